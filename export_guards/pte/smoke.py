"""The runtime smoke check: load a ``.pte`` in ``executorch.runtime`` in a child process and run
each method once on inputs the child makes up (or ``forward`` on inputs given). A crash there
is a finding, never the checker's death.

The child is ``export_guards.workers.runtime_smoke``: it prints one JSON line per step, so that
the parent knows where a crash happened. A :class:`SmokeWorker` runs several input sets in one
child (the lint's example inputs, then the inputs at each dynamic dimension's bounds): one
:class:`SmokeRun` each.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, final

__all__ = [
    "MARKER",
    "SmokeInputs",
    "SmokeRun",
    "SmokeWorker",
    "StartedSmoke",
    "input_specs",
    "smoke_test",
    "start_smoke_test",
]

WORKER = "export_guards.workers.runtime_smoke"
MARKER = "export-guards: input set"
"""The line (and the run's number) the child writes to stderr before each run after the first:
the runtime's log lines after it are that run's."""
_KERNEL_CALL_FAILED = re.compile(r"KernelCall failed at instruction (\S+) in operator (\S+):\s")
_CHECK_FAILED = re.compile(r"(Check failed \(.*\):.*)$")


@final
@dataclass(frozen=True)
class SmokeRun:
    """What happened when the runtime loaded and ran the program.

    Attributes:
        program: how findings name the program (its path, or ``<bytes>``).
        steps: what the child did, in order (``"load"``, ``"run forward"``, ``"ran forward"``).
        failure: the exception the runtime raised, if any (``"run forward: RuntimeError: ..."``).
        signal: the signal that killed the child (``"SIGSEGV"``), if any.
        timed_out: whether it ran past its time limit.
        time_limit_s: that time limit, in seconds, when it did.
        stderr: the runtime's log lines that say what went wrong (at most two).
        log: every log line of the runtime's.
        mismatches: each output that differs from eager beyond the tolerance, described
            (the lint's run on its example inputs; the comparison is the caller's).
        made_up: the inputs the child made up for the method it ran last (``#0 float32[1, 8]
            random, #1 int64[1] zeros``), once that method loaded; ``None`` for inputs given.
        made_up_indices: whether some of those were integers, whose values a program may read
            as indices or positions (made-up ones may be out of its range).
        made_up_values_failed: whether, after a failure on made-up floats alone, the method ran
            on the same inputs with zeros for them: the values made up failed, not the program.
    """

    program: str
    steps: tuple[str, ...] = ()
    failure: str | None = None
    signal: str | None = None
    timed_out: bool = False
    time_limit_s: float | None = None
    stderr: str = field(default="", repr=False)
    log: tuple[str, ...] = field(default=(), repr=False)
    mismatches: tuple[str, ...] = ()
    made_up: str | None = None
    made_up_indices: bool = False
    made_up_values_failed: bool = False

    @property
    def last_step(self) -> str:
        return self.steps[-1] if self.steps else "start"

    @property
    def failed_call(self) -> tuple[str, str] | None:
        """The instruction and operator whose kernel call failed (``("0:3",
        "aten::constant_pad_nd.out")``), from the runtime's log; ``None`` when no kernel call did."""
        for line in self.log:
            found = _KERNEL_CALL_FAILED.search(line)
            if found:
                return found.group(1), found.group(2)
        return None

    @property
    def reason(self) -> str | None:
        """The runtime's own words for why a call failed: its first failed check (``Check failed
        (pad[i] >= 0): Padding values must be non-negative, but got pad[1] = -1``)."""
        for line in self.log:
            found = _CHECK_FAILED.search(line)
            if found:
                return found.group(1).strip().removesuffix(":")
        return None


@final
@dataclass(frozen=True)
class SmokeInputs:
    """One run of ``forward`` in a :class:`SmokeWorker`: its inputs (a list saved with
    ``torch.save``), where the child saves its outputs, and how findings name the program run
    on them (``the written program at length=64 (the upper bound)``)."""

    inputs: str
    outputs: str
    name: str


def smoke_test(
    program: str | os.PathLike[str],
    data_files: Sequence[str] = (),
    timeout_s: float = 120.0,
    *,
    name: str | None = None,
    inputs: str | None = None,
    outputs: str | None = None,
) -> SmokeRun:
    """Run the child on ``program`` (with at most one data file) and describe what happened;
    findings call the program ``name`` (default: its path). With ``inputs`` (a list saved with
    ``torch.save``), the child runs ``forward`` on them and saves its outputs to ``outputs``."""
    return start_smoke_test(program, data_files, timeout_s, name=name, inputs=inputs, outputs=outputs).result()


@final
class StartedSmoke:
    """A smoke run under way in its child process: the caller works meanwhile (``check_pte``
    runs the structural rules while the child imports the runtime), asks for what the child
    answers before it loads the program (:meth:`answer`), then for the ``result``."""

    def __init__(self, process: subprocess.Popen[str], pipes: _Pipes, names: Sequence[str], timeout_s: float) -> None:
        self._process, self._pipes, self._names = process, pipes, tuple(names)
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s

    def answer(self, kind: str) -> Any:
        """What the child answered as ``kind`` (its line ``{"inventory": ...}``), once it has:
        ``None`` when it ended, or ran past its time limit, without answering."""
        return self._pipes.answer(kind, self._deadline)

    def result(self) -> SmokeRun:
        """Wait for the child (until its time limit, counted from its start) and describe what
        happened (to its first run: the only one but a :meth:`SmokeWorker.run_each`'s)."""
        return self.results()[0]

    def results(self) -> tuple[SmokeRun, ...]:
        """:meth:`result` for each run the child started (the first always), in order."""
        timed_out = False
        try:
            self._process.wait(timeout=max(0.0, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            timed_out = True
        limit = self._timeout_s if timed_out else None
        return _described(
            self._names, self._process.returncode, self._pipes.stdout(), self._pipes.stderr(), time_limit_s=limit
        )


def start_smoke_test(
    program: str | os.PathLike[str],
    data_files: Sequence[str] = (),
    timeout_s: float = 120.0,
    *,
    name: str | None = None,
    inputs: str | None = None,
    outputs: str | None = None,
) -> StartedSmoke:
    """:func:`smoke_test`, started: the child runs while the caller works; ``program`` (and the
    files named) must stay until ``result()`` returns."""
    given = ["--inputs", inputs, "--outputs", outputs or os.devnull] if inputs is not None else []
    command = [sys.executable, "-m", WORKER, *given, os.fspath(program), *data_files[:1]]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    return StartedSmoke(process, _Pipes(process), [name or os.fspath(program)], timeout_s)


def input_specs(program: Any) -> dict[str, list[list[object]]]:
    """Each method's inputs as the runtime's child makes them up (``workers.runtime_smoke``):
    ``["tensor", scalar type, sizes, dim order]``, ``["int", value]``, ``["double", value]``,
    ``["bool", value]`` or ``["none"]`` (other kinds of input are left out, as the child leaves
    them out), from a parsed program (``PteFile.program``; ``{}`` for None)."""
    specs: dict[str, list[list[object]]] = {}
    for plan in program.execution_plan if program is not None else ():
        if plan.name not in specs:  # the first method of a name, as the child's next() finds it
            with contextlib.suppress(Exception):  # a value damaged past this reading: the child reads the file itself
                specs[plan.name] = [
                    spec for index in plan.inputs if (spec := _input_spec(plan.values[index].val)) is not None
                ]
            specs.setdefault(plan.name, None)  # type: ignore[arg-type]
    return {name: found for name, found in specs.items() if found is not None}


def _input_spec(value: object) -> list[object] | None:
    kind = type(value).__name__
    if kind == "Tensor":
        return ["tensor", int(value.scalar_type), [int(n) for n in value.sizes], [int(n) for n in value.dim_order]]  # type: ignore[attr-defined]
    if kind in ("Int", "Double", "Bool"):
        return [kind.lower(), json.loads(json.dumps(getattr(value, f"{kind.lower()}_val")))]  # as the job carries it
    return ["none"] if kind == "Null" else None


@final
class SmokeWorker:
    """A smoke child started ahead of its program: it imports the runtime while the caller
    works (the lint exports meanwhile; ``check_pte`` reads the program), then ``start`` hands it
    one program. Use it as a context manager: a worker never handed a program is stopped on
    exit."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", WORKER, "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._pipes = _Pipes(self._process)

    def start(
        self,
        program: str | os.PathLike[str],
        data_files: Sequence[str] = (),
        timeout_s: float = 120.0,
        *,
        name: str | None = None,
        runs: Sequence[SmokeInputs] = (),
        inventory: bool = False,
        replay: Sequence[object] = (),
        made_up: Mapping[str, list[list[object]]] | None = None,
    ) -> StartedSmoke:
        """Hand the child its program (once: it serves one). With ``inventory``, it first
        answers ``"inventory"``: the kernels and backends of its runtime
        (:meth:`RuntimeInventory.installed`'s fields); with ``replay`` (EG519's calls,
        ``rules.kernels.replay_calls``), ``"replayed"``: the verdict of each, replayed on
        torch's meta tensors. Then it loads and runs the program, as :func:`smoke_test`, or
        ``forward`` on each of ``runs`` in turn (:meth:`run_each`), within ``timeout_s`` a run.
        ``made_up``: what to make up each method's inputs from (:func:`input_specs` of the
        program the caller parsed already), so that the child does not parse it again."""
        job = {
            "program": os.fspath(program),
            "data": data_files[0] if data_files else None,
            "runs": [{"inputs": r.inputs, "outputs": r.outputs} for r in runs],
            "inventory": inventory,
            "replay": list(replay),
            **({"made_up": dict(made_up)} if made_up is not None else {}),
        }
        names = [r.name for r in runs] or [name or os.fspath(program)]
        started = StartedSmoke(self._process, self._pipes, names, timeout_s * len(names))
        assert self._process.stdin is not None
        with contextlib.suppress(OSError):  # the child died before it read its job: the result says how
            self._process.stdin.write(json.dumps(job) + "\n")
        with contextlib.suppress(OSError):
            self._process.stdin.close()
        return started

    def run(
        self,
        program: str | os.PathLike[str],
        data_files: Sequence[str] = (),
        timeout_s: float = 120.0,
        *,
        name: str | None = None,
        inputs: str | None = None,
        outputs: str | None = None,
    ) -> SmokeRun:
        """:func:`smoke_test` in this worker (once: it serves one program)."""
        runs = [SmokeInputs(inputs, outputs or os.devnull, name or os.fspath(program))] if inputs is not None else []
        return self.start(program, data_files, timeout_s, name=name, runs=runs).result()

    def run_each(
        self,
        program: str | os.PathLike[str],
        runs: Sequence[SmokeInputs],
        data_files: Sequence[str] = (),
        timeout_s: float = 120.0,
    ) -> tuple[SmokeRun, ...]:
        """Load ``program`` once in this worker and run ``forward`` on each of ``runs`` in turn,
        the same loaded method, each run seeing the state (mutable buffers) the runs before it left, within
        ``timeout_s`` a run; a crash ends the runs after it. One :class:`SmokeRun` for each run
        started (the first always), in order: a failure, a crash or a time-out is the run's
        where it happened."""
        return self.start(program, data_files, timeout_s, runs=runs).results()

    def __enter__(self) -> SmokeWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process.poll() is None:  # never handed a program (or still running after an error)
            self._process.kill()
            self._process.wait()
        self._pipes.close()


@final
class _Pipes:
    """The child's output, read as it comes by two threads (a pipe left unread fills, and the
    child blocks on it): stdout by line, for the answers it gives before its run; stderr whole."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._process = process
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._seen: list[str] = []
        self._ended = False
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read_lines, daemon=True, name="export-guards smoke stdout"),
            threading.Thread(target=self._read_stderr, daemon=True, name="export-guards smoke stderr"),
        ]
        for reader in self._readers:
            reader.start()

    def _read_lines(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _read_stderr(self) -> None:
        assert self._process.stderr is not None
        self._stderr.append(self._process.stderr.read())

    def answer(self, kind: str, deadline: float) -> Any:
        while not self._ended:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                self._ended = True
                break
            self._seen.append(line)
            if line.startswith(f'{{"{kind}"'):
                return json.loads(line)[kind]
        return None

    def stdout(self) -> str:
        """Everything the child printed (call once it has ended)."""
        self._readers[0].join()
        while not self._ended:
            line = self._lines.get()
            self._ended = line is None
            self._seen += [line] if line is not None else []
        return "".join(self._seen)

    def stderr(self) -> str:
        self._readers[1].join()
        return "".join(self._stderr)

    def close(self) -> None:
        for reader in self._readers:
            reader.join()
        for stream in (self._process.stdin, self._process.stdout, self._process.stderr):
            if stream is not None and not stream.closed:
                with contextlib.suppress(OSError):  # a job the dead child never read
                    stream.close()


def _described(
    names: Sequence[str], returncode: int, stdout: str, stderr: str, *, time_limit_s: float | None = None
) -> tuple[SmokeRun, ...]:
    """A :class:`SmokeRun` for each run (named ``names``) that the child's lines say started,
    the first always; a death, a time-out (the child ran past ``time_limit_s``) or an exit code
    is the last started run's."""
    timed_out = time_limit_s is not None
    lines: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        if line.startswith(('{"step"', '{"failure"', '{"made_up"')):  # the child's own lines, not the runtime's chatter
            lines.setdefault(int(json.loads(line).get("set", 0)), []).append(line)
    logs: dict[int, list[str]] = {}
    current = 0
    for line in stderr.strip().splitlines():
        if line.startswith(MARKER):
            current = int(line.removeprefix(MARKER))
        elif _is_runtime_log(line):
            logs.setdefault(current, []).append(line)
    last = max([0, *(r for r in lines if r < len(names))])
    died = -returncode if returncode < 0 and not timed_out else None
    described = []
    for run, name in enumerate(names[: last + 1]):
        said = "\n".join(lines.get(run, ()))
        failure = next(
            (json.loads(line)["failure"] for line in lines.get(run, ()) if line.startswith('{"failure"')), None
        )
        made_up = [json.loads(line)["made_up"] for line in lines.get(run, ()) if line.startswith('{"made_up"')][-1:]
        if run == last and failure is None and returncode > 0:
            failure = f"the smoke run exited with {returncode}"
        log = tuple(logs.get(run, ()))
        described.append(
            SmokeRun(
                name,
                _steps(said),
                failure=failure,
                signal=signal.Signals(died).name if died and run == last else None,
                timed_out=timed_out and run == last,
                time_limit_s=time_limit_s if run == last else None,
                stderr="\n".join(_telling(log)),
                log=log,
                made_up=made_up[0]["inputs"] if made_up else None,
                made_up_indices=bool(made_up and made_up[0]["indices"]),
                made_up_values_failed=bool(made_up and made_up[0].get("zeros_ran")),
            )
        )
    return tuple(described)


def _telling(lines: Iterable[str]) -> list[str]:
    """The runtime log lines that say what went wrong (``Check failed (...)``, ``KernelCall
    failed ... in operator ...``): at most two; else the last line."""
    lines = list(lines)
    telling = [
        line for line in lines if any(word in line.lower() for word in ("fail", "error", "missing", "out of range"))
    ]
    return telling[:2] or lines[-1:]


def _is_runtime_log(line: str) -> bool:
    """The runtime's own log lines (``[method.cpp:744] Op index 129 out of range``), not
    Python's warnings or the CPU probe's chatter."""
    return line.startswith("[") and not line.startswith("[cpuinfo")


def _steps(stdout: str) -> tuple[str, ...]:
    return tuple(json.loads(line)["step"] for line in stdout.splitlines() if line.startswith('{"step"'))
