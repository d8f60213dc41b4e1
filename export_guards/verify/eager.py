"""Eager's outputs to compare a program with: from the state the program starts from, and which
of them eager itself does not repeat (a random op: not compared)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import final

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from export_guards.analysis.programs import mutated_constants

__all__ = ["EagerReference", "Expected", "mutable_buffers"]


def mutable_buffers(program: ExportedProgram) -> list[str]:
    """The buffers ``program`` writes (its state between calls: a KV cache), by their names in the model."""
    return sorted(mutated_constants(program) & set(program.graph_signature.buffers))


@final
@dataclass(frozen=True)
class Expected:
    """Eager's outputs on one call, and the flat indices of those a second call from the same
    state does not repeat."""

    outputs: object
    unsteady: frozenset[int]


@final
class EagerReference:
    """A model run eagerly as the written program runs: each input set from the state the program
    starts from (a freshly loaded program's buffers), the steps of one set in order.

    ``model`` is run itself, the buffers the program writes put back before each set and at
    :meth:`close` (``copy_model=False``: the lint's own model, which may be large); or, with
    ``copy_model=True``, each set runs on a fresh copy of it (the caller's model, never run).
    """

    def __init__(self, model: torch.nn.Module, program: ExportedProgram, *, copy_model: bool) -> None:
        self._pristine = model if copy_model else None  # never run: each set's model is a copy of it
        self._model = copy.deepcopy(model) if copy_model else model
        self._buffers = [name for name in mutable_buffers(program) if _has_buffer(model, name)]
        self._start = self._state()

    def start(self) -> None:
        """Back to the state the program starts from, before an input set's first call."""
        if self._pristine is not None:
            self._model = copy.deepcopy(self._pristine)
        else:
            self._put_back(self._start)

    def __call__(self, inputs: Sequence[object], *, repeat: bool = True) -> Expected:
        """Eager's outputs on ``inputs`` from the state now; the state moves on as the model's
        does (where the model raises, it stays as it was). ``repeat=False``: one call, no
        output looked at for whether eager repeats it (a caller that repeats the call only
        where the program differs)."""
        before = self._state()
        with torch.no_grad():
            try:
                outputs = self._model(*inputs)
            except BaseException:
                self._put_back(before)
                raise
            if not repeat:
                return Expected(outputs, frozenset())
            after = self._state()
            self._put_back(before)
            again = self._model(*inputs)
        self._put_back(after)
        pairs = zip(pytree.tree_leaves(outputs), pytree.tree_leaves(again))
        return Expected(outputs, frozenset(i for i, (a, b) in enumerate(pairs) if not _same(a, b)))

    def close(self) -> None:
        """The model's buffers as they were when this reference was made."""
        if self._pristine is None:
            self._put_back(self._start)

    def _state(self) -> dict[str, torch.Tensor]:
        return {name: self._model.get_buffer(name).detach().clone() for name in self._buffers}

    def _put_back(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for name, value in state.items():
                self._model.get_buffer(name).copy_(value)


def _has_buffer(model: torch.nn.Module, name: str) -> bool:
    try:
        model.get_buffer(name)
    except AttributeError:
        return False
    return True


def _same(first: object, second: object) -> bool:
    if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor):
        return first.shape == second.shape and bool(torch.equal(first.nan_to_num(), second.nan_to_num()))
    return bool(first == second)
