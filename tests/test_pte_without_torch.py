"""The program check without torch (issues 38 and 49): ``export-guards check prog.pte`` and
``export_guards.check_pte`` read the program with ExecuTorch's schema modules loaded from the wheel
(``export_guards/pte/reader/wheel.py``) and the operators' schemas from the operator table
(``export_guards/pte/reader/schemas.py``), importing neither torch nor ``executorch.exir`` for
any program, kernel calls or not, unless asked to replay the calls on meta tensors (``replay``,
``--replay``); and the findings are the very ones the check makes with torch loaded and the
replay on (this process), on every program of the corpus and of the fuzz corpus, the replay's
own EG519 findings aside. The pieces re-read from the bytes (the three headers, the dtype
sizes, the flatc path, the schema files) are compared with ExecuTorch's own."""

from __future__ import annotations

import dataclasses
import importlib.resources
import inspect
import itertools
import json
import random
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import pytest

import export_guards.pte.reader.file as pte_file
from conftest import Ran
from export_guards.pte.check import check_pte
from export_guards.pte.reader import headers, wheel
from export_guards.pte.reader.file import PteFile
from export_guards.pte.reader.tensors import DTYPES
from export_guards.report import Finding
from pte_models import Written
from pte_mutations import MUTATIONS, mutate
from pte_structure import STRUCTURE_MUTATORS

TESTS = Path(__file__).parent
REGRESSIONS = TESTS / "pte_regressions"
DELEGATED = ("two methods, xnnpack", "conv net, xnnpack", "dynamic batch, xnnpack", "portable ops between delegates")
"""Valid programs with no kernel call (XNNPACK runs all their compute)."""
DELEGATED_MUTANTS = 100  # damaged copies of each, in the corpus too
EXAMPLES = TESTS.parent / "examples"
KERNEL_CALL_EXAMPLES = {"segmentation": ("segmentation.py:model", {"size": 72}), "decoder": ("decoder.py:model", {})}
"""The demo's segmentation model (on the demo test's small input) and the decoder example:
XNNPACK programs that call kernels (a layer norm, a GELU, a pixel shuffle)."""
REGRESSION_PARSE_SECONDS = 2.0  # as test_pte_fuzz.test_regression: hang-*.pte would take hours


def facts(report: Iterable[Finding]) -> list[dict[str, object]]:
    """What the child and this process compare: every field of each finding that equality compares."""
    import dataclasses

    return [{f.name: getattr(finding, f.name) for f in dataclasses.fields(finding) if f.compare} for finding in report]


def heavy() -> list[str]:
    """What the check must not load (without the replay)."""
    import sys

    return sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.") or m == "executorch.exir")


FACTS = "\n".join(inspect.getsource(function) for function in (facts, heavy))
"""The two, for the children to define alike (``from __future__ import annotations``: their
annotations are never evaluated there)."""


def as_json(value: object) -> object:
    return json.loads(json.dumps(value))


def python(script: str, *args: str, cwd: Path = TESTS) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter (nothing imported yet), from ``cwd``."""
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def kernel_free(data: bytes) -> bool:
    """Whether the program has no kernel call (or cannot be parsed): nothing that needs torch."""
    program = PteFile(data).program
    return program is None or not any(
        isinstance(i.instr_args, wheel.KernelCall)
        for plan in program.execution_plan
        for c in plan.chains
        for i in c.instructions
    )


def delegate_segments(data: bytes) -> list[tuple[int, int]]:
    pte = PteFile(data)
    return [(r.start, r.size) for r in pte.segments if "delegate" in pte.contents.get(r.what, "")]


def damaged_delegated_program(valid: Mapping[str, bytes]) -> bytes:
    """A fully delegated program with a damaged XNNPACK payload: findings, and no kernel call."""
    base = valid["two methods, xnnpack"]
    segments = delegate_segments(base)
    for number in range(200):
        data = mutate(base, "delegate_payload", random.Random(f"without torch {number}"), segments)
        if kernel_free(data) and PteFile(data).program is not None and check_pte(data).errors:
            return data
    raise AssertionError("no damage of the payload was found")


CLI_CHILD = (
    "from __future__ import annotations\n"
    + FACTS
    + """
import json, runpy, sys
sys.argv = ["export_guards", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("export_guards", run_name="__main__", alter_sys=True)
except SystemExit as exit:
    code = exit.code
print("HEAVY " + json.dumps(heavy()), file=sys.stderr)
sys.exit(code)
"""
)

API_CHILD = (
    "from __future__ import annotations\n"
    + FACTS
    + """
import json, sys
import export_guards
report = export_guards.check_pte(sys.argv[1], replay=sys.argv[2:] == ["replay"])
print(json.dumps({"findings": facts(report), "heavy": heavy()}))
"""
)


def heavy_of(done: subprocess.CompletedProcess[str]) -> list[str]:
    line = next(line for line in done.stderr.splitlines() if line.startswith("HEAVY "))
    return json.loads(line.removeprefix("HEAVY "))


@pytest.mark.subprocess
def test_a_delegated_program_is_checked_without_torch(
    valid_program_bytes: Mapping[str, bytes], cli: Callable[..., Ran], tmp_path: Path
) -> None:
    """The command and the Python API, in a fresh interpreter, on a fully delegated program (as
    written, and with a damaged XNNPACK payload): neither torch nor executorch.exir loads, and
    the findings are those of this process, where both are loaded."""
    clean, damaged = tmp_path / "clean.pte", tmp_path / "damaged.pte"
    clean.write_bytes(valid_program_bytes["conv net, xnnpack"])
    damaged.write_bytes(damaged_delegated_program(valid_program_bytes))
    for path in (clean, damaged):
        assert kernel_free(path.read_bytes())
        done = python(CLI_CHILD, "check", str(path), "--format", "json")
        assert heavy_of(done) == [], f"{path.name}: the command loaded {heavy_of(done)[:5]}"
        here = cli("check", path, "--format", "json")
        assert (done.returncode, json.loads(done.stdout)) == (here.returncode, json.loads(here.stdout)), done.stderr[
            -2000:
        ]
        api = python(API_CHILD, str(path))
        assert api.returncode == 0, api.stderr[-2000:]
        child = json.loads(api.stdout)
        assert child["heavy"] == [], f"{path.name}: check_pte loaded {child['heavy'][:5]}"
        assert child["findings"] == as_json(facts(check_pte(path))) == as_json(facts(check_pte(path, replay=True)))
    assert json.loads(here.stdout)["findings"], "the damaged program has findings"


def without_replay(findings: list[dict[str, object]]) -> tuple[list[dict[str, object]], set[str]]:
    """The findings but EG519's, and the calls EG519 names (a call the replay finds at fault may
    show, without the replay, with another of its problems)."""
    calls = {str(f["message"]).split(" with ", 1)[0] for f in findings if f["code"] == "EG519"}
    return [f for f in findings if f["code"] != "EG519"], calls


def same_as_replayed(child: list[dict[str, object]], replayed: list[dict[str, object]]) -> bool:
    """``child``'s findings (without the replay) are ``replayed``'s but for EG519 findings that
    only the replay makes: every other finding alike, every EG519 call among the replay's."""
    (others, calls), (expected, replayed_calls) = without_replay(child), without_replay(replayed)
    return others == expected and calls <= replayed_calls


def check_without_and_with_replay(path: Path, cli: Callable[..., Ran]) -> list[dict[str, object]]:
    """``path`` checked in fresh interpreters by the command and the API: without torch, with
    this process's findings; with the replay, torch loads and the findings are this process's
    with the replay (today's). Returns the findings."""
    done = python(CLI_CHILD, "check", str(path), "--format", "json")
    assert heavy_of(done) == [], f"{path.name}: the command loaded {heavy_of(done)[:5]}"
    here = cli("check", path, "--format", "json")
    assert (done.returncode, json.loads(done.stdout)) == (here.returncode, json.loads(here.stdout)), done.stderr[-2000:]
    api = python(API_CHILD, str(path))
    assert api.returncode == 0, api.stderr[-2000:]
    child = json.loads(api.stdout)
    assert child["heavy"] == [], f"{path.name}: check_pte loaded {child['heavy'][:5]}"
    replayed = as_json(facts(check_pte(path, replay=True)))
    assert child["findings"] == as_json(facts(check_pte(path))) and same_as_replayed(child["findings"], replayed)
    api = python(API_CHILD, str(path), "replay")
    assert api.returncode == 0, api.stderr[-2000:]
    child = json.loads(api.stdout)
    assert child["findings"] == replayed
    assert "torch" in child["heavy"] and "executorch.exir" in child["heavy"]
    return child["findings"]


@pytest.mark.subprocess
def test_a_program_with_kernel_calls_is_checked_without_torch(
    written_programs: Mapping[str, Written], cli: Callable[..., Ran]
) -> None:
    """A portable program: the schemas its kernel calls need come from the operator table, so
    neither torch nor executorch.exir loads, and the findings are this process's; the replay
    (``replay=True``) loads torch, as it says, and finds what it found before."""
    path = written_programs["portable"].pte
    assert not kernel_free(path.read_bytes())
    assert {f["code"] for f in check_without_and_with_replay(path, cli)} == {"EG520"}


def _operands_that_do_not_broadcast_and_an_operator_no_runtime_has(program: wheel.Program) -> None:
    """The last add's second operand one element short, so that the two do not broadcast (the
    replay on meta tensors says so in torch's words, the check without torch in its own), and the
    matrix product renamed to an operator that no runtime has a kernel for."""
    plan = program.execution_plan[0]
    call = [c for c in (i.instr_args for i in plan.chains[0].instructions) if isinstance(c, wheel.KernelCall)][-1]
    assert plan.operators[call.op_index].name == "aten::add"
    plan.values[call.args[1]].val.sizes[-1] -= 1
    next(o for o in plan.operators if o.name == "aten::addmm").name = "aten::add_nowhere"


@pytest.mark.subprocess
def test_the_runtime_run_leaves_torch_and_the_runtime_to_its_child(
    written_programs: Mapping[str, Written], tmp_path: Path
) -> None:
    """``check --runtime`` (issue 47): the command's own process loads neither torch nor the
    runtime. Its child, which runs the program, answers what needs them: the runtime's kernels
    (EG521 names the operator it lacks) and EG519's replay on meta tensors (operands that do not
    broadcast, in torch's words, as this process's replay reports them).
    A program that kills the runtime is a finding, and the command survives it."""
    from pte_structure import edit_pte

    path = tmp_path / "mutant.pte"
    path.write_bytes(
        edit_pte(
            written_programs["portable"].pte.read_bytes(),
            _operands_that_do_not_broadcast_and_an_operator_no_runtime_has,
        )
    )
    done = python(CLI_CHILD, "check", str(path), "--runtime", "--format", "json", "--isolated")
    assert done.returncode == 1 and heavy_of(done) == [], done.stderr[-2000:]
    found = {(f["code"], f["message"]) for f in json.loads(done.stdout)["findings"]}
    replayed = {
        (f.code, f.message)
        for f in check_pte(path, replay=True).with_code("EG519")
        if "with tensors it refuses" in f.message
    }
    assert replayed and replayed <= found
    assert not replayed & {
        (f.code, f.message) for f in check_pte(path).with_code("EG519")
    }  # torch's words: the child's replay
    assert any(
        code == "EG521" and "aten::add_nowhere.out, for which executorch.runtime" in message for code, message in found
    )
    crash = REGRESSIONS / "runtime-sigsegv-portable-287-flip.pte"
    done = python(CLI_CHILD, "check", str(crash), "--runtime", "--format", "json", "--isolated")
    assert done.returncode == 1 and heavy_of(done) == [], done.stderr[-2000:]
    (died,) = [f["message"] for f in json.loads(done.stdout)["findings"] if f["code"] == "EG511"]
    assert "the runtime died with SIGSEGV during 'run forward'" in died


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(KERNEL_CALL_EXAMPLES))
def test_the_examples_programs_are_checked_without_torch(example: str, cli: Callable[..., Ran], tmp_path: Path) -> None:
    """The demo's segmentation model and examples/decoder.py, exported with the guards: programs
    that call kernels besides their XNNPACK delegates, checked without torch."""
    from export_guards.pipeline import export_target

    target, arguments = KERNEL_CALL_EXAMPLES[example]
    path = tmp_path / f"{example}.pte"
    path.write_bytes(export_target(str(EXAMPLES / target), arguments).to_pte())
    assert not kernel_free(path.read_bytes())
    check_without_and_with_replay(path, cli)


@dataclasses.dataclass(frozen=True)
class Job:
    name: str
    pte: str
    data_files: tuple[str, ...] = ()
    parse_seconds: float | None = None
    kernel_free: bool = True


CORPUS_CHILD = (
    "from __future__ import annotations\n"
    + FACTS
    + """
import json, sys
assert not heavy(), heavy()
import export_guards
import export_guards.pte.reader.file as pte_file
default = pte_file.PARSE_SECONDS
for job in json.loads(open(sys.argv[1]).read()):
    pte_file.PARSE_SECONDS = job["parse_seconds"] or default
    report = export_guards.check_pte(job["pte"], data_files=job["data_files"])
    print(json.dumps({"findings": facts(report), "torch": bool(heavy())}), flush=True)
"""
)


def corpus(written: Mapping[str, Written], valid: Mapping[str, bytes], folder: Path, fuzz_cases: int) -> Iterator[Job]:
    """Every program of the corpus (written, valid, regressions), the fuzz corpus of
    test_pte_fuzz (its cases and its structure-aware mutants, of the same seeds and draws),
    and damaged copies of the fully delegated programs."""

    numbers = itertools.count()

    def written_as(name: str, data: bytes, data_files: tuple[Path, ...] = ()) -> Job:
        path = folder / f"{next(numbers)}.pte"
        path.write_bytes(data)
        return Job(name, str(path), tuple(map(str, data_files)), kernel_free=kernel_free(data))

    for name, program in written.items():
        yield Job(
            name,
            str(program.pte),
            tuple(map(str, program.data_files)),
            kernel_free=kernel_free(program.pte.read_bytes()),
        )
    for name, data in valid.items():
        yield written_as(name, data)
    for path in sorted(REGRESSIONS.glob("*.pte")):
        pte_file.PARSE_SECONDS, default = REGRESSION_PARSE_SECONDS, pte_file.PARSE_SECONDS
        try:
            free = kernel_free(path.read_bytes())
        finally:
            pte_file.PARSE_SECONDS = default
        yield Job(path.name, str(path), parse_seconds=REGRESSION_PARSE_SECONDS, kernel_free=free)
    per_seed = -(-fuzz_cases // len(written))
    for name, program in written.items():
        base = program.pte.read_bytes()
        segments = delegate_segments(base)
        for number in range(per_seed):
            kind = MUTATIONS[number % len(MUTATIONS)]
            yield written_as(
                f"{name} #{number} ({kind})",
                mutate(base, kind, random.Random(f"{name}-{number}"), segments),
                program.data_files,
            )
    for kind, mutator in sorted(STRUCTURE_MUTATORS.items()):
        for name, program in written.items():
            base = program.pte.read_bytes()
            for number in range(12):
                data = mutator(base, random.Random(f"{kind}-{name}-{number}"))
                if data is not None and data != base:
                    yield written_as(f"{kind} of {name} #{number}", data, program.data_files)
    for name in DELEGATED:
        base, segments = valid[name], delegate_segments(valid[name])
        for number in range(DELEGATED_MUTANTS):
            kind = MUTATIONS[number % len(MUTATIONS)]
            yield written_as(
                f"{name} #{number} ({kind})", mutate(base, kind, random.Random(f"delegated-{name}-{number}"), segments)
            )


@pytest.mark.subprocess
def test_the_findings_without_torch_are_those_with_torch(
    written_programs: Mapping[str, Written],
    valid_program_bytes: Mapping[str, bytes],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """One fresh interpreter checks the whole corpus without torch (nothing loads it, kernel
    calls or not) and gives, program by program, the findings of this process, where torch is
    loaded and the kernel calls are replayed on meta tensors as before the operator table: the
    same, but for EG519 findings that only the replay makes."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    cases = int(request.config.getoption("--pte-fuzz-cases"))
    jobs = list(corpus(written_programs, valid_program_bytes, folder, cases))
    listed = tmp_path / "jobs.json"
    listed.write_text(json.dumps([dataclasses.asdict(job) for job in jobs]))
    done = python(CORPUS_CHILD, str(listed))
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == len(jobs)
    different = []
    for job, result in zip(jobs, results, strict=True):
        pte_file.PARSE_SECONDS, default = job.parse_seconds or pte_file.PARSE_SECONDS, pte_file.PARSE_SECONDS
        try:
            here = as_json(facts(check_pte(job.pte, data_files=job.data_files, replay=True)))
        finally:
            pte_file.PARSE_SECONDS = default
        if not same_as_replayed(result["findings"], here):
            different.append(f"{job.name}: without torch {result['findings'][:3]}, with torch {here[:3]}")
    assert not different, f"{len(different)} of {len(jobs)} programs differ:\n" + "\n".join(different[:5])
    with_torch = [job.name for job, result in zip(jobs, results) if result["torch"]]
    assert not with_torch, f"checking {with_torch[0]} loaded torch"
    calls = sum(not job.kernel_free for job in jobs)
    assert calls >= len(jobs) // 4, f"only {calls} of {len(jobs)} programs call kernels"


def corpus_bytes(written: Mapping[str, Written], valid: Mapping[str, bytes]) -> dict[str, bytes]:
    found = {name: program.pte.read_bytes() for name, program in written.items()}
    found.update(valid)
    found.update((path.name, path.read_bytes()) for path in sorted(REGRESSIONS.glob("*.pte")))
    return found


def damaged_heads(data: bytes, name: str, count: int = 40) -> Iterator[bytes]:
    """``data`` and copies with bits of their first 48 bytes flipped, and cut short."""
    yield data
    for number in range(count):
        rng = random.Random(f"{name}-head-{number}")
        head = bytearray(data[:48])
        for _ in range(rng.randint(1, 6)):
            head[rng.randrange(len(head))] ^= 1 << rng.randrange(8)
        yield bytes(head) + data[48:]
    yield data[: len(data) // 2]
    yield data[:20]


def same_header(ours: object, theirs: object, cls: type) -> bool:
    return (
        all(getattr(ours, f.name) == getattr(theirs, f.name) for f in dataclasses.fields(cls))
        and ours.is_valid() == theirs.is_valid()
    )  # type: ignore[attr-defined]


def parsed_alike(ours: type, theirs: type, data: bytes) -> bool:
    try:
        expected = theirs.from_bytes(data)  # type: ignore[attr-defined]
    except ValueError:
        with pytest.raises(ValueError):  # noqa: PT011 - the reference reader's error, whatever its message
            ours.from_bytes(data)  # type: ignore[attr-defined]
        return True
    return same_header(ours.from_bytes(data), expected, theirs)  # type: ignore[attr-defined]


def test_the_headers_are_executorchs(
    written_programs: Mapping[str, Written], valid_program_bytes: Mapping[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The extended header, the .ptd header and the XNNPACK header as ours read them and as
    ExecuTorch's classes do, on every program of the corpus and on damaged heads of them."""
    monkeypatch.setattr(pte_file, "PARSE_SECONDS", REGRESSION_PARSE_SECONDS)
    from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader
    from executorch.exir._serialize._program import _ExtendedHeader
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorHeader

    for name in ("EXPECTED_MAGIC", "MINIMUM_LENGTH", "EXPECTED_LENGTH"):
        assert getattr(headers.ExtendedHeader, name) == getattr(_ExtendedHeader, name)
    for name in ("EXPECTED_MAGIC", "EXPECTED_LENGTH"):
        assert getattr(headers.FlatTensorHeader, name) == getattr(FlatTensorHeader, name)
    layout = [n for n in vars(XNNHeader) if n.isupper()]
    assert layout and all(getattr(headers.XNNHeader, n) == getattr(XNNHeader, n) for n in layout)
    assert {f.name for f in dataclasses.fields(headers.ExtendedHeader)} == {
        f.name for f in dataclasses.fields(_ExtendedHeader)
    }
    assert {f.name for f in dataclasses.fields(headers.FlatTensorHeader)} == {
        f.name for f in dataclasses.fields(FlatTensorHeader)
    }

    payloads = 0
    for name, data in corpus_bytes(written_programs, valid_program_bytes).items():
        for damaged in damaged_heads(data, name):
            assert parsed_alike(
                headers.ExtendedHeader, _ExtendedHeader, damaged[8 : 8 + _ExtendedHeader.EXPECTED_LENGTH]
            ), name
        for delegate in PteFile(data).delegates:
            payload = delegate.data or b""
            if payload[4:8] != XNNHeader.EXPECTED_MAGIC:
                continue
            theirs = XNNHeader.from_bytes(payload[: XNNHeader.EXPECTED_LENGTH])
            read = {f: int.from_bytes(payload[getattr(headers.XNNHeader, f"{f.upper()}_OFFSET")], "little") for f in
                    ("flatbuffer_offset", "flatbuffer_size", "constant_data_offset", "constant_data_size")}  # fmt: skip
            assert read == {f: getattr(theirs, f) for f in read}, name
            payloads += 1
    assert payloads >= len(DELEGATED)
    for ptd in written_programs["external"].data_files:
        for damaged in damaged_heads(ptd.read_bytes(), ptd.name):
            assert parsed_alike(
                headers.FlatTensorHeader, FlatTensorHeader, damaged[8 : 8 + FlatTensorHeader.EXPECTED_LENGTH]
            ), ptd.name


def test_the_named_data_read_ahead_of_the_reader_is_where_the_reader_finds_it(
    written_programs: Mapping[str, Written], valid_program_bytes: Mapping[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's head start on EG523 (``reader/named_regions.py``, read before ExecuTorch's
    reader is imported): each program's and data file's named data where ExecuTorch's reader
    places it; on damaged ones (the regressions, bits flipped in the flatbuffer) no exception,
    and each key the reader still finds in the same place."""
    from export_guards.pte.reader.external import PtdFile
    from export_guards.pte.reader.named_regions import named_data_regions

    monkeypatch.setattr(pte_file, "PARSE_SECONDS", REGRESSION_PARSE_SECONDS)

    def read(name: str, data: bytes) -> dict[str, tuple[int, int]]:
        found = PtdFile(data, name).named_data if name.endswith(".ptd") else PteFile(data).named_data
        return {key: (region.start, region.end) for key, region in found.items()}

    files = corpus_bytes(written_programs, valid_program_bytes)
    files.update((ptd.name, ptd.read_bytes()) for written in written_programs.values() for ptd in written.data_files)
    assert sum(bool(read(name, data)) for name, data in files.items()) >= 3  # programs and .ptd files with named data
    for name, data in files.items():
        if not (REGRESSIONS / name).exists():  # as written: the same entries
            assert named_data_regions(data) == read(name, data), name
        for number in range(10):
            damaged = mutate(data, "flip_program", random.Random(f"named data {name} {number}"), [])
            ahead = named_data_regions(damaged)
            assert all(ahead.get(key) == region for key, region in read(name, damaged).items()), name


def test_the_dtypes_are_executorchs() -> None:
    """Each scalar type's torch dtype name and size, as ``executorch.exir.tensor`` maps it."""
    from executorch.exir.tensor import get_scalar_type

    for scalar_type in wheel.ScalarType:
        try:
            dtype = get_scalar_type(scalar_type)
        except KeyError:
            assert scalar_type not in DTYPES
        else:
            assert DTYPES[scalar_type] == (str(dtype).removeprefix("torch."), dtype.itemsize), scalar_type


def test_the_wheel_files_are_executorchs() -> None:
    """The flatc and the schema files, found as ExecuTorch and importlib.resources find them."""
    from executorch.exir._serialize._flatbuffer import _get_flatc_path

    assert wheel.flatc_path() == _get_flatc_path()
    for package, name in [
        ("executorch.backends.xnnpack.serialization", "schema.fbs"),
        ("executorch.extension.flat_tensor.serialize", "flat_tensor.fbs"),
        ("executorch.extension.flat_tensor.serialize", "scalar_type.fbs"),
    ]:
        assert wheel.read_resource(package, name) == importlib.resources.files(package).joinpath(name).read_bytes()


def test_the_schema_classes_are_executorchs() -> None:
    """In this process (executorch.exir imported, before or after the loader ran): one class each."""
    import executorch.exir.schema
    from executorch.exir._serialize.generated.executorch_flatbuffer.Program import ProgramT

    assert wheel.Tensor is executorch.exir.schema.Tensor and wheel.ProgramT is ProgramT
    assert wheel.ScalarType is executorch.exir.schema.ScalarType


LOADER_CHILD = (
    "from __future__ import annotations\n"
    + FACTS
    + """
import json, sys
from export_guards.pte.reader import wheel
light, before = wheel.loaded_light(), heavy()
import executorch.exir
import executorch.exir.backend
from executorch.exir._serialize._flatbuffer_program import _flatbuffer_to_program
from executorch.exir.tensor import get_scalar_type
data = open(sys.argv[1], "rb").read()
print(json.dumps({
    "light": light,
    "before": before,
    "same": wheel.Tensor is executorch.exir.schema.Tensor and wheel.ProgramT is executorch.exir._serialize._flatbuffer_program.ProgramT,
    "attributes": [executorch.exir.scalar_type is sys.modules["executorch.exir.scalar_type"],
                   executorch.exir._serialize.generated is sys.modules["executorch.exir._serialize.generated"],
                   executorch.exir.backend.compile_spec_schema is sys.modules["executorch.exir.backend.compile_spec_schema"]],
    "dtype": str(get_scalar_type(wheel.ScalarType.FLOAT)),
    "parsed": isinstance(_flatbuffer_to_program(data), wheel.Program),
}))
"""
)


@pytest.mark.subprocess
def test_the_light_modules_become_executorchs_own(written_programs: Mapping[str, Written], tmp_path: Path) -> None:
    """In a fresh interpreter the loader loads ExecuTorch's schema modules without their packages;
    importing executorch.exir after it gives the same classes, and each package its modules."""
    table = tmp_path / "program.fb"
    data = written_programs["xnnpack"].pte.read_bytes()
    table.write_bytes(data[: PteFile(data).program_size])
    done = python(LOADER_CHILD, str(table))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["light"] == list(wheel.LIGHT_MODULES) and result["before"] == []
    assert result["same"] and all(result["attributes"]) and result["parsed"]
    assert result["dtype"] == "torch.float32"
