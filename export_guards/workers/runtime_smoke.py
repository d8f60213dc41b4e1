"""The runtime child of the smoke check: load a ``.pte`` in ``executorch.runtime`` and run each
method once on inputs it makes up (or ``forward`` on inputs given).

``python -m export_guards.workers.runtime_smoke program.pte [data.ptd]`` prints one JSON line per
step (``{"step": "run forward"}``) and one for an exception (``{"failure": "..."}``), flushed as
it goes, so that the parent (``export_guards.pte.smoke``) knows where a crash happened. Once a
method has loaded, it says which inputs it made up for it (``{"made_up": {"inputs": "#0
float32[1, 8] random, #1 int64[1] zeros", "indices": true}}``): a failure on made-up integers
may be theirs, not the program's (``pte/rules/runtime.py``).

With ``--inputs IN --outputs OUT`` it runs ``forward`` once on the inputs ``IN`` holds (a list
saved with ``torch.save``: the lint's example inputs) and saves the outputs to ``OUT``, for the
parent to compare with eager. With ``--serve`` it imports the runtime, then reads its job from
stdin as one JSON line (``{"program", "data", "runs": [{"inputs", "outputs"}, ...], "inventory", "replay"}``):
the lint starts it ahead, so that the import overlaps the export, and so does ``check
--runtime``, which also asks it, before the run, for its runtime's kernels and backends and for
EG519's replay (one JSON line each: ``{"inventory": ...}``, ``{"replayed": [...]}``), so that the
parent loads neither the runtime nor torch. Each run after the first (the inputs at
a dynamic dimension's bounds) calls the same loaded method after the runs before it, as an app
does (one program and one copy of its weights in memory), its lines marked with the run's
number (``"set"``) and its log after a marker line (``MARKER``), so that the parent tells the
runs apart in one child.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from export_guards.workers.runtime_alone import defer_exir_init

defer_exir_init()  # first: of executorch.exir, only the files imported below load (seconds of start-up)

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402
from executorch.exir.schema import Bool, Double, Int, Null, ScalarType, Tensor  # noqa: E402
from executorch.exir.tensor import get_scalar_type  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

from export_guards.compat import load_program  # noqa: E402
from export_guards.pte.inventory import RuntimeInventory  # noqa: E402
from export_guards.pte.reader.file import PteFile, open_bytes  # noqa: E402
from export_guards.pte.smoke import MARKER  # noqa: E402

__all__ = ["in_dim_order", "made_up", "smoke"]


def smoke(
    program: str,
    data_file: str | None,
    runs: Sequence[tuple[str, str]] = (),
    made_up: dict[str, list[list[Any]]] | None = None,
) -> int:
    """Load ``program`` (with ``data_file``) and run each method once on made-up inputs,
    reporting each step; with ``runs`` (``(inputs, outputs)`` files), run ``forward`` on each
    run's inputs instead and save its outputs: one loaded method, called run after run, each
    run seeing the state (mutable buffers) the runs before it left, as eager's calls do.
    ``made_up``: each method's inputs as the parent read them (``smoke.input_specs``), where
    it parsed the program already."""

    def say(line: dict[str, object], run: int) -> None:
        print(json.dumps({**line, **({"set": run} if run else {})}), flush=True)

    say({"step": "load"}, 0)
    try:
        loaded = load_program(Runtime.get(), program, data_file)  # data_path: executorch 1.5 and later
        names = sorted(loaded.method_names)
    except Exception as error:  # noqa: BLE001 - the worker reports any failure to its parent
        say({"failure": f"load: {type(error).__name__}: {error}"}, 0)
        return 0
    if not runs:
        for name in names:
            if not _ran_on_made_up_inputs(program, loaded, name, lambda line: say(line, 0), (made_up or {}).get(name)):
                return 0
        return 0
    for run, (inputs, outputs) in enumerate(runs):
        if run:
            print(f"{MARKER} {run}", file=sys.stderr, flush=True)  # the runtime's log lines after it are this run's
        say({"step": "run forward"}, run)
        try:
            # flat, as the runtime takes them (a None kept in its place: the program holds one there)
            given = pytree.tree_leaves(list(torch.load(inputs, weights_only=True)))
            results = loaded.load_method("forward").execute(
                given
            )  # one method (the program caches it): loaded once, as an app loads it
        except Exception as error:  # noqa: BLE001 - the worker reports any failure to its parent
            say({"failure": f"run forward: {type(error).__name__}: {error}"}, run)
            continue
        say({"step": "ran forward"}, run)
        torch.save(list(results), outputs)
    return 0


def _ran_on_made_up_inputs(
    program: str, loaded: Any, name: str, say: Callable[[dict[str, object]], None], specs: list[list[Any]] | None = None
) -> bool:
    """Run method ``name`` once on inputs made up for it, saying which (once it has loaded:
    its operators and delegates, whatever the inputs) and whether they hold integers; whether it
    ran. After a failure on floats alone, it runs once more with zeros for them, and says
    whether that ran (``"zeros_ran"``): then the values made up, not the program, may be at fault."""
    say({"step": f"run {name}"})
    made: list[object] = []
    said: dict[str, object] | None = None  # once the method has loaded and its inputs are made
    try:
        method = loaded.load_method(name)
        made = _from_specs(specs) if specs is not None else _inputs(program, name, loaded)
        said = {"inputs": made_up(made), "indices": any(_holds_indices(value) for value in made)}
        say({"made_up": said})
        method.execute(made)
    except Exception as error:  # noqa: BLE001 - the worker reports any failure to its parent
        say({"failure": f"run {name}: {type(error).__name__}: {error}"})
        if said is not None and not said["indices"]:
            zeros = [
                torch.zeros_like(v) if isinstance(v, torch.Tensor) and v.dtype.is_floating_point else v for v in made
            ]
            say({"made_up": {**said, "zeros_ran": _runs(loaded, name, zeros)}})
        return False
    say({"step": f"ran {name}"})
    return True


def _runs(loaded: Any, name: str, inputs: list[object]) -> bool:
    """Whether method ``name``, loaded afresh, runs on ``inputs``."""
    try:
        loaded.load_method(name).execute(inputs)
    except Exception:  # noqa: BLE001 - any failure: it does not run
        return False
    return True


def _inputs(program: str, method: str, loaded: object) -> list[object]:
    """Inputs of the right shapes and dtypes: from the program's own values (non-tensor inputs
    included, a ``None`` where the program holds one), or from the runtime's method metadata
    when the program cannot be parsed. Floats are random; integers are zeros, an index into any
    dimension (of size 1 or more) and a position from which ``arange(n)`` stays within ``n``
    slots, which ones or random values are not (a cache written at ``position + arange(n)``);
    booleans are ``True`` (a mask that lets every position through)."""

    tensor = _made
    parsed = PteFile(open_bytes(program)).program
    plan = next((p for p in parsed.execution_plan if p.name == method), None) if parsed else None
    if plan is None:
        meta = loaded.metadata(method)  # type: ignore[attr-defined]
        infos = [meta.input_tensor_meta(i) for i in range(meta.num_inputs())]
        return [tensor(get_scalar_type(info.dtype()), list(info.sizes())) for info in infos]
    inputs: list[object] = []
    for index in plan.inputs:
        value = plan.values[index].val
        if isinstance(value, Tensor):
            inputs.append(tensor(get_scalar_type(value.scalar_type), list(value.sizes), list(value.dim_order)))
        elif isinstance(value, Int):
            inputs.append(value.int_val)
        elif isinstance(value, Double):
            inputs.append(value.double_val)
        elif isinstance(value, Bool):
            inputs.append(value.bool_val)
        elif isinstance(value, Null):
            inputs.append(None)  # an optional input given as None at export (transformers' inputs_embeds)
    return inputs


def _made(dtype: torch.dtype, shape: list[int], dim_order: list[int] | None = None) -> torch.Tensor:
    """A made-up tensor (``_inputs`` says which values)."""
    dense = (
        torch.randn(shape).to(dtype)
        if dtype.is_floating_point
        else torch.ones(shape, dtype=dtype)
        if dtype == torch.bool
        else torch.zeros(shape, dtype=dtype)
    )
    return in_dim_order(dense, dim_order) if dim_order else dense


def _from_specs(specs: list[list[Any]]) -> list[object]:
    """The inputs ``_inputs`` makes from the program's values, from the parent's reading of
    them (``smoke.input_specs``)."""
    inputs: list[object] = []
    for kind, *rest in specs:
        if kind == "tensor":
            inputs.append(_made(get_scalar_type(_scalar_type(rest[0])), list(rest[1]), list(rest[2])))
        else:
            inputs.append(None if kind == "none" else rest[0])
    return inputs


def _scalar_type(number: int) -> object:
    """The ``ScalarType`` the program's reading gives for ``number`` (the number itself where
    it names none), so that an unknown one fails as it fails there."""
    try:
        return ScalarType(number)
    except ValueError:
        return number


def made_up(inputs: Sequence[object]) -> str:
    """The inputs the check made up, for a person: ``#0 float32[1, 32, 8] random, #1 int64[1]
    zeros, #2 None``."""
    said = []
    for index, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            fill = "random" if value.dtype.is_floating_point else "true" if value.dtype == torch.bool else "zeros"
            said.append(f"#{index} {str(value.dtype).removeprefix('torch.')}{list(value.shape)} {fill}")
        else:
            said.append(f"#{index} {value!r}")
    return ", ".join(said) or "none"


def _holds_indices(value: object) -> bool:
    """Whether ``value``'s made-up values may be read as indices or positions: an integer
    tensor (a float's values change what a kernel computes, never whether it accepts them)."""
    return (
        isinstance(value, torch.Tensor)
        and not value.dtype.is_floating_point
        and not value.dtype.is_complex
        and value.dtype != torch.bool
    )


def in_dim_order(dense: torch.Tensor, dim_order: list[int]) -> torch.Tensor:
    """``dense`` laid out in memory in ``dim_order`` (``[0, 2, 3, 1]``: channels last), as the
    runtime requires of an input whose program tensor has that dim order."""
    if sorted(dim_order) != list(range(dense.dim())) or dim_order == sorted(dim_order):
        return dense
    return dense.permute(dim_order).contiguous().permute([dim_order.index(d) for d in range(dense.dim())])


def _answer(inventory: bool, replay: list[Sequence[object]]) -> None:
    """What the parent asked of this process, which has the runtime and torch loaded, before it
    runs the program: its runtime's kernels and backends (EG521), and EG519's calls replayed
    on meta tensors (``check --runtime`` leaves torch to this process)."""
    if inventory:
        found = RuntimeInventory.installed()
        print(
            json.dumps(
                {
                    "inventory": {
                        "name": found.name,
                        "kernels": sorted(found.kernels),
                        "backends": sorted(found.backends or ()),
                    }
                }
            ),
            flush=True,
        )
    if replay:
        from export_guards.pte.rules.kernels import replayed

        print(json.dumps({"step": "replay kernel calls"}), flush=True)  # a crash here is the replay's, not the run's
        print(json.dumps({"replayed": replayed(replay)}), flush=True)


def _main(argv: list[str]) -> int:
    if argv == ["--serve"]:
        job = json.loads(sys.stdin.readline() or "null")
        if not job:
            return 0
        _answer(job.get("inventory", False), job.get("replay", []))
        return smoke(
            job["program"],
            job.get("data"),
            [(run["inputs"], run["outputs"]) for run in job.get("runs", ())],
            job.get("made_up"),
        )
    options, positional = {}, argv
    while positional and positional[0].startswith("--"):
        options[positional[0]] = positional[1]
        positional = positional[2:]
    runs = [(options["--inputs"], options.get("--outputs", os.devnull))] if "--inputs" in options else []
    return smoke(positional[0], positional[1] if len(positional) > 1 else None, runs)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
