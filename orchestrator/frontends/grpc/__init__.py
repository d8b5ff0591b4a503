"""The router's gRPC frontend: `orchestrator.router.v1.RouterService`, health and reflection."""
