"""Correct answers of notebook 09 written differently from the reference."""

ALTERNATIVES: dict[str, list] = {}
