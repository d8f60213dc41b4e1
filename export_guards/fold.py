"""The fold: constant-only computations evaluated at export (EG201-EG212), on the torch.export
program and on the module before export (docs/fold.md). A public namespace: it only names what
the passes' room makes. Each function returns the new program (or model) and its report; the pass
(``FoldConstantsPass``) is the same fold as ``to_edge_transform_and_lower``'s pass list runs it."""

from __future__ import annotations

from export_guards.passes.fold import FoldConstantsPass, fold_constants, fold_non_core_constants
from export_guards.passes.module_fold import fold_parametrizations

__all__ = ["FoldConstantsPass", "fold_constants", "fold_non_core_constants", "fold_parametrizations"]
