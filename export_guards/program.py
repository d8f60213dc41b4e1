"""The written program: checked (``check_pte``, as ``export-guards check``), compared
(``diff_pte``, ``compare_pte``, ``check_reproducible``), checked against and run on the runtime
(``check_program``, ``run_program``, under a ``Tolerance``), its delegation counted
(``delegation_summary``) and its shared constants stored once (``store_once``) (docs/check.md).
A public namespace: it only names what the rooms below make."""

from __future__ import annotations

from export_guards.analysis.delegation import DelegationSummary, delegation_summary
from export_guards.errors import ExportFailed, RuntimeMismatch
from export_guards.pte.check import check_pte, check_reproducible, compare_pte, diff_pte
from export_guards.pte.inventory import RuntimeInventory
from export_guards.pte.store_once import SharedCopy, shared_copies, store_once
from export_guards.verify import Tolerance, check_program, run_program

__all__ = [
    "DelegationSummary",
    "ExportFailed",
    "RuntimeInventory",
    "RuntimeMismatch",
    "SharedCopy",
    "Tolerance",
    "check_program",
    "check_pte",
    "check_reproducible",
    "compare_pte",
    "delegation_summary",
    "diff_pte",
    "run_program",
    "shared_copies",
    "store_once",
]
