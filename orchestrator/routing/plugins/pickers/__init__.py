"""Pickers: each turns scored candidates into a primary and ordered fallbacks. Part of
`routing/` (layer 5, pure).
"""
