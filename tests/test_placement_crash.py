"""The reported crash, reproduced and prevented, each pipeline in its own process.

On a device whose memory the host cannot read, the unguarded pipeline dies with SIGSEGV in
ExecuTorch's emitter (portable) or in XNNPACK's preprocess; the guarded one raises
``ConstantPlacementError`` naming every constant; the ``"copy"`` policy exports the same bytes
as a CPU export, which run in ``executorch.runtime`` and match eager.
"""

from __future__ import annotations

import signal

import pytest

from conftest import DEVICES, last_json, run_script
from test_placement import EVERY_CONSTANT

# Where each unguarded pipeline reads the device pointer from the host: (file, function).
CRASH_SITE = {
    "portable": ("executorch/exir/emit/_emitter.py", "_tensor_spec_to_evalue"),
    "xnnpack": ("executorch/backends/xnnpack/operators/node_visitor.py", "get_serialized_buffer_index"),
}

pytestmark = [
    pytest.mark.parametrize("backend", ["portable", "xnnpack"]),
    pytest.mark.subprocess,
]  # each pipeline in its own process


@pytest.fixture(params=DEVICES)
def device_name(request: pytest.FixtureRequest) -> str:
    if request.param == "trapdev":
        request.getfixturevalue("trapdev")  # build the extension once, here, not in each child
    return request.param


def test_unguarded_pipeline_dies_with_sigsegv(device_name: str, backend: str) -> None:
    completed = run_script("placement_scenario.py", "unguarded", device_name, backend)
    assert completed.returncode == -signal.SIGSEGV, (completed.returncode, completed.stderr[-3000:])
    crashed_in = completed.stderr.split("Current thread", 1)[-1]
    innermost_frame = crashed_in.splitlines()[1]
    file, function = CRASH_SITE[backend]
    assert file in innermost_frame and function in innermost_frame, crashed_in[:1500]


@pytest.mark.parametrize("where", ["guarded", "guarded-edge"])
def test_guarded_pipeline_raises_naming_every_constant(device_name: str, backend: str, where: str) -> None:
    outcome = last_json(run_script("placement_scenario.py", where, device_name, backend))
    assert outcome["guard_error"] == "ConstantPlacementError"
    assert outcome["is_internal_error"] is True
    assert sorted(outcome["constants"]) == sorted(EVERY_CONSTANT)
    assert outcome["codes"] == ["EG101"]
    assert f"is on {device_name}:0" in outcome["message"]


def test_copy_policy_matches_the_cpu_export_byte_for_byte(device_name: str, backend: str) -> None:
    outcome = last_json(run_script("placement_scenario.py", "copy", device_name, backend))
    assert outcome["identical_to_cpu_export"] is True
    assert outcome["max_abs_error"] <= 1e-5
    assert outcome["program_untouched"] is True
    assert outcome["model_untouched"] is True
    if backend == "xnnpack":
        assert outcome["delegates"] >= 1
