"""Scorers: each rates candidates in [0, 1] by one signal. Part of `routing/` (layer 5, pure)."""
