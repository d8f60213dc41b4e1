"""``python -m export_guards``: the ``export-guards`` command."""

from export_guards.cli import main

raise SystemExit(main())
