"""The guards as ExecuTorch passes (``ExportedProgramPassBase``): placement, fold, lint, and
the default pass list; and the module-level fold of reparametrized weights, before export."""
