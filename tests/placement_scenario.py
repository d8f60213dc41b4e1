"""One export scenario on a device, run by the tests in its own process (it may crash).

Usage: python placement_scenario.py {unguarded,guarded,guarded-edge,copy} DEVICE {portable,xnnpack}
Prints one JSON line describing what happened, unless the process dies first.
"""

from __future__ import annotations

import copy
import json
import sys

import torch

import models


def main(mode: str, device_name: str, backend: str) -> dict[str, object]:
    if device_name == "trapdev":
        from export_guards.testing import load_trapdev

        device = load_trapdev()
    else:
        device = torch.device(device_name)

    from executorch.exir import to_edge, to_edge_transform_and_lower
    from executorch.exir.error import InternalError

    import export_guards as eg

    partitioners = []
    if backend == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioners = [XnnpackPartitioner()]

    cpu_model = models.seeded(models.EveryConstantKind)
    cpu_inputs = cpu_model.example_inputs()
    model = models.to_device(copy.deepcopy(cpu_model), device)
    inputs = tuple(x.to(device) for x in cpu_inputs)
    program = torch.export.export(model, inputs)

    if mode == "unguarded":
        to_edge_transform_and_lower(program, partitioner=partitioners).to_executorch()
        return {"survived": True}

    if mode in ("guarded", "guarded-edge"):
        try:
            if mode == "guarded":
                passes = eg.guard_passes()
                to_edge_transform_and_lower(program, transform_passes=passes, partitioner=partitioners)
            else:
                edge = eg.placement.guard_constant_placement(to_edge(program))
                for partitioner in partitioners:
                    edge = edge.to_backend(partitioner)
                edge.to_executorch()
        except eg.GuardError as error:  # the guard's error, unwrapped in both forms; the test inspects it
            return {
                "guard_error": type(error).__name__,
                "is_internal_error": isinstance(error, InternalError),
                "constants": [f.constant for f in error.report.errors],
                "codes": sorted({f.code for f in error.report.errors}),
                "message": str(error),
            }
        return {"raised": None}

    assert mode == "copy", mode
    before = {k: (v.device.type, v.cpu().clone()) for k, v in model.state_dict().items()}
    guarded = eg.placement.guard_constant_placement(program, policy="copy")
    pte = to_edge_transform_and_lower(guarded, partitioner=partitioners).to_executorch().buffer
    cpu_program = torch.export.export(cpu_model, cpu_inputs)
    cpu_pte = to_edge_transform_and_lower(cpu_program, partitioner=partitioners).to_executorch().buffer

    from executorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    (runtime_out,) = method.execute(list(cpu_inputs))
    with torch.no_grad():
        eager_out = model(*inputs).cpu()
    after = model.state_dict()
    return {
        "identical_to_cpu_export": pte == cpu_pte,
        "pte_bytes": len(pte),
        "max_abs_error": float((runtime_out - eager_out).abs().max()),
        "program_untouched": all(v.device.type == device.type for v in program.state_dict.values()),
        "model_untouched": all(
            after[k].device.type == dev and torch.equal(after[k].cpu(), value)
            for k, (dev, value) in before.items()
            if k != "calls"  # the eager forward above increments it
        ),
        "delegates": pte.count(b"XnnpackBackend"),
    }


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])), flush=True)
