"""The points table: every check's points and how they split over its concerns."""


def points_table() -> str:
    """The points of every question and how they split over its concerns (a Markdown table, written
    into docs/ by `course build` between the markers build.POINTS_TABLE_START and _END)."""
    from fractions import Fraction

    from autograder.checks import CHECKS

    rows = ["| check | visible | hidden | how a test cell's points split |", "| --- | --- | --- | --- |"]
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
        rows.append(f"| `{name}` | {check.points:g} | {check.hidden_points:g} | {split} |")
    return "\n".join(rows)
