"""Intake: the files an LMS export holds, whose each is, and which notebook it answers."""
