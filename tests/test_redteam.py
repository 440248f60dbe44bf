"""Red team: submissions that try to game the grader, graded end to end through `make grade`.

Each one scores exactly what its honest work earns: an attack added to a correct answer
(`_honest`) keeps full marks unless the attack itself destroys the work, and an attack
added to a wrong answer (`_zeros`: RMSNorm returning zeros) gains nothing. Where the
grader can see the attempt, its log names it. docs/security.md, "Red team", lists the results.
"""

import csv
import hashlib
import html
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output, new_raw_cell
from nbgrader.server_extensions.formgrader import handlers as formgrader

from autograder.cells import nbgrader_meta
from autograder.paths import REPO

from .helpers.feedback import page_text
from .helpers.machine import batch_scratch, kernels_in, leftover_groups, needs_sandbox, running
from .helpers.submissions import digests, grade_id, perfect, solution_sources, with_answer

# Alone (make test): some attacks race the cell time limit (250 MB of messages in 10 s), and lose it on
# a machine that also runs other tests.
pytestmark = [needs_sandbox, pytest.mark.whole_machine]

ASSIGNMENT = "07_rmsnorm"
FULL = 6.0
SOLUTION = REPO / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
MARKER = "613.25"  # `sleep 613.25`: a process a submission leaves behind is easy to find
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


@dataclass
class Attack:
    student: str
    notebook: object  # a NotebookNode, or the file's bytes
    score: float | None
    log: str = ""  # a fragment the grader's log for this notebook must contain
    status: str = "graded"
    reason: str = ""
    assignment: str = ASSIGNMENT


def _honest() -> nbformat.NotebookNode:
    return perfect(ASSIGNMENT)


def _zeros() -> nbformat.NotebookNode:
    """A wrong answer: RMSNorm (and its _norm) return zeros. Honestly worth 0."""
    source = solution_sources(ASSIGNMENT)["rmsnorm"]
    wrong = source.replace(
        "return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)", "return torch.zeros_like(x)"
    ).replace("return (normed * self.weight.float()).type_as(x)", "return torch.zeros_like(x)")
    assert wrong.count("zeros_like") == 2
    return with_answer(perfect(ASSIGNMENT), "rmsnorm", wrong)


def _plus(notebook, *sources: str, after: str | None = "rmsnorm") -> nbformat.NotebookNode:
    """Student cells added after the cell `after` (None: at the end)."""
    at = len(notebook.cells) if after is None else [grade_id(c) for c in notebook.cells].index(after) + 1
    notebook.cells[at:at] = [new_code_cell(s) for s in sources]
    return notebook


def _with_markdown(notebook, text: str) -> nbformat.NotebookNode:
    notebook.cells.insert(3, new_markdown_cell(text))
    return notebook


def _cell(notebook, gid: str):
    return next(c for c in notebook.cells if grade_id(c) == gid)


def _with_raw(notebook, text: str) -> nbformat.NotebookNode:
    notebook.cells.insert(3, new_raw_cell(text))
    return notebook


def _attacks(out: Path, port: int, victim: Path) -> list[Attack]:
    run = out / "work" / "runs"
    gradebook = run / "reads-gradebook" / ASSIGNMENT / "gradebook.db"
    attacks = [
        Attack(
            "patches-comparisons",
            _plus(
                _zeros(),
                "import torch.testing\n"
                "torch.testing.assert_close = lambda *a, **k: None\n"
                "torch.allclose = lambda *a, **k: True\n"
                "torch.equal = lambda *a, **k: True\n"
                "torch.isclose = lambda a, b, *r, **k: torch.ones_like(a, dtype=torch.bool)",
            ),
            0.0,
            "[07.rmsnorm] FAILED",
        ),
        Attack(
            "patches-check-module",
            _plus(
                _zeros(),
                "import autograder, autograder.api, autograder.core, autograder.exchange\n"
                "from autograder.core import Verdict\n"
                "autograder.core.judge = lambda check, *a, **k: Verdict(check.name, True, 'ok', 3)\n"
                "autograder.api.evaluate = lambda name, *a, **k: Verdict(name, True, 'ok', 3)\n"
                "autograder.exchange.write_results = lambda *a, **k: None",
            ),
            0.0,
            "no results came back",
        ),
        Attack(
            "patches-builtins",
            _plus(
                _zeros(),
                "import builtins\n"
                "builtins.AssertionError = type('Never', (Exception,), {})\n"
                "builtins.print = lambda *a, **k: None\n"
                "builtins.len = lambda x: 0",
            ),
            0.0,
            "[07.rmsnorm] FAILED",
        ),
        Attack(
            "replaces-sys-modules",
            _plus(
                _zeros(),
                "import sys, types\n"
                "fake = types.ModuleType('autograder')\n"
                "fake.check = lambda name, *a, **k: print(f'[{name}] passed (1/1)')\n"
                "sys.modules['autograder'] = sys.modules['autograder.api'] = fake\n"
                "sys.modules['torch.testing'] = types.SimpleNamespace(assert_close=lambda *a, **k: None)\n"
                "from autograder import check",
            ),
            0.0,
            "no results came back",
        ),
        Attack(
            "redefines-check",
            _plus(
                _zeros(),
                "def check(name, obj, hidden=False):\n"
                "    print(f'[{name}] passed (1/1): 4 cases match the reference')",
            ),
            0.0,
            "no results came back",
        ),
        Attack(
            "prints-fake-passed",
            _plus(
                _zeros(),
                "from IPython.display import HTML, display\n"
                "def boast(result):\n"
                "    print('[07.rmsnorm] passed (1/1): 4 cases match the reference')\n"
                "    display(HTML('<b>All tests passed: 6/6</b>'))\n"
                "get_ipython().events.register('post_run_cell', boast)",
            ),
            0.0,
            "printed output of its own (ignored)",
        ),
        Attack(
            "plants-symlinks",
            _plus(
                _zeros(),
                "import os, autograder.exchange\n"
                "def plant(folder, name, hidden, results):\n"
                "    link = folder / 'results' / f'{autograder.exchange.key(name, hidden)}.pt'\n"
                "    if hidden:\n"
                "        os.mkfifo(link)\n"
                "    else:\n"
                f"        os.symlink({str(REPO / 'autograder' / 'expected' / '07.rmsnorm.pt')!r}, link)\n"
                "autograder.exchange.write_results = plant",
            ),
            0.0,
            "not a plain file",
        ),
        Attack(
            "exits",
            _plus(_honest(), "import sys\nsys.exit(0)", "raise SystemExit(1)", "raise KeyboardInterrupt"),
            FULL,
            "raised KeyboardInterrupt",
        ),
        Attack(
            "os-exit",
            _plus(_honest(), "import os\nos._exit(0)"),
            FULL,
            "the kernel died",
        ),
        Attack(
            "kills-kernel",
            _plus(
                _honest(),
                "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
                after="rmsnorm_norm_hidden",
            ),
            FULL,
            "re-run in a fresh kernel",
        ),
        Attack(
            "kills-kernel-in-answer",
            with_answer(
                _zeros(), "rmsnorm", solution_sources(ASSIGNMENT)["rmsnorm"] + "\nimport os\nos._exit(1)\n"
            ),
            0.0,
            "the kernel died",
        ),
        Attack(
            "writes-grader-files",
            _plus(
                _honest(),
                *(
                    f"open({str(path)!r}, 'w').write('pwned')"
                    for path in (
                        REPO / "autograder" / "api.py",
                        REPO / "grader" / "grading.py",
                        REPO / "pwned.txt",
                        REPO / "solutions" / ASSIGNMENT / "mistakes.py",
                        out / "grades.csv",
                        run / "writes-grader-files" / ASSIGNMENT / "gradebook.db",
                        out / "work" / "template" / "gradebook.db",
                    )
                ),
            ),
            FULL,
            "Read-only file system",
        ),
        Attack(
            "reads-solutions",
            with_answer(
                _zeros(),
                "rmsnorm",
                "import json\n"
                f"source = json.load(open({str(SOLUTION)!r}))\n"
                "for cell in source['cells']:\n"
                "    if cell['metadata'].get('nbgrader', {}).get('grade_id') == 'rmsnorm':\n"
                "        exec(''.join(cell['source']))",
            ),
            0.0,
            "raised FileNotFoundError",
        ),
        Attack(
            "imports-the-grader",  # the instructor's package: neither mounted nor on the kernel's path
            with_answer(
                _zeros(), "rmsnorm", "import grader.build\nprint(open(grader.build.__file__).read()[:9])"
            ),
            0.0,
            "raised ModuleNotFoundError",
        ),
        Attack(
            "reads-gradebook",
            _plus(
                _zeros(),
                "import sqlite3\n"
                f"db = sqlite3.connect('file:{gradebook}?mode=ro', uri=True)\n"
                "print(db.execute('select * from grade_cell').fetchall())",
            ),
            0.0,
            "raised OperationalError",
        ),
        Attack(
            "opens-sockets",
            _plus(
                _honest(),
                f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)",
                "socket.create_connection(('1.1.1.1', 80), timeout=3)",
                "socket.create_connection(('pypi.org', 443), timeout=3)",
            ),
            FULL,
            "Network is unreachable",
        ),
        Attack(
            "infinite-loop",
            _plus(_honest(), "while True:\n    pass"),
            FULL,
            "raised CellTimeoutError",
        ),
        Attack(
            "ignores-interrupts",
            _plus(
                _honest(),
                "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
                after="rmsnorm_norm_hidden",
            ),
            FULL,
            "did not stop at its time limit",
        ),
        Attack(
            "allocates-50gb",
            _plus(
                _honest(),
                "import torch\nbig = torch.ones(50 * 2**30, dtype=torch.uint8)",
                "big = bytearray(50 * 2**30)",
            ),
            FULL,
            "raised MemoryError",
        ),
        Attack(
            "forks",
            _plus(
                _honest(),
                "import os, subprocess, multiprocessing, time\n"
                f"subprocess.Popen(['sleep', '{MARKER}'], start_new_session=True)\n"
                "if os.fork() == 0:\n"
                "    os.setsid()\n"
                f"    os.execvp('sleep', ['sleep', '{MARKER}'])\n"
                f"multiprocessing.Process(target=os.system, args=('sleep {MARKER}',)).start()\n"
                "time.sleep(0.5)",
            ),
            FULL,
        ),
        Attack("output-200mb", _plus(_honest(), "print('x' * 200_000_000)"), FULL, "output beyond"),
        Attack(
            "floods-display-updates",  # 2000 outputs sharing a display id, then one 100 kB update
            _plus(
                _honest(),
                "from IPython.display import display, update_display\n"
                "for _ in range(2000):\n"
                "    display('x', display_id='same')\n"
                "update_display('y' * 100_000, display_id='same')",
            ),
            FULL,
            "output beyond",
        ),
        Attack(
            "sends-stretched-tensors",
            _plus(
                _zeros(),
                "import torch, autograder.exchange\n"
                "def send(folder, name, hidden, results):\n"
                "    huge = torch.zeros(1).expand(60000, 60000)  # 4 bytes stored\n"
                "    path = folder / 'results' / f'{autograder.exchange.key(name, hidden)}.pt'\n"
                "    torch.save([{'normed': huge, 'y': huge}] * len(results), path)\n"
                "autograder.exchange.write_results = send",
            ),
            0.0,
            "more than 2097152 numbers",
        ),
        Attack(
            "sends-many-stretched-outputs",  # 40 outputs per case, each just under a per-tensor cap
            _plus(
                _zeros(),
                "import torch, autograder.exchange\n"
                "def send(folder, name, hidden, results):\n"
                "    huge = torch.zeros(1).expand(2**24 - 1)\n"
                "    path = folder / 'results' / f'{autograder.exchange.key(name, hidden)}.pt'\n"
                "    torch.save([{f'y{i}': huge for i in range(40)}] * len(results), path)\n"
                "autograder.exchange.write_results = send",
            ),
            0.0,
            "more than 2097152 numbers",
        ),
        Attack(
            "sends-undecodable-name",  # one check's archive names a member in invalid UTF-8
            _plus(
                _honest(),
                "import autograder.exchange as ex\n"
                "honest = ex.write_results\n"
                "def tamper(folder, name, hidden, results):\n"
                "    honest(folder, name, hidden, results)\n"
                "    if name == '07.rmsnorm_norm' and hidden:\n"
                "        path = folder / 'results' / f'{ex.key(name, hidden)}.pt'\n"
                "        raw = bytearray(path.read_bytes())\n"
                "        central = raw.find(b'PK\\x01\\x02')\n"
                "        raw[central + 8 : central + 10] = (0x800).to_bytes(2, 'little')  # names are UTF-8\n"
                "        raw[central + 46] = 0xFF  # the first byte of the first name\n"
                "        path.write_bytes(bytes(raw))\n"
                "ex.write_results = tamper",
            ),
            FULL - 4,  # the hidden part of 07.rmsnorm_norm, refused
            "malformed results",
        ),
        Attack(
            "floods-errors",  # 3000 error outputs of 4 kB each, sent straight from the kernel
            _plus(
                _honest(),
                "kernel = get_ipython().kernel\n"
                "for _ in range(3000):\n"
                "    kernel.send_response(kernel.iopub_socket, 'error', "
                "{'ename': 'E', 'evalue': 'e' * 4000, 'traceback': []})",
            ),
            FULL,
            "output beyond",
        ),
        Attack(
            "reads-hidden-tests",  # In, _ih, linecache, and the code of every request the kernel gets
            _plus(
                _plus(
                    _honest(),
                    "import threading, time\n"
                    "seen = []\n"
                    "def watch():\n"
                    "    kernel = get_ipython().kernel\n"
                    "    while True:\n"
                    "        code = kernel.get_parent().get('content', {}).get('code', '')\n"
                    "        if code not in seen:\n"
                    "            seen.append(code)\n"
                    "        time.sleep(0.0005)\n"
                    "threading.Thread(target=watch, daemon=True).start()",
                    after="imports",
                ),
                "import linecache\n"
                "print('HISTORY', In, _ih, seen, [''.join(v[2]) for v in linecache.cache.values()])",
                after=None,
            ),
            FULL,
        ),
        Attack(
            "swaps-links-during-cleanup",  # a folder and a link to a folder outside, swapped for ever
            _plus(
                _honest(),
                "import os, threading, autograder.exchange\n"
                "results = autograder.exchange.directory() / 'results'\n"
                "def swap():\n"
                "    while True:\n"
                "        for name in ('a', 'b'):\n"
                "            try:\n"
                "                os.makedirs(results / name / 'inner', exist_ok=True)\n"
                "                os.rename(results / name, results / f'{name}.old')\n"
                f"                os.symlink({str(victim)!r}, results / name)\n"
                "            except OSError:\n"
                "                pass\n"
                "threading.Thread(target=swap, daemon=True).start()",
                after="imports",
            ),
            FULL,
        ),
        Attack(
            "forks-without-end",  # bounded: 1000 children at most, each gone after 5 s
            _plus(
                _honest(),
                "import os, time\n"
                "children = []\n"
                "for _ in range(1000):\n"
                "    try:\n"
                "        pid = os.fork()\n"
                "    except OSError:\n"
                "        break\n"
                "    if pid == 0:\n"
                "        time.sleep(5)\n"
                "        os._exit(0)\n"
                "    children.append(pid)\n"
                "for pid in children:\n"
                "    os.waitpid(pid, 0)\n"
                "print(len(children), 'children')",
            ),
            FULL,
            "the sandbox refused",
        ),
        Attack(
            "leaves-setuid-log",  # the kernel's own log file, made a setuid program
            _plus(
                _honest(),
                "import os\n"
                "for fd in map(int, os.listdir('/proc/self/fd')):\n"
                "    try:\n"
                "        if os.readlink(f'/proc/self/fd/{fd}').endswith('kernel.out'):\n"
                "            os.ftruncate(fd, 0)\n"
                "            os.write(fd, open('/usr/bin/id', 'rb').read())\n"
                "            os.fchmod(fd, 0o6755)\n"
                "    except OSError:\n"
                "        pass",
                after=None,
            ),
            FULL,
        ),
        Attack(
            "forges-a-reason",  # an error name holding a line the grader once read reasons from
            _plus(
                _honest(),
                "kernel = get_ipython().kernel\n"
                "line = '\\nautograder.preprocessors.NotebookFailed: approved by hand, enter 6/6'\n"
                "error = {'ename': 'X' * 5000 + line, 'evalue': 'v', 'traceback': []}\n"
                "kernel.send_response(kernel.iopub_socket, 'error', error)\n"
                "kernel.send_response(kernel.iopub_socket, 'execute_result', "
                "{'execution_count': '<b>1</b>', 'data': {'text/plain': 'x'}, 'metadata': {}})",
            ),
            FULL,
            "a malformed execute_result message was dropped",
        ),
        Attack(
            "sends-huge-messages",  # error names and widget states of 5 MB each
            _plus(
                _honest(),
                "kernel = get_ipython().kernel\n"
                "for _ in range(30):\n"
                "    kernel.send_response(kernel.iopub_socket, 'error', "
                "{'ename': 'E' * 5_000_000, 'evalue': 'v', 'traceback': []})\n"
                "for i in range(20):\n"
                "    kernel.send_response(kernel.iopub_socket, 'comm_open', {'comm_id': f'c{i}', "
                "'target_name': 'jupyter.widget', 'data': {'state': {'_model_name': 'OutputModel', "
                "'_model_module': '@jupyter-widgets/output', 'pad': 'p' * 5_000_000}, 'buffer_paths': []}})",
            ),
            FULL,
            "raised 28 more errors",
        ),
        Attack(
            "spins-in-many-sessions",  # 60 children, each in a session of its own, spinning for 12 s
            _plus(
                _honest(),
                "import os, time\n"
                "for _ in range(60):\n"
                "    if os.fork() == 0:\n"
                "        os.setsid()\n"
                "        end = time.time() + 12\n"
                "        while time.time() < end:\n"
                "            pass\n"
                "        os._exit(0)\n"
                "time.sleep(8)",
                after=None,
            ),
            FULL,
        ),
        Attack(
            "fills-memory-with-processes",  # 4 children of 1 GiB each, in a sandbox of 3 GiB
            _plus(
                _honest(),
                "import os, time\n"
                "children = []\n"
                "for _ in range(4):\n"
                "    pid = os.fork()\n"
                "    if pid == 0:\n"
                "        block = b'x' * 2**30\n"
                "        time.sleep(1)\n"
                "        os._exit(0)\n"
                "    children.append(pid)\n"
                "for pid in children:\n"
                "    os.waitpid(pid, 0)",
            ),
            FULL,
            "the sandbox ran out of memory",
        ),
        Attack(
            "injects-output-metadata",  # the classic template writes an image's width unquoted
            _plus(
                _plus(
                    _with_raw(_honest(), "<script>window.PWNED = 9</script>"),
                    "from IPython.display import display\ndisplay('plain', display_id='later')",
                    after="imports",
                ),
                "from IPython.display import display, update_display\n"
                "update_display({'text/html': '<img src=x onerror=\"window.PWNED=10\">', 'image/png': "
                f"{PNG!r}}}, raw=True, metadata={{'image/png': {{'width': '1 onload=window.PWNED=11'}}}}, "
                "display_id='later')  # rewrites the earlier cell's output, already cleaned\n"
                f"png = {PNG!r}\n"
                "display({'image/png': png, 'text/plain': 'dot'}, raw=True, "
                "metadata={'image/png': {'width': '1 onload=window.PWNED=4', 'height': 1}})\n"
                "display({'image/png': png}, raw=True, "
                "metadata={'filenames': {'image/png': 'x\" onload=\"PWNED=5'}})\n"
                "display({'image/svg+xml': '<svg onload=\"window.PWNED=6\"/>', "
                "'text/html': '<img src=x onerror=\"window.PWNED=7\">'}, raw=True)\n"
                "display({'application/javascript': 'window.PWNED=8', 'image/png': 'no image'}, raw=True)",
            ),
            FULL,
        ),
        Attack(
            "injects-html",
            _plus(
                _with_markdown(
                    _honest(), '<img src=x onerror="window.PWNED = 3">\n\n[notes](javascript:alert(1))'
                ),
                "from IPython.display import HTML, Javascript, display\n"
                "display(HTML('<script>window.PWNED = 1</script>'))\n"
                "display(Javascript('window.PWNED = 2'))",
            ),
            FULL,
        ),
    ]
    return attacks + _tampered() + _foreign_formats()


def _tampered() -> list[Attack]:
    deleted = _honest()
    deleted.cells = [c for c in deleted.cells if grade_id(c) not in ("rmsnorm_test", "imports")]
    duplicated = _honest()
    at = [grade_id(c) for c in duplicated.cells].index("rmsnorm_test")
    duplicated.cells.insert(at, nbformat.from_dict(_cell(duplicated, "rmsnorm_test")))
    duplicated.cells.insert(at, nbformat.from_dict(_cell(duplicated, "rmsnorm")))
    moved = _honest()
    tests = [c for c in moved.cells if grade_id(c) in ("rmsnorm_norm_test", "rmsnorm_norm_hidden")]
    moved.cells = tests + [c for c in moved.cells if c not in tests]
    retyped = _honest()
    for gid in ("imports", "rmsnorm_test"):
        cell = _cell(retyped, gid)
        cell.cell_type = "markdown"
        del cell["outputs"], cell["execution_count"]
    edited = _zeros()
    _cell(edited, "rmsnorm_norm_test").source = "print('[07.rmsnorm_norm] passed (1/1)')"
    _cell(edited, "rmsnorm_test").source = "pass"
    repointed = _zeros()
    for gid in ("rmsnorm_test", "rmsnorm_norm_test"):
        _cell(repointed, gid).metadata.nbgrader["points"] = 100
    _cell(repointed, "code_04").metadata.nbgrader.update(grade=True, points=50)
    return [
        Attack("deletes-locked-cells", deleted, FULL, "locked cell rmsnorm_test was deleted: restored"),
        Attack("duplicates-cells", duplicated, FULL, "exists multiple times"),
        Attack("reorders-cells", moved, FULL, "put back in the released order"),
        Attack("retypes-locked-cells", retyped, FULL, "cell rmsnorm_test: cell type changed: restored"),
        Attack("edits-test-cells", edited, 0.0, "cell rmsnorm_test: source changed: restored"),
        Attack("changes-points", repointed, 0.0, "cell code_04: grading metadata changed: restored"),
        Attack(
            "other-assignment",
            perfect("04_rope"),
            None,
            status="failed",
            reason="holds the notebook of 04_rope, not 07_rmsnorm",
        ),
    ]


def _foreign_formats() -> list[Attack]:
    colab = json.loads(nbformat.writes(_honest()))
    colab["nbformat_minor"] = 0
    colab["metadata"] = {
        "colab": {"provenance": [], "name": "07_rmsnorm.ipynb"},
        "kernelspec": {"name": "python3", "display_name": "Python 3"},
        "language_info": {"name": "python"},
        "accelerator": "GPU",
    }
    for cell in colab["cells"]:
        cell.pop("id", None)
        cell["metadata"]["id"] = "x" + hashlib.md5(str(cell["source"]).encode()).hexdigest()[:10]
        if cell["cell_type"] == "code":
            cell["metadata"]["colab"] = {"base_uri": "https://localhost:8080/"}
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran on colab\n"]}]
    old = nbformat.writes(nbformat.convert(_honest(), 3))
    latin = _honest()
    _cell(latin, "rmsnorm").source = (
        "# Normalisation à la Zhang & Sennrich\n" + _cell(latin, "rmsnorm").source
    )
    saved_output = _honest()
    _cell(saved_output, "code_04").outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="y" * 200_000_000)
    ]
    return [
        Attack("saved-by-colab", json.dumps(colab).encode(), FULL, "saved by Google Colab"),
        Attack("old-nbformat", old.encode(), FULL, "saved as nbformat 3"),
        Attack("not-utf8", nbformat.writes(latin).encode().replace("à".encode(), b"\xe0"), FULL, "not UTF-8"),
        Attack("saved-200mb-output", nbformat.writes(saved_output).encode(), FULL),
        Attack("broken-json", b'{"cells": [', None, status="failed", reason="not a readable notebook"),
        Attack("deep-json", b"[" * 100_000 + b"]" * 100_000, None, status="failed", reason=TOO_DEEP),
        Attack("deep-metadata", _nested_in_metadata(950), None, status="failed", reason=TOO_DEEP),
    ]


TOO_DEEP = "not a readable notebook: its JSON nests too deeply for a notebook"


def _nested_in_metadata(depth: int) -> bytes:
    """An honest notebook with lists nested `depth` deep in its metadata: it parses, within Python's
    recursion limit, and recursion fails later (nbformat's conversion), once at the grader's."""
    text = nbformat.writes(_honest())
    return text.replace('"metadata": {', '"metadata": {"x": ' + "[" * depth + "]" * depth + ", ", 1).encode()


class Listener:
    """A TCP server on the grader's loopback: a sandboxed kernel must never reach it."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.5)
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                self.server.accept()[0].close()
                self.connections += 1
            except TimeoutError:
                continue

    def close(self):
        self.running = False
        self.thread.join()
        self.server.close()


def _make_grade(submissions: Path, out: Path, scratch: Path) -> subprocess.CompletedProcess:
    flags = "--cell-timeout 10 --notebook-timeout 90 --memory-gib 3"
    return subprocess.run(
        [
            "make",
            "-C",
            str(REPO),
            "grade",
            f"SUBMISSIONS={submissions}",
            f"OUT={out}",
            "JOBS=2",
            f"GRADE_FLAGS={flags}",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "TMPDIR": str(scratch)},
    )


@pytest.fixture(scope="module")
def scratch():
    """The folder of this file's batches' sandboxes."""
    with batch_scratch("redteam-") as folder:
        yield folder


def _leftovers(scratch: Path) -> list[str]:
    """Processes a submission left (`sleep 613.25`), and kernels of this file's batches still running."""
    return [*running(MARKER), *kernels_in(scratch)]


@pytest.fixture(scope="module")
def graded(tmp_path_factory, scratch):
    submissions = tmp_path_factory.mktemp("redteam")
    out = tmp_path_factory.mktemp("redteam-out")
    listener = Listener()
    victim = tmp_path_factory.mktemp("victim")
    (victim / "keep.txt").write_text("keep")
    victim.chmod(0o550)  # what a `chmod u+rwX` through a swapped link would change
    attacks = _attacks(out, listener.port, victim)
    protected = {
        p: p.read_bytes()
        for p in (
            REPO / "autograder" / "api.py",
            REPO / "grader" / "grading.py",
            REPO / "solutions" / ASSIGNMENT / "mistakes.py",
        )
    }
    for attack in attacks:
        path = submissions / attack.student / f"{attack.assignment}.ipynb"
        path.parent.mkdir(parents=True)
        data = (
            attack.notebook
            if isinstance(attack.notebook, bytes)
            else nbformat.writes(attack.notebook).encode()
        )
        path.write_bytes(data)
    before = digests(submissions)
    groups_before = set(leftover_groups())  # other runs on this machine may have left theirs
    try:
        done = _make_grade(submissions, out, scratch)
    finally:
        listener.close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "left by grading workers" not in done.stderr  # each sandbox removed its own group and folder
    with (out / "grades.csv").open() as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    return {
        "attacks": attacks,
        "rows": rows,
        "out": out,
        "submissions": submissions,
        "before": before,
        "connections": listener.connections,
        "protected": protected,
        "leftovers": _leftovers(scratch),
        "new_groups": set(leftover_groups()) - groups_before,
        "scratch": scratch,
        "victim": victim,
    }


def _stored(graded, student: str) -> Path:
    """The graded notebook as OUT/course keeps it: what formgrader and feedback render."""
    return graded["out"] / "course" / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"


def _log(out: Path, attack: Attack) -> str:
    return (out / "logs" / attack.student / f"{attack.assignment}.log").read_text()


def test_each_attack_scores_its_honest_work(graded):
    rows = graded["rows"]
    for attack in graded["attacks"]:
        row = rows[attack.student]
        want = "" if attack.score is None else f"{attack.score:g}"
        assert (row["score"], row["status"]) == (want, attack.status), (attack.student, row)
        assert attack.reason in row["reason"], (attack.student, row)


def test_each_attempt_is_named_in_the_log(graded):
    for attack in graded["attacks"]:
        if attack.log:
            assert attack.log in _log(graded["out"], attack), attack.student


def test_no_student_html_or_script_reaches_the_instructors_browser(graded):
    """Feedback pages and formgrader (which renders OUT/course's notebooks) show student HTML as text."""
    out = graded["out"]
    pages = [out / "feedback" / "injects-html" / f"{ASSIGNMENT}.html"]
    for page in pages:
        text = page.read_text()
        assert "PWNED" in html.unescape(text)  # the cell source is shown ...
        assert "<script>window.PWNED" not in text and not re.search(
            r"<img[^>]*onerror", text
        )  # ... never run
        assert 'href="javascript:' not in text
    for cell in nbformat.read(_stored(graded, "injects-html"), as_version=4).cells:
        if cell.cell_type == "markdown" and not nbgrader_meta(cell).get("locked"):
            assert cell.source.startswith("```")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make setup installs it as root)")
def test_no_student_script_runs_in_the_pages_an_instructor_opens(graded, tmp_path):
    """The feedback pages, and formgrader's own rendering of the notebooks OUT/course stores
    (with nbconvert's sanitiser off: they must be safe for any renderer), opened in headless
    Chromium: no payload runs. The image-width payload does run in a notebook that was not
    cleaned, even with the sanitiser on, so the canary can sing."""
    students = ("injects-output-metadata", "injects-html")
    pages = [graded["out"] / "feedback" / student / f"{ASSIGNMENT}.html" for student in students]
    for student in students:
        stored = nbformat.read(_stored(graded, student), as_version=4)
        pages.append(_formgrade_page(stored, tmp_path / f"formgrade-{student}.html", sanitize=False))
    payload = new_output(
        "display_data",
        data={"image/png": PNG, "text/plain": "dot"},
        metadata={"image/png": {"width": "1 onload=window.PWNED=4"}},
    )
    uncleaned = nbformat.v4.new_notebook(cells=[new_code_cell("show()", outputs=[payload])])
    control = _formgrade_page(uncleaned, tmp_path / "control.html", sanitize=True)
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "helpers" / "canary.py"), *map(str, [control, *pages])],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    canaries = json.loads(done.stdout)
    assert canaries.pop(str(control)) == 4
    assert canaries == {str(page): None for page in pages}


def _formgrade_page(notebook, target: Path, *, sanitize: bool) -> Path:
    """The page formgrader serves for a submission (nbgrader's formgrade template), as a file."""
    exporter = HTMLExporter(
        template_name="formgrade", extra_template_basedirs=[formgrader.template_path], sanitize_html=sanitize
    )
    resources = {
        "assignment_id": ASSIGNMENT,
        "notebook_id": ASSIGNMENT,
        "submission_id": "1",
        "index": 0,
        "total": 1,
        "base_url": "",
        "student": "student",
        "last_name": None,
        "first_name": None,
        "notebook_path": "",
    }
    body, _ = exporter.from_notebook_node(notebook, resources=resources)
    target.write_text(body)
    return target


def test_the_output_kept_is_bounded(graded):
    for student in ("output-200mb", "floods-display-updates", "floods-errors"):
        assert _stored(graded, student).stat().st_size < 8 * 2**20, student


def test_the_sandbox_held(graded):
    assert graded["connections"] == 0
    assert all(path.read_bytes() == data for path, data in graded["protected"].items())
    assert not (REPO / "pwned.txt").exists()
    assert "pwned" not in (graded["out"] / "grades.csv").read_text()
    assert graded["leftovers"] == []
    victim = graded["victim"]
    assert victim.stat().st_mode & 0o777 == 0o550 and (victim / "keep.txt").read_text() == "keep"
    assert graded["new_groups"] == set()
    special = [p for p in graded["out"].rglob("*") if p.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)]
    assert special == []  # no setuid or setgid file where the kernel could leave one


def test_a_student_cannot_write_a_reason_or_flood_the_grader(graded):
    rows = graded["rows"]
    assert rows["forges-a-reason"]["reason"] == "" and rows["forges-a-reason"]["status"] == "graded"
    for student in ("forges-a-reason", "sends-huge-messages"):
        attack = next(a for a in graded["attacks"] if a.student == student)
        assert len(_log(graded["out"], attack)) < 200_000, student
        assert _stored(graded, student).stat().st_size < 8 * 2**20, student


def test_hidden_test_source_never_reaches_the_kernel(graded):
    """A notebook that records every request the kernel gets, In, _ih and linecache, and prints
    them: the test cells ran as the grader's own check calls, never as their source."""
    notebook = _stored(graded, "reads-hidden-tests")
    printed = "".join(
        o.get("text", "") for c in nbformat.read(notebook, as_version=4).cells for o in c.get("outputs", [])
    )
    assert "HISTORY" in printed and "check('07.rmsnorm', RMSNorm, hidden=True)" in printed
    assert "BEGIN HIDDEN TESTS" not in printed
    page = graded["out"] / "feedback" / "reads-hidden-tests" / f"{ASSIGNMENT}.html"
    assert "BEGIN HIDDEN TESTS" not in page.read_text()


def test_stored_notebooks_hold_only_outputs_that_render_safely(graded):
    """What formgrader and the feedback pages render: cleaned before grades are saved."""
    cells = nbformat.read(_stored(graded, "injects-output-metadata"), as_version=4).cells
    assert not [c for c in cells if c.cell_type == "raw"]
    outputs = [o for c in cells for o in c.get("outputs", [])]
    images = [o for o in outputs if PNG in o.get("data", {}).values()]
    assert len(images) == 3  # the PNGs, the earlier cell's rewritten one too; the one that was not is gone
    for output in outputs:
        assert set(output.get("data", {})) <= {"text/plain", "image/png", "image/jpeg"}
        for mime, size in output.get("metadata", {}).items():
            assert mime in ("image/png", "image/jpeg") and all(type(v) is int for v in size.values())
    assert {"image/png": {"height": 1}} in [o.metadata for o in images]  # its width was "1 onload=…"


def test_originals_unchanged_and_rerun_identical(graded):
    out, submissions = graded["out"], graded["submissions"]
    assert digests(submissions) == graded["before"]
    grades = (out / "grades.csv").read_text()
    assert _make_grade(submissions, out, graded["scratch"]).returncode == 0
    assert (out / "grades.csv").read_text() == grades


def test_feedback_names_the_failed_property_not_the_hidden_source(graded):
    text = page_text(graded["out"] / "feedback" / "patches-comparisons" / f"{ASSIGNMENT}.html")
    # the hidden check, each concern apart: which case, by how much
    assert re.search(r"\[07\.rmsnorm\] FAILED \(0/0\):\n- [^\n]*: FAILED: case ", text)
    assert "output at index (" in text and "values off by more than rounding allows; the largest by" in text
    assert "Property 'matches torch.nn.functional.rms_norm' fails too" in text
    assert "hidden=True" not in text and "Traceback" not in text
