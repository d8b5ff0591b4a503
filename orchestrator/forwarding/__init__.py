"""Forwarding: the pooled upstream client, circuit breakers, the dispatcher that carries out routing
decisions (retries before the first token, deadlines, relayed streams), the replica scraper and the
router's metrics.

Layer 6: may import `routing/` and everything below it; the router service and the frontends
use it.
"""
