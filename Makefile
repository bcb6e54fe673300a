# per-dqn: every set-up step a fresh machine needs lives here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# torch is pinned through constraints.txt so that no CUDA build is ever pulled on a CPU machine.
PIP    := $(BIN)/python -m pip install --constraint constraints.txt

.PHONY: install train tensorboard test bench bench-train lint clean mutants

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Trains the default CartPole config (D3QN + proportional PER); the run lands in runs/.
train: $(STAMP)
	$(BIN)/per-dqn train --config cartpole.yaml

# Serves the curves of every run under runs/ at http://localhost:6006.
tensorboard: $(STAMP)
	$(BIN)/tensorboard --logdir runs

test: $(STAMP)
	$(BIN)/python -m pytest

# One-line bugs the suite must catch (tests/mutants/mutants.py); a survivor fails the target.
mutants: $(STAMP)
	$(BIN)/python tests/mutants/mutants.py

bench: $(STAMP)
	$(PIP) -e '.[dev,bench]'
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/atari.py

# Whole-loop SPS on CartPole, uniform vs proportional vs rank.
bench-train: $(STAMP)
	$(BIN)/python benchmarks/train_loop.py

# Atari-scale env, replay at 1M (vs cpprb and Tianshou), learner and whole-loop SPS (vs SB3),
# peers measured when the bench extra is installed.
.PHONY: bench-atari
bench-atari: $(STAMP)
	$(BIN)/python benchmarks/atari.py

lint: $(STAMP)
	$(BIN)/ruff check per_dqn tests benchmarks
	$(BIN)/ruff format --check per_dqn tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
