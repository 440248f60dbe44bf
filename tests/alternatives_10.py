"""Correct answers of notebook 10 written differently from the reference."""

ALTERNATIVES: dict[str, list] = {}
