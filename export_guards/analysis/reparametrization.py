"""How reparametrizations name their state, known once: which constants of a program are the
state of a tensor that a reparametrization computes (``conv.weight`` from ``conv.weight_orig``,
``conv.weight_u``, ``conv.weight_v``). The lint (EG212), the graph fold (naming what it folds)
and the module fold read it. Imports neither torch nor ExecuTorch.

A suffix alone proves nothing (a weight may be named ``attn_v``): a hook-based state counts
only with its companions beside it, as the hooks register them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["SPECTRAL_NORM_STATE", "WEIGHT_NORM_STATE", "reparametrized", "reparametrized_tensor"]

SPECTRAL_NORM_STATE = ("_orig", "_u", "_v")
"""What hook-based ``torch.nn.utils.spectral_norm`` keeps beside a module for ``NAME``:
``NAME_orig`` (the parameter), ``NAME_u`` and ``NAME_v`` (buffers)."""
WEIGHT_NORM_STATE = ("_g", "_v")
"""What hook-based ``torch.nn.utils.weight_norm`` keeps for ``NAME``: ``NAME_g`` and ``NAME_v``."""

# The first two suffixes of each must both be there; the others join them where present.
_HOOK_STATES = (SPECTRAL_NORM_STATE, WEIGHT_NORM_STATE)
# torch.nn.utils.parametrize: [module.]parametrizations.NAME.original[N], or .N.<buffer> of a
# parametrization module.
_PARAMETRIZED = re.compile(r"^(?:(?P<module>.+)\.)?parametrizations\.(?P<name>\w+)\.(?:original\d*|\d+\.\w+)$")


def reparametrized(names: Iterable[str]) -> dict[str, list[str]]:
    """Each tensor that a reparametrization computes from constants among ``names`` (FQNs),
    with the FQNs of its state, sorted; the tensors sorted by name."""
    names = set(names)
    tensors: dict[str, set[str]] = {}
    for fqn in names:
        if match := _PARAMETRIZED.match(fqn):
            tensor = f"{match['module']}.{match['name']}" if match["module"] else match["name"]
            tensors.setdefault(tensor, set()).add(fqn)
            continue
        for state in _HOOK_STATES:
            tensor = fqn.removesuffix(state[0])
            if tensor != fqn and tensor + state[1] in names:
                tensors.setdefault(tensor, set()).update(
                    tensor + suffix for suffix in state if tensor + suffix in names
                )
    return {tensor: sorted(state) for tensor, state in sorted(tensors.items())}


def reparametrized_tensor(fqn: str, names: Iterable[str]) -> str | None:
    """The tensor whose reparametrization state ``fqn`` is, given the constants ``names`` beside
    it; ``None`` when it is no such state."""
    return next((tensor for tensor, state in reparametrized({fqn, *names}).items() if fqn in state), None)
