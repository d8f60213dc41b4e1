"""Small programs for the ``.pte`` checks, written with the real ExecuTorch pipeline."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower


class ConvLinear(torch.nn.Module):
    """A conv and a linear (both delegated to XNNPACK) and a buffer added outside them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.linear = torch.nn.Linear(8, 5)
        self.register_buffer("offset", torch.linspace(-1, 1, 5))
        self.offset: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.conv(x).mean((2, 3))) + self.offset


class Counter(torch.nn.Module):
    """A mutated buffer: memory-planned state next to constants."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))
        self.register_buffer("count", torch.zeros(4))
        self.count: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1)
        return x @ self.weight + self.count


def example() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A factory for ``export-guards check --reproducible``: seeded, so exports repeat."""
    torch.manual_seed(0)
    return ConvLinear().eval(), (torch.randn(1, 3, 8, 8),)


def unseeded() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """Fresh random weights at every call: two exports differ."""
    return ConvLinear().eval(), (torch.randn(1, 3, 8, 8),)


class Broadcast(torch.nn.Module):
    """A conv whose weight is a small constant repeated 64 times: folded only with a fold budget
    (``fold-max-growth``) far over the default's."""

    def __init__(self) -> None:
        super().__init__()
        self.row = torch.nn.Parameter(torch.randn(1, 3, 3, 3) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, self.row.repeat(64, 1, 1, 1), padding=1)


def broadcast() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A factory for ``export-guards check --reproducible --fold-max-growth 64``."""
    torch.manual_seed(0)
    return Broadcast().eval(), (torch.randn(1, 3, 8, 8),)


@dataclass(frozen=True)
class Written:
    pte: Path
    data_files: tuple[Path, ...] = ()


def write_programs(folder: Path) -> dict[str, Written]:
    """Portable, XNNPACK, external-data and mutable-buffer programs, written to ``folder``."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    torch.manual_seed(0)
    model, inputs = example()
    program = torch.export.export(model, inputs)
    written = {}
    portable = folder / "portable.pte"
    portable.write_bytes(to_edge_transform_and_lower(program).to_executorch().buffer)
    written["portable"] = Written(portable)
    xnnpack = folder / "xnnpack.pte"
    xnnpack.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    written["xnnpack"] = Written(xnnpack)
    manager = to_edge_transform_and_lower(program).to_executorch(ExecutorchBackendConfig(external_constants=True))
    external = folder / "external" / "external.pte"
    external.parent.mkdir(exist_ok=True)
    external.write_bytes(manager.buffer)
    manager.write_tensor_data_to_file(str(external.parent))
    written["external"] = Written(external, tuple(sorted(external.parent.glob("*.ptd"))))
    counter = torch.export.export(Counter(), (torch.randn(2, 4),))
    mutable = folder / "mutable.pte"
    mutable.write_bytes(to_edge_transform_and_lower(counter).to_executorch().buffer)
    written["mutable"] = Written(mutable)
    return written


class Gated(torch.nn.Module):
    """Bool and int64 inputs, an index buffer, a float16 round trip."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 3))
        self.register_buffer("order", torch.tensor([2, 0, 1]))
        self.order: torch.Tensor

    def forward(self, x: torch.Tensor, mask: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        y = (x @ self.weight)[:, self.order].masked_fill(mask, 0.0)
        return y.to(torch.float16).to(torch.float32) + shift.float()


class InitializedState(torch.nn.Module):
    """Mutable buffers whose initial values the program carries (InitializedMutableBufferPass)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))
        self.register_buffer("position", torch.arange(10, dtype=torch.float32))
        self.position: torch.Tensor
        self.register_buffer("scale", torch.ones(3))
        self.scale: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.position.add_(1)
        self.scale.mul_(2)
        return x @ self.weight + self.position[:4] + self.scale.sum()


def valid_programs(lowered_architectures: Mapping[str, bytes] | None = None) -> dict[str, bytes]:
    """Programs as ExecuTorch writes them, for shapes of program the checks must accept: two
    methods, a dynamic batch, bool / int64 inputs, quantized XNNPACK, initialised state; and
    the :func:`architectures` (``lowered_architectures`` when they were lowered already)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from export_guards import emit_passes

    torch.manual_seed(0)
    xnnpack = [XnnpackPartitioner()]
    programs = {}
    linear = torch.nn.Linear(4, 4).eval()
    methods = {
        "forward": torch.export.export(linear, (torch.randn(2, 4),)),
        "other": torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU()), (torch.randn(3, 4),)),
    }
    programs["two methods, xnnpack"] = to_edge_transform_and_lower(methods, partitioner=xnnpack).to_executorch().buffer
    batch = torch.export.Dim("batch", min=1, max=16)
    dynamic = torch.export.export(linear, (torch.randn(2, 4),), dynamic_shapes={"input": {0: batch}})
    programs["dynamic batch, xnnpack"] = (
        to_edge_transform_and_lower(dynamic, partitioner=xnnpack).to_executorch().buffer
    )
    gated = torch.export.export(Gated(), (torch.randn(2, 3), torch.tensor([[True, False, True]] * 2), torch.arange(3)))
    programs["bool and int64 inputs"] = to_edge_transform_and_lower(gated).to_executorch().buffer
    model, inputs = example()
    captured = torch.export.export(model, inputs).module()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(captured, quantizer)
    prepared(*inputs)
    quantized = torch.export.export(convert_pt2e(prepared), inputs)
    programs["int8, xnnpack"] = to_edge_transform_and_lower(quantized, partitioner=xnnpack).to_executorch().buffer
    state = torch.export.export(InitializedState(), (torch.randn(2, 4),))
    config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["position", "scale"])])
    programs["initialised state"] = to_edge_transform_and_lower(state).to_executorch(config).buffer
    programs["one cond"] = (
        to_edge_transform_and_lower(torch.export.export(OneCond(), COND_INPUTS)).to_executorch().buffer
    )
    guarded = to_edge_transform_and_lower(torch.export.export(TwoConds(), COND_INPUTS))
    programs["two conds, guarded"] = guarded.to_executorch(ExecutorchBackendConfig(passes=emit_passes())).buffer
    programs.update(architectures() if lowered_architectures is None else lowered_architectures)
    return programs


class TwoConds(torch.nn.Module):
    """Two ``torch.cond`` in a row, both results returned: stock ExecuTorch plans the second
    branch's output on the first one's bytes (ExecuTorch #21490)."""

    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        first = torch.cond(flag, lambda x: x + 1, lambda x: x - 1, (x,))
        second = torch.cond(flag, lambda x: x * 10, lambda x: x * 2, (x,))
        return first, second


class CondResultReadLater(torch.nn.Module):
    """A ``torch.cond`` result read after a second ``cond`` ran: it escapes its branch."""

    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
        first = torch.cond(flag, lambda x: x + 1, lambda x: x - 1, (x,))
        second = torch.cond(flag, lambda x: x * 10, lambda x: x * 2, (x,))
        return first + second


class OneCond(torch.nn.Module):
    """One ``torch.cond`` whose result is read before anything else runs: a right program."""

    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
        return torch.cond(flag, lambda x: x + 1, lambda x: x - 1, (x,)) * 3


COND_INPUTS = (torch.ones(4), torch.tensor(True))


def control_flow_programs() -> dict[str, bytes]:
    """The control-flow models as stock ExecuTorch writes them (portable), and as the guards'
    emit passes write them (``emit_passes()``: the results copied out of their branches)."""
    from export_guards import emit_passes

    programs = {}
    for name, model in (
        ("two conds", TwoConds()),
        ("cond result read later", CondResultReadLater()),
        ("one cond", OneCond()),
    ):

        def lowered() -> object:  # to_executorch may rewrite the edge program it is given: one each
            return to_edge_transform_and_lower(torch.export.export(model, COND_INPUTS))  # noqa: B023 - called in this iteration

        programs[f"{name}, stock"] = lowered().to_executorch().buffer
        programs[f"{name}, guarded"] = lowered().to_executorch(ExecutorchBackendConfig(passes=emit_passes())).buffer
    return programs


class KeyValueCache(torch.nn.Module):
    """A cache buffer written in place at a position (a decoder's KV cache)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("keys", torch.zeros(4, 8))
        self.keys: torch.Tensor
        self.project = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        self.keys.index_copy_(0, position, self.project(x))
        return self.keys.sum(0) * 2


def architectures() -> dict[str, bytes]:
    """Realistic architectures as ExecuTorch writes them, portable and XNNPACK: a transformer
    block, a conv net (batch norm, pooling, depthwise), channels-last input, a dynamic batch of
    images, a KV cache, ops left portable between delegates. The program checks must pass them."""
    import sys

    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import transformer

    def lowered(model: torch.nn.Module, inputs: tuple, partitioner: list | None = None, **export: object) -> bytes:
        with torch.no_grad():
            program = torch.export.export(model, inputs, **export)
        return to_edge_transform_and_lower(program, partitioner=partitioner).to_executorch().buffer

    torch.manual_seed(0)
    xnnpack = [XnnpackPartitioner()]
    block, tokens = transformer.model(width=32, length=8, batch=1)
    # Named layers: executorch 1.4's XNNPACK batch-norm fusion fails on a weight whose name starts
    # with a digit, as a bare Sequential's do ('0_weight_fused_bn' is not in list; docs/compatibility.md)
    convnet = torch.nn.Sequential(OrderedDict(
        conv=torch.nn.Conv2d(3, 8, 3, padding=1), norm=torch.nn.BatchNorm2d(8), relu=torch.nn.ReLU(), pool=torch.nn.MaxPool2d(2),
        depthwise=torch.nn.Conv2d(8, 8, 3, groups=8), average=torch.nn.AdaptiveAvgPool2d(1), flatten=torch.nn.Flatten(), linear=torch.nn.Linear(8, 4),
    )).eval()  # fmt: skip
    # A trained batch norm's statistics differ by channel (a fresh one is the same map on every
    # channel, nearly the identity, under which damage that moves a tensor between channels hides).
    # Drawn from a generator of their own, so the draws after them stay as they were.
    statistics = torch.Generator().manual_seed(1)
    ranges = {"running_mean": (-0.5, 0.5), "running_var": (0.5, 2.0), "weight": (0.5, 1.5), "bias": (-0.2, 0.2)}
    with torch.no_grad():
        for name, (low, high) in ranges.items():
            tensor = getattr(convnet[1], name)
            tensor.copy_(torch.rand(tensor.shape, generator=statistics) * (high - low) + low)
    images = (torch.randn(2, 3, 16, 16),)
    # (the portable batch norm kernel takes only contiguous tensors: a conv and a ReLU here)
    channels_last = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    cumulative = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Softmax(-1), torch.nn.Linear(8, 4)).eval()
    return {
        "transformer block, xnnpack": lowered(block, tokens, xnnpack),
        "transformer block, portable": lowered(block, tokens),
        "conv net, xnnpack": lowered(convnet, images, xnnpack),
        "conv net, portable": lowered(convnet, images),
        "conv, portable, channels last": lowered(channels_last, (images[0].to(memory_format=torch.channels_last),)),
        "conv net, xnnpack, dynamic batch": lowered(convnet, images, xnnpack, dynamic_shapes=({0: batch},)),
        "kv cache, xnnpack": lowered(KeyValueCache(), (torch.randn(1, 8), torch.tensor([1])), xnnpack),
        "portable ops between delegates": lowered(cumulative, (torch.randn(3, 8),), [XnnpackPartitioner()]),
        # the emitter places the [6, 8] view of the input on the input's own bytes, no instruction
        "linear on a 3-d input, portable": lowered(cumulative, (torch.randn(1, 6, 8),)),
    }
