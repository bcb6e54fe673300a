# per-dqn: every set-up step a fresh machine needs lives here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# torch is pinned through constraints.txt so that no CUDA build is ever pulled on a CPU machine.
PIP    := $(BIN)/python -m pip install --constraint constraints.txt

.PHONY: install test bench lint clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(PIP) -e '.[dev,bench]'
	$(BIN)/python benchmarks/replay.py

lint: $(STAMP)
	$(BIN)/ruff check per_dqn tests benchmarks
	$(BIN)/ruff format --check per_dqn tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
