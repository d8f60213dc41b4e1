"""A zoo of models whose weights are computed at run time, built in code for the fold tests."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.utils import parametrizations

Wrap = Callable[[nn.Module], nn.Module]

APIS: dict[str, Wrap] = {
    "spectral_norm": nn.utils.spectral_norm,
    "weight_norm": nn.utils.weight_norm,
    "parametrizations.spectral_norm": parametrizations.spectral_norm,
    "parametrizations.weight_norm": parametrizations.weight_norm,
}


class ConvStack(nn.Module):
    """Three convs (one depthwise) and a transposed conv, each wrapped by ``wraps[i]``."""

    def __init__(self, wraps: list[Wrap]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            [
                wraps[0](nn.Conv2d(3, 8, 3, padding=1)),
                wraps[1](nn.Conv2d(8, 8, 3, padding=1, groups=8)),
                wraps[2](nn.Conv2d(8, 8, 1)),
            ]
        )
        self.up = wraps[3](nn.ConvTranspose2d(8, 4, 2, stride=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = torch.relu(conv(x))
        return self.up(x)


class Linears(nn.Module):
    def __init__(self, wraps: list[Wrap]) -> None:
        super().__init__()
        self.a = wraps[0](nn.Linear(12, 16))
        self.b = wraps[1](nn.Linear(16, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class Tied(nn.Module):
    """One spectral-norm conv applied twice, and an identical twin of it (also applied twice,
    so that its power iterations match): one stored weight."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = parametrizations.spectral_norm(nn.Conv2d(4, 4, 3, padding=1))
        self.twin = copy.deepcopy(self.conv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.twin(self.twin(self.conv(self.conv(x))))


class UserCode(nn.Module):
    """A weight scaled by a learned log-scale, and a Gaussian kernel set through ``.data`` and
    normalised in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 3, 3, 3) * 0.2)
        self.log_scale = nn.Parameter(torch.randn(6, 1, 1, 1) * 0.1)
        self.blur = nn.Conv2d(6, 6, 5, padding=2, groups=6, bias=False)
        grid = torch.arange(5.0) - 2
        gauss = torch.exp(-(grid[:, None] ** 2 + grid[None, :] ** 2) / 2.0)
        self.blur.weight.data = gauss.expand(6, 1, 5, 5).clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.conv2d(x, self.w * self.log_scale.exp(), padding=1)
        kernel = self.blur.weight / self.blur.weight.sum(dim=(2, 3), keepdim=True)
        return nn.functional.conv2d(y, kernel, padding=2, groups=6)


class InputDependent(nn.Module):
    """A weight that depends on the input: must never be folded."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3, 3, 3) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.conv2d(x, self.w * x.mean(), padding=1)


class MutatedBuffer(nn.Module):
    """A weight computed from a buffer that forward updates: must never be folded."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3, 3, 3) * 0.2)
        self.register_buffer("gain", torch.ones(4, 1, 1, 1))
        self.gain: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.gain.fill_(1.5)
        return nn.functional.conv2d(x, self.w * self.gain, padding=1)


class RandomWeight(nn.Module):
    """A weight with a random op in it (times zero): must never be folded."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3, 3, 3) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.conv2d(x, self.w + 0.0 * torch.rand_like(self.w), padding=1)


class Broadcast(nn.Module):
    """A weight repeated from a small constant: folding it would multiply its bytes by 32."""

    def __init__(self) -> None:
        super().__init__()
        self.row = nn.Parameter(torch.randn(1, 3, 3, 3) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.conv2d(x, self.row.repeat(64, 1, 1, 1), padding=1)


def image(channels: int = 3, size: int = 8) -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(7)),)


def built(factory: Callable[[], nn.Module]) -> nn.Module:
    """``factory()`` under a fixed seed, with a few train-mode forwards (so spectral norm's
    u / v have moved), then in eval mode."""
    torch.manual_seed(0)
    model = factory()
    for _ in range(2):
        model(*example_inputs(model))
    return model.eval()


def example_inputs(model: nn.Module) -> tuple[torch.Tensor, ...]:
    if isinstance(model, Linears):
        return (torch.randn(2, 12, generator=torch.Generator().manual_seed(7)),)
    if isinstance(model, Tied):
        return image(4)
    return image()
