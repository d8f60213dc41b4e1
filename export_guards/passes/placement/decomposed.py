"""What a copy cannot undo: attention that ``to_edge`` decomposed by the device the graph was
traced on, before the copy.

``scaled_dot_product_attention`` picks its kernel by device when it is decomposed
(``_fused_sdp_choice``): on the CPU ``_scaled_dot_product_flash_attention_for_cpu`` (for 4-D
inputs), whose decomposition adds a permute, a copy and a permute to the math path; on CUDA a
fused kernel (``_scaled_dot_product_efficient_attention``, ``_flash_attention``) that ExecuTorch
has no kernel for; elsewhere the math path. A copy made on the torch.export program, or before
``to_edge_transform_and_lower`` decomposes it (the guarded partitioners' pre-decomposition
transform), decomposes on the CPU; one made after keeps the device's pick.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.fx import GraphModule, Node

from export_guards.analysis.source import node_site
from export_guards.report import Report
from export_guards.ruleset import CATALOG, Hit, finding

__all__ = ["ATTENTION", "FUSED_ATTENTION", "kept_decompositions"]

ATTENTION = "aten.scaled_dot_product_attention.default"
"""The op whose decomposition depends on the device (by its provenance name)."""

FUSED_ATTENTION = frozenset(
    f"aten.{name}.default"
    for name in (
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_fused_attention_overrideable",
    )
)
"""The device kernels that decomposing attention leaves in the graph on CUDA (and a PrivateUse1
backend that registers its own choice): none has a CPU kernel or a decomposition."""


def kept_decompositions(method: str | None, graph_module: GraphModule, device: torch.device) -> Report:
    """One ``EG104`` per attention of ``graph_module`` (traced on ``device``) that was
    decomposed before a copy, at its first node."""
    return Report.of(
        finding(
            CATALOG["EG104"],
            Hit(
                f"{name} was decomposed on {device} before the copy: the copy keeps that decomposition "
                "(the device's attention kernel), so its program is not necessarily the CPU export's",
                node,
            ),
            method=method,
            locate=node_site,
        )
        for name, node in _decomposed_attention(graph_module)
    )


def _decomposed_attention(graph_module: GraphModule) -> Iterator[tuple[str, Node]]:
    """Each decomposed attention's name in the traced program and its first node."""
    seen: set[str] = set()
    for module in graph_module.modules():
        if not isinstance(module, GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function" or str(node.target) == ATTENTION:
                continue
            name = str(node.target) if str(node.target) in FUSED_ATTENTION else _attention_origin(node)
            if name is not None and name not in seen:
                seen.add(name)
                yield name, node


def _attention_origin(node: Node) -> str | None:
    """The name of the ``scaled_dot_product_attention`` node that ``node`` was decomposed from."""
    sources = list(node.meta.get("from_node") or ())
    while sources:
        source = sources.pop()
        if source.target == ATTENTION:
            return source.name
        sources.extend(source.from_node)
    return None
