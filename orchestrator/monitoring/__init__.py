"""Monitoring of the orchestrator: the alert and recording rules, and a local Prometheus that
loads them and scrapes the embedded stack."""
