"""Overload control in front of routing: admission against the fleet's capacity with priority
classes, and per-API-key limits. What cannot be served in time is refused at once (429).

Layer 7: may import `routing/` and everything below it (`core/` ... `forwarding/`); the router
service and the frontends use it, it knows nothing of them or of any transport.
"""
