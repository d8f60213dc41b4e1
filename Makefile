# Two commands do all the set-up: `make demo` and `make test`. Each creates .venv when it is
# missing and installs the pinned environment from constraints.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: demo test bench bench-placement bench-fold bench-fold-peer bench-lint bench-check bench-campaign bench-cli clean

$(INSTALLED): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --constraint constraints.txt --editable '.[test]'
	touch $@

demo: $(INSTALLED)
	$(PY) examples/demo.py

test: $(INSTALLED)
	$(PY) -m pytest

bench: $(INSTALLED)
	$(PY) benchmarks/placement.py
	$(PY) benchmarks/fold.py
	$(PY) benchmarks/fold_vs_peer.py
	$(PY) benchmarks/lint.py
	$(PY) benchmarks/pte_check.py
	$(PY) benchmarks/pte_campaign.py
	$(PY) benchmarks/cli_startup.py

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

bench-campaign: $(INSTALLED)
	$(PY) benchmarks/pte_campaign.py

bench-cli: $(INSTALLED)
	$(PY) benchmarks/cli_startup.py

clean:
	rm -rf $(VENV) build *.egg-info
