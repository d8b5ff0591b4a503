"""Capacity planning: the cheapest (or lowest-power) fleet that serves a demand within its SLO."""
