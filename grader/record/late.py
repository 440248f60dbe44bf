"""Late work: the due date, when each file came in, and the instructor's penalty policy.

Lateness comes from the export: a submission time (Blackboard's attempt time, Gradescope's
metadata) compared with the due date, or the export's own mark (Canvas names a late file
`_LATE_` but not its time: such a file counts as late by less than a day). The policy is the
instructor's, none by default: `zero`, or a percentage of the score per started day late. The
merged nbgrader course gets the due date, each submission's time and the penalty of each
notebook, so formgrader and `nbgrader export` show them; its nbgrader_config.py names the same
policy for nbgrader's own late-penalty step (`CoursePenalty`).
"""

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Float, Unicode

from grader.grades import Result

DAY_S = 24 * 3600


def local_time(text: str) -> datetime:
    """An ISO 8601 time as this machine's local time, without a zone (a time without a zone is
    taken as local already); ValueError if it is not one."""
    moment = datetime.fromisoformat(text.strip())
    return moment.astimezone().replace(tzinfo=None) if moment.tzinfo else moment


@dataclass(frozen=True)
class LatePolicy:
    due: datetime | None = None
    method: str = "none"  # none | zero | per_day
    percent_per_day: float = 0.0

    @classmethod
    def parse(cls, due: str | None, penalty: str | None) -> "LatePolicy":
        """From `--due` and `--late-penalty` (none, zero, or e.g. 10%/day); SystemExit says what is wrong."""
        try:
            moment = local_time(due) if due else None
        except ValueError:
            raise SystemExit(
                f"--due {due!r}: not a date and time; write it as 2026-11-20T23:59 (local time)"
            ) from None
        text = (penalty or "none").strip().lower()
        if text in ("none", "zero"):
            policy = cls(moment, text)
        elif match := re.fullmatch(r"(\d+(?:\.\d+)?)\s*%\s*/\s*day", text):
            policy = cls(moment, "per_day", float(match.group(1)))
        else:
            raise SystemExit(
                f"--late-penalty {penalty!r}: write none, zero, or a percentage per day such as 10%/day"
            )
        if policy.method != "none" and moment is None:
            raise SystemExit(
                f"--late-penalty {penalty}: a penalty needs the due date (--due 2026-11-20T23:59)"
            )
        return policy

    def describe(self) -> str:
        due = f"due {self.due:%Y-%m-%d %H:%M}" if self.due else "no due date"
        if self.method == "per_day":
            return f"{due}; late work loses {self.percent_per_day:g}% of its score per started day"
        return f"{due}; late work scores {'zero' if self.method == 'zero' else 'as it is (no penalty)'}"

    def timestamp(self, result: Result) -> datetime | None:
        """When the file came in, as nbgrader records it: the export's time, or for a file the
        export marks late without a time, a second past the due date."""
        if result.submitted_at:
            try:
                return local_time(result.submitted_at)
            except ValueError:
                return None
        if result.late and self.due:
            return self.due + timedelta(seconds=1)
        return None

    def seconds_late(self, result: Result) -> float:
        moment = self.timestamp(result)
        return max(0.0, (moment - self.due).total_seconds()) if moment and self.due else 0.0

    def is_late(self, result: Result) -> bool:
        return result.late or self.seconds_late(result) > 0

    def penalty(self, score: float | None, seconds_late: float) -> float | None:
        """Points taken off `score` (never more than it), None where nothing is taken."""
        if not score or seconds_late <= 0 or self.method == "none":
            return None
        if self.method == "zero":
            return score
        days = math.ceil(seconds_late / DAY_S)
        return min(score, score * days * self.percent_per_day / 100)

    def nbgrader_config(self) -> dict:
        """The policy for nbgrader's AssignLatePenalties in the merged course's config."""
        return {
            "AssignLatePenalties": {"plugin_class": "grader.record.late.CoursePenalty"},
            "CoursePenalty": {"method": self.method, "percent_per_day": self.percent_per_day},
        }


class CoursePenalty(LateSubmissionPlugin):
    """nbgrader's late-penalty plugin, applying the course's policy (LatePolicy.penalty)."""

    method = Unicode("none", help="none, zero or per_day").tag(config=True)
    percent_per_day = Float(0.0, help="for per_day: the share of the score lost per started day").tag(
        config=True
    )

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float):
        return LatePolicy(None, self.method, self.percent_per_day).penalty(score, total_seconds_late)
