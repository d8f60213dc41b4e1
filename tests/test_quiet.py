"""Only the tool's own lines: the libraries' known noise filtered at its source, everything else
they say let through (issue 38)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from export_guards import quiet

ROOT = Path(__file__).resolve().parent.parent


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _log(logger: logging.Logger, message: str, module: str) -> None:
    """A record as the library's own module logs it (its path is where it came from)."""
    logger.handle(logger.makeRecord(logger.name, logging.WARNING, f"/site-packages/{module}", 96, message, (), None))


def test_known_lines_are_dropped_at_their_source_and_every_other_line_passes() -> None:
    logger = logging.getLogger("torchao")
    kept = _Kept()
    logger.addHandler(kept)
    cuda_kernels = "Failed to load /x/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: Could not load this library"
    try:
        quiet.filter_known_noise()  # import export_guards did it: again changes nothing
        _log(logger, cuda_kernels, "torchao/__init__.py")
        _log(logger, cuda_kernels, "torchao/quantization/api.py")  # another module: not the known line
        _log(logger, "Failed to load the checkpoint", "torchao/__init__.py")  # another message: a real problem
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()  # the suite ignores every FutureWarning: here, only the known one
            warnings.simplefilter("always")
            quiet.show_known_noise()
            quiet.filter_known_noise()
            warnings.warn(
                "`isinstance(treespec, LeafSpec)` is deprecated, use TreeSpec.is_leaf()", FutureWarning, stacklevel=1
            )
            warnings.warn("`LeafSpec` will change", FutureWarning, stacklevel=1)
            warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated", DeprecationWarning, stacklevel=1)
        assert [str(w.message) for w in caught] == [
            "`LeafSpec` will change",
            "`isinstance(treespec, LeafSpec)` is deprecated",
        ]
        assert kept.messages == [cuda_kernels, "Failed to load the checkpoint"]

        quiet.show_known_noise()  # the command's -v: the known lines too
        _log(logger, cuda_kernels, "torchao/__init__.py")
        assert kept.messages[-1] == cuda_kernels
        assert not any(f[1] is not None and "LeafSpec" in f[1].pattern for f in warnings.filters)
    finally:
        logger.removeHandler(kept)
        quiet.filter_known_noise()  # as the rest of the session expects


@pytest.mark.subprocess  # the libraries load in a fresh interpreter, after import export_guards
def test_the_api_prints_no_library_line_and_the_switch_lets_them_through(tmp_path: Path) -> None:
    script = tmp_path / "use.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        import export_guards as eg

        net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
        result = eg.export_with_guards(net, (torch.randn(2, 8),))
        assert not eg.program.check_program(result, result.to_pte()).errors
        print("exported")
    """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "exported\n", done.stderr[-3000:]
    assert done.stderr == ""  # no torchao, pytree or LeafSpec line: nothing at all
    loud = subprocess.run(
        [sys.executable, "-c", "import export_guards, logging; print(logging.getLogger('torchao').filters)"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "EXPORT_GUARDS_LIBRARY_NOISE": "1"},
    )  # fmt: skip
    assert loud.stdout.strip() == "[]", loud.stderr


@pytest.mark.subprocess
@pytest.mark.slow  # a recipe export, with the backends' recipe packages imported
def test_recipes_and_a_buffer_written_in_place_print_nothing(tmp_path: Path) -> None:
    """``recipe_names`` (coremltools' import lines), a recipe export (ExecuTorch's 'Disabled
    validating the partitioner.' on the root logger) and the emission of a buffer written in place
    (the emitter's UserWarning, which the lint's own rule answers) print nothing; a buffer that
    starts from ones is still reported, by that rule."""
    script = tmp_path / "use.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        import export_guards as eg

        class Counter(torch.nn.Module):
            def __init__(self, start):
                super().__init__()
                self.linear = torch.nn.Linear(4, 4)
                self.register_buffer("count", start(4))
                self.count: torch.Tensor

            def forward(self, x):
                self.count.add_(1)
                return self.linear(x) + self.count

        assert "xnnpack_fp32" in eg.recipes.recipe_names()
        assert isinstance(eg.recipes.recipe_named("xnnpack_fp32"), type(eg.recipes.recipe_named("xnnpack_fp32")))
        recipe = eg.export_with_guards(Counter(torch.zeros).eval(), (torch.randn(2, 4),), config=eg.Settings(recipe="xnnpack_fp32"))
        backend = eg.export_with_guards(Counter(torch.ones).eval(), (torch.randn(2, 4),))
        backend.to_pte()
        print(sorted({eg.RULES[f.code].name for f in recipe.report.errors}), sorted({eg.RULES[f.code].name for f in backend.report.errors}))
    """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "[] ['buffer-initial-value-dropped']\n"
    assert done.stderr == ""


@pytest.mark.subprocess
def test_native_lines_pass_except_the_cpu_probe_and_the_tokenizers_registration() -> None:
    code = textwrap.dedent("""
        import os
        from export_guards.quiet import runtime_chatter_dropped

        with runtime_chatter_dropped():
            os.write(2, b"[cpuinfo_utils.cpp:71] Reading file /sys/devices/soc0/image_version\\n")
            os.write(2, b"I tokenizers:regex.cpp:40] Registering override fallback regex\\n")
            os.write(2, b"[method.cpp:744] Op index 12 out of range\\n")
        os.write(2, b"after\\n")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "[method.cpp:744] Op index 12 out of range\nafter\n", done.stderr


def test_a_library_error_held_through_a_step_that_ends_well_is_logged_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The plugin's steps hold the libraries' ERROR records and log them once the step ends
    without raising (it iterated the held dict's keys, and raised AttributeError instead)."""
    from export_guards.pytest_plugin.quiet import libraries_kept_quiet

    with caplog.at_level(logging.ERROR), libraries_kept_quiet():
        logging.getLogger("torch.export_guards_test").error("held until the step ends")
        assert "held until the step ends" not in caplog.text
    assert [r.getMessage() for r in caplog.records] == ["held until the step ends"]
