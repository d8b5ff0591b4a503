"""Filters: each narrows the candidates by one rule."""
