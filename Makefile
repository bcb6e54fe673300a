# per-dqn: every set-up step a fresh machine needs lives here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# constraints.txt pins torch's version, not its build: on Linux the default index serves torch
# 2.13.0 built for CUDA, ~2.7 GB with its nvidia-* packages (README, "Set-up"; docs/quickstart.md).
PIP    := $(BIN)/python -m pip install --constraint constraints.txt
# The index torch is installed from before everything else; empty: the default index. For the
# CPU-only build, PyTorch's CPU wheel index, the URL PyTorch's "Get Started" selector gives for
# Linux, Pip, CPU: `make install TORCH_INDEX_URL=<that URL>`.
TORCH_INDEX_URL ?=

.PHONY: install train tensorboard docs test test-fast bench bench-train bench-sb3 bench-minatar bench-packs bench-ray bench-smoke lint clean mutants mutation minatar-1.0.10

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX_URL),$(PIP) torch --index-url '$(TORCH_INDEX_URL)')
	$(PIP) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Trains the default CartPole config (D3QN + proportional PER); the run lands in runs/.
train: $(STAMP)
	$(BIN)/per-dqn train --config cartpole.yaml

# Serves the curves of every run under runs/ at http://localhost:6006.
tensorboard: $(STAMP)
	$(BIN)/tensorboard --logdir runs

# The tests cover every optional part, so the extras they need are installed first: in the same
# one pip call as the rest on a fresh machine (a second call resolved and built it all again).
# mutmut (the mutation extra) too: the test of `make mutation`'s resume uses its function hashes.
TEST_STAMP := $(VENV)/.installed-test
LEGACY_MINATAR := .minatar-1.0.10/minatar/__init__.py
$(TEST_STAMP): pyproject.toml constraints.txt $(LEGACY_MINATAR)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX_URL),$(PIP) torch --index-url '$(TORCH_INDEX_URL)')
	$(PIP) -e '.[dev,minatar,wandb,reference,ray,docs,mutation]'
	touch $(STAMP) $(TEST_STAMP)

# MinAtar 1.0.10, the release before Seaquest's oxygen fix (1.0.11) that the published MinAtar
# results ran, in a folder of its own: `PYTHONPATH=.minatar-1.0.10 .venv/bin/per-dqn ...` plays
# it (per_dqn/envs/minatar_gym.py), and the tests run it there. Its own dependencies (pandas, seaborn,
# ...) serve only its plots: left out. Not under the constraints file, which pins nothing of it.
minatar-1.0.10: $(LEGACY_MINATAR)
$(LEGACY_MINATAR):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --no-deps --upgrade --target .minatar-1.0.10 minatar==1.0.10

# The docs site (docs/conf.py: Sphinx, MyST markdown, Furo) into build/site: open
# build/site/index.html. Warnings are errors: a broken link or a page in no table of contents
# fails the build. The reference pages are generated from the code as it builds.
docs: $(TEST_STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs build/site
	@echo "the site: build/site/index.html"

# Two pytest-xdist workers, the long tests handed out first and the Ray tests on one worker
# (tests/conftest.py); docs/testing.md gives the time measured from a clean clone on 2 cores.
XDIST := -n 2 --dist loadgroup

test: $(TEST_STAMP)
	$(BIN)/python -m pytest $(XDIST) --durations=25

# The inner loop's tier: everything but the tests marked slow (over ~5 s each, the full CartPole
# result among them), ray (real Ray clusters) and kill (real processes signalled or killed);
# `make test` still runs them all.
test-fast: $(TEST_STAMP)
	$(BIN)/python -m pytest $(XDIST) -m "not slow and not ray and not kill"

# One-line bugs the suite must catch (tests/mutants/mutants.py); a survivor fails the target.
mutants: $(STAMP)
	$(BIN)/python tests/mutants/mutants.py

# Mutation testing by a tool (mutmut, the `mutation` extra) over the modules [tool.mutmut] names
# (in envs/make.py, policy.py and the checkpoint modules only the functions SCOPE in tests/mutants/
# mutation_table.py names): every one-line change mutmut can make, each against the fast tests
# that call the changed function (the trust boundary's readers: only their own test files, FOCUS
# in tests/mutants/mutmut_plugin.py), one worker; then the per-module table, with the
# equivalent mutants of docs/mutation.md set apart (exit 1 below 90% in a module). Hours on 2
# cores, so not part of `make test`. It resumes: with results in mutants/ (git-ignored) it runs
# only the mutants not yet run or not yet caught, after a fresh record of which tests call which
# function (mutmut-stats.json); `rm -rf mutants` starts afresh. The copies of the tests and
# their data are made afresh each time: mutmut copies over them, so a test file deleted or renamed
# since the last run would stay and fail the record against the new code.
mutation: $(TEST_STAMP)
	$(PIP) -e '.[dev,minatar,mutation]'
	rm -rf mutants/mutmut-stats.json mutants/tests mutants/docs mutants/configs mutants/benchmarks
	set -f; names="$$($(BIN)/python tests/mutants/mutation_table.py --run-args)"; \
	  if [ -n "$$names" ]; then $(BIN)/mutmut run --max-children 1 $$names; fi
	$(BIN)/python tests/mutants/mutation_table.py

bench: $(STAMP)
	$(PIP) -e '.[dev,bench]'
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/atari.py

# The report's event reader and unarchive's writer against TensorBoard's, on the MinAtar study's
# archive (about 2 minutes).
.PHONY: bench-events
bench-events: $(STAMP)
	$(BIN)/python benchmarks/events.py

# Whole-loop SPS on CartPole, every replay kind. With AGAINST=PATH (another checkout, e.g.
# `git worktree add /tmp/old dcc030f`): this checkout against PATH, in one run.
bench-train: $(STAMP)
	$(BIN)/python benchmarks/train_loop.py $(if $(AGAINST),--against $(AGAINST))

# The default CartPole run against Stable-Baselines3's DQN with rl-zoo's CartPole settings,
# whole wall time of each (start-up included), side by side.
bench-sb3: $(STAMP)
	$(PIP) -e '.[dev,bench]'
	$(BIN)/python benchmarks/cartpole_vs_sb3.py

# MinAtar Breakout training SPS at minatar.yaml's update ratio: per_dqn (uniform, proportional)
# against Stable-Baselines3's DQN with the same settings, in one run; then the bit storage's
# bytes and times on a real Seaquest stream, shared next observations against whole ones.
bench-minatar: $(TEST_STAMP)
	$(PIP) -e '.[dev,bench,minatar]'
	$(BIN)/python benchmarks/minatar_vs_sb3.py
	$(BIN)/python benchmarks/bit_storage.py

# Packs against single runs (issue 24): the same ablate sweep unpacked and with --pack, CartPole
# (20 seeds x 50k, --pack 10) and MinAtar Breakout (10 x 200k, --pack 5), whole wall time of each;
# about an hour on 2 cores: not part of `bench`.
bench-packs: $(TEST_STAMP)
	$(BIN)/python benchmarks/packs.py

# The Ray backend's overhead: the same sweep of 8 CartPole runs (ablate --replay uniform --seeds 8,
# full budget) on the local backend and on a local Ray cluster, whole wall time of each, in one
# run; the ray extra comes with the test extras. About 2 x 2 sweeps of 8 runs: not part of `bench`.
bench-ray: $(TEST_STAMP)
	$(BIN)/python benchmarks/ray_overhead.py

# Each replay kind's cost per gradient step (sample, learn, update) against proportional's, on
# CartPole and MinAtar Breakout, in one run (a few minutes): docs/benchmarks.md's table.
.PHONY: bench-variants
bench-variants: $(TEST_STAMP)
	$(BIN)/python benchmarks/variants.py

# Ape-X (issue 47) on a local 2-CPU Ray cluster: one replay shard's capacity (blocks in, batches
# of 512 out with their priority updates; three observation shapes), then the actors' env steps
# a second against a single run's acting-only rate, one Ray actor against two (three envs);
# about 6 minutes, on a quiet machine.
.PHONY: bench-apex
bench-apex: $(TEST_STAMP)
	$(BIN)/python benchmarks/apex_shard.py
	$(BIN)/python benchmarks/apex_actors.py

# Every benchmark script at tiny sizes (seconds each; `make test` runs these too). MinAtar's
# scripts need the minatar extra, so it installs what `make test` does.
bench-smoke: $(TEST_STAMP)
	$(BIN)/python -m pytest -m bench_smoke tests/test_benchmarks.py

# Atari-scale env, replay at 1M (vs cpprb and Tianshou), learner and whole-loop SPS (vs SB3),
# peers measured when the bench extra is installed.
.PHONY: bench-atari
bench-atari: $(STAMP)
	$(BIN)/python benchmarks/atari.py

lint: $(STAMP)
	$(BIN)/ruff check per_dqn tests benchmarks docs/conf.py docs/_ext
	$(BIN)/ruff format --check per_dqn tests benchmarks docs/conf.py docs/_ext

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis mutants .minatar-1.0.10
