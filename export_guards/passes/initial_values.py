"""The fix for a written buffer whose initial value matters (EG308), by the buffer's name in the model."""

from __future__ import annotations

from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

__all__ = ["keep_initial_values"]


def keep_initial_values(*buffers: str) -> InitializedMutableBufferPass:
    """ExecuTorch's ``InitializedMutableBufferPass`` for ``buffers``, named as in the model
    (``"layers.0.attention.k_cache"``), for ``to_executorch(ExecutorchBackendConfig(passes=[...]))``:
    the program starts each from the value it had at export, not from zeros.

    ExecuTorch's pass matches a part of the graph's placeholder name, which torch.export makes
    from the name (``b_layers_0_attention_k_cache``); this spells it so, once, here."""
    return InitializedMutableBufferPass([f"b_{fqn.replace('.', '_')}" for fqn in buffers])
