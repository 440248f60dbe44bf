"""Grading one notebook: its kernel in the sandbox, the checks judged outside it, grades and page as data."""
