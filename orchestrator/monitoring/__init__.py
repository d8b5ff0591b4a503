"""Monitoring of the orchestrator: the alert and recording rules, scrape configs, a local
Prometheus that loads them and scrapes the embedded stack, and a router's SLO attainment read
from its `/metrics` (`orchestrator status --router`).

Layer 12: may import everything below it (`bench/` included); `up/` and `cli/` use it.
"""
