"""Correct answers to notebook 00 written differently from the reference."""

ALTERNATIVES = {}
