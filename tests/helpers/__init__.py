"""What the tests share: correct alternatives, submissions and their verdicts, LMS exports, pinned
seeds, a loaded machine, browser sessions. No tests here."""
