"""Same outcome before and after a refactor: the findings, programs and bytes of a fixed set of cases.

``record OUT.json`` runs every case in this process and writes, per case (a stable key), what it
gave: ``findings`` (each finding with all of its fields, in report order), ``pte_sha256`` and
``pte_len`` of the written program, and where the case raised, ``error`` (``Type: first line``)
with ``cause`` (the innermost exception, when another one wraps it) and the ``findings`` of the
exception's report if it has one: an exception is an outcome too (``ConstantPlacementError`` for a
device constant). ``compare A.json B.json`` prints each case that differs, with what differs,
then ``N cases, M differ``; it exits 1 if any differ (a case missing from one side differs).

It imports ``export_guards`` from whatever comes first on ``sys.path``, and the test suite's
models from that copy's ``tests/``, so the same script records an older tree too::

    git -C /work/main worktree add /tmp/eg-head HEAD
    cd /tmp/eg-head && PYTHONPATH=/tmp/eg-head:/tmp/eg-head/tests \\
        /work/main/.venv/bin/python /work/main/benchmarks/same_outcome.py record /tmp/outcome-head.json
    cd /work/main && .venv/bin/python benchmarks/same_outcome.py record /tmp/outcome-now.json
    .venv/bin/python benchmarks/same_outcome.py compare /tmp/outcome-head.json /tmp/outcome-now.json

(the venv's editable install points at /work/main, so PYTHONPATH must name the other tree:
the file records which ``export_guards`` it imported, and ``record`` prints it).

The cases, each model built under ``torch.manual_seed(0)`` (both trees build the same weights):

1. ``matrix``: every row of ``tests/flow_models.ROWS`` through every flow of
   ``tests/test_flow_matrix.py`` (the drop-in passes with no partitioner, XNNPACK and the test
   device's backend; ``emit_passes("copy")``; the guarded partitioners with the copy policy;
   every XNNPACK recipe by name), the stock limitations included (their error is the outcome).
   The flows are written out here as the test writes them rather than imported, so that an edit
   of the test file cannot change what is compared; the drop-in flows give no report, so each
   guard pass is wrapped to keep what it reports (its ``GuardPassResult.report``; a cell that
   raises keeps it as ``passes_found``). The Vulkan
   column is left out: its programs need a backend the pip runtime lacks (the test only lowers
   them, all rows in one program) and its preprocess costs seconds per program.
2. ``pipeline``: ``export_with_guards`` (hence ``lower_with_guards``) on each row and on the
   placement scenario's model (``tests/models.EveryConstantKind``), with placement ``error`` and
   ``copy`` and backend ``xnnpack`` and ``portable``, on the CPU and on the test device
   ``trapdev`` (every row has a ``trapdev`` program): the report and ``to_pte()``.
3. ``example``: the ``examples/`` targets that the README, docs and Makefile lint, with the
   options they give, through ``export_target``'s steps then ``to_pte()``, ``check_program`` and
   ``run_program``, as ``export-guards lint`` does: the report, the program's check, its run
   compared with eager, and the bytes (none is
   skipped: the slowest, segmentation at 400 x 400, takes about 13 s).
4. ``recipe`` and ``placement``: on each ``trapdev`` program, ``guard_recipe`` (exported with
   ``executorch.export.export``, then ``recipe_report``) and ``export_with_recipe``, both with
   ``xnnpack_fp32`` and either policy; ``check_constant_placement`` and
   ``guard_constant_placement`` (either policy, on the torch.export program and on the edge
   program, the copy lowered with stock ``to_executorch()``).

Paths under the recorded tree's root are written as ``<repo>``, so that two checkouts compare;
``record`` runs under ``PYTHONHASHSEED=0`` (it re-executes itself so), as a few messages list a
set; ExecuTorch's quantized kernels are registered, as the flow matrix does, so that a portable
int8 program is written. 360 cases, about 8 minutes on 2 cores (``meta.seconds`` in the file;
``meta.case_seconds`` per case, not compared). Two records of one tree are identical.
The file is rewritten after each case: a case that kills the process (a host read of device
memory) leaves the cases before it, and ``compare`` reports the rest as missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import faulthandler
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

Outcome = dict[str, Any]
Case = Callable[[], Outcome]

MATRIX_FLOWS = (
    "guard_passes × portable",
    "guard_passes × XNNPACK",
    "guard_passes × test device backend",
    "emit_passes copy",
    "guard_partitioners + copy",
)
"""The non-recipe columns of tests/test_flow_matrix.py, Vulkan aside (see the docstring)."""

EXAMPLES: tuple[tuple[str, dict[str, Any], dict[str, Any]], ...] = (
    # (target, factory arguments, Settings fields): each as a command in the README, docs or Makefile runs it.
    ("examples/decoder.py:model", {}, {}),  # README, docs/lint.md, Makefile
    ("examples/decoder.py:model", {}, {"fold": False}),  # docs/lint.md: --no-fold
    ("examples/decoder.py:model", {}, {"recipe": "xnnpack_pt2e_int8_static_per_channel"}),  # docs/recipes.md
    ("examples/segmentation.py:model", {}, {}),  # README, docs/getting-started.md
    ("examples/segmentation.py:model", {"size": 72}, {}),  # docs/lint.md: --arg size=72
    ("examples/segmentation.py:model", {}, {"fold": False}),  # docs/howto-reparametrized-weights.md
    ("examples/device_constants.py:model", {}, {}),  # docs/howto-device-constants.md: EG101 per constant
)

EXTRA_ROW = "every constant kind (placement scenario)"
"""tests/models.EveryConstantKind, the model of tests/placement_scenario.py: every kind of constant."""


# --- what an outcome holds ------------------------------------------------------------------


class Normalizer:
    """Makes recorded values independent of where the tree is checked out."""

    def __init__(self, root: Path) -> None:
        self.prefixes = sorted({str(root), str(root.resolve())}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for prefix in self.prefixes:
            value = value.replace(prefix, "<repo>")
        return value

    def value(self, value: object) -> object:
        """``value`` as JSON: enums by value, dataclasses field by field, tuples as lists;
        anything else JSON does not know as its ``str``."""
        if isinstance(value, enum.Enum):
            return self.value(value.value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: self.value(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {str(k): self.value(v) for k, v in value.items()}
        if isinstance(value, str):
            return self.text(value)
        if value is None or isinstance(value, (bool, int, float)):
            return value
        return self.text(str(value))


NORMALIZE = Normalizer(Path.cwd())  # replaced by record() once it knows the tree's root


def findings(report: Iterable[object]) -> list[object]:
    """Every field of each finding, in report order (the order is part of the outcome)."""
    return [NORMALIZE.value(f) for f in report]


def program(pte: bytes) -> Outcome:
    return {"pte_sha256": hashlib.sha256(pte).hexdigest(), "pte_len": len(pte)}


def first_line(error: BaseException) -> str:
    message = str(error).strip()
    return f"{type(error).__name__}: {NORMALIZE.text(message.splitlines()[0])}" if message else type(error).__name__


def failure(error: BaseException) -> Outcome:
    """An exception as an outcome: its first line, the innermost cause's (ExecuTorch's pass
    manager wraps a guard's error in a plain ``Exception``), and the report one of them carries."""
    chain = [error]
    while chain[-1].__cause__ is not None and len(chain) < 20:
        chain.append(chain[-1].__cause__)
    outcome: Outcome = {"error": first_line(error)}
    if len(chain) > 1:
        outcome["cause"] = first_line(chain[-1])
    report = next((e.report for e in chain if _is_report(getattr(e, "report", None))), None)
    if report is not None:
        outcome["findings"] = findings(report)
    return outcome


def _is_report(value: object) -> bool:
    import export_guards as eg

    return isinstance(value, eg.Report)


def guarded(result: Any, *, check: bool = False, run: tuple[Any, Any] | None = None) -> Outcome:
    """A ``GuardedExport``'s report and written program (or why ``to_pte`` failed); with
    ``check``, the written program's check as ``export-guards lint`` runs it; with ``run`` (the
    model and its example inputs), the program's run in ``executorch.runtime`` compared with
    eager, as the lint runs it."""
    outcome: Outcome = {"findings": findings(result.report)}
    try:
        pte = result.to_pte()
    except Exception as error:  # noqa: BLE001 - an export stopped before lowering is an outcome
        return {**outcome, **{k: v for k, v in failure(error).items() if k != "findings"}}
    outcome.update(program(pte))
    if check:
        outcome["program_check"] = findings(checked(result, pte))
    if run is not None:
        outcome["program_run"] = findings(ran(result, pte, *run))
    return outcome


def checked(result: Any, pte: bytes) -> Any:
    """The written program's check, through the tree's own API: ``export_guards.check_program``
    (a baseline from before it: the export's own method)."""
    try:
        from export_guards import check_program
    except ImportError:
        return result.check_program(pte)
    return check_program(result, pte)


def ran(result: Any, pte: bytes, model: Any, inputs: Any) -> Any:
    """The written program's run, compared with eager, through the tree's own API:
    ``export_guards.run_program`` (a baseline from before it: the export's own method)."""
    try:
        from export_guards import run_program
    except ImportError:
        return result.run_program(pte, model, inputs)
    return run_program(result, pte, model, inputs).report


# --- recording what the drop-in passes report ---------------------------------------------


def recording(guard: Any, found: list[Any]) -> Any:
    """``guard``, keeping each call's report in ``found``: the pass managers keep only each
    result's program or graph. The wrapper is of ``guard``'s kind (an ExecuTorch program pass,
    or a torch.fx graph pass for ``ExecutorchBackendConfig.passes``) and named as ``guard``,
    as ExecuTorch's pass manager names a pass that fails."""
    from executorch.exir.pass_base import ExportedProgramPassBase
    from torch.fx.passes.infra.pass_base import PassBase

    def call(self: Any, subject: Any) -> Any:
        result = guard(subject)
        found.extend(getattr(result, "report", None) or ())
        return result

    base = ExportedProgramPassBase if isinstance(guard, ExportedProgramPassBase) else PassBase
    return type(type(guard).__name__, (base,), {"call": call, "changes_input": getattr(guard, "changes_input", True)})()


def recorded_transform_passes(passes: list[Any], found: list[Any]) -> list[Any]:
    """``guard_passes(...)``, each pass keeping its result's report in ``found``."""
    return [recording(p, found) for p in passes]


def recorded_emit_passes(passes: list[Any], found: list[Any]) -> list[Any]:
    """``emit_passes(...)``, the checking pass keeping its report in ``found``; a
    ``SpecPropPass`` (the one ``to_executorch`` hands the emitted program to) is left as it is."""
    from executorch.exir.passes.spec_prop_pass import SpecPropPass

    return [p if isinstance(p, SpecPropPass) else recording(p, found) for p in passes]


# --- the models ------------------------------------------------------------------------------


def rows() -> dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]]:
    """The flow matrix's rows (tests/flow_models.py)."""
    from flow_models import ROWS

    return dict(ROWS)


def every_constant_kind() -> tuple[Any, tuple[Any, ...]]:
    import models

    model = models.seeded(models.EveryConstantKind)
    return model, model.example_inputs()


def all_rows() -> dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]]:
    return {**rows(), EXTRA_ROW: every_constant_kind}


def built(factory: Callable[[], tuple[Any, tuple[Any, ...]]], device: str = "cpu") -> tuple[Any, tuple[Any, ...]]:
    """A fresh model and its inputs, on ``device`` (``"trapdev"`` loads the test device)."""
    model, inputs = factory()
    if device == "cpu":
        return model, tuple(inputs)
    import models
    from export_guards.testing import load_trapdev

    on = load_trapdev()
    return models.to_device(model, on), tuple(x.to(on) for x in inputs)


def exported(factory: Callable[[], tuple[Any, tuple[Any, ...]]], device: str = "cpu") -> Any:
    """``torch.export`` without autograd, as tests/test_flow_matrix.py does it (a KV cache
    written in place fails ``to_executorch`` in grad mode, guards or not)."""
    import torch

    model, inputs = built(factory, device)
    with torch.no_grad():
        return torch.export.export(model, inputs)


# --- 1. the flow matrix ----------------------------------------------------------------------


def matrix_flow(flow: str, factory: Callable[[], tuple[Any, tuple[Any, ...]]]) -> Outcome:
    """One cell of tests/test_flow_matrix.py, the findings of its guard passes kept."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower

    import export_guards as eg
    from device_backend import BACKEND_ID, HostCopyPartitioner, runnable

    found: list[Any] = []

    def emit(policy: str = "error") -> ExecutorchBackendConfig:
        return ExecutorchBackendConfig(passes=recorded_emit_passes(eg.emit_passes(policy), found))

    try:
        if flow in ("guard_passes × portable", "guard_passes × XNNPACK"):
            parts = eg.guard_partitioners([XnnpackPartitioner()]) if flow.endswith("XNNPACK") else []
            passes = recorded_transform_passes(eg.guard_passes(partitioner=parts or None), found)
            edge = to_edge_transform_and_lower(exported(factory), transform_passes=passes, partitioner=parts)
            pte = edge.to_executorch(emit()).buffer
        elif flow == "guard_passes × test device backend":
            parts = eg.guard_partitioners(
                [HostCopyPartitioner()], device_backends=(*eg.DEVICE_BACKENDS, BACKEND_ID), emitter="copy"
            )
            passes = recorded_transform_passes(eg.guard_passes(partitioner=parts), found)
            edge = to_edge_transform_and_lower(exported(factory, "trapdev"), transform_passes=passes, partitioner=parts)
            pte = runnable(edge).to_executorch(emit("copy")).buffer
        elif flow == "emit_passes copy":
            pte = to_edge(exported(factory, "trapdev")).to_executorch(emit("copy")).buffer
        elif flow == "guard_partitioners + copy":
            parts = eg.guard_partitioners([XnnpackPartitioner()])
            passes = recorded_transform_passes(eg.guard_passes(placement="copy", partitioner=parts), found)
            edge = to_edge_transform_and_lower(exported(factory, "trapdev"), transform_passes=passes, partitioner=parts)
            pte = edge.to_executorch(emit()).buffer
        else:
            raise ValueError(flow)
    except Exception as error:  # noqa: BLE001 - a failing cell is an outcome
        return {"passes_found": findings(found), **failure(error)}
    return {"findings": findings(found), **program(pte)}


def matrix_recipe(recipe: str, factory: Callable[[], tuple[Any, tuple[Any, ...]]]) -> Outcome:
    import export_guards as eg

    return guarded(eg.export_with_recipe(*built(factory), recipe))


def matrix_cases() -> Iterator[tuple[str, Case]]:
    import export_guards as eg

    recipes = sorted(name for name in eg.recipe_names() if name.startswith("xnnpack_"))  # as the test picks them
    for name, factory in rows().items():
        for flow in MATRIX_FLOWS:
            yield f"matrix | {name} | {flow}", lambda flow=flow, factory=factory: matrix_flow(flow, factory)
        for recipe in recipes:
            yield (
                f"matrix | {name} | recipe {recipe}",
                lambda recipe=recipe, factory=factory: matrix_recipe(recipe, factory),
            )


# --- 2. export_with_guards / lower_with_guards -----------------------------------------------


def pipeline(factory: Callable[[], tuple[Any, tuple[Any, ...]]], device: str, backend: str, placement: str) -> Outcome:
    import torch

    import export_guards as eg

    model, inputs = built(factory, device)
    with torch.no_grad():  # as exported(): the KV cache row needs it
        return guarded(eg.export_with_guards(model, inputs, backend=backend, placement=placement))


def pipeline_cases() -> Iterator[tuple[str, Case]]:
    for name, factory in all_rows().items():
        for device in ("cpu", "trapdev"):
            for backend in ("xnnpack", "portable"):
                for placement in ("error", "copy"):
                    key = f"pipeline | {name} | {device} | {backend} | placement={placement}"
                    yield key, lambda f=factory, d=device, b=backend, p=placement: pipeline(f, d, b, p)


# --- 3. the examples -------------------------------------------------------------------------


def example(root: Path, target: str, arguments: dict[str, Any], settings: dict[str, Any]) -> Outcome:
    import export_guards as eg
    from export_guards.pipeline import export_in_steps
    from export_guards.targets import load_target, target_file

    config = eg.Settings().updated(settings) if settings else None
    made = load_target(str(root / target), arguments)  # export_target's own two steps, the model kept to run eager
    result = export_in_steps(
        made.model,
        made.inputs,
        config=config,
        source=target_file(str(root / target)),
        dynamic_shapes=made.dynamic_shapes,
        strict=made.strict,
        lowering=made.lowering,
    )
    return guarded(result, check=True, run=(made.model, made.inputs))


def example_cases(root: Path) -> Iterator[tuple[str, Case]]:
    for target, arguments, settings in EXAMPLES:
        options = "".join(f" --arg {k}={v}" for k, v in arguments.items()) + "".join(
            " --no-fold" if (k, v) == ("fold", False) else f" --{k} {v}" for k, v in settings.items()
        )
        yield f"example | {target}{options}", lambda t=target, a=arguments, s=settings: example(root, t, a, s)


# --- 4. recipes and placement on the test device ----------------------------------------------


def recipe_session(factory: Callable[[], tuple[Any, tuple[Any, ...]]], placement: str) -> Outcome:
    """``guard_recipe`` as the README shows it: ExecuTorch's ``export``, then ``recipe_report``."""
    import torch
    from executorch.export import export

    import export_guards as eg
    from export_guards.recipes import recipe_named

    model, inputs = built(factory, "trapdev")
    with torch.no_grad():
        session = export(model, [inputs], eg.guard_recipe(recipe_named("xnnpack_fp32"), placement=placement))
    return {"findings": findings(eg.recipe_report(session)), **program(session.get_pte_buffer())}


def recipe_export(factory: Callable[[], tuple[Any, tuple[Any, ...]]], placement: str) -> Outcome:
    import torch

    import export_guards as eg

    model, inputs = built(factory, "trapdev")
    with torch.no_grad():
        return guarded(eg.export_with_recipe(model, inputs, "xnnpack_fp32", config=eg.Settings(placement=placement)))


def placement(factory: Callable[[], tuple[Any, tuple[Any, ...]]], how: str) -> Outcome:
    from executorch.exir import to_edge

    import export_guards as eg

    ep = exported(factory, "trapdev")
    if how == "check_constant_placement":
        return {"findings": findings(eg.check_constant_placement(ep))}
    stage, policy = how.split()  # "program copy", "edge error", ...
    target = ep if stage == "program" else to_edge(ep)
    guarded_program = eg.guard_constant_placement(target, policy=policy)
    edge = to_edge(guarded_program) if stage == "program" else guarded_program
    return program(edge.to_executorch().buffer)


def device_cases() -> Iterator[tuple[str, Case]]:
    for name, factory in all_rows().items():
        for policy in ("error", "copy"):
            yield (
                f"recipe | {name} | trapdev | guard_recipe xnnpack_fp32 + recipe_report | placement={policy}",
                (lambda f=factory, p=policy: recipe_session(f, p)),
            )
            yield (
                f"recipe | {name} | trapdev | export_with_recipe xnnpack_fp32 | placement={policy}",
                (lambda f=factory, p=policy: recipe_export(f, p)),
            )
        for how in ("check_constant_placement", "program error", "program copy", "edge error", "edge copy"):
            yield f"placement | {name} | trapdev | {how}", lambda f=factory, h=how: placement(f, h)


# --- record and compare ----------------------------------------------------------------------


def all_cases(root: Path) -> Iterator[tuple[str, Case]]:
    yield from matrix_cases()
    yield from pipeline_cases()
    yield from example_cases(root)
    yield from device_cases()


def run_case(case: Case) -> Outcome:
    import torch

    torch.manual_seed(0)  # the factories seed themselves; this covers whatever draws outside them
    try:
        return case()
    except Exception as error:  # noqa: BLE001 - an exception is an outcome to compare
        return failure(error)


def with_fixed_hash_seed() -> None:
    """Run again under ``PYTHONHASHSEED=0`` unless already: some messages list a set (ExecuTorch's
    "Missing out variants: {...}"), whose order follows the string hash seed of the process."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})  # noqa: S606 - re-executes this very script


def record(out: Path, only: str | None) -> int:
    global NORMALIZE  # noqa: PLW0603 - set once per record, read by every case
    faulthandler.enable()  # a case that kills the process says where
    started = time.perf_counter()
    import torch

    import export_guards

    root = Path(export_guards.__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "tests"))  # the suite's models, from the same tree
    NORMALIZE = Normalizer(root)
    print(f"export_guards from {export_guards.__file__}", file=sys.stderr, flush=True)

    import executorch.kernels.quantized  # noqa: F401 - as the flow matrix: a portable int8 program needs its out variants

    meta = {
        "export_guards": export_guards.__file__,
        "torch": torch.__version__,
        "executorch": importlib.metadata.version("executorch"),
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "hash_seed": os.environ.get("PYTHONHASHSEED"),
    }
    cases: dict[str, Outcome] = {}
    seconds: dict[str, float] = {}
    for key, case in all_cases(root):
        if only is not None and only not in key:
            continue
        if key in cases:
            raise RuntimeError(f"two cases named {key!r}")
        began = time.perf_counter()
        cases[key] = run_case(case)
        seconds[key] = round(time.perf_counter() - began, 2)
        shown = (
            cases[key].get("error")
            or f"{len(cases[key].get('findings', []))} findings, {cases[key].get('pte_len', '-')} bytes"
        )
        print(f"{seconds[key]:6.1f}s  {key}: {shown}", file=sys.stderr, flush=True)
        _write(out, meta, cases, seconds, time.perf_counter() - started, complete=False)
    total = time.perf_counter() - started
    _write(out, meta, cases, seconds, total, complete=True)
    print(f"{len(cases)} cases in {total:.0f} s: {out}", file=sys.stderr)
    return 0


def _write(
    out: Path, meta: dict[str, Any], cases: dict[str, Outcome], seconds: dict[str, float], total: float, complete: bool
) -> None:
    # Timings are kept apart from the outcomes: they differ from run to run and are not compared.
    data = {"meta": {**meta, "complete": complete, "seconds": round(total, 1), "case_seconds": seconds}, "cases": cases}
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    partial.replace(out)


def compare(a: Path, b: Path) -> int:
    left, right = (json.loads(p.read_text()) for p in (a, b))
    for path, data in ((a, left), (b, right)):
        meta = data.get("meta", {})
        print(
            f"{path}: export_guards from {meta.get('export_guards')}, {meta.get('seconds')} s{'' if meta.get('complete') else ', INCOMPLETE'}"
        )
    keys = list(left["cases"]) + [k for k in right["cases"] if k not in left["cases"]]
    differ = 0
    for key in keys:
        x, y = left["cases"].get(key), right["cases"].get(key)
        if x == y:
            continue
        differ += 1
        print(f"DIFFERS {key}")
        for line in difference(x, y):
            print(f"    {line}")
    print(f"{len(keys)} cases, {differ} differ")
    return 1 if differ else 0


def difference(x: Outcome | None, y: Outcome | None, limit: int = 30) -> list[str]:
    """What differs between two outcomes, field by field; lists as a unified diff of one JSON
    line per element."""
    if x is None or y is None:
        return [f"missing in {'A' if x is None else 'B'}"]
    lines: list[str] = []
    for field in list(x) + [k for k in y if k not in x]:
        u, v = x.get(field), y.get(field)
        if u == v:
            continue
        if isinstance(u, list) and isinstance(v, list) and len(u) == len(v) and all(isinstance(e, dict) for e in u + v):
            # The same number of findings: name the fields that changed, not two whole lines.
            lines += [
                f"{field}[{i}] {e.get('code', '')} {name}: A={_short(e.get(name))} B={_short(f.get(name))}"
                for i, (e, f) in enumerate(zip(u, v))
                for name in list(e) + [n for n in f if n not in e]
                if e.get(name) != f.get(name)
            ]
        elif isinstance(u, list) and isinstance(v, list):
            diff = difflib.unified_diff(
                [json.dumps(e, ensure_ascii=False) for e in u],
                [json.dumps(e, ensure_ascii=False) for e in v],
                "A",
                "B",
                lineterm="",
                n=0,
            )
            lines += [f"{field}: {line}" for line in list(diff)[2:]]
        else:
            lines.append(f"{field}: A={_short(u)} B={_short(v)}")
    return lines[:limit] + ([f"... {len(lines) - limit} more lines"] if len(lines) > limit else [])


def _short(value: object, width: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    recording = commands.add_parser("record", help="run every case and write the outcomes")
    recording.add_argument("out", type=Path)
    recording.add_argument("--only", help="only the cases whose key contains this text (to try the script)")
    comparing = commands.add_parser("compare", help="print the cases whose outcomes differ; exit 1 if any")
    comparing.add_argument("a", type=Path)
    comparing.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.command == "record":
        with_fixed_hash_seed()
        return record(args.out, args.only)
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
