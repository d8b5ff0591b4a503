"""The embedded stack and nothing else: `orchestrator up` on one machine (local Ray cluster,
control plane in-process, a router child, the simulated fabric, an optional local Prometheus).

May import every package below it; the cluster-mode processes it starts live with their layer
(`controlplane/runner.py`, `router_process/`), and only `cli/` imports this package.
"""
