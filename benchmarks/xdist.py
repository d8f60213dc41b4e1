"""xdist benchmark: the plugin's ``check_export`` on 6 small models, serial against ``pytest -n auto``.

Run: ``.venv/bin/python benchmarks/xdist.py [--rounds N] [--unlimited]``.

Writes a throwaway pytest project (one test per model, a few seconds each: a conv net, an MLP,
a weight-normed conv net, two transformer blocks, a depthwise-separable net, a 1D-conv audio
net; each exported with the guards, lowered to XNNPACK, run in ``executorch.runtime`` and
compared with eager) and runs it as a user would, ``python -m pytest -q -p no:cacheprovider``,
serially and with ``-n auto``, interleaved round by round (the order alternates, so drift hits
both). Each wall time includes start-up (importing torch and ExecuTorch: once serially, once
per worker). Reports every wall time, the median CPU time of each kind of run (all its
processes), the load average (other work on the machine slows ``-n auto`` most), and the median
of the paired ratios xdist / serial. Target: <= 1.0 (exit 1 if missed). ``--unlimited`` adds a
third run per round, ``-n auto`` with the plugin's per-worker thread limit undone (each worker
back to torch's default, every core), to show what the limit buys.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TESTS = '''
import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm


def inputs(*shape, seed=0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)),)


def check(check_export, model, example, extra):
    torch.manual_seed(0)
    model = model.eval()
    result = check_export(model, example, extra_inputs=[extra], atol=1e-4, rtol=1e-3)
    assert result.delegation.fraction_delegated > 0


def test_conv_net(check_export):
    layers, channels = [], 3
    for width in (16, 32, 64, 128):
        layers += [nn.Conv2d(channels, width, 3, stride=2, padding=1), nn.BatchNorm2d(width), nn.ReLU()]
        layers += [nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()]
        channels = width
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))
    check(check_export, model, inputs(1, 3, 96, 96), inputs(1, 3, 96, 96, seed=1))


def test_mlp(check_export):
    layers = [nn.Linear(256, 512), nn.GELU()]
    for _ in range(6):
        layers += [nn.Linear(512, 512), nn.LayerNorm(512), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(512, 10))
    check(check_export, model, inputs(8, 256), inputs(8, 256, seed=1))


def test_weight_normed_conv(check_export):
    widths = (3, 32, 32, 64, 32, 3)
    layers = []
    for channels_in, channels_out in zip(widths, widths[1:]):
        layers += [weight_norm(nn.Conv2d(channels_in, channels_out, 3, padding=1)), nn.ReLU()]
    check(check_export, nn.Sequential(*layers[:-1]), inputs(1, 3, 48, 48), inputs(1, 3, 48, 48, seed=1))


class Block(nn.Module):
    """A pre-norm transformer block: attention and an MLP, each with a residual."""

    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attention = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.out((attention @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def test_transformer_block(check_export):
    check(check_export, nn.Sequential(Block(), Block()), inputs(1, 32, 64), inputs(1, 32, 64, seed=1))


def separable(channels_in, channels_out, stride):
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_in, 3, stride=stride, padding=1, groups=channels_in),
        nn.BatchNorm2d(channels_in), nn.ReLU6(),
        nn.Conv2d(channels_in, channels_out, 1), nn.BatchNorm2d(channels_out), nn.ReLU6(),
    )


def test_depthwise_separable(check_export):
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        separable(16, 32, 1), separable(32, 64, 2), separable(64, 64, 1), separable(64, 128, 2), separable(128, 128, 1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
    )
    check(check_export, model, inputs(1, 3, 96, 96), inputs(1, 3, 96, 96, seed=1))


def test_audio_conv1d(check_export):
    layers, channels = [], 1
    for width in (16, 32, 64, 64, 128):
        layers += [nn.Conv1d(channels, width, 9, stride=2, padding=4), nn.BatchNorm1d(width), nn.ReLU()]
        channels = width
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(channels, 12))
    check(check_export, model, inputs(1, 1, 8000), inputs(1, 1, 8000, seed=1))
'''

# --unlimited: undo the plugin's per-worker thread limit, back to torch's default (every core).
UNLIMITED_CONFTEST = """
import os

import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if os.environ.get("EG_BENCH_UNLIMITED") and hasattr(config, "workerinput"):
        import torch

        torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
"""


def run(project: Path, extra: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (its processes, workers included) of one pytest run of ``project``;
    every test must pass."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        output = done.stdout[-4000:] + done.stderr[-2000:]
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{output}")
    return seconds, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved serial / xdist rounds (default 3)")
    parser.add_argument("--unlimited", action="store_true", help="also time -n auto without the plugin's thread limit")
    args = parser.parse_args()

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    variants = {"serial": [], "xdist": ["-n", "auto"]}
    if args.unlimited:
        variants["unlimited"] = ["-n", "auto"]
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="eg-xdist-") as folder:
        project = Path(folder)
        (project / "pytest.ini").write_text("[pytest]\n")  # the project's own root: nothing of ours
        (project / "test_models.py").write_text(textwrap.dedent(TESTS))
        (project / "conftest.py").write_text(textwrap.dedent(UNLIMITED_CONFTEST))
        run(project, ["-n", "auto"], dict(os.environ))  # warm the file cache: round 1 is not a cold start
        for round_ in range(args.rounds):
            for name in variants if round_ % 2 == 0 else reversed(variants):
                env = {**os.environ, "EG_BENCH_UNLIMITED": "1"} if name == "unlimited" else dict(os.environ)
                seconds, cpu_seconds = run(project, variants[name], env)
                wall[name].append(seconds)
                cpu[name].append(cpu_seconds)
            times = ", ".join(f"{n} {wall[n][-1]:.1f} s" for n in variants)
            print(f"round {round_ + 1}: {times}", file=sys.stderr, flush=True)

    def paired(name: str) -> float:
        return statistics.median(x / s for x, s in zip(wall[name], wall["serial"]))

    ratio = paired("xdist")
    after = os.getloadavg()[0]
    print(f"{cores} cores (load average {load:.1f} before, {after:.1f} after), 6 models, {args.rounds} rounds\n")
    print("| run | wall s, each round | median wall s | median CPU s |")
    print("|---|---|---|---|")
    for name in variants:
        rounds = " / ".join(f"{s:.1f}" for s in wall[name])
        print(f"| {name} | {rounds} | {statistics.median(wall[name]):.1f} | {statistics.median(cpu[name]):.1f} |")
    if args.unlimited:
        print(f"\nwithout the thread limit: xdist / serial = {paired('unlimited'):.2f} (median of paired ratios)")
    verdict = "met" if ratio <= 1.0 else "MISSED"
    print(f"\nxdist / serial = {ratio:.2f} (median of paired ratios; target <= 1.0): {verdict}")
    return 0 if ratio <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
