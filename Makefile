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

bench: setup
	$(BIN)/python bench/sampler.py --json
	$(BIN)/python bench/detectors.py --json

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) bench/.build .pytest_cache .mypy_cache .ruff_cache .hypothesis
