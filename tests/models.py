"""Small models that the tests build in code, with deterministic weights."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)


def seeded(factory: Callable[[], M], seed: int = 0) -> M:
    """``factory()`` built under a fixed seed, in eval mode."""
    torch.manual_seed(seed)
    return factory().eval()


def linear_relu() -> nn.Module:
    """The reported model: ``Sequential(Linear(4, 3), ReLU())``."""
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU())


class EveryConstantKind(nn.Module):
    """Parameters, persistent and non-persistent buffers, a mutable buffer with an initial
    state, a lifted tensor constant, and a batch norm whose statistics are traced on the
    device."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)
        self.register_buffer("scale", torch.tensor([1.5, -0.5, 2.0, 0.25]), persistent=False)
        self.scale: torch.Tensor
        self.register_buffer("calls", torch.zeros(1))
        self.calls: torch.Tensor
        self.offset = torch.linspace(-1.0, 1.0, 4)  # a plain tensor attribute: lifted constant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1.0)
        features = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.head(features) * self.scale + self.offset

    def example_inputs(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
        return (torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1)).to(device),)


def to_device(model: M, device: torch.device | str) -> M:
    """``model`` moved to ``device``, plain tensor attributes included, tied parameters still
    tied (``Module.to`` unties them on a device whose tensors cannot share a CPU tensor's
    implementation, such as the test device; on CUDA they stay tied)."""
    first_name: dict[int, str] = {}
    ties = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        ties[name] = first_name.setdefault(id(parameter), name)
    model = model.to(device)
    for name, first in ties.items():
        if name != first:
            owner, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(owner), attribute, model.get_parameter(first))
    for name, value in vars(model).items():
        if isinstance(value, torch.Tensor):
            setattr(model, name, value.to(device))
    return model
