"""What a sandboxed grading kernel's start costs, with and without its worker's font list.

    .venv/bin/python benchmarks/kernel_start.py [--rounds 5]

Starts kernels as a grading worker does (bubblewrap, `autograder.kernel_launcher`: torch,
matplotlib, ipykernel and this package imported before the notebook needs them), in alternating
order within each round, and reads the CPU time of the kernel's process once it answers its first
request; then stops it. Prints the mean of each, and their ratio, measured side by side in one run.
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autograder.exchange import remove_tree  # noqa: E402
from autograder.sandbox import SandboxedKernelManager, prepare_root, write_font_list  # noqa: E402
from grader.notebook.kernels import KERNEL_ARGUMENTS  # noqa: E402


async def start(scratch: Path, font_list: Path | None) -> tuple[float, float]:
    """(CPU seconds of the kernel's processes, wall seconds) from its launch to its first reply."""
    root = Path(tempfile.mkdtemp(prefix="k-", dir=scratch))
    prepare_root(root)
    manager = SandboxedKernelManager(
        root=str(root),
        kernel_name="python3",
        font_list=str(font_list or ""),
        log_file=str(root / "kernel.out"),
    )
    began = time.monotonic()
    await manager.start_kernel(extra_arguments=KERNEL_ARGUMENTS)
    client = manager.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=120)
        wall = time.monotonic() - began
        processes = psutil.Process(manager.provisioner.process.pid).children(recursive=True)
        cpu = sum(sum(p.cpu_times()[:2]) for p in processes)
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)
        remove_tree(root)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory(prefix="kernel-start-") as folder:
        scratch = Path(folder)
        font_list = write_font_list(scratch)
        kinds = {"without the font list": None, "with the font list": font_list}
        measured: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
        for round_ in range(rounds):
            order = list(kinds) if round_ % 2 == 0 else list(reversed(kinds))
            for kind in order:
                measured[kind].append(asyncio.run(start(scratch, kinds[kind])))
    print(f"{'kernel':<24} {'CPU s to ready':>15} {'wall s to ready':>16}")
    for kind, runs in measured.items():
        cpu, wall = statistics.mean(c for c, _ in runs), statistics.mean(w for _, w in runs)
        print(f"{kind:<24} {cpu:>15.2f} {wall:>16.2f}")
    without, with_list = (statistics.mean(c for c, _ in runs) for runs in measured.values())
    print(f"CPU with / without: {with_list / without:.2f}x ({without - with_list:.2f} s less per start)")


if __name__ == "__main__":
    main()
