"""A structure-aware mutation campaign: is ``check_pte`` as strict as the runtime, and never stricter?

Run: ``make bench-campaign`` (or ``.venv/bin/python benchmarks/pte_campaign.py [--mutants N]
[--seed S] [--programs default|other]``).

Each mutant changes one semantic field of a valid program to another valid-looking value
(``tests/pte_structure.py``: delegate call arguments, XNNPACK values and node ids, dtypes,
shapes and dim orders, memory-plan slots, instruction order and outputs, header fields, kernel
arguments and return slots, operator and backend names). Every mutant is checked with
``check_pte`` against the runtime at hand (``RuntimeInventory.installed()``, as ``check
--runtime`` does) and then run in ``executorch.runtime`` in a child process (restarted after
each crash; a run past ``--timeout`` is a hang) on the original program's inputs, and its outputs
are compared with the original's (each method runs three times, the second time on other inputs).
Reported per mutator and in total (issue 26's four rows, and more):

- checker-clean crashes or hangs (target: none);
- checker-clean runtime errors (no error-severity finding), other than those of a backend
  that the runtime at hand lacks and another ExecuTorch build registers, which EG521 warns of
  (target: at most 2 % of mutants); beside them the count with only the rules this work
  started from (EG501-EG513);
- runtime errors warned of as such a backend (a kernel the runtime lacks, or a backend id that
  no build registers, is an EG521 error: flagged);
- checker-clean wrong outputs (silent corruptions the check missed);
- false alarms: flagged programs that run with exactly the original's outputs, every flagged
  mutant run (target: none);
- check time per file.

``--programs other`` uses programs the tests do not mutate (a transformer block, a conv net, a
cat / split model, initialised state, a dynamic batch), for a campaign the rules were not
tuned on.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "examples")]  # the mutators and models live with the tests

BASELINE_CODES = tuple(f"EG5{n:02d}" for n in range(1, 14))  # the rules before EG514-EG518


def seed_programs(kind: str, folder: Path) -> dict[str, tuple[bytes, tuple[Path, ...]]]:
    """Valid programs by name, with their data files."""
    import torch
    from executorch.exir import to_edge_transform_and_lower

    from pte_models import valid_programs, write_programs

    if kind == "default":
        written = write_programs(folder)
        programs = {name: (w.pte.read_bytes(), w.data_files) for name, w in written.items()}
        valid = valid_programs()  # batch norm, dim-order copies, copy_ and index_put on state
        for name in ("two methods, xnnpack", "conv net, portable", "bool and int64 inputs", "kv cache, xnnpack"):
            programs[name] = (valid[name], ())
        return programs

    class CatSplit(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            p, q = torch.cat([self.a(x), self.b(y), x], dim=1).split([12, 12], dim=1)
            return torch.relu(p), torch.cumsum(q, 1)

    torch.manual_seed(1)
    cat_split = torch.export.export(CatSplit(), (torch.randn(2, 8), torch.randn(2, 8)))
    others = valid_programs()  # its realistic architectures, which no test mutates
    return {
        "transformer block, xnnpack": (others["transformer block, xnnpack"], ()),
        "conv net, xnnpack": (others["conv net, xnnpack"], ()),
        "cat / split, portable": (to_edge_transform_and_lower(cat_split).to_executorch().buffer, ()),
        "initialised state": (others["initialised state"], ()),
        "dynamic batch, xnnpack": (others["dynamic batch, xnnpack"], ()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=420, help="mutants in all (default 420)")
    parser.add_argument("--seed", type=int, default=0, help="the mutation seed (default 0)")
    parser.add_argument(
        "--programs", choices=("default", "other"), default="default", help="which valid programs to mutate"
    )
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds before a run counts as a hang")
    parser.add_argument("--keep", type=Path, help="write the mutants that the check and the runtime disagree on here")
    args = parser.parse_args()

    import torch

    import export_guards as eg
    from pte_structure import RUNTIME_MUTATORS, STRUCTURE_MUTATORS, Runner, program_inputs

    installed = eg.program.RuntimeInventory.installed()
    mutators = {**STRUCTURE_MUTATORS, **RUNTIME_MUTATORS}
    rng = random.Random(args.seed)
    scratch = Path(tempfile.mkdtemp(prefix="pte-campaign-"))
    seeds = seed_programs(args.programs, scratch)
    runner = Runner(args.timeout)
    originals: dict[str, tuple[bytes, tuple[Path, ...], Path, object]] = {}
    for name, (data, data_files) in seeds.items():
        path, inputs = scratch / f"{len(originals)}.pte", scratch / f"{len(originals)}.inputs"
        path.write_bytes(data)
        torch.save(program_inputs(data), inputs)
        first = runner.run(path, data_files[0] if data_files else None, inputs)
        assert first["outcome"] == "ok", f"the valid program {name} does not run: {first}"
        originals[name] = (data, data_files, inputs, first["digest"])

    rows: dict[str, Counter[str]] = defaultdict(Counter)
    check_ms: list[float] = []
    made = attempts = 0
    while made < args.mutants and attempts < args.mutants * 20:
        attempts += 1
        kind = rng.choice(list(mutators))
        name = rng.choice(list(originals))
        data, data_files, inputs, digest = originals[name]
        mutant = mutators[kind](data, rng)
        if mutant is None or mutant == data:
            continue
        made += 1
        path = scratch / f"mutant-{made}.pte"
        path.write_bytes(mutant)
        start = time.perf_counter()
        report = eg.check_pte(path, data_files=data_files, against=installed)
        check_ms.append((time.perf_counter() - start) * 1e3)
        errors = {f.code for f in report.errors}
        flagged, baseline_flagged = bool(errors), bool(errors & set(BASELINE_CODES))
        lacking = bool(report.with_code("EG521"))
        result = runner.run(path, data_files[0] if data_files else None, inputs)
        outcome = result["outcome"]
        if outcome == "ok":
            outcome = "same output" if result["digest"] == digest else "wrong output"
        row = rows[kind]
        row["mutants"] += 1
        row["flagged"] += flagged
        verdicts = []
        if not flagged and outcome in ("crash", "hang"):
            verdicts.append("clean crash or hang")
        if not flagged and outcome == "error":
            verdicts.append("warned: runtime lacks" if lacking else "clean runtime error")
        if not baseline_flagged and outcome == "error":
            verdicts.append("clean runtime error, EG501-EG513 only")
        if not flagged and outcome == "wrong output":
            verdicts.append("clean wrong output")
        if flagged and outcome == "same output":
            verdicts.append("false alarm")
        for verdict in verdicts:
            row[verdict] += 1
            if args.keep and verdict != "clean runtime error, EG501-EG513 only":
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"{verdict.replace(' ', '-')}-{made}.pte").write_bytes(mutant)
                (args.keep / f"{verdict.replace(' ', '-')}-{made}.txt").write_text(
                    f"{kind} of {name}: {outcome} {result.get('why', '')}\n"
                    + "\n".join(f"{f.code} {f.message}" for f in report)
                )
    runner.close()

    columns = [
        "mutants", "flagged", "clean crash or hang", "clean runtime error", "warned: runtime lacks",
        "clean runtime error, EG501-EG513 only", "clean wrong output", "false alarm",
    ]  # fmt: skip
    print(f"programs: {args.programs} ({', '.join(originals)}); mutation seed {args.seed}")
    print("| mutator | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    total: Counter[str] = Counter()
    for kind in sorted(rows):
        total.update(rows[kind])
        print(f"| {kind} | " + " | ".join(str(rows[kind][c]) for c in columns) + " |")
    print("| **all** | " + " | ".join(f"**{total[c]}**" for c in columns) + " |")
    before, after = total["clean runtime error, EG501-EG513 only"], total["clean runtime error"]
    share = after / total["mutants"] if total["mutants"] else 0.0
    print(f"\ncheck time per file: median {statistics.median(check_ms):.1f} ms, max {max(check_ms):.1f} ms")
    print(
        f"checker-clean runtime errors: {after} of {total['mutants']} mutants ({share:.1%}; {before} with EG501-EG513 only)"
    )
    met = total["clean crash or hang"] == 0 and total["false alarm"] == 0 and share <= 0.02
    print("targets met" if met else "targets NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
