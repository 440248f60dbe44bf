"""Correct answers to notebook 02 written differently from the reference."""

ALTERNATIVES = {}
