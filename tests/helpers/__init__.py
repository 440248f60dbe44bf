"""What the tests share: the correct alternatives (gathered from solutions/*/alternatives.py),
submissions and their verdicts, LMS exports, pinned seeds, a loaded machine, browser sessions. No
tests here."""
