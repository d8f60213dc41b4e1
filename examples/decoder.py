"""A 9-conv segmentation decoder whose convs can be wrapped in weight reparametrizations.

Input 1x3x128x128; GroupNorm, GELU, depthwise convs and PixelShuffle, as in the reported
model. ``decoder(api)`` wraps every conv with one API (or a mix of them); ``model()`` is a
factory usable by ``export-guards lint``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.utils import parametrizations

APIS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "plain": lambda conv: conv,
    "spectral_norm": nn.utils.spectral_norm,
    "parametrizations.spectral_norm": parametrizations.spectral_norm,
    "parametrizations.weight_norm": parametrizations.weight_norm,
}


def _block(wrap: Callable[[nn.Module], nn.Module], conv: nn.Conv2d, shuffle: int = 1) -> nn.Sequential:
    channels = conv.out_channels // (shuffle * shuffle)
    layers: list[nn.Module] = [wrap(conv)]
    if shuffle > 1:
        layers.append(nn.PixelShuffle(shuffle))
    layers += [nn.GroupNorm(min(8, channels), channels), nn.GELU()]
    return nn.Sequential(*layers)


class Decoder(nn.Module):
    """Nine convs: stem, two depthwise-separable pairs, a strided conv, two PixelShuffle
    upsampling convs and a 1x1 head."""

    def __init__(self, wraps: list[Callable[[nn.Module], nn.Module]]) -> None:
        super().__init__()
        w = iter(wraps)
        self.stem = _block(next(w), nn.Conv2d(3, 32, 3, stride=2, padding=1))
        self.dw1 = _block(next(w), nn.Conv2d(32, 32, 3, padding=1, groups=32))
        self.pw1 = _block(next(w), nn.Conv2d(32, 64, 1))
        self.down = _block(next(w), nn.Conv2d(64, 64, 3, stride=2, padding=1))
        self.dw2 = _block(next(w), nn.Conv2d(64, 64, 3, padding=1, groups=64))
        self.pw2 = _block(next(w), nn.Conv2d(64, 64, 1))
        self.up1 = _block(next(w), nn.Conv2d(64, 128, 3, padding=1), shuffle=2)
        self.up2 = _block(next(w), nn.Conv2d(32, 64, 3, padding=1), shuffle=2)
        self.head = next(w)(nn.Conv2d(16, 2, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pw1(self.dw1(self.stem(x)))
        x = self.pw2(self.dw2(self.down(x)))
        return self.head(self.up2(self.up1(x)))


def decoder(api: str) -> Decoder:
    """The decoder with every conv wrapped by ``api`` (a key of ``APIS``, or ``"mixed"``
    for the three reparametrizations in turn), deterministic weights, in eval mode, after
    two train-mode forwards so that spectral norm's u / v have moved."""
    if api == "mixed":
        cycle = [APIS[name] for name in list(APIS)[1:]]
        wraps = [cycle[i % len(cycle)] for i in range(9)]
    else:
        wraps = [APIS[api]] * 9
    torch.manual_seed(0)
    model = Decoder(wraps)
    with torch.no_grad():
        for _ in range(2):
            model(example_input())
    return model.eval()


def example_input() -> torch.Tensor:
    return torch.randn(1, 3, 128, 128, generator=torch.Generator().manual_seed(1))


def model(api: str = "mixed") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Factory: the mixed decoder and its example input."""
    return decoder(api), (example_input(),)
