"""The guarded export's time, this tree against another revision, side by side (issue 39: the
house's refactors must leave the export no slower).

Run: ``.venv/bin/python benchmarks/export_ab.py [--baseline REV] [--rounds N]``.

Each round runs two fresh processes, one importing the baseline's ``export_guards`` (a ``git
worktree`` of REV, default ``HEAD``) and one this tree's, in alternating order. Each process
builds the same seeded models (a transformer block, a conv net with batch norm, a weight-norm
net whose weights the fold makes static, an MLP), exports each once to warm up, then times
``lower_with_guards(program).to_pte()`` three times per model (process CPU time, median),
under the default placement policy and under ``"copy"``. Reported: each round's ratio of the
summed medians (this tree / baseline) and the median of the paired ratios, per model and over
all of them. Target: at most 1.05 (no slower, within the machine's noise).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.05

_TIMER = """
import json, statistics, time
import torch
from torch import nn
import export_guards as eg

def seeded(build):
    torch.manual_seed(0)
    return build().eval()

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(128, 4, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(128), nn.LayerNorm(128)
        self.mlp = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128))
    def forward(self, x):
        x = self.norm1(x + self.attention(x, x, x, need_weights=False)[0])
        return self.norm2(x + self.mlp(x))

def conv_net():
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

def weight_norm_net():
    return nn.Sequential(*(nn.utils.parametrizations.weight_norm(nn.Linear(256, 256)) for _ in range(6)))

MODELS = {
    "transformer block": (lambda: seeded(Block), (torch.randn(1, 16, 128),)),
    "conv net + batch norm": (lambda: seeded(conv_net), (torch.randn(1, 3, 32, 32),)),
    "weight-norm net (folded)": (lambda: seeded(weight_norm_net), (torch.randn(2, 256),)),
    "mlp": (lambda: seeded(lambda: nn.Sequential(*(nn.Linear(512, 512) for _ in range(8)))), (torch.randn(4, 512),)),
}
seconds = {}
for name, (build, inputs) in MODELS.items():
    model = build()
    for placement in ("error", "copy"):
        eg.lower_with_guards(torch.export.export(model, inputs), config=eg.Settings(placement=placement)).to_pte()  # warm up
        runs = []
        for _ in range(3):
            program = torch.export.export(model, inputs)
            start = time.process_time()
            eg.lower_with_guards(program, config=eg.Settings(placement=placement)).to_pte()
            runs.append(time.process_time() - start)
        seconds[f"{name}, placement={placement}"] = statistics.median(runs)
print(json.dumps(seconds))
"""


def export_seconds(tree: Path) -> dict[str, float]:
    """Each model's median guarded-export time, in a fresh process importing ``tree``."""
    done = subprocess.run(
        [sys.executable, "-c", _TIMER], env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True, cwd=tree,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD", help="the revision to compare with (default HEAD)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="eg-export-ab-") as scratch:
        baseline = Path(scratch, "baseline")
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(baseline), args.baseline],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            paired: dict[str, list[float]] = {}
            for round_ in range(args.rounds):
                order = (baseline, ROOT) if round_ % 2 == 0 else (ROOT, baseline)
                seconds = {tree: export_seconds(tree) for tree in order}
                for name in seconds[ROOT]:
                    paired.setdefault(name, []).append(seconds[ROOT][name] / seconds[baseline][name])
                total = sum(seconds[ROOT].values()) / sum(seconds[baseline].values())
                paired.setdefault("all models", []).append(total)
                print(
                    f"round {round_ + 1}: baseline {sum(seconds[baseline].values()):.2f} s, this tree {sum(seconds[ROOT].values()):.2f} s: x{total:.3f}",
                    flush=True,
                )
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT, check=False, capture_output=True
            )
    for name, ratios in paired.items():
        print(f"{name}: median of paired ratios x{statistics.median(ratios):.3f}")
    median = statistics.median(paired["all models"])
    print(f"all models: x{median:.3f} (target <= {TARGET})")
    return 0 if median <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
