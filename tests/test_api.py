"""The public API: one error root, a small top level with named namespaces, the old names kept
one release behind a warning that names the new spelling, and ``config=Settings(...)`` the one
way to pass options (docs/api.md)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
import warnings

import pytest
import torch
from executorch.exir.error import InternalError

import export_guards as eg


def package_modules() -> list[str]:
    """Every module of the package but the child-process entry points' ``__main__`` runs."""
    return sorted(
        m.name for m in pkgutil.walk_packages(eg.__path__, "export_guards.") if m.name != "export_guards.__main__"
    )


def exception_classes() -> dict[str, type[BaseException]]:
    """Each exception class the package defines, public or not, by its module and name (a
    private one is control flow that never leaves its module: listed apart)."""
    found = {}
    for name in package_modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("export_guards")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


# raised and caught in their own module
PRIVATE = {"_ParseTimeout", "_Refused", "_Unsupported", "_ReadsChanged", "_Unknown"}
# raised in one module of the reader and caught in the next, never out of it: read the slow way
FALLBACKS = {"Unreadable"}
NOT_ERRORS = {"Interrupted"}  # a KeyboardInterrupt (a signal), as Python's own is no Exception


def test_every_exception_class_of_the_package_derives_from_the_one_root() -> None:
    classes = exception_classes()
    assert len(classes) >= 20  # the walk found them (the guards' errors, the torch-free ones, the command's)
    names = {cls.__name__ for cls in classes.values()}
    assert names >= PRIVATE | FALLBACKS | NOT_ERRORS  # what is left out still exists, and is left out by name
    outside = sorted(
        path
        for path, cls in classes.items()
        if cls.__name__ not in PRIVATE | FALLBACKS | NOT_ERRORS and not issubclass(cls, eg.Error)
    )
    assert outside == [], f"errors not under export_guards.Error: {outside}"
    assert all(cls.__name__.startswith("_") for cls in classes.values() if cls.__name__ in PRIVATE)


def test_each_error_keeps_its_builtin_base_and_the_guards_are_executorchs_internal_error() -> None:
    bases = {
        "GradModeWriteError": RuntimeError,
        "RuntimeMismatch": RuntimeError,
        "TargetError": ValueError,
        "NotAModule": TypeError,
        "ProjectRulesError": ValueError,
    }
    for name, base in bases.items():
        assert issubclass(getattr(eg.errors, name), base), name
    guards = [
        "GuardError",
        "ConstantPlacementError",
        "KnownWrongDelegationError",
        "LintError",
        "LoweringFailed",
        "ProgramRefused",
        "SharedMemoryError",
    ]
    for name in guards:
        error = getattr(eg.errors, name)
        assert issubclass(error, InternalError) and issubclass(error, eg.Error), name
        assert error.__module__ == "export_guards.errors" and getattr(eg.errors, name) is error
    assert not issubclass(eg.errors.RuntimeMismatch, InternalError)  # the torch-free ones are not ExecuTorch's
    assert set(eg.errors.__all__) == {*bases, *guards, "Error", "ExportFailed"}


def test_the_root_and_the_torch_free_errors_import_neither_torch_nor_executorch() -> None:
    code = (
        "import sys\n"
        "import export_guards\n"
        "root = export_guards.Error\n"
        "from export_guards.errors import Error, ExportFailed, RuntimeMismatch, TargetError\n"
        "assert root is Error and issubclass(RuntimeMismatch, root)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_top_level_is_small_and_each_namespace_is_a_real_module() -> None:
    assert len(eg.__all__) <= 30
    for space in eg._NAMESPACES:
        module = importlib.import_module(f"export_guards.{space}")
        assert getattr(eg, space) is module
        assert all(hasattr(module, name) for name in module.__all__), space
    for name in eg.__all__:  # a top-level name is in its namespace too, the same object, where it has one
        homes = [space for space in eg._NAMESPACES if name in getattr(eg, space).__all__]
        assert all(getattr(getattr(eg, space), name) is getattr(eg, name) for space in homes), name
    assert eg.placement.guard_partitioners is eg.guard_partitioners and eg.program.check_pte is eg.check_pte


def deprecated_names() -> list[tuple[str, str]]:
    moved = [(old, rf"use export_guards\.{space}\.{old}$") for old, space in eg._MOVED.items()]
    renamed = [
        (old, "use " + spelling.replace("(", r"\(").replace(")", r"\)").replace(".", r"\."))
        for old, (_, _, spelling) in eg._RENAMED.items()
    ]
    return moved + renamed


@pytest.mark.parametrize(("old", "new"), deprecated_names())
def test_an_old_name_still_works_and_its_warning_names_the_new_spelling(old: str, new: str) -> None:
    assert old not in eg.__all__
    with pytest.warns(DeprecationWarning, match=rf"^export_guards\.{old} is deprecated: {new}") as warned:
        value = getattr(eg, old)
    assert warned[0].filename == __file__  # said at the caller's line
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match=rf"export_guards\.{old} is deprecated"):
        exec(f"from export_guards import {old}", namespace)  # noqa: S102 - the from-import spelling, with the name as data
    assert namespace[old] is value
    if old in eg._MOVED:
        assert value is getattr(getattr(eg, eg._MOVED[old]), old)
    if old in eg._RENAMED:
        module, attribute, _ = eg._RENAMED[old]
        assert value is getattr(importlib.import_module(module), attribute)


def test_the_renamed_ones_are_what_their_new_spelling_is() -> None:
    with pytest.warns(DeprecationWarning, match="LintConfig is deprecated"):
        renamed = eg.LintConfig
    assert renamed is eg.Settings


def test_loose_keyword_options_warn_naming_the_settings_and_config_does_not() -> None:
    with pytest.warns(
        DeprecationWarning,
        match=r"guard_passes\(placement=, fold_max_growth=\) is deprecated: pass config=Settings\(placement='copy', fold_max_growth=2\.0\)",
    ) as warned:
        loose = eg.guard_passes(placement="copy", max_growth=2.0)
    assert warned[0].filename == __file__
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "export_guards", DeprecationWarning)
        one_way = eg.guard_passes(config=eg.Settings(placement="copy", fold_max_growth=2.0))
        eg.guard_recipe(eg.recipes.recipe_named("xnnpack_fp32"), config=eg.Settings(placement="copy"))
    assert repr(loose) == repr(one_way) and [
        p.max_growth for p in loose if isinstance(p, eg.fold.FoldConstantsPass)
    ] == [2.0]
    config = eg.Settings(fold=False)
    with pytest.warns(DeprecationWarning, match=r"pass config=config\.updated\(\{'placement': 'copy'\}\)"):
        eg.guard_recipe(eg.recipes.recipe_named("xnnpack_fp32"), config=config, placement="copy")


def test_a_guarded_export_with_loose_keywords_warns_once_at_the_callers_line() -> None:
    model = torch.nn.Linear(4, 2).eval()
    program = torch.export.export(model, (torch.randn(1, 4),))
    with pytest.warns(DeprecationWarning, match="export_with_guards") as warned:
        loose = eg.export_with_guards(model, (torch.randn(1, 4),), backend="portable")
    ours = [w for w in warned if str(w.message).startswith("export_guards")]
    assert [(w.filename, str(w.message)) for w in ours] == [
        (
            __file__,
            "export_guards: export_with_guards(backend=) is deprecated: pass config=Settings(backend='portable')",
        )
    ]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "export_guards", DeprecationWarning)
        one_way = eg.lower_with_guards(program, config=eg.Settings(backend="portable"))
    assert loose.to_pte() == one_way.to_pte()
