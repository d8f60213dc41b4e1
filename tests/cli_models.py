"""Factories for the command-line tests: each returns (model, example_inputs)."""

from __future__ import annotations

import torch
from torch import nn

import export_guards as eg


def clean():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval(), (torch.randn(1, 3, 8, 8),)


def gated():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Sigmoid()).eval(), (torch.randn(2, 4),)


def training_mode():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train(), (torch.randn(2, 4),)


class _Sorted(nn.Module):
    """No delegate takes sort or cumsum, and executorch.runtime has no kernel for sort."""

    def forward(self, x):
        return torch.sort(x)[0].cumsum(-1)


def sorted_cumsum():
    return _Sorted(), (torch.randn(4, 8),)


def reparametrized():
    torch.manual_seed(0)
    conv = nn.utils.parametrizations.spectral_norm(nn.Conv2d(3, 4, 3))
    return nn.Sequential(conv, nn.ReLU()).eval(), (torch.randn(1, 3, 8, 8),)


def on_trapdev():
    from export_guards.testing import load_trapdev

    device = load_trapdev()
    return nn.Linear(4, 3).to(device), (torch.randn(2, 4).to(device),)


def lowering_fails():
    class Noisy(nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)  # not core ATen: to_edge refuses it

    return Noisy(), (torch.randn(2, 3),)


def broken():
    class Broken(nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent control flow: torch.export refuses it
                return x
            return -x

    return Broken(), (torch.randn(3),)


def not_a_pair():
    return nn.Linear(4, 3)


def noisy():
    print("the factory talks on stdout")
    return clean()


def sized(size=8, channels=3):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(channels, 4, 3), nn.ReLU()).eval(), (torch.randn(1, channels, size, size),)


def raises():
    weights = {"conv": 3}
    return weights["linear"], ()  # the user's bug: a KeyError on this line


def three():
    model, inputs = clean()
    return model, inputs, "extra"


def exits():
    raise SystemExit(3)


def native_noise():
    import os

    os.write(1, b"written to fd 1 by native code\n")  # bypasses sys.stdout, as C code does
    return clean()


def slow():
    import sys
    import time

    print("the factory is running", file=sys.stderr, flush=True)  # the test signals after this line
    time.sleep(600)  # long enough to be interrupted
    return clean()


def removes_a_folder(then="clean"):
    """Removes the folder named by ``EG_TEST_REMOVE`` while the model is built (so the report
    that was to be written there cannot be), then builds the model ``then`` names."""
    import os
    import shutil

    shutil.rmtree(os.environ["EG_TEST_REMOVE"])
    return {"clean": clean, "training_mode": training_mode}[then]()


class _NegativePad(nn.Module):
    """XNNPACK declines a negative pad; the portable kernel refuses it when the program runs."""

    def __init__(self):
        super().__init__()
        self.pad = nn.ConstantPad2d((1, -1, 0, 0), 0.0)

    def forward(self, x):
        return self.pad(x) * 2


def negative_pad():
    return _NegativePad().eval(), (torch.randn(1, 2, 4, 4),)


class _ExportOnly(nn.Module):
    """A branch only torch.export takes: the program computes another function than eager."""

    def forward(self, x):
        if torch.compiler.is_exporting():
            return x * 2 + 1
        return x * 2


def export_only():
    torch.manual_seed(0)
    return _ExportOnly().eval(), (torch.randn(2, 3),)


def grad_in_place():
    from cli_layers import ScaledInPlace

    return ScaledInPlace(), (torch.randn(2, 4),)


def data_dependent():
    from cli_layers import DataDependent

    return DataDependent(), (torch.ones(3),)


def mixed_devices():
    from cli_layers import AddBias
    from export_guards.testing import load_trapdev

    return AddBias(load_trapdev()), (torch.randn(2, 3),)


class TracedHow(nn.Module):
    """Doubles its input where TorchDynamo traces it (a strict export), adds one otherwise."""

    def forward(self, x):
        return x * 2 if torch.compiler.is_dynamo_compiling() else x + 1


def strict():
    return eg.Exportable(TracedHow(), (torch.full((3,), 3.0),), strict=True)


def not_strict():
    return TracedHow(), (torch.full((3,), 3.0),), None, False


def dynamic(shortest=1):
    """A linear over a sequence of any length from ``shortest`` on, as torch.export takes it."""
    torch.manual_seed(0)
    length = torch.export.Dim("length", min=shortest, max=64)
    return nn.Linear(4, 4).eval(), (torch.randn(1, 6, 4),), ({1: length},)


def dynamic_out_of_range():
    """Shapes that contradict the example inputs: a length of 6, at least 8."""
    return dynamic(shortest=8)


class _PaddedToEight(nn.Module):
    """Right for the example's length only: a single-token fast path that torch.export cannot
    see (it sizes the sequence symbolically), and a pad to 8 that turns negative past 8 (eager
    crops, the runtime's kernel refuses)."""

    def forward(self, x):
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        y = x * 3 if statically_known_true(x.shape[-1] == 1) else x * 2
        return nn.functional.pad(y, (0, 8 - x.shape[-1]))


def dynamic_wrong_at_bounds():
    """Matches eager at its example length (6); differs at the least (1), fails at the most (64)."""
    torch.manual_seed(0)
    return _PaddedToEight(), (torch.randn(1, 6),), ({1: torch.export.Dim("length", min=1, max=64)},)


class _CacheAtPosition(nn.Module):
    """A static cache of 32 slots written at ``cache_position[0] + arange(n)``, as transformers'
    static cache is: right for every position from which the ``n`` new entries fit."""

    def __init__(self, slots: int = 32, width: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.register_buffer("cache", torch.zeros(1, slots, width))
        self.cache: torch.Tensor

    def forward(self, x, cache_position):
        self.cache[:, cache_position[0] + torch.arange(x.shape[1])] = self.proj(x)
        return self.cache.sum(1)


def cache_at_position():
    """A sequence of 1 to 32 tokens written into the 32 slots: at the upper bound, only position 0 fits."""
    torch.manual_seed(0)
    seq = torch.export.Dim("seq", min=1, max=32)
    return _CacheAtPosition().eval().requires_grad_(False), (torch.randn(1, 4, 8), torch.tensor([0])), ({1: seq}, None)


def cache_in_grad_mode():
    """The cache above, its parameters left requiring grad (no ``requires_grad_(False)``): the
    program writes a buffer in place, and no parameter."""
    torch.manual_seed(0)
    return _CacheAtPosition().eval(), (torch.randn(1, 4, 8), torch.tensor([0]))


class _OptionalEmbeds(nn.Module):
    """transformers' decoder signature: ``inputs_embeds`` is ``None`` unless given."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, input_ids, inputs_embeds=None, cache_position=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed(input_ids)
        return self.proj(inputs_embeds) + cache_position.unsqueeze(-1).to(inputs_embeds.dtype)


def optional_embeds(given=False):
    """With ``inputs_embeds=None`` in the example (or, ``given``, without the argument at all)."""
    torch.manual_seed(0)
    seq = torch.export.Dim("seq", min=1, max=32)
    ids, positions = torch.randint(0, 16, (1, 4)), torch.arange(4)
    if given:
        return _WithoutEmbeds(_OptionalEmbeds().eval()), (ids, positions), ({1: seq}, {0: seq})
    return _OptionalEmbeds().eval(), (ids, None, positions), ({1: seq}, None, {0: seq})


class _WithoutEmbeds(nn.Module):
    def __init__(self, decoder: nn.Module) -> None:
        super().__init__()
        self.decoder = decoder

    def forward(self, input_ids, cache_position):
        return self.decoder(input_ids, None, cache_position)
