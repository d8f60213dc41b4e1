# Two commands do all the set-up: `make demo` and `make test`. Each creates .venv when it is
# missing and installs the pinned environment from constraints.txt.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: demo test lint format test-gpu ci test-compat test-fast coverage bench bench-placement bench-fold bench-fold-peer bench-lint bench-check bench-check-ab bench-campaign bench-cli bench-verdict bench-check-light bench-export-ab bench-check-kernels bench-check-hash bench-check-runtime bench-llm bench-llm-scale bench-llm-scale-1b bench-check-scale bench-known-wrong bench-weight-only delegate-numerics operator-table kernel-table same-outcome clean

$(INSTALLED): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --constraint constraints.txt --editable '.[test]'
	touch $@

demo: $(INSTALLED)
	$(PY) examples/demo.py

# Everything, on every core (pytest-xdist; an idle worker takes tests from a busy one, so one
# long file does not hold the run up), after the lint, the format check and the type check
# (seconds: ruff's and mypy's caches, .ruff_cache and .mypy_cache). CI runs this.
test: lint
	$(PY) -m pytest -n auto --dist worksteal

# ruff's rules and format, and mypy, as configured in pyproject.toml.
lint: $(INSTALLED)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# Rewrites the code: ruff's format, then the lint's own fixes (imports sorted, ...).
format: $(INSTALLED)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# On a machine with CUDA (about 5 minutes): the CUDA tests (tests/test_cuda.py), every
# device-parametrized test on cuda (its id names the device), and the device demo on CUDA.
# Where the installed torch is older than the one executorch's runtime was built for, the
# runtime steps skip, saying which torch it needs. Elsewhere it stops at once, saying why.
test-gpu: $(INSTALLED)
	$(PY) -c "import sys, torch; sys.exit(None if torch.cuda.is_available() else 'make test-gpu needs CUDA: torch.cuda.is_available() is False here (make test runs the same checks on the test device)')"
	$(PY) -m pytest tests -n auto --dist worksteal -k cuda -p no:cacheprovider -q -rs
	$(PY) examples/device_demo.py

# The pairs besides the default one that the compat tier runs on (docs/compatibility.md): in
# each, the fast tests and the command on a bundled example (lint, check, check --runtime). Each
# pair has its venv beside .venv (.venv-PAIR, kept between runs), pinned by constraints/PAIR.txt.
# Oldest first: CI runs the first.
COMPAT_PAIRS := executorch-1.4-torch-2.13
OLDEST_PAIR := $(firstword $(COMPAT_PAIRS))

# What CI runs (the README's test command): the whole suite on the default pair, then the compat
# tier on the oldest supported pair.
ci: test compat-$(OLDEST_PAIR)

# The compat tier on every pair of COMPAT_PAIRS.
test-compat: $(addprefix compat-,$(COMPAT_PAIRS))

.PRECIOUS: .venv-%/.installed  # not an intermediate file: make would remove it after the run
.venv-%/.installed: pyproject.toml constraints/%.txt
	test -x .venv-$*/bin/python || $(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet --constraint constraints/$*.txt --editable '.[test]'
	touch $@

compat-%: .venv-%/.installed
	.venv-$*/bin/python -m pytest tests -n auto --dist worksteal -m "not slow and not subprocess" --pte-fuzz-cases 200 -p no:cacheprovider -q
	mkdir -p out/$*
	.venv-$*/bin/export-guards lint examples/decoder.py:model --pte out/$*/decoder.pte
	.venv-$*/bin/export-guards check out/$*/decoder.pte
	.venv-$*/bin/export-guards check --runtime out/$*/decoder.pte

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
	$(PY) benchmarks/check_kernel_calls.py
	$(PY) benchmarks/llm_export.py

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
	rm -rf $(VENV) $(VENV)-* build *.egg-info

# `export-guards check` on an XNNPACK program in a fresh interpreter, without torch (issue 38: at most 1 s).
bench-check-light: $(INSTALLED)
	$(PY) benchmarks/check_without_torch.py

# `export-guards check` on the segmentation, decoder and int8 decoder programs (kernel calls
# besides XNNPACK) and on a folder of 50 with --jobs 2, fresh interpreters, without torch (issue 49:
# at most 1 s each, 10 s the folder).
bench-check-kernels: $(INSTALLED)
	$(PY) benchmarks/check_kernel_calls.py

bench-check-hash: $(INSTALLED)
	$(PY) benchmarks/pte_check_hash.py

bench-check-runtime: $(INSTALLED)
	$(PY) benchmarks/check_runtime_cost.py

# The pass list with and without its known-wrong pass, side by side, on programs without such a
# pattern (issue 52: at most 1.02x, the same bytes).
bench-known-wrong: $(INSTALLED)
	$(PY) benchmarks/known_wrong_cost.py

# A weight-only quantized linear on the portable kernels (EG405) against 8da8w and fp32 on
# XNNPACK, in the runtime (issue 62: what EG405's fallback costs; --candidates for the rewrites).
bench-weight-only: $(INSTALLED)
	$(PY) benchmarks/weight_only_speed.py

# Every quantization configuration documented for XNNPACK, stock / portable / guarded against
# eager: where the known-wrong table (export_guards/analysis/known_wrong.py) comes from.
delegate-numerics: $(INSTALLED)
	$(PY) benchmarks/delegate_numerics.py

# The operator table that `check` reads instead of torch (export_guards/pte/reader/operator_schemas.json),
# from the live registry of the pinned torch and ExecuTorch: after a change of constraints.txt.
operator-table: $(INSTALLED)
	$(PY) -c "from export_guards.pte.reader.schemas import write_shipped; print(write_shipped())"

# The dtypes each kernel of the installed executorch.runtime takes, found by running each one
# (export_guards/pte/kernel_probe.py; minutes): EG525's table, after a change of the pinned ExecuTorch.
kernel-table: $(INSTALLED)
	$(PY) -c "from export_guards.pte.kernel_probe import write_shipped; print(write_shipped())"

# The guarded export's time, this tree against HEAD, side by side (issue 39: no slower).
bench-export-ab: $(INSTALLED)
	$(PY) benchmarks/export_ab.py

# The quantized decoder's guarded export against stock, side by side (issue 45: at most 1.05x, no more bytes).
bench-llm: $(INSTALLED)
	$(PY) benchmarks/llm_export.py

# The guarded flows (lower_with_guards, the pass list, the lint) against stock at the small and
# the 40M- and 100M-parameter decoders, fp32 and 8da4w: time and peak memory, paired (hours on 2 cores).
bench-llm-scale: $(INSTALLED)
	$(PY) benchmarks/llm_scale.py

# The 1B-shape decoder (8da4w, exported at the example's length) through lower_with_guards against
# stock, one pair (issue 64): about 9 GB of peak memory per run, one run at a time, 15 minutes.
bench-llm-scale-1b: $(INSTALLED)
	$(PY) benchmarks/llm_scale.py --size 1b --ways guarded --pairs 1 --static

# The same findings, programs and bytes as REV (default HEAD) on the flow matrix, the examples
# and the device flows: a refactor's proof (issue 39). About 16 minutes on 2 cores.
REV ?= HEAD
same-outcome: $(INSTALLED)
	rm -rf out/same-outcome && git worktree prune && mkdir -p out/same-outcome
	git worktree add --detach out/same-outcome/baseline $(REV)
	cd out/same-outcome/baseline && PYTHONPATH=$$PWD:$$PWD/tests $(CURDIR)/$(PY) $(CURDIR)/benchmarks/same_outcome.py record ../baseline.json; \
		status=$$?; cd $(CURDIR) && git worktree remove --force out/same-outcome/baseline; exit $$status
	$(PY) benchmarks/same_outcome.py record out/same-outcome/this-tree.json
	$(PY) benchmarks/same_outcome.py compare out/same-outcome/baseline.json out/same-outcome/this-tree.json

# check, diff A A and check --runtime on the 100M decoders of /tmp/shared against reading the
# file once and a bare import-load-run script (issue 64); --quick for one pair
bench-check-scale: $(INSTALLED)
	$(PY) benchmarks/check_scale.py
