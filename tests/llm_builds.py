"""examples/llm.py's decoder one layer deep, for the tests: every op, parameter and claim of the
decoder is in each layer (the tied weight is the embedding's and the head's, whatever the
depth), and a second layer only doubles ExecuTorch's lowering time. ``model`` and ``prefill``
are factories ``export-guards lint`` takes, as examples/llm.py's are."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm  # examples/llm.py

CONFIG = llm.Config(layers=1)


def decoder(variant: str = "fp32") -> torch.nn.Module:
    """``llm.decoder(variant)``, one layer deep."""
    return llm.decoder(variant, CONFIG)


def model(variant: str = "fp32") -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """``llm.model(variant)``, one layer deep."""
    return decoder(variant), llm.tokens(4)


def prefill(
    variant: str = "fp32",
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], dict[str, dict[int, torch.export.Dim]]]:
    """``llm.prefill(variant)``, one layer deep."""
    return decoder(variant), llm.tokens(4), llm.dynamic_length()
