"""Forwarding: the pooled upstream client, circuit breakers, the dispatcher that carries out routing
decisions (retries before the first token, deadlines, relayed streams), the replica scraper and the
router's metrics."""
