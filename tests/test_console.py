"""What the command shows a person: a timed line per step, a live one on a terminal, colour
where a person reads it (``NO_COLOR`` / ``FORCE_COLOR`` as ruff), and nothing of the
libraries' own noise; in this process where the process does not matter, else on a
pseudo-terminal."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from conftest import Ran
from export_guards import progress
from export_guards.cli.console import LONG_PART_S, LONG_RUN_S, ProgressLines, colour_report, colours

TESTS = Path(__file__).parent
MODELS = TESTS / "cli_models.py"
ESC = "\x1b["


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def timed_lines(
    stream: io.StringIO, clock: Clock, *, quiet: bool = False
) -> Callable[..., AbstractContextManager[None]]:
    """A run's timed progress lines, on ``stream``, timed by ``clock``."""
    return ProgressLines(quiet=quiet, clock=clock, stream=stream).timed


def test_a_step_gets_its_timed_line_once_the_run_is_long() -> None:
    log, clock = io.StringIO(), Clock()
    timed = timed_lines(log, clock)
    with timed("building the model"):
        clock.now += 0.5  # a short run so far: no line
    with timed("torch.export"):
        clock.now += 3.14
    with timed("writing the program (to_executorch)"):
        clock.now += 0.01
    assert (
        log.getvalue()
        == "export-guards: torch.export took 3.1 s\nexport-guards: writing the program (to_executorch) took 0.0 s\n"
    )

    short, quick = io.StringIO(), Clock()
    with timed_lines(short, quick)("checking a.pte"):
        quick.now += LONG_RUN_S / 2
    with timed_lines(short, quick)("writing", always=True):  # always: however short the run
        pass
    assert short.getvalue() == "export-guards: writing took 0.0 s\n"


def test_a_terminal_shows_the_step_under_way_and_a_log_gets_no_carriage_return() -> None:
    screen, clock = Terminal(), Clock()
    timed = timed_lines(screen, clock)
    with timed("torch.export"):
        assert screen.getvalue() == "export-guards: torch.export..."
        clock.now += 2.5
    assert screen.getvalue() == "export-guards: torch.export...\r\x1b[Kexport-guards: torch.export took 2.5 s\n"
    with pytest.raises(RuntimeError), timed("linting and lowering (xnnpack)"):
        raise RuntimeError("lowering failed")
    assert screen.getvalue().endswith(
        "took 2.5 s\nexport-guards: linting and lowering (xnnpack)...\r\x1b[K"
    )  # gone; no line: it failed
    quiet = Terminal()
    with timed_lines(quiet, clock, quiet=True)("torch.export", always=True):
        clock.now += 5
    assert quiet.getvalue() == ""


@pytest.mark.parametrize(
    ("environment", "tty", "coloured"),
    [
        ({}, True, True),
        ({}, False, False),
        ({"NO_COLOR": "1"}, True, False),
        ({"NO_COLOR": ""}, True, True),  # set but empty: not set
        ({"FORCE_COLOR": "1"}, False, True),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, True),  # as in ruff, FORCE_COLOR wins
    ],
)
def test_colour_follows_no_color_force_color_then_the_terminal(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], tty: bool, coloured: bool
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert colours(Terminal() if tty else io.StringIO()) is coloured


def test_the_text_report_colours_codes_and_severities_only() -> None:
    text = "m.py:3: EG301 [error] dropout 'x [error]' runs\nEG310 [info] fixed-input-shapes: 1 finding\n  EG301 fix: Call model.eval().\nFound 2 findings (1 error, 1 info).\n"
    coloured = colour_report(text)
    assert f"m.py:3: {ESC}1mEG301{ESC}0m [{ESC}31merror{ESC}0m] dropout 'x [error]' runs" in coloured
    assert f"{ESC}1mEG310{ESC}0m [{ESC}36minfo{ESC}0m]" in coloured
    assert coloured.count(ESC) == 8 and _plain(coloured) == text


def _plain(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


def _bad_header(folder: Path) -> Path:
    """A program file that reads and fails EG501 (its extended header's length is wrong), in microseconds."""
    head = b"\0\0\0\0ET12eh00" + (4).to_bytes(4, "little") + (40).to_bytes(8, "little")
    path = folder / "bad-header.pte"
    path.write_bytes(head.ljust(64, b"\0"))
    return path


def test_force_color_colours_the_text_report_and_errors_never_machine_formats_or_files(
    cli: Callable[..., Ran], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = _bad_header(tmp_path)
    monkeypatch.setenv("FORCE_COLOR", "1")
    text = cli("check", empty, "--select", "EG501")
    assert text.returncode == 1 and f"{ESC}1mEG501{ESC}0m [{ESC}31merror{ESC}0m]" in text.stdout
    for output_format in ("json", "sarif", "github"):
        machine = cli("check", empty, "--select", "EG501", "--output-format", output_format)
        assert machine.returncode == 1 and machine.stdout and ESC not in machine.stdout, output_format
    kept = cli("check", empty, "--select", "EG501", "--report-file", tmp_path / "report.txt")
    assert kept.returncode == 1 and ESC not in (tmp_path / "report.txt").read_text()
    usage = cli("check", tmp_path / "missing.pte")
    assert usage.returncode == 2 and f"export-guards: {ESC}1;31merror:{ESC}0m no such file" in usage.stderr
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("FORCE_COLOR")
    assert ESC not in cli("check", empty, "--select", "EG501").stdout


def test_quiet_silences_every_progress_line_the_baseline_ones_included(cli: Callable[..., Ran], tmp_path: Path) -> None:
    empty = _bad_header(tmp_path)
    baseline = tmp_path / "baseline.json"
    written = cli("check", empty, "--select", "EG501", "--isolated", "--write-baseline", baseline, "-q")
    assert written.returncode == 0 and baseline.is_file() and written.stderr == ""
    gated = cli("check", empty, "--select", "EG501", "--isolated", "--baseline", baseline, "-q")
    assert gated.returncode == 0 and gated.stderr == ""
    said = cli("check", empty, "--select", "EG501", "--isolated", "--baseline", baseline)
    assert "finding(s) in the baseline" in said.stderr


def on_a_terminal(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run the command with stderr on a pseudo-terminal (stdout a pipe); its exit code, stdout
    and what the terminal received."""
    leader, follower = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-m", "export_guards", *args],
        stdout=subprocess.PIPE,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        cwd=TESTS,
        env=env,
    ) as process:
        os.close(follower)
        received = bytearray()
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the command ended: the terminal is closed
                break
            if not chunk:
                break
            received += chunk
        assert process.stdout is not None
        stdout = process.stdout.read().decode()
        code = process.wait(timeout=600)
    os.close(leader)
    return code, stdout, received.decode().replace("\r\n", "\n")


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_recipe_run_on_a_terminal_shows_its_steps_in_colour_and_no_library_noise(tmp_path: Path) -> None:
    """One run, many claims: on a terminal each step shows while it runs and ends as one timed
    line; the text report on stdout is coloured (FORCE_COLOR: stdout is a pipe); ExecuTorch's
    ``WARNING:root:`` lines, torch's and torchao's log lines stay off it."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")} | {"FORCE_COLOR": "1"}
    pte = tmp_path / "model.pte"
    code, stdout, screen = on_a_terminal(
        "lint",
        f"{MODELS}:gated",
        "--recipe",
        "xnnpack_fp32",
        "--pte",
        str(pte),
        "--fail-level",
        "warning",
        "--show-info",
        env=env,
    )
    assert code in (0, 1), screen[-3000:]
    assert f"{ESC}1mEG" in stdout and f"[{ESC}36minfo{ESC}0m]" in stdout  # coloured: FORCE_COLOR
    assert "\r\x1b[K" in screen  # the live line of a step, replaced by its end line
    lines = [line.rpartition("\r\x1b[K")[2] for line in screen.split("\n")]
    assert "export-guards: exporting and linting" in lines[0]
    assert any(
        line.startswith("export-guards: exporting, linting and lowering with the recipe xnnpack_fp32 took ")
        for line in lines
    ), lines
    assert all(line.startswith("export-guards: ") for line in lines if line), (
        lines
    )  # nothing else: no WARNING:root, no W1202 ...
    assert "WARNING" not in screen


def test_a_long_step_says_each_long_part_as_it_ends_and_a_terminal_shows_each_part_under_way() -> None:
    log, clock = io.StringIO(), Clock()
    clock.now += LONG_RUN_S  # a long run: every step's line shows
    with timed_lines(log, clock)("linting and lowering (xnnpack)"):
        progress.now("linting the program")
        clock.now += LONG_PART_S / 2  # quick: no line of its own
        progress.now("compiling 87 delegates (XnnpackBackend)")
        clock.now += 41.25
    assert log.getvalue() == (
        "export-guards: linting and lowering (xnnpack): compiling 87 delegates (XnnpackBackend) took 41.2 s\n"
        "export-guards: linting and lowering (xnnpack) took 41.8 s\n"
    )
    progress.now("outside any step")  # nobody shows it: nothing, and no error

    screen = Terminal()
    with timed_lines(screen, clock)("writing the program"):
        progress.now("serializing the program")
        assert (
            screen.getvalue()
            == "export-guards: writing the program...\r\x1b[Kexport-guards: writing the program: serializing the program..."
        )
        clock.now += 2.5
    assert screen.getvalue().endswith(
        "\r\x1b[Kexport-guards: writing the program: serializing the program took 2.5 s\n\r\x1b[Kexport-guards: writing the program took 2.5 s\n"
    )

    failed = io.StringIO()
    with pytest.raises(RuntimeError), timed_lines(failed, clock)("running the program"):  # noqa: PT012 - the failure is the timed step's
        progress.now("running the program on 3 input sets in executorch.runtime")
        clock.now += 5
        raise RuntimeError("the child died")
    assert failed.getvalue() == ""  # a failed step, and its part, get no line: the error says what failed
