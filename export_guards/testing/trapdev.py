"""A test-only accelerator, ``trapdev``, whose memory faults when the host reads it."""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

import torch

__all__ = ["DEVICE_TYPE", "load_trapdev"]

DEVICE_TYPE = "trapdev"
"""The device type name that :func:`load_trapdev` gives PrivateUse1."""

_SOURCE = Path(__file__).with_name("trapdev.cpp")


def load_trapdev() -> torch.device:
    """Build (once, cached) and register the ``trapdev`` device; return ``torch.device("trapdev")``.

    ``trapdev`` is PrivateUse1 renamed. Its tensors report a ``data_ptr()`` inside a
    ``PROT_NONE`` mapping while the bytes live in a second, host-readable one that only the
    backend's copy kernels use, so any raw host read of a constant dies with SIGSEGV just as
    a CUDA pointer does; ``tensor.to("cpu")`` and every other operator work (the latter on
    the CPU through the CPU fallback). The first call in a fresh environment compiles the
    backend with the system C++ compiler (about 20 s); later calls reuse the build cache.

    Raises:
        RuntimeError: PrivateUse1 is already taken by another backend in this process, or
            the platform is not Linux.
    """
    current = torch._C._get_privateuse1_backend_name()
    if current == DEVICE_TYPE and hasattr(torch, DEVICE_TYPE):
        return torch.device(DEVICE_TYPE)
    if current != "privateuseone":
        raise RuntimeError(
            f"cannot load the test device {DEVICE_TYPE!r}: PrivateUse1 is already the "
            f"{current!r} backend in this process; run trapdev tests in their own process"
        )
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"the test device {DEVICE_TYPE!r} needs Linux (mmap with PROT_NONE)")

    from torch.utils.cpp_extension import load_inline

    source = _SOURCE.read_text()
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    load_inline(
        name=f"export_guards_trapdev_{digest}",
        cpp_sources=[source],
        is_python_module=False,
        no_implicit_headers=True,
        extra_cflags=["-O1"],
    )
    torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    torch._register_device_module(DEVICE_TYPE, _device_module())
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    return torch.device(DEVICE_TYPE)


def _device_module() -> types.ModuleType:
    """The ``torch.trapdev`` module that torch expects of a registered device: one device."""
    module = types.ModuleType(f"torch.{DEVICE_TYPE}")
    module.is_available = lambda: True  # type: ignore[attr-defined]
    module.device_count = lambda: 1  # type: ignore[attr-defined]
    module.current_device = lambda: 0  # type: ignore[attr-defined]
    module.is_initialized = lambda: True  # type: ignore[attr-defined]
    module._is_in_bad_fork = lambda: False  # type: ignore[attr-defined]
    module.manual_seed_all = lambda seed: None  # type: ignore[attr-defined]
    return module
