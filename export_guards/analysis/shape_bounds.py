"""The example inputs at the bounds of a program's dynamic dimensions: each size that torch.export
left symbolic moved to its least and its greatest value, the other sizes as in the example.

The sizes are read from the program (its inputs' symbolic shapes and its ``range_constraints``),
not from the ``dynamic_shapes`` the user gave: they are what the written program was made for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, final

import sympy
import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

__all__ = ["UNBOUNDED_FACTOR", "BoundInputs", "ShapeBounds", "inputs_at_bounds", "shape_bounds"]

UNBOUNDED_FACTOR = 2
"""A dimension whose range has no upper bound (``int_oo``) runs at this many times its example
size instead: near the sizes the model was tried at, and within what a machine holds."""


@final
@dataclass(frozen=True)
class BoundInputs:
    """The example inputs with one dynamic size moved to a bound.

    Attributes:
        label: which size and which bound, for a person (``length=64 (the upper bound)``).
        inputs: the inputs, nested as the example inputs are (a list of the call's arguments).
    """

    label: str
    inputs: list[Any]


@final
@dataclass(frozen=True)
class ShapeBounds:
    """The inputs at each bound of a program's dynamic dimensions, and the bounds left out.

    Attributes:
        inputs: one :class:`BoundInputs` for each bound that inputs could be made for.
        not_made: each bound (or every bound) no inputs could be made for, and why, for a
            person (``length=64 (the upper bound): a size derived from it cannot be told``).
    """

    inputs: list[BoundInputs]
    not_made: list[str]


def inputs_at_bounds(program: ExportedProgram, example_inputs: Sequence[object]) -> list[BoundInputs]:
    """:func:`shape_bounds`'s inputs: the example inputs at each bound that they could be made for."""
    return shape_bounds(program, example_inputs).inputs


def shape_bounds(program: ExportedProgram, example_inputs: Sequence[object]) -> ShapeBounds:
    """For each symbolic size of ``program``'s inputs, ``example_inputs`` at its lower and at
    its upper bound (twice the example's size where the range has none: ``UNBOUNDED_FACTOR``);
    the dimensions that share the size move together, and one derived from it (``2 * length``)
    follows. A bound equal to the example's size is left out (the example runs there).

    A tensor is cropped along a dimension that shrinks and tiled along one that grows, so that
    its values stay ones the model was given (token ids in range); an integer tensor that
    counts along it (positions: ``0, 1, 2, ...``) goes on counting instead. Empty when the
    program is static; ``not_made`` says why where a bound has none (the inputs cannot be paired
    with ``example_inputs``, a size cannot be told). An input given as ``None`` (an optional
    argument: transformers' ``inputs_embeds``) stays ``None`` at every bound, as in the example."""
    leaves, spec = pytree.tree_flatten(list(example_inputs))
    exported = _exported_inputs(program)
    if len(exported) != len(leaves):
        said = f"every bound: the example's {len(leaves)} inputs (flattened) do not pair with the program's {len(exported)} inputs"
        return ShapeBounds([], [said] if program.range_constraints else [])
    sizes = _symbolic_sizes(exported, leaves)
    example = {expr: value for (_, _, expr), value in sizes.items() if isinstance(expr, sympy.Symbol)}
    names = _dim_names(exported, program.graph_signature.user_inputs)
    found: list[BoundInputs] = []
    not_made: list[str] = []
    for symbol in sorted(example, key=str):
        bounds = program.range_constraints.get(symbol)
        if bounds is None:
            continue
        unbounded = not isinstance(bounds.upper, (int, sympy.Integer))  # int_oo: no upper bound
        lower, upper = int(bounds.lower), UNBOUNDED_FACTOR * example[symbol] if unbounded else int(bounds.upper)
        said = f"{UNBOUNDED_FACTOR} times the example's {example[symbol]}: the range has no upper bound"
        for value, which in ((lower, "the lower bound"), (upper, said if unbounded else "the upper bound")):
            if value == example[symbol]:
                continue
            label = f"{names.get(symbol, str(symbol))}={value} ({which})"
            moved = _moved(leaves, sizes, {**example, symbol: value})
            if moved is None:
                not_made.append(
                    f"{label}: a size that depends on it cannot be told from the example, or the example's is 0"
                )
            else:
                found.append(BoundInputs(label, pytree.tree_unflatten(moved, spec)))
    return ShapeBounds(found, not_made)


def _exported_inputs(program: ExportedProgram) -> list[object]:
    """The program's user inputs in the order of the call's flattened arguments: a tensor's
    fake value, or the constant torch.export kept in its place (``None`` for an input given as
    ``None``, which ``user_inputs`` lists by value, not by name)."""
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    return [
        placeholders[name].meta.get("val") if isinstance(name, str) and name in placeholders else name
        for name in program.graph_signature.user_inputs
    ]


def _symbolic_sizes(exported: Sequence[object], leaves: Sequence[object]) -> dict[tuple[int, int, Any], int]:
    """``(input, dimension, its symbolic size) -> the example's size`` for each dimension of a
    tensor input that the program leaves symbolic."""
    sizes: dict[tuple[int, int, Any], int] = {}
    for index, (val, leaf) in enumerate(zip(exported, leaves)):
        if not (isinstance(val, torch.Tensor) and isinstance(leaf, torch.Tensor)) or val.dim() != leaf.dim():
            continue
        for dim, size in enumerate(val.shape):
            if isinstance(size, torch.SymInt):
                sizes[index, dim, size.node.expr] = int(leaf.shape[dim])
    return sizes


def _moved(
    leaves: Sequence[object], sizes: dict[tuple[int, int, Any], int], values: dict[sympy.Symbol, int]
) -> list[object] | None:
    """``leaves`` with each symbolic dimension resized to its size at ``values``; ``None`` when a
    size cannot be told or made (a symbol only seen in a derived size, an empty example)."""
    moved = list(leaves)
    for (index, dim, expr), have in sizes.items():
        if not expr.free_symbols <= values.keys():
            return None
        want = int(expr.subs(values))
        tensor = moved[index]
        assert isinstance(tensor, torch.Tensor)
        if want != have:
            if have == 0 or want < 0:
                return None
            moved[index] = _resized(tensor, dim, want)
    return moved


def _resized(tensor: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """``tensor`` cropped or grown to ``size`` along ``dim``: grown by tiling, or by counting on
    where it counts along ``dim`` (integers in a constant step: positions)."""
    have = tensor.shape[dim]
    if size <= have:
        return tensor.narrow(dim, 0, size).clone()
    if not tensor.is_floating_point() and not tensor.is_complex() and tensor.dtype != torch.bool and have >= 2:
        steps = tensor.narrow(dim, 1, have - 1) - tensor.narrow(dim, 0, have - 1)
        step = steps.flatten()[0]
        if bool((steps == step).all()) and int(step) != 0:
            shape = [1] * tensor.dim()
            shape[dim] = size
            counted = torch.arange(size, dtype=tensor.dtype).reshape(shape) * step
            return (tensor.narrow(dim, 0, 1) + counted).to(tensor.dtype)
    repeats = [1] * tensor.dim()
    repeats[dim] = math.ceil(size / have)
    return tensor.repeat(repeats).narrow(dim, 0, size).clone()


def _dim_names(exported: Sequence[object], inputs: Sequence[str]) -> dict[Any, str]:
    """What the user called each symbolic size: its ``Dim``'s name where torch.export kept it
    (``length``), else the first input dimension that has it (``tokens.shape[1]``)."""
    names: dict[Any, str] = {}
    for val, name in zip(exported, inputs):
        if not isinstance(val, torch.Tensor):
            continue
        for dim, size in enumerate(val.shape):
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                names.setdefault(size.node.expr, _dim_name(val, size.node.expr) or f"{name}.shape[{dim}]")
    return names


def _dim_name(val: torch.Tensor, symbol: sympy.Symbol) -> str | None:
    """The ``Dim`` name torch.export's shape environment keeps for ``symbol``, if any."""
    env = getattr(getattr(val, "fake_mode", None), "shape_env", None)
    debug_names = getattr(env, "source_name_to_debug_name", None) or {}
    for source in getattr(env, "var_to_sources", {}).get(symbol, ()):
        source_name = source.name() if callable(source.name) else source.name
        if source_name in debug_names:
            return str(debug_names[source_name])
    return None
