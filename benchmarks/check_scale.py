"""``export-guards check`` at the speed of reading the file: ``check``, ``diff A A`` and ``check --runtime`` on large programs (issue 64, item 3).

Run: ``make bench-check-scale`` (or ``.venv/bin/python benchmarks/check_scale.py [PTE ...]
[--ways W,...] [--pairs N]``); ``--quick`` (one pair) is the smoke test. By default the two
100M-parameter decoders of ``/tmp/shared`` (``decoder100m_8da4w.pte``, 141 MB, and
``decoder100m_fp32.pte``, 400 MB; ``/tmp/shared/build.py`` writes them).

Every run is a fresh process (``python -m export_guards ...``, as a user runs the command), one
at a time, in rounds of every way, the order reversed round by round; each way is paired with
its baseline's run of the same round:

- hash: the floor of reading the file: a script that maps it and hashes it whole with SHA-256, once;
- check: ``export-guards check FILE`` against hash (targets, issue 64: 0.3 s for the 8da4w
  program, 0.6 s for the fp32 one, the better of wall and CPU seconds);
- diff: ``export-guards diff FILE FILE`` against hash (the same targets);
- bare: a bare script that imports ``executorch.runtime``, loads the program and runs ``forward``
  once on zeros of its inputs' shapes;
- runtime: ``export-guards check --runtime FILE`` against bare (target: 1.1 x, the better of
  wall and CPU).

Reported in markdown: a row per program and way, with the runs' median wall seconds, CPU seconds
(the process's and its children's: the steadier of the two on a shared machine), peak MiB
(``wait4``'s), and the median of the paired ratios (way / baseline). The exit status is 1 where
a target is missed.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SHARED = ("/tmp/shared/decoder100m_8da4w.pte", "/tmp/shared/decoder100m_fp32.pte")  # noqa: S108 - where /tmp/shared/build.py writes them
BASELINE = {"hash": None, "check": "hash", "diff": "hash", "bare": None, "runtime": "bare"}
SECONDS = {
    "decoder100m_8da4w.pte": 0.3,
    "decoder100m_fp32.pte": 0.6,
}  # check's and diff's wall targets, by program (issue 64)
RATIO = {"runtime": 1.1}  # check --runtime / the bare script

_HASH = "import hashlib, mmap, sys\nwith open(sys.argv[1], 'rb') as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:\n    hashlib.sha256(m).hexdigest()\n"
_BARE = (
    "import sys, torch\nfrom executorch.runtime import Runtime\n"
    "DTYPES = {0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64, 5: torch.float16, 6: torch.float32, 7: torch.float64, 11: torch.bool, 15: torch.bfloat16}\n"
    "method = Runtime.get().load_program(sys.argv[1]).load_method('forward')\n"
    "meta = method.metadata\n"
    "inputs = [torch.zeros(list(t.sizes()), dtype=DTYPES[int(t.dtype())]) for t in (meta.input_tensor_meta(i) for i in range(meta.num_inputs()))]\n"
    "method.execute(inputs)\n"
)  # ExecuTorch's ScalarType numbers -> torch's dtypes


def command(way: str, program: str) -> list[str]:
    """The command line of ``way`` on ``program``."""
    python = [sys.executable]
    if way == "hash":
        return [*python, "-c", _HASH, program]
    if way == "bare":
        return [*python, "-c", _BARE, program]
    arguments = {
        "check": ["check", program],
        "diff": ["diff", program, program],
        "runtime": ["check", "--runtime", program],
    }[way]
    return [*python, "-m", "export_guards", *arguments]


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    peak_mib: float


def measured(way: str, program: str) -> Run:
    """``way`` in a fresh process: its wall time, its CPU time and its children's, and the
    largest resident set of its process tree (``wait4``)."""
    args = command(way, program)
    start = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    errors = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # 1: the check found errors (these programs have none)
        raise RuntimeError(f"{way} on {program} exited {code}: {errors.decode()[-500:]}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


@dataclass
class Row:
    program: str
    way: str
    runs: list[Run] = field(default_factory=list)
    ratios: dict[str, list[float]] = field(default_factory=lambda: {"wall": [], "cpu": [], "peak": []})

    def median(self, figure: str) -> float:
        return statistics.median(getattr(run, figure) for run in self.runs)

    def ratio(self, figure: str) -> float | None:
        return statistics.median(self.ratios[figure]) if self.ratios[figure] else None

    def target(self) -> str:
        if self.way in RATIO:
            return f"<= {RATIO[self.way]} x"
        seconds = SECONDS.get(Path(self.program).name)
        return f"<= {seconds} s" if seconds and self.way in ("check", "diff") else ""

    def missed(self) -> bool:
        if self.way in RATIO:
            return min(self.ratio("wall") or 0, self.ratio("cpu") or 0) > RATIO[self.way]
        seconds = SECONDS.get(Path(self.program).name)
        # the better of wall and CPU, as for the ratios: on a loaded machine the wall waits for a core
        return (
            seconds is not None
            and self.way in ("check", "diff")
            and min(self.median("wall_s"), self.median("cpu_s")) > seconds
        )


def pairs(program: str, ways: list[str], count: int) -> list[Row]:
    """``count`` rounds of every way in fresh processes, the order reversed round by round."""
    rows = {way: Row(program, way) for way in ways}
    measured(
        "check" if "check" in ways else ways[0], program
    )  # untimed: the file in the page cache, the bytecode compiled
    for round_ in range(count):
        runs = {}
        for way in ways if round_ % 2 == 0 else ways[::-1]:
            runs[way] = run = measured(way, program)
            rows[way].runs.append(run)
            print(
                f"{Path(program).name} {way} round {round_ + 1}: {run.wall_s:.2f} s, {run.cpu_s:.2f} s CPU, {run.peak_mib:,.0f} MiB",
                file=sys.stderr,
                flush=True,
            )
        for way, row in rows.items():
            if (baseline := BASELINE[way]) is not None and baseline in runs:
                a, b = runs[way], runs[baseline]
                row.ratios["wall"].append(a.wall_s / b.wall_s)
                row.ratios["cpu"].append(a.cpu_s / b.cpu_s)
                row.ratios["peak"].append(a.peak_mib / b.peak_mib)
    return list(rows.values())


def table(rows: list[Row], count: int) -> str:
    lines = [
        f"{count} pair{'s' if count > 1 else ''} per row; figures are medians of the runs, ratios the medians of the paired ratios (way / its baseline)",
        "",
        "| program | MB | way | vs | wall s | CPU s | peak MiB | wall | CPU | peak | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratios = [f"{r:.2f}" if (r := row.ratio(figure)) is not None else "" for figure in ("wall", "cpu", "peak")]
        lines.append(
            f"| {Path(row.program).name} | {os.path.getsize(row.program) / 1e6:,.0f} | {row.way} | {BASELINE[row.way] or ''} | {row.median('wall_s'):.2f} "
            f"| {row.median('cpu_s'):.2f} | {row.median('peak_mib'):,.0f} | {' | '.join(ratios)} | {row.target()} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "programs",
        nargs="*",
        default=list(SHARED),
        help="the .pte files (default: the two 100M decoders of /tmp/shared)",
    )
    parser.add_argument(
        "--ways",
        default="check,diff,runtime",
        help="comma-separated, of: check, diff, runtime; each brings its baseline (default all)",
    )
    parser.add_argument("--pairs", type=int, default=3, help="pairs per way (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 pair: a smoke test of the benchmark")
    args = parser.parse_args()
    missing = [p for p in args.programs if not os.path.isfile(p)]
    if missing:
        print(
            f"no such program: {', '.join(missing)}; the default ones are written by `.venv/bin/python /tmp/shared/build.py` (minutes, GBs)",
            file=sys.stderr,
        )
        return 2
    asked = args.ways.split(",")
    ways = [way for way in BASELINE if way in asked or any(BASELINE.get(other) == way for other in asked)]
    count = 1 if args.quick else args.pairs
    rows = [row for program in args.programs for row in pairs(program, ways, count)]
    print("\n" + table(rows, count))
    return 1 if any(row.missed() for row in rows) else 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crashing run leaves no core file behind
    sys.exit(main())
