# One way to run things. Every target creates .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DEMO_ARGS ?= --duration 30

.PHONY: setup demo test bench lint system-packages clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all]'
	touch $(STAMP)

demo: setup
	$(BIN)/burstscope demo $(DEMO_ARGS)

system-packages:
	@bash scripts/install-system-packages.sh

test: setup system-packages
	$(BIN)/python -m pytest -q

# Each benchmark prints one JSON line (sampler: one per configuration) and compares
# against a reference measured in the same run.
BENCHMARKS ?= sampler detection simulate demo exporter capture mqtt

bench: setup
	@for name in $(BENCHMARKS); do $(BIN)/python bench/$$name.py --json || exit 1; done

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	@# One at a time: each benchmark is a script, not a module of one package.
	@for file in bench/*.py; do $(BIN)/mypy $$file >/dev/null || { $(BIN)/mypy $$file; exit 1; }; done

clean:
	rm -rf $(VENV) bench/.build .pytest_cache .mypy_cache .ruff_cache .hypothesis
