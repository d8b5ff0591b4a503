"""The control plane: the registry of pools and replicas (a Ray actor), the reconciler keeping
pools at size, replica and checker actors (the one place each engine is scraped), the gRPC
`ControlPlane` service and its clients (the routers' table watch, the operator's commands),
HTTP service discovery, and the `control-plane` process with its Ray lifetime and watchdog.

Layer 10: may import everything below it (`core/` ... `discovery/`), never `frontends/` (its
sibling) or anything above. The only package that imports `ray`; this `__init__` imports
nothing, so `python -m orchestrator.controlplane.watchdog` starts in a blink.
"""
