# One way to run things. Every target creates .venv on first use: `make demo` installs only
# what the demo needs; setup, test, bench and lint install every extra.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
ALL_STAMP  := $(VENV)/.installed-all
DEMO_ARGS ?= --duration 30
# A third-party reader of Chrome trace-event files (Meta's Holistic Trace Analysis) for the
# export tests, in an environment of its own: its pins (pandas, jupyter) never touch .venv.
HTA_VENV  := .venv-hta
HTA_STAMP := $(HTA_VENV)/.installed-hta
HTA_VERSION ?= 0.5.0
# checkov scans the Kubernetes manifests (tests/test_kubernetes_manifests.py), offline with
# --skip-download, from an environment of its own: its many pins never touch .venv.
CHECKOV_VENV   := .venv-checkov
CHECKOV_STAMP  := $(CHECKOV_VENV)/.installed-checkov
CHECKOV_VERSION ?= 3.3.30

.PHONY: setup demo test bench lint system-packages clean

setup: $(ALL_STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(ALL_STAMP): pyproject.toml setup.py collector/sources/_tick.c collector/collectives/_spans.c | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[all]'
	touch $@ $(DEMO_STAMP)

# The package and its four runtime dependencies, nothing for tests, lint or plots.
$(DEMO_STAMP): pyproject.toml setup.py collector/sources/_tick.c collector/collectives/_spans.c | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	touch $@

demo: $(DEMO_STAMP)
	$(BIN)/burstscope demo $(DEMO_ARGS)
	@echo
	@echo "burstscope is installed in $(abspath $(BIN))/burstscope; for a shell where"
	@echo "plain 'burstscope' works: . $(abspath $(BIN))/activate"

system-packages:
	@bash scripts/install-system-packages.sh

$(HTA_STAMP):
	$(PYTHON) -m venv $(HTA_VENV)
	$(HTA_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		'holistictraceanalysis==$(HTA_VERSION)'
	touch $@

$(CHECKOV_STAMP):
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		'checkov==$(CHECKOV_VERSION)'
	touch $@

# Two workers, a test file each at a time (pyproject.toml's test extra says why);
# `make test WORKERS=0` runs in one process.
WORKERS ?= 2
test: $(ALL_STAMP) $(HTA_STAMP) $(CHECKOV_STAMP) system-packages
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile

# Each benchmark prints one JSON line (sampler: one per configuration) and compares
# against a reference measured in the same run.
BENCHMARKS ?= sampler agent detection simulate demo exporter capture mqtt fleet fleet_report stragglers

bench: $(ALL_STAMP)
	@for name in $(BENCHMARKS); do $(BIN)/python bench/$$name.py --json || exit 1; done

lint: $(ALL_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python dashboards/check_sdk.py
	@# One at a time: each benchmark is a script, not a module of one package.
	@for file in bench/*.py; do $(BIN)/mypy $$file >/dev/null || { $(BIN)/mypy $$file; exit 1; }; done

clean:
	rm -rf $(VENV) $(HTA_VENV) $(CHECKOV_VENV) bench/.build build collector/sources/_tick.*.so collector/collectives/_spans.*.so \
		.pytest_cache .mypy_cache .ruff_cache .hypothesis
