"""Layers of the command-line tests' models that live in another file than their factories, as
a user's layers often do: a failed step must point here, not at torch's frames."""

from __future__ import annotations

import torch
from torch import nn


class ScaledInPlace(nn.Module):
    """Changes a parameter that requires grad in place: torch.export refuses it in grad mode."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale.mul_(0.5)
        return x * self.scale


class DataDependent(nn.Module):
    """A shape read from the input's values."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int(x.sum().item())
        return torch.zeros(n)


class AddBias(nn.Module):
    """Adds a bias that may live on another device than the input."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.ones(3, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias
