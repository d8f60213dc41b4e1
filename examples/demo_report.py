"""The demo's report for people: one HTML page (tables and bar charts, no scripts, no
downloads) and the same facts as Markdown. It reads what the demo measured; it computes nothing."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["DemoResult", "LintGroup", "Variant", "group_lint", "render_html", "render_markdown"]


@dataclass
class Variant:
    """One way of exporting the model, and what came of it."""

    name: str
    convs_delegated: int
    convs_total: int
    compute_delegated: int
    compute_total: int
    pte_bytes: int
    latency_s: float | None  # None: it did not run
    max_abs_error: float | None
    note: str = ""


@dataclass
class DemoResult:
    model: str
    headline: str
    input_shape: str
    eager_latency_s: float
    variants: list[Variant]
    lint: list[tuple[str, str, str, str]]  # code, severity, where, message
    folds: list[tuple[str, str]]  # the parameter it made, the message
    check: str
    pte_path: str
    timings: list[tuple[str, float]] = field(default_factory=list)


@dataclass
class LintGroup:
    """Findings of one code whose messages differ only in the names and numbers they quote:
    one entry in the report, with each place."""

    code: str
    severity: str
    shape: str  # the message with each quoted name as '…' and each number as #
    places: list[tuple[str, str]]  # where, and the names its message quotes
    first: str  # the first finding's message, whole


_QUOTED = re.compile(r"'[^']*'")
_NUMBER = re.compile(r"\b\d[\d,.]*\b")


def group_lint(lint: Sequence[tuple[str, str, str, str]]) -> list[LintGroup]:
    """``lint`` (code, severity, where, message) grouped by code, severity and message shape, in
    the order each group first appears: the same paragraph once, however many layers it names."""
    groups: dict[tuple[str, str, str], LintGroup] = {}
    for code, severity, where, message in lint:
        shape = _NUMBER.sub("#", _QUOTED.sub("'…'", message))
        group = groups.setdefault((code, severity, shape), LintGroup(code, severity, shape, [], message))
        group.places.append((where, ", ".join(_QUOTED.findall(message))))
    return list(groups.values())


def _summary(group: LintGroup) -> str:
    """The message itself when it is alone; its shape and the count when there are several."""
    return group.first if len(group.places) == 1 else f"{group.shape} ({len(group.places)} times)"


def _place(where: str, names: str) -> str:
    return f"{where}: {names}" if names else where


def render_markdown(result: DemoResult) -> str:
    lines = [
        f"# export-guards demo: {result.model}",
        "",
        f"**{result.headline}**",
        "",
        f"Input {result.input_shape}.",
        "",
    ]
    lines += [
        "| export | convs on XNNPACK | compute ops delegated | .pte | latency (executorch.runtime) | max abs error vs eager | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in result.variants:
        lines.append(
            f"| {v.name} | {v.convs_delegated}/{v.convs_total} | {v.compute_delegated}/{v.compute_total} | "
            f"{_megabytes(v.pte_bytes)} | {_latency(v.latency_s)} | {_error(v.max_abs_error)} | {v.note} |"
        )
    lines.append(f"| eager PyTorch (reference) | | | | {_latency(result.eager_latency_s)} | | |")
    lines += ["", COMPUTE_OPS, "", EAGER]
    lines += ["", f"## Lint without the guards ({len(result.lint)} findings)", ""]
    for group in group_lint(result.lint):
        if len(group.places) == 1:
            lines.append(f"- `{group.code}` [{group.severity}] {group.places[0][0]}: {group.first}")
        else:
            lines.append(f"- `{group.code}` [{group.severity}] {_summary(group)}:")
            lines += [f"  - {_place(where, names)}" for where, names in group.places]
    for title, folds in _fold_groups(result):
        lines += ["", f"## {title} ({len(folds)})", ""] + [f"- {message}" for message in folds]
    lines += ["", "## The written program", "", f"`{result.pte_path}`: `export-guards check`: {result.check}", ""]
    lines += ["## Where the demo's time went", ""] + [f"- {step}: {seconds:.1f} s" for step, seconds in result.timings]
    return "\n".join(lines) + "\n"


COMPUTE_OPS = (
    "Compute ops are convolutions, linears and matrix products (batched or not): the ops a "
    "delegate is for. The rest (norms, activations, reshapes) runs where the partitioner puts it."
)
EAGER = (
    "Eager PyTorch is a reference, not a target: it runs every op on its own multi-threaded "
    "kernels, while in executorch.runtime the ops XNNPACK does not take here (GroupNorm, GELU, "
    "PixelShuffle, the reflect padding) run on ExecuTorch's portable kernels, on one thread."
)


def _fold_groups(result: DemoResult) -> list[tuple[str, list[str]]]:
    """The reparametrized weights first: they are what XNNPACK needed; then the other folds."""
    weights = [message for made, message in result.folds if made.endswith(".weight")]
    others = [message for made, message in result.folds if not made.endswith(".weight")]
    groups = [("Weights folded into static parameters", weights), ("Other constant-only computations folded", others)]
    return [(title, folds) for title, folds in groups if folds]


def render_html(result: DemoResult) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(v.name)}</td><td>{v.convs_delegated}/{v.convs_total}</td>"
        f"<td>{v.compute_delegated}/{v.compute_total}</td><td>{_megabytes(v.pte_bytes)}</td>"
        f"<td>{e(_latency(v.latency_s))}</td><td>{e(_error(v.max_abs_error))}</td><td>{e(v.note)}</td></tr>"
        for v in result.variants
    )
    rows += f"<tr class=ref><td>eager PyTorch (reference)</td><td></td><td></td><td></td><td>{e(_latency(result.eager_latency_s))}</td><td></td><td></td></tr>"
    latency = _bars(
        "Latency per forward, executorch.runtime (lower is better)",
        [(v.name, v.latency_s or 0.0, _latency(v.latency_s)) for v in result.variants]
        + [("eager PyTorch", result.eager_latency_s, _latency(result.eager_latency_s))],
    )
    delegation = _bars(
        "Convolutions on XNNPACK (higher is better)",
        [
            (v.name, v.convs_delegated / max(v.convs_total, 1), f"{v.convs_delegated} of {v.convs_total}")
            for v in result.variants
        ],
        maximum=1.0,
    )
    lint = "".join(
        f"<tr><td><code>{e(g.code)}</code></td><td class={e(g.severity)}>{e(g.severity)}</td><td>{len(g.places)}</td>"
        f"<td>{e(_summary(g))}{_places(g)}</td></tr>"
        for g in group_lint(result.lint)
    )
    folds = "".join(
        f"<h2>{e(title)} ({len(group)})</h2><ul>" + "".join(f"<li>{e(fold)}</li>" for fold in group) + "</ul>"
        for title, group in _fold_groups(result)
    )
    timings = "".join(f"<tr><td>{e(step)}</td><td>{seconds:.1f} s</td></tr>" for step, seconds in result.timings)
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><title>export-guards demo: {e(result.model)}</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; max-width: 1000px; margin: 2em auto; padding: 0 1em; color: #222 }}
table {{ border-collapse: collapse; margin: 1em 0 }} td, th {{ border: 1px solid #ccc; padding: .3em .6em; text-align: left; vertical-align: top }}
th {{ background: #f3f3f3 }} tr.ref td {{ color: #666 }} .error {{ color: #b00 }} .warning {{ color: #a60 }} .info {{ color: #06c }}
.headline {{ font-size: 1.15em; background: #eef5ee; border-left: 4px solid #2a8a2a; padding: .6em .9em }}
.small {{ font-size: .9em; color: #555 }}
.charts {{ display: flex; gap: 2em; flex-wrap: wrap }} code {{ background: #f3f3f3; padding: 0 .2em }}
</style></head><body>
<h1>export-guards demo: {e(result.model)}</h1>
<p class=headline>{e(result.headline)}</p>
<p>Input {e(result.input_shape)}, lowered with <code>XnnpackPartitioner</code>, run in <code>executorch.runtime</code> on this machine's CPU.</p>
<h2>Before and after</h2>
<table><tr><th>export</th><th>convs on XNNPACK</th><th>compute ops delegated</th><th>.pte</th><th>latency</th><th>max abs error vs eager</th><th>note</th></tr>{rows}</table>
<p class=small>{e(COMPUTE_OPS)} {e(EAGER)}</p>
<div class=charts>{latency}{delegation}</div>
<h2>Lint without the guards ({len(result.lint)} findings)</h2>
<table><tr><th>code</th><th>severity</th><th>findings</th><th>message, and where</th></tr>{lint}</table>
{folds}
<h2>The written program</h2><p><code>{e(result.pte_path)}</code>: <code>export-guards check</code>: {e(result.check)}</p>
<h2>Where the demo's time went</h2><table>{timings}</table>
</body></html>
"""


def _places(group: LintGroup) -> str:
    """Where a group's findings are: one line for one, a list of each place and message for several."""
    e = html.escape
    if len(group.places) == 1:
        return f"<br><span class=small>{e(group.places[0][0])}</span>"
    items = "".join(f"<li>{e(_place(where, names))}</li>" for where, names in group.places)
    return f"<details><summary>{len(group.places)} places</summary><ul class=small>{items}</ul></details>"


def _bars(title: str, bars: Sequence[tuple[str, float, str]], maximum: float | None = None) -> str:
    """A horizontal bar chart as inline SVG."""
    top = maximum or max((value for _, value, _ in bars), default=1.0) or 1.0
    height, label_width, bar_width = 26, 190, 220
    parts = [
        f'<svg width="{label_width + bar_width + 90}" height="{height * len(bars) + 34}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="0" y="16" font-weight="bold" font-size="14">{html.escape(title)}</text>',
    ]
    for i, (name, value, text) in enumerate(bars):
        y = 28 + i * height
        width = max(1.0, bar_width * value / top)
        parts.append(f'<text x="0" y="{y + 15}" font-size="13">{html.escape(name)}</text>')
        parts.append(f'<rect x="{label_width}" y="{y + 3}" width="{width:.1f}" height="{height - 8}" fill="#3b7dd8"/>')
        parts.append(f'<text x="{label_width + width + 6:.1f}" y="{y + 15}" font-size="13">{html.escape(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _latency(seconds: float | None) -> str:
    return "did not run" if seconds is None else f"{seconds * 1e3:,.0f} ms"


def _error(error: float | None) -> str:
    return "n/a" if error is None else f"{error:.1e}"
