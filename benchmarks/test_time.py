"""Where the test suite's time goes: seconds per test file (setup, which is where shared
fixtures build, and the tests themselves), the slowest setups, and how many times each model
class is exported with ``torch.export.export`` in one run, per file.

Run: ``.venv/bin/python benchmarks/test_time.py [--keep] [PYTEST ARGS]`` (default: the whole
suite as ``make test`` runs it, ``-n auto --dist worksteal``). Each file's seconds are printed
beside those kept in ``benchmarks/test_time.json`` (the last run that was kept), so that a file
that slowed down shows; ``--keep`` keeps this run's. This file is also the pytest plugin that
records the figures in each test process (``-p test_time``); exports in subprocesses that tests
start (the command, pytester runs) are not counted, only their time.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
KEPT = Path(__file__).with_name("test_time.json")
SLOWER = 1.25  # a file this much slower than the kept run's, and by 5 s or more, is marked
_FOLDER = "EG_TEST_TIME_FOLDER"  # where each pytest process writes its figures


def main() -> int:
    keep = "--keep" in sys.argv[1:]
    args = [arg for arg in sys.argv[1:] if arg != "--keep"] or ["-n", "auto", "--dist", "worksteal"]
    with tempfile.TemporaryDirectory() as folder:
        # this file alone on the path (benchmarks/xdist.py would shadow pytest-xdist)
        (Path(folder) / "eg_test_time.py").symlink_to(Path(__file__).resolve())
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH")])))
        env[_FOLDER] = folder
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "eg_test_time", "-q", "-p", "no:cacheprovider", *args],
            cwd=ROOT,
            env=env,
        )
        wall = time.perf_counter() - start
        records = [json.loads(path.read_text()) for path in Path(folder).glob("*.json")]
    seconds: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    setups: list[tuple[float, str]] = []
    exports: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    tests = 0
    for record in records:
        tests += record["tests"]
        for file, phases in record["seconds"].items():
            seconds[file].update(phases)
        setups += [(s, test) for s, test in record["setups"]]
        for file, models in record["exports"].items():
            exports[file].update(models)
    print(f"\n{tests} tests in {wall / 60:.1f} min wall ({' '.join(args)}); pytest exited {done.returncode}\n")
    kept = json.loads(KEPT.read_text())["seconds"] if KEPT.exists() else {}
    print(f"{'file':<48} {'setup s':>8} {'tests s':>8} {'kept s':>8} {'exports':>8}  most exported")
    for file, phases in sorted(seconds.items(), key=lambda item: -sum(item[1].values())):
        models = exports.get(file, collections.Counter())
        top = ", ".join(f"{name} x{n}" for name, n in models.most_common(3))
        total, before = sum(phases.values()), kept.get(file)
        slower = before is not None and total > before * SLOWER and total - before >= 5
        print(
            f"{file:<48} {phases['setup']:8.1f} {phases['call'] + phases['teardown']:8.1f} "
            f"{'-' if before is None else f'{before:.1f}':>8} {sum(models.values()):8d}  {top}{'  SLOWER' if slower else ''}"
        )
    print("\nslowest setups (a shared fixture builds in the first test that asks for it):")
    for taken, test in sorted(setups, reverse=True)[:12]:
        print(f"  {taken:7.1f} s  {test}")
    every = collections.Counter[str]()
    for models in exports.values():
        every.update(models)
    print("\nexports per model class in this run: " + ", ".join(f"{name} x{n}" for name, n in every.most_common()))
    if keep:
        figures = {file: round(sum(phases.values()), 1) for file, phases in sorted(seconds.items())}
        KEPT.write_text(
            json.dumps({"tests": tests, "wall_minutes": round(wall / 60, 1), "seconds": figures}, indent=1) + "\n"
        )
        print(f"kept in {KEPT.relative_to(ROOT)}")
    return done.returncode


# The plugin side, in each pytest process (xdist workers included).
_record: dict[str, Any] = {
    "tests": 0,
    "seconds": collections.defaultdict(collections.Counter),
    "setups": [],
    "exports": collections.defaultdict(collections.Counter),
}
_current = ["(collection)"]


def pytest_configure(config: pytest.Config) -> None:
    import torch

    original = torch.export.export

    def counted(model: Any, *args: Any, **kwargs: Any) -> Any:
        _record["exports"][_current[0]][type(model).__name__] += 1
        return original(model, *args, **kwargs)

    torch.export.export = counted


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    _current[0] = item.nodeid.split("::")[0]
    return (yield)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    file = report.nodeid.split("::")[0]
    _record["seconds"][file][report.when] += report.duration
    if report.when == "setup":
        _record["setups"].append((report.duration, report.nodeid))
    if report.when == "call":
        _record["tests"] += 1


def pytest_sessionfinish(session: pytest.Session) -> None:
    folder = os.environ.get(_FOLDER)
    controller = not hasattr(session.config, "workerinput") and session.config.getoption("numprocesses", None)
    if folder and not controller:  # xdist's controller hears every worker's reports again
        Path(folder, f"{os.getpid()}.json").write_text(json.dumps(_record))


if __name__ == "__main__":
    sys.exit(main())
