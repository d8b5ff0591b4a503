"""Filters: each narrows the candidates by one rule. Part of `routing/` (layer 5, pure)."""
