"""Shared fixtures: the test-only device (built once a session), the devices to run on, the
programs many tests read (lowered once a session, handed out read-only), and the command run
in this process."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

import pytest
import torch

from export_guards.report import Finding
from export_guards.ruleset import CATALOG
from export_guards.testing import load_trapdev

TESTS = Path(__file__).parent
T = TypeVar("T")

DEVICES = [
    "trapdev",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(
            not torch.cuda.is_available(),
            reason="CUDA is not available here; the trapdev device covers the same host-read crash",
        ),
    ),
]


@pytest.hookimpl(trylast=True)  # after the plugin has given this worker's torch its share of the cores
def pytest_configure(config: pytest.Config) -> None:
    # The command's output as a CI log gets it: no colour, whatever the developer's shell asks.
    for variable in ("FORCE_COLOR", "NO_COLOR"):
        os.environ.pop(variable, None)
    if hasattr(config, "workerinput"):  # the same share for the processes its tests start (the command, the runtime)
        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test that runs a program where executorch's runtime cannot run with the installed
    torch skips, saying which torch it needs (``compat.runtime_mismatch``), instead of failing
    with the runtime's C++ trace; everything before the run has been tested."""
    from export_guards.compat import MISMATCH_SIGNATURE, RuntimeMismatch, runtime_mismatch

    try:
        return (yield)
    except RuntimeMismatch as mismatch:
        pytest.skip(str(mismatch))
    except RuntimeError as error:  # the runtime called directly: told by its failure
        mismatch = runtime_mismatch(str(error)) if MISMATCH_SIGNATURE in str(error) else None
        if mismatch is None:
            raise
        pytest.skip(mismatch)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--pte-fuzz-cases", type=int, default=2000, help="damaged .pte files the fuzz test checks (default 2000)"
    )


@pytest.fixture(scope="session", autouse=True)
def every_emitted_code_is_registered_and_documented() -> Iterator[set[str]]:
    """Record the code of every finding the suite makes in this process; at the end, each of
    export-guards' own (EG) must be in the catalog and have a section in docs/rules.md (a
    project rule's code is its package's to document)."""
    emitted: set[str] = set()
    original = Finding.__init__

    def recording(self: Finding, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)
        emitted.add(self.code)

    Finding.__init__ = recording  # type: ignore[method-assign]
    try:
        yield emitted
    finally:
        Finding.__init__ = original  # type: ignore[method-assign]
    rules_page = (TESTS.parent / "docs" / "rules.md").read_text()
    unregistered = sorted(c for c in emitted - set(CATALOG) if c.startswith("EG"))
    undocumented = sorted(c for c in emitted & set(CATALOG) if f"## {c} {CATALOG[c].name}\n" not in rules_page)
    assert not unregistered and not undocumented, (
        f"emitted but not registered: {unregistered}; not documented: {undocumented}"
    )


@pytest.fixture(scope="session")
def trapdev() -> torch.device:
    """The test accelerator whose memory faults on a host read (compiled once, cached)."""
    return load_trapdev()


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each non-CPU device available: trapdev always, CUDA where present."""
    if request.param == "trapdev":
        return request.getfixturevalue("trapdev")
    return torch.device(request.param)


def run_script(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``tests/<script>`` in a fresh interpreter with faulthandler on, so a crash there
    shows where it happened and cannot take the test session down."""
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", str(TESTS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=TESTS,
    )


def last_json(completed: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The JSON line a scenario printed last; fails with its stderr when there is none."""
    lines = completed.stdout.strip().splitlines()
    assert completed.returncode == 0 and lines, f"scenario exited {completed.returncode}:\n{completed.stderr[-4000:]}"
    return json.loads(lines[-1])


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[], T]) -> T:
    """``build()`` once a run, however many xdist workers ask: the first builds it under a lock
    and pickles it into the run's folder (the workers' temporary folders' parent, new each run);
    the others unpickle it. Only for what no test changes (bytes, files read back): each worker
    gets its own copy, never a shared model. Without xdist, ``build()`` (the session caches it)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build()
    from filelock import FileLock  # torch's own dependency

    path = tmp_path_factory.getbasetemp().parent / f"built-once-{name}.pickle"
    with FileLock(f"{path}.lock"):
        if not path.exists():
            written = path.with_suffix(".partial")
            written.write_bytes(pickle.dumps(build()))
            written.replace(path)  # whole or absent, whatever stops a worker midway
        return pickle.loads(path.read_bytes())  # noqa: S301 - the run's own cache, written above


@pytest.fixture(scope="session")
def written_programs(tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, object]:
    """``pte_models.write_programs``, once a run: portable, XNNPACK, external-data and
    mutable-buffer programs on disk, in a folder the workers share. Read them; a test that
    damages one edits a copy of its bytes and writes it under its own ``tmp_path``."""
    from pte_models import write_programs

    def write() -> dict[str, object]:
        return write_programs(Path(tmp_path_factory.mktemp("programs")))

    return MappingProxyType(built_once(tmp_path_factory, "written-programs", write))


@pytest.fixture(scope="session")
def architecture_programs(tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, bytes]:
    """``pte_models.architectures()``, once a run: realistic programs, as bytes."""
    from pte_models import architectures

    return MappingProxyType(built_once(tmp_path_factory, "architectures", architectures))


@pytest.fixture(scope="session")
def valid_program_bytes(
    tmp_path_factory: pytest.TempPathFactory, architecture_programs: Mapping[str, bytes]
) -> Mapping[str, bytes]:
    """``pte_models.valid_programs()``, once a run, sharing the architectures."""
    from pte_models import valid_programs

    return MappingProxyType(
        built_once(tmp_path_factory, "valid-programs", lambda: valid_programs(architecture_programs))
    )


@dataclass(frozen=True)
class Ran:
    """What one run of the command gave: its exit code and what it wrote to fd 1 and 2."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Callable[..., Ran]:
    """Run ``export-guards ARGS`` in this process, from ``cwd`` (default tests/): for what the
    process does not matter to. Signals, start-up without torch and the console script itself
    are tested in subprocesses.

    ``lint`` leaves out its run of the written program (``--no-run``) unless the test is marked
    ``runs_program``: each run starts a child that imports ExecuTorch's runtime (seconds of CPU),
    and the tests so marked are the ones about the run."""
    from export_guards.cli import main

    runs = request.node.get_closest_marker("runs_program") is not None

    def invoke(*args: object, cwd: Path = TESTS) -> Ran:
        from export_guards.compat import runtime_mismatch

        if args[:1] == ("lint",) and not runs and "--no-run" not in args:
            args = (*args, "--no-run")

        if "--runtime" in map(str, args) and (mismatch := runtime_mismatch()) is not None:
            pytest.skip(mismatch)  # the command would say it in one line (tests/test_compat.py)
        monkeypatch.chdir(cwd)
        capfd.readouterr()
        try:
            code = main([str(a) for a in args])
        except SystemExit as stopped:  # argparse's usage errors
            code = stopped.code if isinstance(stopped.code, int) else 2
        out, err = capfd.readouterr()
        return Ran(code, out, err)

    return invoke
