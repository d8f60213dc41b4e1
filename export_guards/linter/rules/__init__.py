"""The built-in rules. Importing a module registers its rules; add a module to add rules."""

from export_guards.linter.rules import (  # noqa: F401
    constants,
    delegation,
    mutation,
    numerics,
    placement,
    training,
    weights,
)
