"""Correct answers of notebook 11 written differently from the reference."""

ALTERNATIVES: dict[str, list] = {}
