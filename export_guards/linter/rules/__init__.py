"""The built-in rules. Importing a module registers its rules; add a module to add rules."""

from export_guards.linter.rules import (  # noqa: F401
    constants,
    delegation,
    mutation,
    numerics,
    placement,
    pte_delegates,
    pte_external,
    pte_instructions,
    pte_reproducible,
    pte_runtime,
    pte_structure,
    training,
    weights,
)
