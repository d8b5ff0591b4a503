"""The router's gRPC frontend: `orchestrator.router.v1.RouterService`, health and reflection.
Part of `frontends/` (layer 10); independent of the HTTP frontend beside it.
"""
