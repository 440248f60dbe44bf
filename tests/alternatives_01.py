"""Correct answers to notebook 01 written differently from the reference."""

ALTERNATIVES = {}
