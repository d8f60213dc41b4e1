"""Program check benchmark on programs that call kernels (issue 49): ``export-guards check``
loads neither torch nor ``executorch.exir`` for the demo's segmentation model, the decoder of
``examples/decoder.py`` and its int8 quantized export, each of which calls kernels besides its
XNNPACK delegates (a layer norm, a GELU, a pixel shuffle, the quantize and dequantize calls).

Run: ``.venv/bin/python benchmarks/check_kernel_calls.py [--rounds 5]``.

Exports the three programs once, in this process, with the guarded pipeline (the segmentation
model at the demo's default size, 400), and makes a folder of 50 programs: those three and the
small programs of ``tests/pte_models.py``, written again under other names until there are 50.
Checks that each of the three has kernel calls and that its check in a fresh interpreter loads
neither torch nor ``executorch.exir``. Then times, each in a fresh interpreter as a user runs it,
interleaved round by round so that machine noise hits all alike: a bare ``python -c pass`` (the
floor), ``python -m export_guards check`` of each program, the same with ``--replay`` (which
loads torch: the check as it was before the operator table), and the folder with ``--jobs 2``.
Reports the median wall time and the peak memory (RSS) of each. Targets: each program at most
1 s, the folder at most 10 s. ``--large`` adds a transformer block of 87M parameters (a program
of some 350 MB): its check in no more memory than with the replay, which loads torch as every
check of a program with kernel calls did before the operator table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM_TARGET_S, FOLDER_TARGET_S, FOLDER_SIZE = 1.0, 10.0, 50

sys.path.insert(0, str(ROOT / "benchmarks"))
from check_without_torch import HEAVY  # noqa: E402  (the command, then the heavy modules it loaded)

# Launches one command and reports its wall time and peak RSS: started from this small process,
# the command's peak is its own (a child forked from the benchmark, which holds torch and the
# exported models, would count the benchmark's pages as its own).
LAUNCHER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
seconds = time.perf_counter() - start
print(json.dumps([seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode, done.stderr.decode(errors="replace")[-500:]]))
"""

EXAMPLES: dict[str, tuple[str, str | None, dict[str, object]]] = {
    "segmentation.pte": ("segmentation.py:model", None, {}),
    "decoder.pte": ("decoder.py:model", None, {}),
    "decoder_int8.pte": ("decoder.py:model", "xnnpack_pt2e_int8_static_per_channel", {}),
}
LARGE: dict[str, tuple[str, str | None, dict[str, object]]] = {
    "transformer_85m.pte": ("transformer.py:model", None, {"width": 2688, "heads": 8})
}
"""One transformer block of 87M parameters (a program of some 350 MB): the memory of a check."""


def export_examples(folder: Path, examples: dict[str, tuple[str, str | None, dict[str, object]]]) -> None:
    """The example programs, exported with the guards, written to ``folder``."""
    import export_guards  # noqa: F401  (first: its known-noise filters, before the libraries load)

    # isort: split
    from export_guards.pipeline import export_target
    from export_guards.settings import Settings

    for name, (target, recipe, arguments) in examples.items():
        config = Settings(recipe=recipe) if recipe else None
        (folder / name).write_bytes(export_target(str(ROOT / "examples" / target), arguments, config=config).to_pte())


def fill_folder(folder: Path, examples: Path) -> None:
    """``FOLDER_SIZE`` programs: the examples and the small programs of ``tests/pte_models.py``,
    round and round under new names."""
    sys.path.insert(0, str(ROOT / "tests"))
    from pte_models import valid_programs

    small = folder.parent / "small"
    small.mkdir(parents=True)
    sources = [examples / name for name in EXAMPLES]  # not the large one
    for number, data in enumerate(valid_programs().values()):
        (small / f"{number}.pte").write_bytes(data)
        sources.append(small / f"{number}.pte")
    folder.mkdir()
    for number in range(FOLDER_SIZE):
        shutil.copyfile(sources[number % len(sources)], folder / f"{number:02d}-{sources[number % len(sources)].name}")


def kernel_calls(path: Path) -> int:
    from export_guards.pte.reader.file import PteFile
    from export_guards.pte.reader.wheel import KernelCall

    plans = PteFile(path.read_bytes()).program.execution_plan  # type: ignore[union-attr]
    return sum(
        isinstance(i.instr_args, KernelCall) for plan in plans for chain in plan.chains for i in chain.instructions
    )


def timed(command: list[str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of ``command`` in a fresh process; exit 0 or 1 (findings)."""
    launched = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *command], cwd=cwd, capture_output=True, text=True, check=True
    )
    seconds, peak, code, error = json.loads(launched.stdout)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {code}: {error}")
    return seconds, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--large",
        action="store_true",
        help="also the 87M-parameter transformer block (exporting it takes minutes and GBs)",
    )
    args = parser.parse_args()
    examples = {**EXAMPLES, **(LARGE if args.large else {})}
    check = [sys.executable, "-m", "export_guards", "check", "--quiet"]
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        examples_folder, folder = work / "examples", work / "folder" / "programs"
        examples_folder.mkdir()
        export_examples(examples_folder, examples)
        fill_folder(folder, examples_folder)
        failed = False
        for name in examples:
            path = examples_folder / name
            loaded = subprocess.run(
                [sys.executable, "-c", HEAVY, "check", str(path)], capture_output=True, text=True, check=False, cwd=work
            )
            heavy = json.loads(loaded.stderr.strip().splitlines()[-1].replace("'", '"'))
            calls = kernel_calls(path)
            print(f"{name}: {path.stat().st_size:,} bytes, {calls} kernel calls; the check loads "
                  f"{', '.join(heavy[:3]) + (' ...' if len(heavy) > 3 else '') if heavy else 'neither torch nor executorch.exir'}")  # fmt: skip
            failed |= bool(heavy) or (calls == 0 and name in EXAMPLES)
        table: dict[str, tuple[list[str], float | None]] = {
            "python -c pass (floor)": ([sys.executable, "-c", "pass"], None)
        }
        for name in examples:
            table[f"check {name}"] = (
                [*check, str(examples_folder / name)],
                PROGRAM_TARGET_S if name in EXAMPLES else None,
            )
            table[f"check --replay {name} (loads torch)"] = ([*check, "--replay", str(examples_folder / name)], None)
        table[f"check --jobs 2 of {FOLDER_SIZE} programs"] = ([*check, "--jobs", "2", str(folder)], FOLDER_TARGET_S)
        samples: dict[str, list[tuple[float, int]]] = {name: [] for name in table}
        for _ in range(args.rounds):
            for name, (command, _target) in table.items():
                samples[name].append(timed(command, work))
    print(
        f"median wall time and peak RSS of {args.rounds} runs each, interleaved (fresh interpreters), on {os.cpu_count()} cores"
    )
    for name, (_command, target) in table.items():
        median = statistics.median(s for s, _ in samples[name])
        memory = statistics.median(m for _, m in samples[name]) / 1024
        verdict = "" if target is None else ("  ok" if median <= target else f"  OVER {target:.0f} s")
        failed |= verdict.startswith("  OVER")
        print(f"  {name:<58} {median * 1000:7.0f} ms {memory:6.0f} MiB{verdict}")
    for name in LARGE if args.large else ():
        peaks = [
            statistics.median(m for _, m in samples[f"check {flag}{name}{tail}"])
            for flag, tail in (("", ""), ("--replay ", " (loads torch)"))
        ]
        print(
            f"  {name}: the check's peak RSS {'within' if peaks[0] <= peaks[1] else 'OVER'} the replay's ({peaks[0] / 1024:.0f} against {peaks[1] / 1024:.0f} MiB)"
        )
        failed |= peaks[0] > peaks[1]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
