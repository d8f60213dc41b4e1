"""Verification of a guarded export, apart from the export itself: its written program checked
against the runtime that will load it (:func:`check_program`), and run and compared with eager
(:func:`run_program` in a child process; :class:`LoadedMethod` in this one), under one tolerance
policy (:class:`Tolerance`)."""

from __future__ import annotations

from export_guards.verify.eager import EagerReference, Expected, mutable_buffers
from export_guards.verify.outputs import (
    QUANTIZATION_ERROR,
    TOLERANCES,
    OutputError,
    Tolerance,
    compare_outputs,
    quantizes,
)
from export_guards.verify.program import check_program
from export_guards.verify.runs import InputSet, ProgramRuns, expected_at, input_sets, run_program
from export_guards.verify.runtime import LoadedMethod, input_differences, run_pte, runtime_error_text

__all__ = [
    "QUANTIZATION_ERROR",
    "TOLERANCES",
    "EagerReference",
    "Expected",
    "InputSet",
    "LoadedMethod",
    "OutputError",
    "ProgramRuns",
    "Tolerance",
    "check_program",
    "compare_outputs",
    "expected_at",
    "input_differences",
    "input_sets",
    "mutable_buffers",
    "quantizes",
    "run_program",
    "run_pte",
    "runtime_error_text",
]
