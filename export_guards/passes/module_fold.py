"""Fold reparametrized weights of an ``nn.Module`` into plain parameters, before export.

``spectral_norm`` / ``weight_norm`` (hook-based and ``torch.nn.utils.parametrizations``) and
every ``torch.nn.utils.parametrize`` parametrization recompute a weight at every forward; once
exported, that weight is a graph computation that delegates such as XNNPACK will not take as a
static weight. This fold replaces each by the tensor that the eval-mode forward computes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import cast

import torch
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.spectral_norm import SpectralNorm
from torch.nn.utils.weight_norm import WeightNorm

from export_guards.analysis.reparametrization import SPECTRAL_NORM_STATE, WEIGHT_NORM_STATE
from export_guards.internals import forward_pre_hooks, own_parametrized_class
from export_guards.report import Report
from export_guards.ruleset import CATALOG, Hit, finding

__all__ = ["fold_parametrizations", "is_reparametrized"]


def fold_parametrizations(model: nn.Module, *, inplace: bool = False) -> tuple[nn.Module, Report]:
    """Replace every reparametrized weight of ``model`` by a plain ``nn.Parameter``.

    Removes hook-based ``torch.nn.utils.spectral_norm`` / ``weight_norm`` and every
    ``torch.nn.utils.parametrize`` parametrization (``parametrizations.spectral_norm``,
    ``parametrizations.weight_norm``, ``orthogonal``, user-defined ones). Each weight becomes
    exactly what the eval-mode forward computes from the stored state: no power iteration
    runs (spectral norm uses its stored ``u`` / ``v``), so the eval outputs before and after
    are bit-identical, whatever mode ``model`` is in. The training flags of the model are kept.

    Args:
        model: the module to fold.
        inplace: fold ``model`` itself; by default a deep copy is folded and ``model`` is left
            untouched.

    Returns:
        The folded module and a report with one ``EG202`` info finding per folded weight.
    """
    folded = model if inplace else _deepcopy(model)
    findings = []
    for path, module in list(folded.named_modules()):
        for tensor_name, api, before in list(_reparametrizations(module)):
            fqn = f"{path}.{tensor_name}" if path else tensor_name
            _remove(module, tensor_name, api)  # first: reading a parametrized weight in train mode runs it
            after = getattr(module, tensor_name).nbytes
            message = f"folded {api} of '{fqn}' into a plain parameter ({before:,} bytes of state -> {after:,} bytes)"
            findings.append(finding(CATALOG["EG202"], Hit(message, constant=fqn)))
    return folded, Report.of(findings)


def is_reparametrized(module: nn.Module) -> bool:
    """Whether ``module`` recomputes one of its own tensors at every forward (hook-based
    spectral / weight norm, or a ``torch.nn.utils.parametrize`` parametrization)."""
    return next(_reparametrizations(module), None) is not None


def _deepcopy(model: nn.Module) -> nn.Module:
    # After a forward, hook-based spectral/weight norm keep the last computed weight as a
    # non-leaf tensor attribute, which deepcopy refuses. Removal recomputes it, so the copy
    # may share a detached alias.
    memo: dict[int, object] = {}
    for module in model.modules():
        for hook in forward_pre_hooks(module):
            if isinstance(hook, (SpectralNorm, WeightNorm)):
                weight = getattr(module, hook.name, None)
                if isinstance(weight, torch.Tensor) and not weight.is_leaf:
                    memo[id(weight)] = weight.detach()
    return copy.deepcopy(model, memo)


def _reparametrizations(module: nn.Module) -> Iterator[tuple[str, str, int]]:
    """``(tensor name, API, bytes of the state behind it)`` for each reparametrized tensor."""
    for hook in forward_pre_hooks(module):
        if isinstance(hook, SpectralNorm):
            yield hook.name, "torch.nn.utils.spectral_norm", _bytes(module, hook.name, SPECTRAL_NORM_STATE)
        elif isinstance(hook, WeightNorm):
            yield hook.name, "torch.nn.utils.weight_norm", _bytes(module, hook.name, WEIGHT_NORM_STATE)
    if parametrize.is_parametrized(module):
        for tensor_name, chain in cast("dict[str, torch.nn.ModuleList]", module.parametrizations).items():
            kinds = ", ".join(type(p).__name__ for p in chain)
            state = sum(t.nbytes for t in [*chain.parameters(), *chain.buffers()])
            yield tensor_name, f"parametrization ({kinds})", state


def _bytes(module: nn.Module, name: str, suffixes: tuple[str, ...]) -> int:
    return sum(getattr(module, name + suffix).nbytes for suffix in suffixes)


def _remove(module: nn.Module, tensor_name: str, api: str) -> None:
    if api == "torch.nn.utils.spectral_norm":
        # Computes the weight with do_power_iteration=False: the eval-mode forward.
        nn.utils.remove_spectral_norm(module, tensor_name)
    elif api == "torch.nn.utils.weight_norm":
        nn.utils.remove_weight_norm(module, tensor_name)
    else:
        # The parametrizations' eval mode skips spectral norm's power iteration; the chain is
        # removed right after, so its training flags need no restoring.
        cast("dict[str, torch.nn.ModuleList]", module.parametrizations)[tensor_name].eval()
        own_parametrized_class(module)  # deepcopy shares the class that holds the parametrized property
        with torch.no_grad():
            parametrize.remove_parametrizations(module, tensor_name, leave_parametrized=True)
