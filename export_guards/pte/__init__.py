"""Checks of a written ``.pte`` program: structure, delegate data, reproducibility, a runtime smoke run."""
