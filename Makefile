# Two commands do all the set-up: `make demo` and `make test`. Each creates .venv when it is
# missing and installs the pinned environment from constraints.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: demo test test-fast coverage bench bench-placement bench-fold bench-fold-peer bench-lint bench-check bench-check-ab bench-campaign bench-cli bench-verdict bench-check-light clean

$(INSTALLED): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --constraint constraints.txt --editable '.[test]'
	touch $@

demo: $(INSTALLED)
	$(PY) examples/demo.py

# Everything, on every core (pytest-xdist; an idle worker takes tests from a busy one, so one
# long file does not hold the run up). CI runs this.
test: $(INSTALLED)
	$(PY) -m pytest -n auto --dist worksteal

# Line coverage of export_guards/ by the whole suite, every process counted (coverage.py).
coverage: $(INSTALLED)
	rm -f .coverage .coverage.*
	$(PY) -m coverage run -m pytest -n auto --dist worksteal -q
	$(PY) -m coverage combine -q
	$(PY) -m coverage report --format=total

# The inner loop: the engine, settings, renderers, readers and rules on shared programs; the
# fuzz with fewer cases. No subprocess, no slow export.
test-fast: $(INSTALLED)
	$(PY) -m pytest tests -n auto --dist worksteal -m "not slow and not subprocess" --pte-fuzz-cases 200

bench: $(INSTALLED)
	$(PY) benchmarks/placement.py
	$(PY) benchmarks/fold.py
	$(PY) benchmarks/fold_vs_peer.py
	$(PY) benchmarks/lint.py
	$(PY) benchmarks/pte_check.py
	$(PY) benchmarks/pte_campaign.py
	$(PY) benchmarks/cli_startup.py
	$(PY) benchmarks/lint_verdict.py
	$(PY) benchmarks/check_without_torch.py

bench-placement: $(INSTALLED)
	$(PY) benchmarks/placement.py

bench-fold: $(INSTALLED)
	$(PY) benchmarks/fold.py

bench-fold-peer: $(INSTALLED)
	$(PY) benchmarks/fold_vs_peer.py

bench-lint: $(INSTALLED)
	$(PY) benchmarks/lint.py

bench-check: $(INSTALLED)
	$(PY) benchmarks/pte_check.py

# Check time per file, this tree against HEAD, side by side (issue 26: at most 1.5x).
bench-check-ab: $(INSTALLED)
	$(PY) benchmarks/pte_check_ab.py

bench-campaign: $(INSTALLED)
	$(PY) benchmarks/pte_campaign.py

bench-cli: $(INSTALLED)
	$(PY) benchmarks/cli_startup.py

# The lint with the check of its written program against the lint before it (issue 36: at most 1.1x).
bench-verdict: $(INSTALLED)
	$(PY) benchmarks/lint_verdict.py

clean:
	rm -rf $(VENV) build *.egg-info

# `export-guards check` on an XNNPACK program in a fresh interpreter, without torch (issue 38: at most 1 s).
bench-check-light: $(INSTALLED)
	$(PY) benchmarks/check_without_torch.py
