"""The control plane: registry of pools and replicas, and the reconciler keeping pools at size."""
