"""What EG405's portable fallback costs a weight-only quantized linear at run time, against the
forms XNNPACK computes right.

Run: ``make bench-weight-only`` (or ``.venv/bin/python benchmarks/weight_only_speed.py [--rounds N] [--candidates]``).

Decoder-sized linears (a stack of four, ``dim -> hidden -> dim`` twice: 768 -> 2048 and 2048 ->
2048), on one token and on 64, each written by ``lower_with_guards`` and run in
``executorch.runtime`` in this process: torchao's weight-only configurations (``Int8WeightOnlyConfig``,
``IntxWeightOnlyConfig`` int8 per channel and int4 per group of 32), which EG405 keeps off
XNNPACK (dequantize and matmul on the portable kernels, the weight quantized in the program);
8da8w (``Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))``),
which XNNPACK computes right; and the same linears in fp32 on XNNPACK. The forwards alternate
round by round, the order rotated. Reported per program: the median forward, the median of the
paired ratios to 8da8w's and to fp32's forward in the same round, the program's bytes, and its
largest difference from its eager model relative to eager's largest value (each must be right).

``--candidates`` adds the rewrites that would put the linear on XNNPACK with eager's numbers, run
for real: "folded", the dequantized weight as a static fp32 weight (what folding the
dequantization writes); "dynamic weight", the dequantization kept on the portable kernels and the
matmul given to XNNPACK with a weight computed as it runs (a second ``XnnpackPartitioner`` with
``force_non_static_weights_for_f32_linear=True``, after the linear's source partition is
dropped); and "qc8w, no bias", XNNPACK's float-activation, int8-weight linear reached through a
linear config of one's own (the stock one takes a quantized weight only with a quantized
activation; the serializer refuses a bias beside it, the runtime an int4 weight: int8 per channel,
the biases dropped, compared with its own eager model).

Measured (executorch 1.5.1, torchao 0.18, x86_64 with 2 cores shared with other work, so the
figures move with the load; median of paired ratios to 8da8w's forward), 768 -> 2048 -> 768:

=====================================  ==============  ===============  ===========
program                                1 token         64 tokens        bytes
=====================================  ==============  ===============  ===========
fp32 (XNNPACK)                         1.1x - 5x       1.2x             25,192,320
8da8w (XNNPACK)                        1x              1x               6,342,016
int8wo, guarded (portable)             18x - 106x      5.8x             6,345,680
intx8wo per channel, guarded           26x - 185x      6.7x             6,351,568
intx4wo group 32, guarded              27x - 181x      6.7x (89x as     7,162,576
                                                       addmm, before)
candidate: folded to fp32              1.5x - 4.6x     1.3x             25,192,320
candidate: dynamic weight              28x - 205x      4.7x             6,353,872
candidate: qc8w, no bias (int8 chan.)  1.3x            -                6,318,080
=====================================  ==============  ===============  ===========

2048 -> 2048 -> 2048 (no candidates): fp32 2.5x / 1.3x, int8wo 32x / 5.1x, intx8wo per channel
49x / 8.0x, intx4wo group 32 48x / 9.0x (1 token / 64 tokens); 8da8w's program 16,848,256 bytes,
the weight-only ones 16.9 to 19.1 MB, fp32's 67,145,600.

Every program's difference from its eager model stays within float rounding (at most 3e-6 of
eager's largest value; 8da8w's 7e-3 is its activations' quantization). So: folding buys fp32's
speed for fp32's bytes and keeps the quantization's error (no better than not quantizing); the
dynamic weight costs what the portable ``mm`` does; only the qc8w kernel is right and fast, and
it is not reachable through the stock partitioner.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable

import export_guards as eg  # first: it keeps the libraries' known noise off the terminal

# isort: split

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from executorch.runtime import Runtime
from torch import nn
from torchao.quantization import (
    Int8DynamicActivationIntxWeightConfig,
    Int8WeightOnlyConfig,
    IntxWeightOnlyConfig,
    quantize_,
)
from torchao.quantization.granularity import PerAxis, PerGroup

from export_guards.analysis.known_wrong import LINEAR_SOURCES
from export_guards.analysis.ops import aten_name

SHAPES = ((768, 2048), (2048, 2048))
TOKENS = (1, 64)
CONFIGS: dict[str, Callable[[], object] | None] = {
    "fp32": None,
    "8da8w": lambda: Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)),
    "int8wo": Int8WeightOnlyConfig,
    "intx8wo-channel": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),
    "intx4wo-group32": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)),  # type: ignore[attr-defined]  # torch's stubs lack the sub-byte dtypes
}
WEIGHT_ONLY = ("int8wo", "intx8wo-channel", "intx4wo-group32")
CANDIDATES_FOR = ("intx8wo-channel", "intx4wo-group32")


def linears(dim: int, hidden: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(dim, hidden), nn.Linear(hidden, dim), nn.Linear(dim, hidden), nn.Linear(hidden, dim)
    ).eval()


def quantized(model: nn.Module, config: str) -> nn.Module:
    build = CONFIGS[config]
    if build is None:
        return model
    model = copy.deepcopy(model)
    quantize_(model, build())
    return model


def folded(model: nn.Module) -> nn.Module:
    """``model`` with each quantized weight replaced by its dequantized fp32 value (what folding
    the dequantization writes)."""
    model = copy.deepcopy(model)
    for linear in (m for m in model.modules() if isinstance(m, nn.Linear)):
        linear.weight = nn.Parameter(linear.weight.dequantize(), requires_grad=False)
    return model


def _names_linear(source: object) -> bool:
    """Whether an ``nn_module_stack`` entry's module (its dotted class name) is a linear."""
    return (
        source in {f"{s.__module__}.{s.__qualname__}" for s in LINEAR_SOURCES if isinstance(s, type)}
        or source in LINEAR_SOURCES
    )


class _NoLinearSource(ExportedProgramPassBase):
    """Drop the linear source partition from every matmul and weight layout node (after the
    guard passes), so that XNNPACK's partitioner sees a plain matmul of a computed weight."""

    def call(self, exported_program: torch.export.ExportedProgram) -> ExportedProgramPassResult:
        for node in exported_program.graph.nodes:
            if node.op == "call_function" and aten_name(node.target) in (
                "mm",
                "addmm",
                "t_copy",
                "permute_copy",
                "view_copy",
            ):
                node.meta.pop("source_fn_stack", None)
                modules = dict(node.meta.get("nn_module_stack") or {})
                while modules and _names_linear(next(reversed(modules.values()))[1]):
                    modules.popitem()
                node.meta["nn_module_stack"] = modules
        return ExportedProgramPassResult(exported_program, True)


def _qc8w_partitioner() -> XnnpackPartitioner:
    """XNNPACK's partitioner with a linear config of its own that takes a quantized weight beside
    a float activation (XNNPACK's f32-qc8w kernel), which the stock config refuses."""
    from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
    from executorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig
    from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
    from executorch.backends.xnnpack.utils.quant_utils import is_dequant

    class FloatActivationLinear(LinearConfig):
        def _get_act_deps(self, node, ep, precision):
            if precision == ConfigPrecisionType.STATIC_QUANT and not is_dequant(node.args[0]):
                return True, []
            return super()._get_act_deps(node, ep, precision)

        def _get_output_deps(self, node, ep, precision):
            if precision == ConfigPrecisionType.STATIC_QUANT and not is_dequant(node.args[0]):
                return True, []
            return super()._get_output_deps(node, ep, precision)

    return XnnpackPartitioner(
        configs=[FloatActivationLinear if c is LinearConfig else c for c in ALL_PARTITIONER_CONFIGS]
    )


def without_bias(model: nn.Module) -> nn.Module:
    """``model`` with its linears' biases dropped (XNNPACK's serializer refuses a bias beside a
    quantized weight and a float activation)."""
    model = copy.deepcopy(model)
    for linear in (m for m in model.modules() if isinstance(m, nn.Linear)):
        linear.bias = None
    return model


def qc8w(program: torch.export.ExportedProgram) -> bytes:
    return to_edge_transform_and_lower(program, partitioner=[_qc8w_partitioner()]).to_executorch().buffer


def guarded(program: torch.export.ExportedProgram) -> bytes:
    return eg.lower_with_guards(program).to_pte()


def dynamic_weight(program: torch.export.ExportedProgram) -> bytes:
    passes = [*eg.guard_passes(), _NoLinearSource()]
    partitioners = [XnnpackPartitioner(), XnnpackPartitioner(force_non_static_weights_for_f32_linear=True)]
    return (
        to_edge_transform_and_lower(program, transform_passes=passes, partitioner=partitioners).to_executorch().buffer
    )


def programs(dim: int, hidden: int, tokens: int, candidates: bool) -> dict[str, tuple[nn.Module, bytes]]:
    """Each way's eager model (the reference) and written program, by name."""
    base, inputs = linears(dim, hidden), (torch.randn(1, tokens, dim),)
    written: dict[str, tuple[nn.Module, bytes]] = {}
    for config in CONFIGS:
        model = quantized(base, config)
        written[config] = (model, guarded(torch.export.export(model, inputs)))
        if candidates and config in CANDIDATES_FOR:
            written[f"{config} folded"] = (model, guarded(torch.export.export(folded(model), inputs)))
            written[f"{config} dynamic weight"] = (model, dynamic_weight(torch.export.export(model, inputs)))
        if candidates and config == "intx8wo-channel":
            unbiased = without_bias(model)
            written[f"{config} qc8w, no bias"] = (unbiased, qc8w(torch.export.export(unbiased, inputs)))
    return written


def latencies(methods: dict[str, object], inputs: list[torch.Tensor], rounds: int) -> dict[str, list[float]]:
    """Seconds per forward of each method, round by round (rotating who goes first)."""
    for method in methods.values():
        method.execute(inputs)  # warm up
    times: dict[str, list[float]] = {name: [] for name in methods}
    names = list(methods)
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            method = methods[name]
            method.execute(inputs)  # type: ignore[attr-defined]
            times[name].append(time.perf_counter() - start)
    return times


def paired(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def measure(dim: int, hidden: int, tokens: int, rounds: int, candidates: bool) -> None:
    written = programs(dim, hidden, tokens, candidates)
    torch.manual_seed(1)
    inputs = [torch.randn(1, tokens, dim)]
    runtime = Runtime.get()
    loaded = {name: runtime.load_program(pte) for name, (_, pte) in written.items()}  # a method needs its program alive
    methods = {name: program.load_method("forward") for name, program in loaded.items()}
    errors = {}
    for name, (model, _) in written.items():
        with torch.no_grad():
            expected = model(*inputs)
        errors[name] = float((methods[name].execute(inputs)[0] - expected).abs().max() / expected.abs().max())
    times = latencies(methods, inputs, rounds)
    print(f"\n{dim} -> {hidden} -> {dim} (x2), {tokens} token{'s' if tokens > 1 else ''}, {rounds} rounds")
    print(f"  {'program':32} {'forward':>10} {'/ 8da8w':>9} {'/ fp32':>8} {'bytes':>12} {'difference':>11}")
    for name, seconds in times.items():
        size = len(written[name][1])
        to_8da8w, to_fp32 = paired(seconds, times["8da8w"]), paired(seconds, times["fp32"])
        line = f"  {name:32} {statistics.median(seconds) * 1e3:8.2f}ms {to_8da8w:8.2f}x {to_fp32:7.2f}x {size:12,} {errors[name]:11.1e}"
        print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=0, help="rounds per shape (default: 15 on one token, 5 on 64)")
    parser.add_argument("--candidates", action="store_true", help="also the folded and dynamic-weight rewrites")
    parser.add_argument("--shape", choices=[f"{d}x{h}" for d, h in SHAPES], help="one shape only")
    parser.add_argument("--tokens", type=int, choices=TOKENS, help="one token count only")
    args = parser.parse_args()
    for dim, hidden in SHAPES:
        for tokens in TOKENS:
            if (args.shape in (None, f"{dim}x{hidden}")) and args.tokens in (None, tokens):
                measure(dim, hidden, tokens, args.rounds or (15 if tokens == 1 else 5), args.candidates)
    return 0


if __name__ == "__main__":
    sys.exit(main())
