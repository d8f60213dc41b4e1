"""Child-process entry points (``python -m export_guards.workers.NAME``); imported by nothing in the package."""
