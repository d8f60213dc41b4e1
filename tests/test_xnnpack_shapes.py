"""The XNNPACK reshape rules (``reader/xnnpack_shapes.py``) agree with what ExecuTorch writes:
on real exports, following each graph from the program's input tensors gives every value the
dims the XNNPACK backend serialized for it, for every node kind the backend writes here."""

from __future__ import annotations

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.schema import DelegateCall

from export_guards.pte.context import PteContext
from export_guards.pte.reader.file import PteFile
from export_guards.pte.reader.xnnpack import EXTERNAL_INPUT
from export_guards.pte.reader.xnnpack_shapes import infer_shapes


class Zoo(torch.nn.Module):
    """One of most node kinds the XNNPACK backend writes, with strides, padding and dilation."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)
        self.up = torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.prelu = torch.nn.PReLU(4)
        self.linear = torch.nn.Linear(16, 6)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        f = torch.nn.functional
        a = f.hardswish(self.depthwise(self.conv(x)))
        b = f.max_pool2d(f.avg_pool2d(a, 2), 3, stride=1, padding=1)
        c = f.pad(f.interpolate(self.prelu(self.up(a)), size=(8, 8), mode="bilinear"), (1, 2, 0, 1))
        d = torch.cat([a, f.interpolate(b, size=(8, 8), mode="bilinear"), a * 2], 1)
        e = d.mean((2, 3), keepdim=True).flatten(1)
        g = self.linear(f.leaky_relu(torch.sigmoid(e[:, :16]) + torch.tanh(e[:, 8:]), 0.1))
        h = torch.bmm(y, y.transpose(1, 2)).softmax(-1)
        i = torch.clamp(h, -0.5, 0.5).abs().neg()
        j = (y.permute(0, 2, 1)[:, 1:3] * y.sum(1, keepdim=True).transpose(1, 2)[:, :2]).sqrt().rsqrt()
        return g, c.floor() + c.ceil(), i.exp(), j, torch.maximum(h, i) - torch.minimum(h, i) / 2


def _zoo() -> bytes:
    torch.manual_seed(0)
    program = torch.export.export(Zoo().eval(), (torch.randn(1, 3, 16, 16), torch.randn(2, 5, 7)))
    return to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


@pytest.fixture(scope="module")
def programs(architecture_programs: dict[str, bytes]) -> dict[str, bytes]:
    programs = {"node zoo": _zoo()}
    programs.update(
        (name, data) for name, data in architecture_programs.items() if "xnnpack" in name and "dynamic" not in name
    )
    return programs


def test_following_each_graph_from_the_program_inputs_gives_the_serialized_dims(programs) -> None:
    kinds = set()
    for name, data in programs.items():
        context = PteContext(PteFile(data, name))
        for plan in context.pte.program.execution_plan:
            calls = [
                i.instr_args for c in plan.chains for i in c.instructions if isinstance(i.instr_args, DelegateCall)
            ]
            for call in calls:
                payload = context.xnnpack_graphs[(plan.name, call.delegate_index)]
                inputs = {}
                for value in payload.values:
                    if value.flags & EXTERNAL_INPUT:
                        tensor = plan.values[call.args[value.external_id]].val
                        inputs[value.value_id] = tuple(tensor.sizes[d] for d in tensor.dim_order)
                shapes = infer_shapes(payload, inputs)
                assert shapes.refused is None, (name, shapes.refused)
                for value in payload.values:
                    # a scalar program tensor is a [1] graph value: the same element
                    if not (value.flags & EXTERNAL_INPUT and inputs[value.value_id] == ()):
                        assert shapes.shapes.get(value.value_id) == value.dims, (name, call.delegate_index, value)
                kinds |= {node.kind for node in payload.nodes}
    assert len(kinds) >= 30, sorted(kinds)  # the zoo covers most of what the backend writes


def test_shapes_a_node_cannot_take_are_refused_with_the_reason(programs) -> None:
    context = PteContext(PteFile(programs["node zoo"]))
    (_plan,) = context.pte.program.execution_plan
    for payload in context.xnnpack_graphs.values():
        linear = next((n for n in payload.nodes if n.kind == "XNNFullyConnected"), None)
        if linear is None:
            continue
        inputs = {v.value_id: v.dims for v in payload.values if v.flags & EXTERNAL_INPUT}
        shapes = infer_shapes(payload, inputs)
        assert shapes.refused is None
        # the same graph, with every input one longer in its last dimension: the linear refuses it
        widened = {k: (*d[:-1], d[-1] + 1) if d else d for k, d in inputs.items()}
        refused = infer_shapes(payload, widened).refused
        assert refused is not None and (
            "channels" in refused[1]
            or "broadcast" in refused[1]
            or "multiply" in refused[1]
            or "reshapes" in refused[1]
        )
        return
    pytest.fail("the zoo has no fully connected node")


def test_the_zoo_and_the_corpus_check_clean(programs) -> None:
    import export_guards as eg

    for name, data in programs.items():
        assert not eg.check_pte(data).errors, name
