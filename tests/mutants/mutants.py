"""One-line mutants the test suite must catch: `make mutants`, or `tests/mutants/mutants.py`.

Each mutant is a bug someone could plausibly write, applied as one textual change to a copy of the
repo; the listed test files then run against that copy and at least one test must fail. A mutant
that survives means the suite has lost a tooth: the table says which, and the exit code is 1.
``tests/test_mutants.py`` (part of `make test`) checks that every ``old`` text still occurs
exactly once, so this list cannot rot silently after a refactor.

    python tests/mutants/mutants.py                 # all, one after another (a few minutes)
    python tests/mutants/mutants.py --only slots-reversed --only stratified-off
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutant:
    """A one-line bug.

    Attributes:
        name: short id, for ``--only``.
        path: the file it changes, relative to the repo root.
        old: text that occurs exactly once in ``path`` (it may carry a line of context).
        new: what replaces it.
        tests: pytest paths or node ids (``file::test``) to run against the mutant (the ones
            expected to catch it).
        why: the bug, in words.
    """

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "slots-reversed", "per_dqn/agent/result.py",
        "return LearnResult(PriorityUpdate(indices, signal.compute(inputs)), metrics)",
        "return LearnResult(PriorityUpdate(indices[::-1], signal.compute(inputs)), metrics)",
        ("tests/test_train.py",),
        "TD errors written back to slots other than those sampled",
    ),
    Mutant(
        "reward-clip-off", "per_dqn/training/loop.py",
        "learn_rewards = np.clip(rewards, -1.0, 1.0) if config.clip_rewards else rewards",
        "learn_rewards = rewards",
        ("tests/test_atari.py",),
        "reward clipping removed from the Atari path",
    ),
    Mutant(
        "gradient-steps-1", "per_dqn/training/loop.py",
        "for _ in range(train.gradient_steps):",
        "for _ in range(1):",
        ("tests/test_train.py",),
        "train.gradient_steps ignored (always 1)",
    ),
    Mutant(
        "eval-greedy", "per_dqn/training/run.py",
        "loop.agent.num_actions, loop.envs.eval, episodes, train.eval_epsilon,",
        "loop.agent.num_actions, loop.envs.eval, episodes, 0.0,",
        ("tests/test_train.py",),
        "the periodic evaluation ignores train.eval_epsilon",
    ),
    Mutant(
        "priority-age-dropped", "per_dqn/training/health.py",
        "self.record_priority_update(updated, env_step)",
        "pass",
        ("tests/test_train.py",),
        "the priority-age (staleness) update dropped",
    ),
    Mutant(
        "stratified-off", "per_dqn/memory/trees.py",
        "masses[k] = (k + strata_u[k]) * segment",
        "masses[k] = strata_u[k] * total",
        ("tests/memory",),
        "stratified sampling replaced by independent draws over the whole range",
    ),
    Mutant(
        "tree-float32", "per_dqn/memory/trees.py",
        "            sum_nodes[p] = sum_nodes[2 * p] + sum_nodes[2 * p + 1]",
        "            sum_nodes[p] = np.float32(sum_nodes[2 * p] + sum_nodes[2 * p + 1])",
        ("tests/memory",),
        "the sum tree's inner nodes rounded (drift from the exact sum of the leaves)",
    ),
    Mutant(
        "first-error-wins", "per_dqn/memory/trees.py",
        "    for k in range(batch):\n        raw = min(td_errors[k], clip) + eps",
        "    for k in range(batch - 1, -1, -1):\n        raw = min(td_errors[k], clip) + eps",
        ("tests/memory",),
        "a slot sampled twice keeps its first TD error instead of its last",
    ),
    Mutant(
        "rank-ties-oldest", "per_dqn/memory/heap.py",
        "return ka > kb or (ka == kb and heap_stamp[a] > heap_stamp[b])",
        "return ka > kb",
        ("tests/memory", "tests/test_replay_stream.py"),
        "rank-based PER: a new transition ties with clipped errors instead of ranking first",
    ),
    Mutant(
        "alpha-not-on-insert", "per_dqn/memory/proportional.py",
        "leaf = self.max_priority**self.alpha",
        "leaf = self.max_priority",
        ("tests/memory",),
        "new transitions enter with the raw max priority, alpha not applied",
    ),
    Mutant(
        "bits-link-older", "per_dqn/memory/bits.py",
        "        for k in range(n - skip):\n            self._place(",
        "        for k in reversed(range(n - skip)):\n            self._place(",
        ("tests/memory/test_bit_storage.py",),
        "a batch linked last item first: a next obs links to an older slot of the same batch, "
        "which the ring overwrites first",
    ),
    Mutant(
        "shared-stream", "per_dqn/training/run.py",
        "self.memory = make_memory(config.replay, self.spec, self.seeds.replay)",
        "self.memory = make_memory(config.replay, self.spec, run.seed)",
        ("tests/test_seeding.py",),
        "the replay sampler seeded with run.seed, as exploration once was",
    ),
    Mutant(
        "beta-stuck", "per_dqn/training/loop.py",
        "self.beta = LinearSchedule(replay.beta0, replay.beta_end, anneal_steps)",
        "self.beta = LinearSchedule(replay.beta0, replay.beta0, 1)",
        ("tests/test_train.py",),
        "beta never annealed to 1",
    ),
    Mutant(
        "beta-schedule-ignored", "per_dqn/training/loop.py",
        "anneal_steps = replay.beta_anneal_steps or train.total_env_steps",
        "anneal_steps = train.total_env_steps",
        ("tests/test_published_settings.py",),
        "replay.beta_anneal_steps ignored: a short run of a long schedule anneals beta to 1",
    ),
    Mutant(
        "truncation-terminates", "per_dqn/training/loop.py",
        "obs, actions, learn_rewards, next_obs, learn_terminated, truncated, active",
        "obs, actions, learn_rewards, next_obs, learn_terminated | truncated, truncated, active",
        ("tests/test_train.py",),
        "a time-limit truncation stored as a termination (no bootstrap)",
    ),
    Mutant(
        "double-dqn-off", "per_dqn/agent/dqn.py",
        "best = next_q_online.argmax(dim=1, keepdim=True)",
        "best = next_q_target.argmax(dim=1, keepdim=True)",
        ("tests/agent",),
        "Double DQN's action chosen by the target net",
    ),
    Mutant(
        "is-weights-ignored", "per_dqn/agent/objectives.py",
        "return ObjectiveOutput((weights * per_sample).mean(dim=-1), per_sample, {})",
        "return ObjectiveOutput(per_sample.mean(dim=-1), per_sample, {})",
        ("tests/agent",),
        "importance-sampling weights left out of the loss",
    ),
    Mutant(
        "iqm-is-mean", "per_dqn/sweeps/stats.py",
        "cut = int(0.25 * n)",
        "cut = 0",
        ("tests/sweeps/test_stats.py",),
        "the report's IQM trims nothing (the mean, which one outlier seed moves)",
    ),
    Mutant(
        "profile-at-or-above", "per_dqn/sweeps/stats.py",
        "return (scores[..., None] > taus).mean(axis=(-3, -2))",
        "return (scores[..., None] >= taus).mean(axis=(-3, -2))",
        ("tests/sweeps/test_stats.py",),
        "performance profiles count scores equal to tau (rliable's are strictly above)",
    ),
    Mutant(
        "auc-is-final-score", "per_dqn/sweeps/measure.py",
        "auc = normalized_auc(run.curve) if run.curve else None",
        "auc = run.score",
        ("tests/sweeps/test_report.py",),
        "the report's AUC column repeats the final score",
    ),
    Mutant(
        "min-max-from-zero", "per_dqn/sweeps/measure.py",
        "bounds[(env, metric)] = (min(values), max(values))",
        "bounds[(env, metric)] = (0.0, max(values))",
        ("tests/sweeps/test_report.py",),
        "games normalised by their maximum alone, not their range",
    ),
    Mutant(
        "reuse-common-keys-only", "per_dqn/sweeps/reuse.py",
        "return flatten_config(filled) == flatten_config(planned)",
        "return not runs.config_differences(held, planned)",
        ("tests/sweeps/test_ablate.py::"
         "test_reuse_takes_no_run_without_weights_or_with_a_key_only_one_side_has",),
        "ablate --reuse takes a run lacking a key the plan sets off its default, or with one more",
    ),
    Mutant(
        "readback-follows-out", "per_dqn/rundir/readback.py",
        "if os.path.commonpath([base, target]) != base or target == base:",
        "if target == base:",
        ("tests/test_readback.py::test_a_link_out_of_the_dir_is_refused_before_it_is_opened",),
        "a file read back through a link out of its dir (issue 43: /dev/zero, another run's)",
    ),
    Mutant(
        "json-depth-counts-strings", "per_dqn/rundir/readback.py",
        "for match in _BRACKET.finditer(_JSON_STRING.sub('\"\"', text)):",
        "for match in _BRACKET.finditer(text):",
        ("tests/test_readback.py::test_json_depth_matches_the_parsed_value_s_depth",),
        "brackets inside JSON strings counted as nesting (a valid record refused as too deep)",
    ),
    Mutant(
        "sweep-links-unchecked", "per_dqn/sweeps/plan.py",
        "    check_run_dir_paths(out, sweep.jobs)\n",
        "",
        ("tests/sweeps/test_sweep_dir_trust.py::"
         "test_a_run_dir_that_is_a_link_is_refused_by_name_and_its_target_kept",),
        "ablate plans a sweep whose run dir is a link (issue 43, E1: it deleted the link's target)",
    ),
    Mutant(
        "sweep-set-read-by-all", "per_dqn/sweeps/plan.py",
        "read.update(o.path for o in kept)",
        "read.update(o.path for o in rest)",
        ("tests/test_kind_keys.py::test_a_sweep_wide_key_none_of_its_runs_reads_is_refused",),
        "a sweep-wide --set that none of the sweep's runs reads counted as read (run as if unset)",
    ),
    Mutant(
        "optimizer-keys-swapped", "per_dqn/config/models.py",
        "OPTIMIZER_KEYS.items() if name != optimizer for key in keys",
        "OPTIMIZER_KEYS.items() if name == optimizer for key in keys",
        ("tests/test_kind_keys.py",),
        "an optimiser's own settings refused and the other optimiser's accepted",
    ),
    Mutant(
        "clear-through-link", "per_dqn/sweeps/job.py",
        "    if run_dir.is_symlink():\n",
        "    if False:\n",
        ("tests/sweeps/test_sweep_dir_trust.py::test_clear_run_dir_refuses_a_link_where_it_deletes",),
        "clear_run_dir deletes through a run dir that is a link",
    ),
    Mutant(
        "checkpoint-reread-by-path", "per_dqn/rundir/checkpoint.py",
        "parts[stem] = load_weights(blob, str(path / name))",
        "parts[stem] = load_weights((path / name).read_bytes(), str(path / name))",
        ("tests/test_readback.py::"
         "test_agent_pt_swapped_just_after_its_check_is_not_what_loads",),
        "agent.pt opened again by path after it was verified (issue 43, E3: a swap loads)",
    ),
    Mutant(
        "stripped-run-id-read", "per_dqn/training/checkpoints.py",
        "if ours is not None and (legacy is None or not isinstance(step, int) or step > legacy):",
        "if ours is not None and legacy is not None and step > legacy:",
        ("tests/test_readback.py::test_a_checkpoint_stripped_of_its_run_id_and_re_signed_is_refused",),
        "a checkpoint stripped of its run id read unchecked in a run dir that has one",
    ),
    Mutant(
        "pack-first-member-discount", "per_dqn/agent/pack.py",
        "agent._gamma_powers[batches[k].n_steps] * ~batches[k].terminated",
        "agents[0]._gamma_powers[batches[k].n_steps] * ~batches[k].terminated",
        ("tests/test_packs.py::test_members_that_differ_in_a_member_key_each_run_as_alone",),
        "every member of a pack discounts with the first member's gamma (issue 46)",
    ),
    Mutant(
        "run-track-trusted", "per_dqn/config/trust.py",
        "for key, value in (tracking_keys(config) if trains else {}).items()",
        "for key, value in {}.items()",
        ("tests/test_trust.py",),
        "a run dir's run.track starts wandb with the user's key on resume (issue 43, E2)",
    ),
    Mutant(
        "shard-slots-local", "per_dqn/distributed/shards.py",
        "return self.offset + serials % self.shard.memory.capacity",
        "return serials % self.shard.memory.capacity",
        ("tests/distributed/test_replay_shards.py::test_the_learner_s_view_of_two_shards_by_hand",),
        "a replay shard hands back its own slots, not the run's: two shards' transitions share "
        "the health panel's slots and the learner counts them in the wrong shard (issue 47)",
    ),
    Mutant(
        "restart-keeps-its-step", "per_dqn/sweeps/events.py",
        "            if kind[r] == _SESSION_LOG and status[r] == _SESSION_START:\n"
        "                for p in range(count):\n"
        "                    if p_step[p] >= s:",
        "            if kind[r] == _SESSION_LOG and status[r] == _SESSION_START:\n"
        "                for p in range(count):\n"
        "                    if p_step[p] > s:",
        ("tests/sweeps/test_events.py",),
        "the report's reader keeps a resumed run's point at its purge step, which TensorBoard "
        "drops: the curve holds the step twice",
    ),
    Mutant(
        "two-whats-merged", "per_dqn/sweeps/events.py",
        "if at < 0 or whats > 1:", "if at < 0:",
        ("tests/sweeps/test_events.py::test_the_compiled_decoder_reads_what_protobuf_reads",),
        "an event holding two oneof fields is decoded as both, not as the last one protobuf "
        "keeps: a summary cleared by a later file version still counts",
    ),
)  # fmt: skip


def check(mutant: Mutant, root: Path = ROOT) -> None:
    """Raises ValueError unless ``mutant.old`` occurs exactly once in its file."""
    text = (root / mutant.path).read_text(encoding="utf-8")
    count = text.count(mutant.old)
    if count != 1:
        raise ValueError(f"mutant {mutant.name}: {mutant.path} holds its text {count} times")


def _copy_repo(dest: Path) -> None:
    """Copies the files git tracks or would track (not .venv, runs/ or caches) into ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        else:
            shutil.copy2(source, target)


def run(mutant: Mutant) -> tuple[str, str, float]:
    """Applies ``mutant`` to a copy of the repo and runs its tests there.

    Returns:
        (outcome, detail, seconds): ``caught`` with the first failing test, ``SURVIVED``, or
        ``ERROR`` (the mutant did not even import: not a useful mutant) with pytest's last line.
    """
    check(mutant)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        copy = Path(tmp)
        _copy_repo(copy)
        path = copy / mutant.path
        path.write_text(path.read_text(encoding="utf-8").replace(mutant.old, mutant.new, 1))
        # The copy's own per_dqn comes first on sys.path (cwd), ahead of any installed one.
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
             *mutant.tests],
            cwd=copy, capture_output=True, text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )  # fmt: skip
    seconds = time.perf_counter() - start
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0:
        return "SURVIVED", lines[-1] if lines else "", seconds
    failed = [line.split(" ", 2)[1] for line in lines if re.match(r"(FAILED|ERROR) ", line)]
    if proc.returncode == 1 and failed:
        return "caught", failed[0], seconds
    return "ERROR", lines[-1] if lines else proc.stderr.strip()[-200:], seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", help="run only this mutant (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        print(f"error: --only: unknown mutant(s) {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if args.list:
        for m in chosen:
            print(f"{m.name:22} {m.path:28} {m.why}")
        return 0
    bad = 0
    print(f"{'mutant':22} {'outcome':9} {'s':>5}  caught by / detail")
    for m in chosen:
        outcome, detail, seconds = run(m)
        bad += outcome != "caught"
        print(f"{m.name:22} {outcome:9} {seconds:5.0f}  {detail}", flush=True)
    print(f"{len(chosen) - bad} of {len(chosen)} mutants caught")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
