"""The points table: every check's points, how they split over its concerns, and whether it is a
question added beyond the original homework (and left out by course.toml)."""


def points_table(checks_left_out: frozenset[str] = frozenset()) -> str:
    """The points of every question and how they split over its concerns (a Markdown table, written
    into docs/ by `course build` between the markers build.POINTS_TABLE_START and _END, with nothing
    left out: the docs describe the whole course, whatever one instructor's course.toml says)."""
    from fractions import Fraction

    from autograder.checks import CHECKS
    from grader.leave_out import standing

    rows = [
        "| check | visible | hidden | how a test cell's points split | added |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, check in CHECKS.items():
        total = sum(c.weight for c in check.concerns)
        shares = [
            f"{c.name}: {Fraction(c.weight / total).limit_denominator(12)}"
            if c.weight
            else f"{c.name}: advice only"
            for c in check.concerns
        ]
        split = "; ".join(shares) or "all or nothing"
        if not (check.points or check.hidden_points):
            split = "no points: it runs given code only, and says whether that still works (advice)"
        added = standing(check, checks_left_out)
        rows.append(f"| `{name}` | {check.points:g} | {check.hidden_points:g} | {split} | {added} |")
    return "\n".join(rows)
