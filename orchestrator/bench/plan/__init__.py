"""Capacity planning: the cheapest (or lowest-power) fleet that serves a demand within its SLO,
each candidate mix checked in virtual time. Part of `bench/` (layer 11).
"""
