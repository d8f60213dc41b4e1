"""The test-only device behaves like an accelerator: usable through torch, unreadable by the host."""

from __future__ import annotations

import signal

import pytest
import torch

from conftest import run_script


def test_round_trip_and_ops_run_on_trapdev(trapdev: torch.device) -> None:
    x = torch.randn(3, 5)
    on_device = x.to(trapdev)
    assert on_device.device.type == "trapdev"
    assert torch.equal(on_device.cpu(), x)
    assert torch.equal(on_device.t().contiguous().cpu(), x.t())
    assert torch.equal((on_device * 2 + 1).cpu(), x * 2 + 1)
    conv = torch.nn.Conv2d(2, 4, 3)
    image = torch.randn(1, 2, 6, 6)
    expected = conv(image)
    assert torch.allclose(conv.to(trapdev)(image.to(trapdev)).cpu(), expected)


@pytest.mark.subprocess
def test_host_read_of_a_trapdev_pointer_dies_with_sigsegv() -> None:
    completed = run_script("trapdev_read.py")
    assert completed.returncode == -signal.SIGSEGV, completed.stderr[-2000:]
    assert "copied back: True" in completed.stdout
    assert "string_at" in completed.stderr  # faulthandler names the raw host read
