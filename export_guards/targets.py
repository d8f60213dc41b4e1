"""A model named on the command line: ``path/to/file.py:factory`` or ``package.module:factory``,
where ``factory(**arguments)`` returns ``(model, example_inputs)``, or an ``Exportable`` (with
torch.export's ``dynamic_shapes`` and ``strict``); and the error that says which step of
exporting it failed, in the user's terms."""

from __future__ import annotations

import ast
import contextlib
import difflib
import importlib
import importlib.machinery
import importlib.util
import re
import sys
import sysconfig
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from export_guards.errors import Error, TargetError
from export_guards.report import Report, SourceLocation
from export_guards.ruleset import CATALOG, Hit, finding, first_line

if TYPE_CHECKING:
    from export_guards.lowering import Lowering

__all__ = [
    "Exportable",
    "StepFailed",
    "TargetError",
    "check_target",
    "hint_for",
    "load_target",
    "parse_arguments",
    "quantized",
    "step",
    "step_report",
    "target_file",
]


class Exportable(NamedTuple):
    """What a factory returns: the model and its example inputs, and how the user's own code
    exports and lowers them. A plain tuple of the first two, or three, or more items does as well.

    Attributes:
        model: the ``nn.Module``.
        inputs: its example inputs (a tuple; one tensor or a list is made a tuple).
        dynamic_shapes: torch.export's ``dynamic_shapes`` for ``inputs`` (``None``: every
            shape fixed to the example's).
        strict: torch.export's ``strict`` (``None``: the flow's default, non-strict for
            ``torch.export.export``, a recipe's own for a recipe).
        partitioners: the partitioners the user's script lowers with, options and all
            (``[XnnpackPartitioner(...)]``; ``[]``: the portable kernels alone), instead of the
            ``--backend``'s default one.
        compile_config: the ``EdgeCompileConfig`` the user's script lowers with.
        backend_config: the ``ExecutorchBackendConfig`` the user's script writes with.
        quantize: the user's quantization step, ``quantize(model, inputs) -> model``, run on
            the model before torch.export (torchao's ``quantize_``, or PT2E's prepare,
            calibrate and convert), each time the model is exported: ``check --reproducible``
            runs it twice, as an app's build would.
    """

    model: Any
    inputs: tuple[Any, ...]
    dynamic_shapes: Any = None
    strict: bool | None = None
    partitioners: Sequence[Any] | None = None
    compile_config: Any = None
    backend_config: Any = None
    quantize: Callable[[Any, tuple[Any, ...]], Any] | None = None

    @property
    def lowering(self) -> Lowering:
        """How this model lowers: the user's quantize step, partitioners and configs, as one
        value, which the fixtures and ``export_with_guards`` take whole.

        Raises:
            TypeError: one of them is not what ExecuTorch takes there.
        """
        from export_guards.lowering import Lowering

        return Lowering(self.partitioners, self.compile_config, self.backend_config, self.quantize)


class StepFailed(Error):
    """A step of the user's job failed (building the model, export, lowering, writing).

    Attributes:
        step: the step, in the user's terms (``"building the model"``).
        detail: what failed: the exception, and where in the user's code when known.
        cause: the innermost exception it was raised from, in one line (``"SpecViolationError:
            Operator aten.rand_like.default is not in Core ATen opset"``).
        location: the line of the user's code it went through, or that made the operator it
            names (a ``GuardError``'s ``location``), when known.
        hint: how to fix a torch error users meet (grad mode, devices mixed, data-dependent
            shapes), when the cause is one (``HINTS``).
    """

    def __init__(
        self, step: str, detail: str, cause: str = "", location: SourceLocation | None = None, hint: str | None = None
    ) -> None:
        super().__init__(f"{step} failed: {detail}")
        self.step = step
        self.detail = detail
        self.cause = cause or detail.splitlines()[0]
        self.location = location
        self.hint = hint

    @property
    def report(self) -> Report:
        """This failure as a report, for a reader of JSON, SARIF, annotations or a test's
        artifacts: its EG002 finding (the step, the innermost cause), on the user's line, with
        the hint for a known torch error as its fix."""
        return step_report(self.step, self.cause, self.location, self.hint)


def step_report(step: str, cause: str, location: SourceLocation | None = None, hint: str | None = None) -> Report:
    """A failed step as a report: its EG002 finding (the step, the innermost cause), on the
    user's line, with the hint for a known torch error (:func:`hint_for`) as its fix. A failed
    step's report and ``LoweringFailed``'s are made here."""
    found = finding(CATALOG["EG002"], Hit(f"{step} failed: {cause}", fix=hint))
    return Report.of([replace(found, location=location)])


def parse_arguments(pairs: Iterable[str]) -> dict[str, Any]:
    """``["size=400", "name=vit"]`` as ``{"size": 400, "name": "vit"}``: each value a Python
    literal where it parses as one, else the text as given.

    Raises:
        TargetError: a pair without ``=`` or with an empty name.
    """
    arguments: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip().isidentifier():
            raise TargetError(f"--arg takes NAME=VALUE, such as size=400; not {pair!r}")
        try:
            arguments[name.strip()] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            arguments[name.strip()] = text
    return arguments


def load_target(target: str, arguments: Mapping[str, Any] | None = None) -> Exportable:
    """Import the target's module, call its factory with ``arguments``, and return what it
    made: the model, its example inputs, their dynamic shapes and whether to export strictly;
    the model quantized by the factory's quantize step, which is then ``None`` (run, once).

    Raises:
        TargetError: the target names no file, module or callable.
        StepFailed: importing the file or calling the factory raised, or called ``sys.exit``,
            or the factory returned something else than ``(model, example_inputs)`` (and
            optionally ``dynamic_shapes`` and ``strict``: an ``Exportable``); the
            message names the exception and the user's line that raised it.
    """
    check_target(target)
    path, module_part, name = _parse(target)
    factory = getattr(_import(path, module_part), name, None)
    if not callable(factory):
        raise TargetError(f"{module_part} has no callable {name!r}")
    return _call_factory(factory, target, path, dict(arguments or {}))


def target_file(target: str) -> Path | None:
    """The file a ``path/to/file.py:factory`` target names (``None`` for a module target)."""
    return _parse(target)[0]


def check_target(target: str) -> Path | None:
    """What can be said of ``target`` without running any of it: the file exists, parses, and
    binds the factory's name at its top level. Returns the source file (a module target's too,
    found without importing it; ``None`` where it has none, such as a compiled module).

    The factory's name is looked for among the names the module's top level binds; a module
    that may make names at run time (``from x import *``, a module ``__getattr__``, writes to
    ``globals()``) is given the benefit of the doubt, and the import decides.

    Raises:
        TargetError: the target is malformed, names a file that is missing or does not parse,
            or a name its module does not define (with the closest names it does define).
    """
    path, module_part, name = _parse(target)
    source = path if path is not None else _module_source(module_part)
    if source is None:
        return None
    try:
        tree = ast.parse(source.read_bytes(), filename=str(source))
    except SyntaxError as error:
        where = f"{source}:{error.lineno}" if error.lineno else str(source)
        raise TargetError(f"{where}: syntax error: {error.msg}") from None
    except (OSError, ValueError) as error:  # unreadable, or null bytes
        raise TargetError(f"cannot read {source}: {error}") from None
    bound, dynamic = _top_level_names(tree)
    if name not in bound and not dynamic:
        close = difflib.get_close_matches(name, sorted(bound), n=3)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
        factories = _functions(tree)
        defined = f"Its functions: {', '.join(factories)}" if factories else "It defines no function at its top level"
        raise TargetError(f"{source} defines no {name!r}{hint} {defined}")
    return source


def _module_source(module_part: str) -> Path | None:
    """The ``.py`` file of a dotted module name, found as ``import`` would find it but without
    running any package's ``__init__``; ``None`` where only the import can tell."""
    top, *rest = module_part.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        raise TargetError(f"cannot import {module_part!r}: no such module")
    for part in rest:
        locations = spec.submodule_search_locations
        found = importlib.machinery.PathFinder.find_spec(part, list(locations)) if locations else None
        if found is None:  # made at import time, or absent: the import says which
            return None
        spec = found
    origin = Path(spec.origin) if spec.origin else None
    return origin if origin is not None and origin.suffix == ".py" and origin.is_file() else None


def _functions(tree: ast.Module) -> list[str]:
    """The public functions a module defines at its top level, in file order: the factories a
    target may name."""
    return [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_")
    ]


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """The names a module's top level may bind (definitions, assignments, imports, and names
    declared ``global`` anywhere), and whether it may bind others at run time: a star import,
    a module ``__getattr__``, ``globals()`` or ``exec`` anywhere, ``setattr`` or ``vars`` at the
    top level. Counting a name too many only weakens the hint; the import still decides."""
    bound = {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}
    dynamic = any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("globals", "exec")
        for node in ast.walk(tree)
    )
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)  # its body is another scope
            dynamic |= node.name == "__getattr__" and not isinstance(node, ast.ClassDef)
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                dynamic |= alias.name == "*"
                bound.add(alias.asname or alias.name.partition(".")[0])
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "vars"):
            dynamic = True
        if not isinstance(node, ast.Lambda):
            pending.extend(ast.iter_child_nodes(node))
    return bound, dynamic


def _parse(target: str) -> tuple[Path | None, str, str]:
    module_part, sep, name = target.rpartition(":")
    if not sep or not module_part or not name:
        raise TargetError(f"target {target!r} must be path/to/file.py:factory or package.module:factory")
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(module_part)
        if not path.is_file():
            raise TargetError(f"no such file: {path}")
        return path, module_part, name
    return None, module_part, name


def _import(path: Path | None, module_part: str) -> Any:
    if path is None:
        if importlib.util.find_spec(module_part.partition(".")[0]) is None:
            raise TargetError(f"cannot import {module_part!r}: no such module")
        with step(f"importing {module_part}", None):
            return importlib.import_module(module_part)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # so the file can import its neighbours
    sys.modules.setdefault(spec.name, module)  # dataclasses and pickling look their module up
    with step(f"importing {path}", path):
        spec.loader.exec_module(module)
    return module


_RETURNS = "(model, example_inputs), optionally with dynamic_shapes, strict and how it lowers after them (export_guards.Exportable)"


def _call_factory(factory: Any, target: str, path: Path | None, arguments: dict[str, Any]) -> Exportable:
    import torch

    with step("building the model", path, call=f"{target.rpartition(':')[2]}()"):
        produced = factory(**arguments)
    if not (isinstance(produced, tuple) and 2 <= len(produced) <= len(Exportable._fields)):
        got = f"a tuple of {len(produced)} items" if isinstance(produced, tuple) else f"a {type(produced).__name__}"
        raise StepFailed("building the model", f"{target} must return {_RETURNS}; it returned {got}")
    made = Exportable(*produced)
    if not isinstance(made.model, torch.nn.Module):
        raise StepFailed(
            "building the model",
            f"{target} must return {_RETURNS}, an nn.Module first; got a {type(made.model).__name__}",
        )
    if made.dynamic_shapes is not None and not isinstance(made.dynamic_shapes, (dict, tuple, list)):
        raise StepFailed(
            "building the model",
            f"{target} must return {_RETURNS}; its dynamic_shapes is a {type(made.dynamic_shapes).__name__}, not a dict, tuple or list",
        )
    if made.strict not in (None, True, False):
        raise StepFailed(
            "building the model",
            f"{target} must return {_RETURNS}; its strict is a {type(made.strict).__name__}, not True or False",
        )
    try:
        made.lowering  # noqa: B018 - checked here, where the factory is named
    except TypeError as error:
        raise StepFailed("building the model", f"{target} must return {_RETURNS}; its {error}") from None
    inputs = made.inputs
    made = made._replace(
        inputs=inputs if isinstance(inputs, tuple) else tuple(inputs) if isinstance(inputs, list) else (inputs,)
    )
    if made.quantize is not None:  # on the model built for this export: no copy; done, so not run again
        made = made._replace(
            model=quantized(
                made.lowering, made.model, made.inputs, path, copied=False, call="the factory's quantize()"
            ),
            quantize=None,
        )
    return made


def quantized(
    lowering: Lowering,
    model: Any,
    inputs: tuple[Any, ...],
    path: Path | None = None,
    *,
    copied: bool = True,
    call: str = "quantize()",
) -> Any:
    """``lowering.quantized(model, inputs)`` (on a copy unless not ``copied``) as a step of the
    user's job, "quantizing the model": what the user's step raises is a ``StepFailed`` on its
    line (:func:`step`); a step that returns no model, one that says so in a line.

    Raises:
        StepFailed: the quantize step raised, or returned something else than an ``nn.Module``.
    """
    from export_guards.lowering import NotAModule

    try:
        with step("quantizing the model", path, call=call):
            return lowering.quantized(model, inputs, copied=copied)
    except StepFailed as failed:
        if isinstance(failed.__cause__, NotAModule):  # not an error inside the user's step: no line of theirs to name
            raise StepFailed("quantizing the model", str(failed.__cause__)) from None
        raise


@contextlib.contextmanager
def step(step: str, path: Path | None = None, call: str = "") -> Iterator[None]:
    """Run one step of the user's job: what it raises, or a ``sys.exit`` in it, becomes a
    ``StepFailed`` that names the step, the cause once (a wrapper whose message only repeats its
    cause is left out), the innermost line of the user's files it went through (``path``, the
    model's file, first; else any file outside Python, its installed packages and
    export-guards), and a hint for a torch error users meet."""
    try:
        yield
    except SystemExit as error:
        raise StepFailed(step, f"the target called sys.exit({error.code!r})") from None
    except Exception as error:
        shown = _unwrapped(error)
        raised = f"{call + ' raised ' if call else ''}{type(shown).__name__}: {first_line(shown)}"
        innermost = _chain(error)[-1]
        cause = f"{type(innermost).__name__}: {first_line(innermost)}"
        if first_line(innermost) not in raised:  # the root cause, that a wrapper's message may have dropped
            raised += f"\n  caused by {cause}"
        explained = explanation(innermost)
        if explained:
            raised += f"\n  torch says: {explained}"
            cause += f" {explained}"
        location = getattr(error, "location", None)  # where the user's code made what failed
        frame = _user_frame(error, path)
        in_model_file = frame is not None and path is not None and Path(frame.filename).resolve() == path.resolve()
        if (
            frame is not None
            and (in_model_file or not isinstance(location, SourceLocation))
            and (in_model_file or _is_users(frame))
        ):
            location = SourceLocation(frame.filename, frame.lineno or 1, (frame.line or "").strip())
        if isinstance(location, SourceLocation):
            where = f"\n  at {location}: {location.code}"
        else:
            location = None
            # torch's own line says nothing where torch said why
            where = (
                f"\n  at {frame.filename}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"
                if frame and not explained
                else ""
            )
        hint = hint_for(error)
        said = f"\n  hint: {hint}" if hint else ""
        raise StepFailed(step, raised + where + said + _found_before(error), cause, location, hint) from error


QUANTIZATION_THAT_WORKS = (
    "Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)) "
    "(8-bit weights; weight_dtype=torch.int4 with PerGroup(32) for 4-bit), which XNNPACK computes, or "
    "IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)) (torch.int4 with PerGroup(32)) "
    "for weights only, on the portable kernels"
)
"""The torchao configurations that this ExecuTorch computes, as an error that names them says it
(``tests/test_quantization_matrix.py`` follows it)."""

HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("a leaf Variable that requires grad",),
        "grad mode: the model changes a parameter that requires grad in place. Export under "
        "`with torch.no_grad():`, or call `model.requires_grad_(False)` before torch.export (in the "
        "factory, for export-guards lint).",
    ),
    (
        # Before the generic device mismatch: moving meta tensors to a device gives no values.
        ("devices, cpu and meta", "devices, meta and cpu", "on the meta device", "Cannot copy out of meta tensor"),
        'a weight on the meta device: the model was built without its values (under `torch.device("meta")` '
        "or by an `init_empty_weights`-style loader). Load the weights before export: "
        '`model.load_state_dict(state_dict, assign=True)`, or `model.to_empty(device="cpu")` then '
        "`model.load_state_dict(state_dict)`.",
    ),
    (
        (
            "FakeTensorDeviceMismatch",
            "Unhandled FakeTensor Device Propagation",
            "Expected all tensors to be on the same device",
        ),
        "tensors on different devices meet here: move the model and every example input to one "
        "device before torch.export (`model.to(device)`, `x.to(device)`), and create tensors in "
        "forward on the input's device (`torch.zeros(n, device=x.device)`).",
    ),
    (
        ("data-dependent", "GuardOnDataDependentSymNode", "DataDependentOutputException"),
        "a data-dependent shape or branch: a value read from a tensor (`.item()`, `int(t)`, "
        "`.tolist()`, `nonzero`) decides a shape or an `if` here. Bound it with `torch._check(...)` "
        "(`torch._check(n >= 0)` for a size: torch deprecates `_check_is_size`), compute the shape from input shapes instead, or "
        "branch with `torch.cond`; see torch.export's page on data-dependent shapes.",
    ),
    (
        ("Cannot evaluate a finite upper bound",),
        "a size with no upper bound: ExecuTorch plans each tensor's memory for its largest size, and a "
        "size read from a tensor (`.item()`, `nonzero`) or a dynamic dimension without a max has none. "
        "Bound it where it is made: `torch._check(n <= N)` after the `.item()` (with `torch._check(n >= 0)`), "
        'or `Dim("name", max=N)` in dynamic_shapes.',
    ),
    (
        ("expected compiled_fn to be GraphModule",),
        "strictness: this model exports strictly (torch.export with strict=True, as its own exporter "
        "does), not with torch.export's default strict=False. Say so in the factory: return "
        "`export_guards.Exportable(model, inputs, strict=True)`.",
    ),
    (
        # Allowing _int_mm (the generic hint's exception list) fails next on torchao's own ops.
        ("aten._int_mm.default is not in Core ATen",),
        "torchao's Int8DynamicActivationInt8WeightConfig: to_edge rejects its aten._int_mm, and "
        "allowing it (`_core_aten_ops_exception_list`) leaves torchao's quantize ops without a kernel. "
        "Rewrite the linears into the form ExecuTorch computes before lowering: `program, report = "
        "export_guards.fold_non_core_constants(program, partitioner=partitioner)` before "
        "to_edge_transform_and_lower (`partitioner=[]` for the portable kernels, and "
        "`to_executorch(ExecutorchBackendConfig(passes=export_guards.emit_passes()))`); lower_with_guards, "
        "export-guards lint and the fixtures do it. Or quantize with "
        "`Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))`, "
        "the same int8 x int8 linear in that form.",
    ),
    (
        ("not in Core ATen", "not an aten op", "is not Aten Canonical"),
        "an op outside core ATen: ExecuTorch's default EdgeCompileConfig rejects it. If your own "
        "script lowers with `EdgeCompileConfig(_core_aten_ops_exception_list=[...])` (or "
        "`_check_ir_validity=False`), say so in the factory: return `export_guards.Exportable(model, "
        "inputs, compile_config=EdgeCompileConfig(...))`, which the lint lowers with; to "
        "lower_with_guards, pass `lowering=export_guards.Lowering(compile_config=EdgeCompileConfig(...))` "
        "with the program exported again (a failed lowering can leave it changed). Else decompose "
        "the op, or let a partitioner take it (`partitioners=[...]`).",
    ),
    (
        ("Missing out variants",),
        "an op with no kernel outside a delegate: the partitioner left it to the runtime's kernels, "
        "which have no out variant of it. Lower with the partitioner configuration that takes it, as "
        "your own script does: return `export_guards.Exportable(model, inputs, partitioners=[...])` "
        "from the factory (for torchao's quantized ops, the XNNPACK partitioner with its quantized "
        "configs; for the portable kernels, which have none of torchao's quantize ops, decompose them before "
        "to_edge: `program, report = export_guards.fold_non_core_constants(program, partitioner=[])`); a custom "
        "op's out variant must be registered (imported) before export.",
    ),
    (
        ("Requires mslk",),
        "torchao's Int4WeightOnlyConfig and Float8DynamicActivationInt4WeightConfig pack the weights for "
        "CUDA kernels (the mslk package), which ExecuTorch does not run. Quantize for ExecuTorch with "
        "IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(128)) (int4 weights in "
        "Int4WeightOnlyConfig's groups of 128) or, for XNNPACK's speed, "
        "Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(128)).",
    ),
    (
        ("Float8 dynamic quantization requires",),
        f"torchao's float8 configurations need a recent CUDA GPU, and ExecuTorch computes no float8. Quantize for "
        f"ExecuTorch with {QUANTIZATION_THAT_WORKS}.",
    ),
)
"""Hints for torch errors users meet, each with words of the error's text or type that say it."""


def hint_for(error: BaseException) -> str | None:
    """The hint for the first known error in ``error``'s chain (``HINTS``), or the one an error
    in it carries (``hint``): what the lint's failed step and ``lower_with_guards``'s
    ``LoweringFailed`` say."""
    chain = _chain(error)
    own = next((hint for raised in chain if isinstance(hint := getattr(raised, "hint", None), str)), None)
    if own is not None:  # an error that knows its program (GradModeWriteError) says its own fix
        return own
    said = [f"{type(raised).__name__}: {raised}" for raised in chain]
    specialized = next((hint for text in said if (hint := _specialized_hint(text))), None)
    if specialized is not None:
        return specialized
    return next((hint for words, hint in HINTS if any(word in text for word in words for text in said)), None)


_BOILERPLATE = (
    "For more information, run with",
    "For extended logs",
    "If you suspect the guard",
    "For more debugging help",
    "For C++ stack trace",
    "The error above occurred when calling",
    "Caused by:",  # the user's line, which the finding's location says
)
"""The lines of torch's shape errors that say how to debug torch, not why the export failed."""


def explanation(error: BaseException) -> str:
    """What torch.export's shape reasoning said of ``error`` beyond its first line, in one line:
    why (``You marked batch as dynamic but your code specialized it to be a constant (1)``) and
    its ``Suggested fixes``; empty for any other error, whose first line is its message."""
    if not type(error).__module__.startswith(("torch.fx.experimental", "torch._dynamo", "torch.export")):
        return ""
    lines = (line.strip().removeprefix("- ").strip() for line in str(error).strip().splitlines()[1:])
    return " ".join(line for line in lines if line and not line.startswith(_BOILERPLATE))[:1200]


def _specialized_hint(text: str) -> str | None:
    """The hint for torch.export's ``Constraints violated``: a dimension marked dynamic that the
    trace fixed, with torch's own suggested fix (``batch = 2``) said as a change to make."""
    fixed = re.findall(r"You marked (\w+) as dynamic but your code specialized it to be a constant \((-?\d+)\)", text)
    if not fixed:
        return None
    names = ", ".join(name for name, _ in fixed)
    if all(value in ("0", "1") for _, value in fixed):  # torch makes every size 0 or 1 a constant
        return (
            f"an example input of size {fixed[0][1]} on {names}, a dimension marked dynamic: torch.export makes "
            "every size 0 or 1 of the example a constant, whatever the code does. Give example inputs of size 2 "
            f"or more there; the Dim's min can stay 1, with the max that ExecuTorch plans memory for "
            f'(`Dim("{fixed[0][0]}", min=1, max=...)`).'
        )
    said = ", ".join(f"{name} = {value}" for name, value in fixed)
    return (
        f"the code fixes {names} to the example's size here ({said}, torch's suggested fix, makes it static). "
        "To keep it dynamic, compute from the input's shape instead of a constant (`x.view(x.shape[0], -1)`, "
        "`x.reshape(-1, n)`, no `if x.shape[0] == ...`); else drop it from dynamic_shapes (`Dim.STATIC`)."
    )


def _specialization_site(error: BaseException, path: Path | None) -> traceback.FrameSummary | None:
    """The user's line where torch.export fixed a dimension marked dynamic (``Constraints
    violated``), where torch recorded one in the user's files (the model's file first)."""
    from export_guards.internals import specialization_sites

    frames = [traceback.FrameSummary(file, line, name) for file, line, name in specialization_sites(error)]
    model_file = path.resolve() if path is not None else None
    mine = [f for f in frames if Path(f.filename).resolve() == model_file] or [f for f in frames if _is_users(f)]
    return mine[0] if mine else None


def _unwrapped(error: BaseException) -> BaseException:
    """``error``, or the error it wraps when its message only repeats its cause's (export-guards'
    ``LoweringFailed: to_edge_transform_and_lower failed: SpecViolationError: ...``): the cause once."""
    while (
        error.__cause__ is not None
        and first_line(error.__cause__)
        and first_line(error.__cause__)[:150] in first_line(error)
    ):
        error = error.__cause__
    return error


def _user_frame(error: BaseException, path: Path | None) -> traceback.FrameSummary | None:
    """The innermost frame of ``error``'s traceback, or of the errors it was raised from
    (torch.export re-raises from its own frames), in the user's file ``path``; else in any of the
    user's files (a model's layers in another module); else the innermost frame outside this
    module."""
    chain = _chain(error)
    site = _specialization_site(chain[-1], path)
    if site is not None:  # the trace ended before torch found the dimension fixed: no user frame in it
        return site
    model_file = path.resolve() if path is not None else None
    for mine in (lambda f: Path(f.filename).resolve() == model_file, _is_users):
        for raised in chain:
            frames = [f for f in traceback.extract_tb(raised.__traceback__) if mine(f)]
            if frames:
                return frames[-1]
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename != __file__]
    return frames[-1] if frames else None


def _library_roots() -> tuple[Path, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    return (*(Path(root).resolve() for root in roots), Path(__file__).resolve().parent)


def _is_users(frame: traceback.FrameSummary) -> bool:
    """Whether ``frame`` runs the user's code: a real file outside Python's library, the
    installed packages and export-guards (not ``<eval_with_key>`` nor ``<frozen ...>``)."""
    if frame.filename.startswith("<"):
        return False
    where = Path(frame.filename).resolve()
    return not any(where.is_relative_to(root) for root in _library_roots())


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it was raised from or during, outermost first."""
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    return chain


def _found_before(error: BaseException) -> str:
    """What a guard had found when the step failed (a ``GuardError``'s report): its errors
    often say why, in the user's terms."""
    report = getattr(error, "report", None)
    errors = [f for f in getattr(report, "errors", ()) if f.code != "EG002"]  # the failure itself, said above
    if not errors:
        return ""
    lines = [f"  {found}" + (f"\n    fix: {found.fix}" if found.fix else "") for found in errors]
    return "\nfound before it failed:\n" + "\n".join(lines)
