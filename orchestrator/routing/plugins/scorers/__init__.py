"""Scorers: each rates candidates in [0, 1] by one signal."""
