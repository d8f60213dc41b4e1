"""EG301, EG302: training-mode ops in an export meant for inference."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.analysis.ops import argument, aten_name
from export_guards.linter.context import LintContext
from export_guards.ruleset import Hit, rule


def _training_ops(context: LintContext, kind: str) -> Iterator[Hit]:
    for node in context.call_nodes():
        name = aten_name(node.target) or ""
        if kind not in name or argument(node, "train", "training") is not True:
            continue
        if kind == "norm" and argument(node, "running_mean") is None:
            continue  # track_running_stats=False: batch statistics are its eval behaviour too
        consequence = _CONSEQUENCE.get(kind, "")
        yield Hit(f"{name} '{node.name}' runs in training mode{consequence}", node)


_CONSEQUENCE = {
    "dropout": ": the program drops activations at random",
    "norm": ": to_edge cannot lower it, and it would normalise with each batch's statistics",
}


@rule("EG301")
def train_mode_dropout(context: LintContext) -> Iterator[Hit]:
    return _training_ops(context, "dropout")


@rule("EG302")
def train_mode_batch_norm(context: LintContext) -> Iterator[Hit]:
    return _training_ops(context, "norm")
