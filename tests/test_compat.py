"""The room for what differs between versions (export_guards/compat.py): what it detects, and
the one line on a pair the suite has not run on."""

from __future__ import annotations

import logging
from importlib import metadata

import pytest

from export_guards import compat


def test_a_tested_pair_says_nothing_and_another_pair_says_both_versions_in_one_line() -> None:
    for executorch, torch in sorted(compat.TESTED):
        assert compat.untested({"executorch": f"{executorch}.1", "torch": f"{torch}.0+cpu"}) is None

    line = compat.untested({"executorch": "1.6.0", "torch": "2.13.0+cpu"})
    assert line is not None and "\n" not in line
    assert "executorch 1.6.0" in line and "torch 2.13.0+cpu" in line and "docs/compatibility.md" in line
    assert compat.untested({"executorch": "1.5.1", "torch": "2.99.0"}) is not None
    assert compat.untested({"executorch": None, "torch": "2.13.0"}) is None, (
        "a missing package is its import's to report"
    )


def test_the_installed_pair_is_tested_here_and_an_untested_one_is_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    installed = {name: metadata.version(name) for name in ("executorch", "torch")}
    assert compat.untested(installed) is None, (
        f"the suite runs on {installed}: add the pair to compat.TESTED and docs/compatibility.md"
    )

    monkeypatch.setattr(compat, "TESTED", frozenset())
    monkeypatch.setattr(compat, "_said", False)
    with caplog.at_level(logging.WARNING, logger="export_guards"):
        compat.say_once_if_untested()
        compat.say_once_if_untested()
    lines = [r.getMessage() for r in caplog.records if r.name == "export_guards"]
    assert len(lines) == 1 and f"executorch {installed['executorch']}" in lines[0]


def test_a_torch_older_than_the_runtimes_is_named_in_one_line() -> None:
    """The reported pair (executorch 1.5.1 with torch 2.11): every run fails in C++; the line
    says which torch the runtime needs and which is installed."""
    line = compat.runtime_mismatch(versions={"executorch": "1.5.1", "torch": "2.11.0+cu130"})
    assert line is not None and "\n" not in line
    assert "needs torch 2.13 or newer" in line and "torch 2.11.0+cu130 is installed" in line
    for torch in ("2.13.0+cpu", "2.14.1+cu130", "2.15.0"):  # the pairs docs/compatibility.md ran the runtime on
        assert compat.runtime_mismatch(versions={"executorch": "1.5.1", "torch": torch}) is None
    # A pair the table does not know is told by the runtime's own failure.
    unknown = {"executorch": "1.6.0", "torch": "2.16.0"}
    assert compat.runtime_mismatch(versions=unknown) is None
    told = compat.runtime_mismatch(
        "RuntimeError: tensor does not have a device\nException raised from device_default", unknown
    )
    assert told is not None and "torch 2.16.0 is installed" in told
    installed = {name: metadata.version(name) for name in ("executorch", "torch")}
    assert compat.runtime_mismatch(versions=installed) is None, f"the suite runs programs on {installed}"


def runtime_built_for_a_newer_torch(monkeypatch: pytest.MonkeyPatch) -> str:
    """This executorch's runtime said to need a torch newer than the installed one."""
    monkeypatch.setitem(compat.RUNTIME_BUILT_FOR, compat._minor(metadata.version("executorch")), "9.0")
    line = compat.runtime_mismatch()
    assert line is not None
    return line


def test_check_runtime_and_run_pte_say_the_mismatch_in_one_line_and_the_rest_works(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    import torch
    from executorch.exir import to_edge

    from export_guards.cli import main
    from export_guards.pte.check import check_pte
    from export_guards.verify import run_pte

    program = tmp_path / "linear.pte"  # type: ignore[operator]
    program.write_bytes(
        to_edge(torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),))).to_executorch().buffer
    )
    line = runtime_built_for_a_newer_torch(monkeypatch)

    capfd.readouterr()
    assert main(["check", str(program), "--runtime"]) == 2
    _, err = capfd.readouterr()
    assert [text for text in err.splitlines() if text.strip()] == [
        f"export-guards: error: --runtime cannot run here: {line}"
    ]
    assert main(["check", str(program)]) == 0, "the program checks need no runtime"
    with pytest.raises(compat.RuntimeMismatch, match=r"needs torch 9.0 or newer"):
        check_pte(program, runtime=True)
    with pytest.raises(compat.RuntimeMismatch, match=r"needs torch 9.0 or newer"):
        run_pte(program.read_bytes(), (torch.randn(2, 4),))
