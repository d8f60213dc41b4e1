"""A model named on the command line: ``path/to/file.py:factory`` or ``package.module:factory``,
where ``factory()`` returns ``(model, example_inputs)``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

__all__ = ["TargetError", "load_target"]


class TargetError(ValueError):
    """The target cannot be imported or its factory does not return (model, example_inputs)."""


def load_target(target: str) -> tuple[Any, tuple[Any, ...]]:
    """Import the target's module, call its factory, and return ``(model, example_inputs)``.

    Raises:
        TargetError: saying what is wrong with the target, in one line.
    """
    return _call_factory(_load_factory(target), target)


def _load_factory(target: str) -> Any:
    module_part, sep, name = target.rpartition(":")
    if not sep or not module_part or not name:
        raise TargetError(f"target {target!r} must be path/to/file.py:factory or package.module:factory")
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(module_part)
        if not path.is_file():
            raise TargetError(f"no such file: {path}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.resolve().parent))  # so the file can import its neighbours
        sys.modules.setdefault(spec.name, module)  # dataclasses and pickling look their module up
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            raise TargetError(f"importing {path} failed: {type(error).__name__}: {first_line(error)}") from None
    else:
        try:
            module = importlib.import_module(module_part)
        except Exception as error:
            raise TargetError(f"cannot import {module_part!r}: {type(error).__name__}: {first_line(error)}") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise TargetError(f"{module_part} has no callable {name!r}")
    return factory


def _call_factory(factory: Any, target: str) -> tuple[Any, tuple[Any, ...]]:
    import torch

    produced = factory()
    if not (isinstance(produced, tuple) and len(produced) == 2 and isinstance(produced[0], torch.nn.Module)):
        raise TargetError(f"{target} must return (model, example_inputs), got {type(produced).__name__}")
    model, inputs = produced
    inputs = inputs if isinstance(inputs, tuple) else tuple(inputs) if isinstance(inputs, list) else (inputs,)
    return model, inputs


def first_line(error: BaseException) -> str:
    """The first line of an error's message."""
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"
