"""How much address space a grading kernel needs: each perfect notebook graded in the sandbox.

    .venv/bin/python benchmarks/sandbox_memory.py

Grades every notebook's perfect submission (with one extra cell at the end) through
`course grade`, sandbox and limits as shipped, and prints what that cell read in the
kernel's /proc/self/status: the peak address space (VmPeak, what RLIMIT_AS caps) and the
peak resident memory (VmHWM), next to the limit.
"""

import json
import sys
import tempfile
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.paths import assignments  # noqa: E402
from grader.grading import Limits, grade  # noqa: E402
from tests.helpers.submissions import perfect  # noqa: E402

PEAKS = (
    "import json\n"
    "print(json.dumps({l.split(':')[0]: int(l.split()[1]) for l in open('/proc/self/status')\n"
    "                  if l.startswith(('VmPeak', 'VmHWM'))}))"
)


def peaks(assignment: str, folder: Path) -> dict[str, int]:
    notebook = perfect(assignment)
    notebook.cells.append(new_code_cell(PEAKS))
    path = folder / "in" / "bench" / f"{assignment}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    (result,) = [r for r in grade(folder / "in", folder / "out", jobs=1) if r.notebook == assignment]
    assert result.score == result.max_score, result
    graded = folder / "out" / "work" / "runs" / "bench" / assignment / "autograded" / "bench" / assignment
    status = json.loads(
        nbformat.read(graded / f"{assignment}.ipynb", as_version=4).cells[-1].outputs[0]["text"]
    )
    return {key: kib * 1024 for key, kib in status.items()}


def main() -> None:
    limit = Limits().memory_bytes
    print(f"RLIMIT_AS of a grading kernel: {limit / 2**30:.1f} GiB")
    print(f"{'notebook':<12} {'VmPeak GiB':>10} {'VmHWM GiB':>10} {'headroom':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for assignment in assignments():
            peak = peaks(assignment, Path(tmp))
            print(
                f"{assignment:<12} {peak['VmPeak'] / 2**30:>10.2f} {peak['VmHWM'] / 2**30:>10.2f} "
                f"{limit / peak['VmPeak']:>8.1f}x"
            )


if __name__ == "__main__":
    main()
