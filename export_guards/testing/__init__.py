"""Test helpers for export-guards: a device whose memory the host cannot read."""

from __future__ import annotations

from export_guards.testing.trapdev import DEVICE_TYPE, load_trapdev

__all__ = ["DEVICE_TYPE", "load_trapdev"]
