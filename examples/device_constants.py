"""Reported model (b): ``Sequential(Linear(4, 3), ReLU())`` whose weights sit on an accelerator.

Moved to CUDA with a CUDA example input, it segfaulted in ``to_executorch()``. Here it sits on
CUDA where it is available, and elsewhere on ``trapdev``, the test accelerator that
export-guards builds, whose memory the host cannot read: the same crash, without a GPU.
``model()`` is a factory usable by ``export-guards lint``.
"""

from __future__ import annotations

import torch
from torch import nn


def model(device: str | torch.device | None = None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The reported model and an example input, on ``device`` (default: ``cuda`` where it is
    available, else ``trapdev``)."""
    if device is None and torch.cuda.is_available():
        device = "cuda"
    if device is None:
        from export_guards.testing import load_trapdev

        device = load_trapdev()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval().to(device)
    example = torch.linspace(-1.0, 1.0, 8).reshape(2, 4).to(device)
    return net, (example,)
