"""The Ray backend's overhead: the same sweep of CartPole runs through ``per-dqn ablate``, on the
local backend and on Ray, whole wall time of each, side by side in one run.

Goal (issue 15): ``--backend ray`` takes at most 10% more wall time than ``--backend local`` on
the same sweep of 8 CartPole runs.

Both sides run the command a user types, as a fresh process timed from its start to its exit
(interpreter start, imports, the runs, ``report.md`` and, for Ray, starting and stopping the
cluster all included), each into its own fresh sweep dir under a temp dir:

* local: ``python -m per_dqn.cli ablate --config cartpole.yaml --replay uniform --seeds 8
  --workers W --out DIR --set run.device=cpu`` (what ``per-dqn ablate`` runs, with this
  checkout's code): W worker processes;
* ray: the same with ``--backend ray``: a single-node Ray cluster of W CPUs that the command starts
  on loopback (no dashboard, as ``ablate`` starts none unless asked; ``--dashboard`` here adds
  ``ablate --dashboard`` on the Ray side), the storage check, each run a Ray task holding one CPU,
  and the cluster shut down at the end. Ray's temp dir is a fresh short dir under /tmp
  (``RAY_TMPDIR``), removed after.

W is ``--workers`` (default: one per core), the shipped config's full budget per run unless
``--steps`` is given, on CPU. Repeats alternate which side goes first. The table gives each side's
median and min wall time and runs a minute; the ratio ray / local is the medians', against the
goal. The breakdown splits each side's wall at the lines the command prints: start-up (to its
``sweep ...`` line: for Ray, the cluster's start and the storage check, whose ``ray: ...`` line
comes just before), the runs (to the last run's line; for local, its worker processes' start
too), the report (to ``report: ...``; for local, joining its worker processes first) and the exit
(for Ray, the cluster's shutdown), with the mean of the runs' own ``wall_seconds``.

The runs are on CPU with the same seeds on both sides, so they must be bit-identical: the script
checks that every run's ``final_eval_return_mean`` and ``model.pt`` agree across both sides and
every repeat, says so, and exits 1 where they do not. It needs the ``ray`` extra.

    .venv/bin/python benchmarks/ray_overhead.py              # 8 runs of 50k steps a side, 2 repeats
    .venv/bin/python benchmarks/ray_overhead.py --smoke      # 2 runs of 300 steps a side, 1 repeat
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import NamedTuple

from _common import (
    ROOT,
    add_mode_options,
    command_line,
    fill_defaults,
    load_averages,
    machine_line,
    markdown_table,
    median,
    progress_log,
    require_at_least,
    rotated,
)

from per_dqn.config import load_config, resolve_config_path

HAVE_RAY = importlib.util.find_spec("ray") is not None
GOAL = 0.10  # extra wall time of ray over local, as a fraction of local's
SIDES = ("local", "ray")
# Smoke runs: short enough to learn a little and evaluate, as tests/sweeps' tiny sweeps do.
SMOKE_SETS = [
    "train.learning_starts=100", "train.log_interval=100", "train.eval_interval=300",
    "train.eval_episodes=2", "train.final_eval_episodes=3", "train.epsilon_decay_steps=300",
]  # fmt: skip
# The lines of `per-dqn ablate`'s output that split its wall time (prefixes).
SWEEP_LINE, RAY_LINE, RUN_LINE, REPORT_LINE = "sweep ", "ray: ", "[", "report: "
PHASES = ("start-up", "runs", "report", "exit")


class Timed(NamedTuple):
    """One ``ablate`` process: its wall time, when each phase ended (seconds from its start), what
    its runs' summaries say and a digest of each run's ``model.pt``, by run dir."""

    wall: float
    phases: dict[str, float]
    ray_line: str | None
    scores: dict[str, float]
    models: dict[str, str]
    run_seconds: float


def ablate_command(args: argparse.Namespace, side: str, out: Path) -> list[str]:
    """The ``python ARGS`` of one side's ``per-dqn ablate``."""
    command = [
        "-m", "per_dqn.cli", "ablate", "--config", args.config, "--replay", args.replay,
        "--seeds", args.seeds, "--workers", str(args.workers), "--out", str(out),
        "--backend", side, "--set", "run.device=cpu",
    ]  # fmt: skip
    if args.steps is not None:
        command += ["--steps", str(args.steps)]
    if args.pack is not None:
        command += ["--pack", str(args.pack)]
    if args.dashboard and side == "ray":
        command.append("--dashboard")
    for item in args.set:
        command += ["--set", item]
    return command


def run_ablate(args: argparse.Namespace, side: str, out: Path) -> Timed:
    """Runs one side's ``ablate`` as a fresh process, timing it from start to exit and noting when
    each of its marking lines came out; then reads its runs."""
    # This checkout first on the path (Ray's workers inherit it), as _common.run_python puts it;
    # unbuffered, so that each line is timed when it is written.
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1")
    # Ray's sockets live under its temp dir, and a socket path has ~107 characters: short.
    ray_tmp = Path(tempfile.mkdtemp(prefix="prb", dir="/tmp")) if side == "ray" else None
    if ray_tmp is not None:
        env["RAY_TMPDIR"] = str(ray_tmp)
    stderr_file = tempfile.TemporaryFile(mode="w+")
    marks: dict[str, float] = {}
    ray_line = None
    lines = []
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *ablate_command(args, side, out)],
        cwd=out.parent, env=env, stdout=subprocess.PIPE, stderr=stderr_file, text=True,
        start_new_session=True,  # its own group: nothing of it outlives an interrupted benchmark
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.perf_counter() - start
            lines.append(line.rstrip("\n"))
            if line.startswith(RAY_LINE) and ray_line is None:
                ray_line, marks["ray"] = line.strip(), now
            elif line.startswith(SWEEP_LINE) and "start-up" not in marks:
                marks["start-up"] = now
            elif line.startswith(RUN_LINE):
                marks["runs"] = now
            elif line.startswith(REPORT_LINE):
                marks["report"] = now
        returncode = proc.wait()
        wall = time.perf_counter() - start
    finally:
        if proc.poll() is None:
            stop_group(proc)
        reap_group(proc, side)
        if ray_tmp is not None:
            shutil.rmtree(ray_tmp, ignore_errors=True)
    stderr_file.seek(0)
    stderr = stderr_file.read()
    stderr_file.close()
    if returncode != 0:
        tail = (lines + stderr.strip().splitlines())[-20:]
        print("\n".join(tail), file=sys.stderr)
        last = stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(
            f"error: per-dqn ablate --backend {side} exited with {returncode}: {last[0]}"
        )
    missing = [p for p in PHASES[:3] if p not in marks]
    if missing:
        raise SystemExit(
            f"error: per-dqn ablate --backend {side} printed no line for {', '.join(missing)}; "
            f"its output was: {' / '.join(lines)}"
        )
    marks["exit"] = wall
    scores, models, seconds = read_runs(out)
    return Timed(wall, marks, ray_line, scores, models, seconds)


def stop_group(proc: subprocess.Popen) -> None:
    """Stops an ``ablate`` still running (the benchmark interrupted): SIGINT to its group, as
    Ctrl-C would, so that it stops its runs and its Ray cluster; SIGKILL after 60 s."""
    for sig, wait in ((signal.SIGINT, 60.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def reap_group(proc: subprocess.Popen, side: str) -> None:
    """Makes sure nothing of a finished ``ablate`` outlives it (Ray's daemons stay in its process
    group): what is left after 10 s is killed, and said on stderr, since it is a leak."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return  # the group is empty
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    print(
        f"warning: processes of per-dqn ablate --backend {side} outlived it by 10 s; killed",
        file=sys.stderr,
    )
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def read_runs(out: Path) -> tuple[dict[str, float], dict[str, str], float]:
    """Each run's ``final_eval_return_mean`` and a SHA-256 of its ``model.pt``, by run dir
    relative to the sweep dir; and the mean of the runs' ``wall_seconds``."""
    scores, models, seconds = {}, {}, []
    for path in sorted(out.rglob("summary.json")):
        run = path.parent.relative_to(out).as_posix()
        summary = json.loads(path.read_text(encoding="utf-8"))
        scores[run] = summary["final_eval_return_mean"]
        seconds.append(summary["wall_seconds"])
        models[run] = hashlib.sha256((path.parent / "model.pt").read_bytes()).hexdigest()
    if not scores:
        raise SystemExit(f"error: sweep dir {out}: no run wrote a summary.json")
    return scores, models, sum(seconds) / len(seconds)


def disagreements(runs: dict[str, list[Timed]]) -> list[str]:
    """Where a run's score or model differs from the first local repeat's: one line each."""
    reference = runs["local"][0]
    found = []
    for side, results in runs.items():
        for repeat, result in enumerate(results):
            if set(result.scores) != set(reference.scores):
                found.append(
                    f"{side} repeat {repeat + 1} ran {sorted(result.scores)}, local repeat 1 "
                    f"{sorted(reference.scores)}"
                )
                continue
            for run, score in result.scores.items():
                if score != reference.scores[run]:
                    found.append(
                        f"{run}: {side} repeat {repeat + 1} final_eval_return_mean {score!r}, "
                        f"local repeat 1 {reference.scores[run]!r}"
                    )
                if result.models[run] != reference.models[run]:
                    found.append(f"{run}: {side} repeat {repeat + 1} model.pt differs")
    return found


def render(args: argparse.Namespace, runs: dict[str, list[Timed]], found: list[str]) -> str:
    """The wall-time table, the ratio against the goal, the breakdown, and whether the runs agree
    (``found``: ``disagreements``)."""
    labels = {
        "local": f"local: --workers {args.workers}",
        "ray": f"ray: local cluster of {args.workers} CPUs",
    }
    n_runs = len(runs["local"][0].scores)
    walls = {side: [r.wall for r in results] for side, results in runs.items()}
    rows = [
        [labels[side], f"{median(w):.1f}", f"{min(w):.1f}", f"{n_runs}",
         f"{n_runs / median(w) * 60:.2f}", ", ".join(f"{x:.1f}" for x in w)]
        for side, w in walls.items()
    ]  # fmt: skip
    headers = ["backend", "wall s (median)", "min", "runs", "runs/min", "wall s per repeat"]
    lines = [markdown_table(headers, rows), ""]
    ratio = median(walls["ray"]) / median(walls["local"])
    paired = [r / loc for r, loc in zip(walls["ray"], walls["local"], strict=True)]
    verdict = "met" if ratio - 1 <= GOAL else "NOT met"
    lines.append(
        f"ray / local wall time (medians): {ratio:.3f} (per repeat {min(paired):.3f} to "
        f"{max(paired):.3f}): {(ratio - 1) * 100:+.1f}% extra wall time; goal <= "
        f"{GOAL * 100:.0f}%: {verdict}."
    )
    lines.append("")
    # The phases: the seconds between the marking lines, medians over the repeats.
    spans: dict[str, dict[str, float]] = {}
    breakdown = []
    for side, results in runs.items():
        spans[side] = {}
        previous = [0.0] * len(results)
        for phase in PHASES:
            ends = [r.phases[phase] for r in results]
            spans[side][phase] = median([e - p for e, p in zip(ends, previous, strict=True)])
            previous = ends
        run_s = median([r.run_seconds for r in results])
        breakdown.append([labels[side], *(f"{spans[side][p]:.1f}" for p in PHASES), f"{run_s:.1f}"])
    lines.append(
        markdown_table(["backend (s, medians)", *PHASES, "one run's own wall (mean)"], breakdown)
    )
    lines.append("")
    ray_start = median([r.phases["ray"] for r in runs["ray"]])
    fixed = sum(spans["ray"][p] - spans["local"][p] for p in ("start-up", "exit"))
    rest = sum(spans["ray"][p] - spans["local"][p] for p in ("runs", "report"))
    lines.append(
        f"Ray's fixed cost: its `ray: ...` line came {ray_start:.1f} s into "
        f"{median(walls['ray']):.1f} s; start-up and exit took {fixed:+.1f} s against local's, "
        f"runs and report {rest:+.1f} s ({runs['ray'][0].ray_line})."
    )
    repeats = len(runs["local"])
    if found:
        lines.append("Summaries DISAGREE between the backends (CPU runs must be bit-identical):")
        lines += [f"  {line}" for line in found]
    else:
        lines.append(
            f"Summaries agree: final_eval_return_mean and model.pt identical for all {n_runs} "
            f"runs, on both backends, in each of {repeats} repeat(s)."
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; the steps default to the config's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser)
    parser.add_argument("--config", default="cartpole.yaml")
    parser.add_argument("--replay", default="uniform", help="ablate's --replay (default uniform)")
    parser.add_argument("--seeds", help="ablate's --seeds (8; smoke 2)")
    parser.add_argument("--steps", type=int, help="env steps a run (the config's; smoke 300)")
    parser.add_argument("--workers", type=int, help="workers and Ray CPUs (one per core)")
    parser.add_argument("--repeats", type=int, help="sweeps a side (2; smoke 1)")
    parser.add_argument("--pack", type=int, help="ablate's --pack on both sides (none)")
    parser.add_argument(
        "--dashboard", action="store_true", help="ablate's --dashboard on the Ray side (off)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a config override for every run, as ablate's --set (repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    load_config(resolve_config_path(args.config))  # a bad --config: its one line, before any run
    cores = os.cpu_count() or 1
    fill_defaults(
        args,
        {"seeds": ("8", None, "2"), "steps": (None, None, 300), "repeats": (2, None, 1),
         "workers": (cores,) * 3},
    )  # fmt: skip
    if args.smoke:
        args.set = [*SMOKE_SETS, *args.set]
    require_at_least(parser, args, 1, "repeats", "workers")
    if args.steps is not None:
        require_at_least(parser, args, 1, "steps")
    if not HAVE_RAY:
        parser.error("ray is not importable: the `ray` extra (`make bench-ray` installs it)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log = progress_log()
    print(f"# {machine_line({'torch': version('torch'), 'ray': version('ray')})}")
    steps = f"{args.steps:,} env steps" if args.steps is not None else "the config's env steps"
    steps += " a run"
    if args.pack is not None:
        steps += f", --pack {args.pack}"
    if args.dashboard:
        steps += ", --dashboard on the Ray side"
    print(
        f"# per-dqn ablate --config {args.config} --replay {args.replay} --seeds {args.seeds}: "
        f"{steps}, --workers {args.workers}, CPU, {args.repeats} repeat(s); load "
        f"{load_averages()}; command `{command_line()}`"
    )
    runs: dict[str, list[Timed]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        for repeat in range(args.repeats):
            for side in rotated(SIDES, repeat):
                result = run_ablate(args, side, Path(tmp) / f"{side}-{repeat}")
                runs[side].append(result)
                log(f"repeat {repeat + 1}: {side} {result.wall:.1f} s")
    print()
    found = disagreements(runs)
    print(render(args, runs, found))
    if found:
        raise SystemExit("error: the backends' runs differ (listed above)")


if __name__ == "__main__":
    main()
