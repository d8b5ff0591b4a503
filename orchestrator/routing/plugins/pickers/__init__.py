"""Pickers: each turns scored candidates into a primary and ordered fallbacks."""
