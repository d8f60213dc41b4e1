"""The checker never crashes, hangs or raises on a damaged ``.pte``: mutations of real programs
(byte flips, truncation, header fields, program fields through ExecuTorch's serializer,
delegate payloads), at least 2,000 cases; ``--pte-fuzz-cases N`` runs more. Structure-aware
mutants (``tests/pte_structure.py``: one semantic field changed to a valid-looking value) are
checked the same way; ``tests/test_pte_runtime_agreement.py`` runs them in the runtime too."""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from export_guards.pte.check import check_pte, diff_pte
from export_guards.pte.reader.file import PteFile
from export_guards.report import Report
from pte_models import Written
from pte_mutations import MUTATIONS, mutate
from pte_structure import STRUCTURE_MUTATORS

REGRESSIONS = Path(__file__).parent / "pte_regressions"
CASE_TIMEOUT_S = 30  # a check takes milliseconds: this long is a hang


@pytest.fixture(scope="session")
def seeds(written_programs: dict[str, Written]) -> dict[str, Written]:
    return written_programs


class Hang(BaseException):
    """A case ran past its deadline: a BaseException, so that no handler in the checker hides it."""


@contextmanager
def deadline(seconds: int, case: str) -> Iterator[None]:
    def hang(signum: int, frame: object) -> None:
        raise Hang(f"checking {case} took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def assert_checked(data: bytes, case: str, data_files: tuple[Path, ...] = ()) -> Report:
    """The check returns a report; no rule failed on the input (each would say so)."""
    with deadline(CASE_TIMEOUT_S, case):
        report = check_pte(data, data_files=data_files)
    broken = [f for f in report if f.code == "EG001"]  # what a rule that raised reports
    assert not broken, f"{case}: a rule failed on the input: {broken[0]}"
    return report


def test_fuzz(seeds: dict[str, Written], request: pytest.FixtureRequest, tmp_path: Path) -> None:
    cases = int(request.config.getoption("--pte-fuzz-cases"))
    per_seed = -(-cases // len(seeds))
    detected = 0
    for name, written in seeds.items():
        base = written.pte.read_bytes()
        pte = PteFile(base)
        delegates = [(r.start, r.size) for r in pte.segments if "delegate" in pte.contents.get(r.what, "")]
        for number in range(per_seed):
            kind = MUTATIONS[number % len(MUTATIONS)]
            case = f"{name} #{number} ({kind})"
            data = mutate(base, kind, random.Random(f"{name}-{number}"), delegates)
            try:
                report = assert_checked(data, case, written.data_files)
            except BaseException:
                kept = tmp_path / f"{name}-{number}-{kind}.pte"
                kept.write_bytes(data)  # to add to tests/pte_regressions/
                raise
            detected += data != base and bool(report.errors)
    # Most damage is found: a checker that reports nothing would pass the loop above.
    assert detected > 0.6 * per_seed * len(seeds), f"only {detected} of {per_seed * len(seeds)} damaged files reported"


def test_diff_fuzz(seeds: dict[str, Written]) -> None:
    """Issue 63: ``diff`` as ``check``: a program truncated anywhere or with a byte flipped, as
    either side of the update, gives a report in which no rule failed, or the one sentence the
    command answers with (exit 2): one line, no placeholder. Never "all reused" for a cut file."""
    answered = 0
    for name, written in seeds.items():
        base = written.pte.read_bytes()
        rng = random.Random(f"diff-{name}")
        cuts = [base[:length] for length in sorted({0, 5, 8, 40, *rng.sample(range(41, len(base)), 12), len(base) - 1})]
        flips = []
        for _ in range(24):
            mutant = bytearray(base)
            mutant[rng.randrange(len(mutant))] ^= 1 << rng.randrange(8)
            flips.append(bytes(mutant))
        for number, data in enumerate(cuts + flips):
            for pair, case in (
                ((base, data), f"{name} #{number} as the new build"),
                ((data, base), f"{name} #{number} as the shipped program"),
            ):
                try:
                    with deadline(CASE_TIMEOUT_S, case):
                        report = diff_pte(*pair)
                except ValueError as error:
                    said = str(error)
                    assert "\n" not in said and "{" not in said and said, f"{case}: {said!r}"
                    answered += 1
                    continue
                assert not [f for f in report if f.code == "EG001"], f"{case}: a rule failed on the input"
                assert number >= len(cuts) or (data == base[: len(data)] and len(data) == len(base)), (
                    f"{case}: a cut file was compared"
                )
    assert answered >= len(seeds) * 2 * 10, f"only {answered} damaged files refused"  # every cut is, as either side


@pytest.mark.parametrize("kind", sorted(STRUCTURE_MUTATORS))
def test_structure_aware_fuzz(kind: str, seeds: dict[str, Written], tmp_path: Path) -> None:
    mutator, made, detected = STRUCTURE_MUTATORS[kind], 0, 0
    for name, written in seeds.items():
        base = written.pte.read_bytes()
        for number in range(12):
            data = mutator(base, random.Random(f"{kind}-{name}-{number}"))
            if data is None or data == base:
                continue
            case = f"{kind} of {name} #{number}"
            try:
                report = assert_checked(data, case, written.data_files)
            except BaseException:
                (tmp_path / f"{name}-{number}-structure.pte").write_bytes(data)
                raise
            made += 1
            detected += bool(report.errors)
    assert made, f"{kind} made no mutant of any seed"
    assert detected, f"none of {made} {kind} mutants was reported"


@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("*.pte")), ids=lambda p: p.name)
def test_regression(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs that once made a rule fail, hung the parse or crashed the runtime: each is
    reported, by the rules, as an error."""
    monkeypatch.setattr("export_guards.pte.reader.file.PARSE_SECONDS", 2.0)  # hang-*.pte would take hours
    assert assert_checked(path.read_bytes(), path.name).errors


@pytest.mark.subprocess
@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("runtime-*.pte")), ids=lambda p: p.name)
def test_regression_that_crashed_the_runtime(path: Path, seeds: dict[str, Written]) -> None:
    """Damage the fuzzer found that once passed the check and then killed executorch.runtime:
    the check now reports it, and the runtime smoke run reports the death by its signal."""
    expected = "SIG" + path.name.split("-")[1].removeprefix("sig").upper()  # runtime-sigsegv-... -> SIGSEGV
    data_files = seeds["external"].data_files if "external" in path.name else ()
    report = check_pte(path, data_files=data_files, runtime=True)
    assert report.errors and {f.code for f in report.errors} - {"EG511"}
    [died] = report.with_code("EG511")
    assert f"the runtime died with {expected} during 'run forward'" in died.message
