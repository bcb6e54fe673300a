"""Whole-loop speed on CartPole: every replay kind (``per_dqn.memory.KINDS``), in one run; or this
checkout's loop against another checkout's (``--against``), in one run.

Each repeat trains the same config (same seed, same hyperparameters) once per memory kind, in
rotating order so that a slow spell of the machine is shared out; env steps per second are the
loop's own (``summary.json``'s ``env_steps / wall_seconds``: acting, storing, sampling, learning,
priority updates and logging), with periodic evaluation switched off so that only the loop is
timed. An untimed warm-up run of each kind comes first. The PER overhead is
``uniform SPS / PER SPS`` of the medians (1.15 = 15 % slower).

``--against PATH`` compares two commits: PATH is another checkout (``git worktree add``). Each
repeat then runs the kinds twice in fresh processes (``benchmarks/_train_child.py``), once with
this checkout and once with PATH first on ``PYTHONPATH``, alternating which goes first, with the
same settings; the table holds both SPS columns and new/old (this checkout / PATH). Each process
warms its kinds up first. Each side trains its own copy of ``--config``: the resolved configs are
compared and their differences listed.

    .venv/bin/python benchmarks/train_loop.py                 # 20k env steps x 3 repeats
    .venv/bin/python benchmarks/train_loop.py --steps 50000 --repeats 5
    git worktree add /tmp/old-dcc030f dcc030f
    .venv/bin/python benchmarks/train_loop.py --against /tmp/old-dcc030f   # old commit vs this
    .venv/bin/python benchmarks/train_loop.py --smoke         # a few seconds, for make test
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml
from _common import (
    ROOT,
    add_mode_options,
    check_finished,
    command_line,
    fill_defaults,
    machine_line,
    markdown_table,
    median,
    require_at_least,
    rotated,
    run_python,
)

from per_dqn.memory import KINDS

CHILD = Path(__file__).resolve().parent / "_train_child.py"


def in_process(args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, int]]:
    """This checkout's runs, in this process: one warm-up per kind, then the repeats."""
    from _train_child import load, one_run, overrides

    sps: dict[str, list[float]] = {kind: [] for kind in args.kinds}
    updates: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-train-loop-") as tmp:
        root = Path(tmp)
        # Warm-up, not timed: first-call costs (numba's kernels, torch's lazy imports).
        for kind in args.kinds:
            settings = overrides(kind, args.warmup_steps, args.seed, args.learning_starts)
            one_run(load(args.config, settings), args.config, root / f"warm-up-{kind}")
        for repeat in range(args.repeats):
            for kind in rotated(args.kinds, repeat):
                settings = overrides(kind, args.steps, args.seed, args.learning_starts)
                run_dir = root / f"{kind}-{repeat}"
                summary = one_run(load(args.config, settings), args.config, run_dir)
                sps[kind].append(summary["env_steps"] / summary["wall_seconds"])
                updates[kind] = summary["update_steps"]
    return sps, updates


def render_kinds(args: argparse.Namespace, sps: dict[str, list[float]], updates: dict) -> str:
    """The one-checkout table and the PER overhead verdict."""
    rows = []
    base = median(sps["uniform"]) if "uniform" in sps else None
    for kind in args.kinds:
        values = sps[kind]
        mid = median(values)
        overhead = "n/a" if base is None else f"{base / mid:.3f}x"
        rows.append(
            [kind, f"{mid:,.0f}", f"{min(values):,.0f}", f"{max(values):,.0f}",
             f"{updates[kind]:,}", overhead]
        )  # fmt: skip
    lines = [
        markdown_table(["replay", "SPS (median)", "min", "max", "updates", "overhead"], rows),
    ]
    per = [k for k in args.kinds if k != "uniform"]
    if base is not None and per:
        worst = max(base / median(sps[k]) for k in per)
        verdict = "within" if worst <= 1.15 else "NOT within"
        lines.append(
            f"\nPER overhead (uniform SPS / PER SPS, worst kind): {worst:.3f}x, {verdict} 15 %"
        )
    return "\n".join(lines)


def git_head(root: Path) -> str:
    """The short commit a checkout is at, or why there is none."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    except OSError:
        return "git not found"
    return done.stdout.strip() if done.returncode == 0 else "not a git checkout"


def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as ``{"a.b": value}``."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flat(value, f"{prefix}{key}."))
    return {key.rstrip("."): value for key, value in out.items()}


def config_differences(new_yaml: str, old_yaml: str) -> list[str]:
    """``key: new X, old Y`` for every resolved config key the two sides do not share."""
    new, old = flat(yaml.safe_load(new_yaml)), flat(yaml.safe_load(old_yaml))
    missing = "(absent)"
    return [
        f"{key}: new {new.get(key, missing)}, old {old.get(key, missing)}"
        for key in sorted(new.keys() | old.keys())
        if new.get(key, missing) != old.get(key, missing)
    ]


def against(args: argparse.Namespace) -> str:
    """Both checkouts' runs, each repeat in two fresh processes; the comparison table."""
    sides = {"new": ROOT, "old": args.against}
    sps: dict[str, dict[str, list[float]]] = {side: {k: [] for k in args.kinds} for side in sides}
    seen: dict[str, dict[str, Any]] = {}
    for repeat in range(args.repeats):
        for side in rotated(list(sides), repeat):
            kinds = rotated(args.kinds, repeat)
            child_args = [
                str(CHILD), "--config", args.config, "--kinds", ",".join(kinds),
                "--steps", str(args.steps), "--seed", str(args.seed),
                "--warmup-steps", str(args.warmup_steps),
            ]  # fmt: skip
            if args.learning_starts is not None:
                child_args += ["--learning-starts", str(args.learning_starts)]
            done = run_python(child_args, root=sides[side], cwd=sides[side])
            check_finished(f"the {side} side's runs ({sides[side]})", done)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            seen[side] = result
            for kind, run in result["runs"].items():
                sps[side][kind].append(run["sps"])
    rows = []
    for kind in args.kinds:
        new, old = sps["new"][kind], sps["old"][kind]
        paired = [a / b for a, b in zip(new, old, strict=True)]
        rows.append(
            [
                kind,
                f"{median(new):,.0f}",
                ", ".join(f"{v:,.0f}" for v in new),
                f"{median(old):,.0f}",
                ", ".join(f"{v:,.0f}" for v in old),
                f"{median(new) / median(old):.3f}x",
                f"{min(paired):.3f}x to {max(paired):.3f}x",
            ]
        )
    headers = [
        "replay",
        "new SPS (median)",
        "new per repeat",
        "old SPS (median)",
        "old per repeat",
        "new/old",
        "new/old per repeat",
    ]
    worst = min(median(sps["new"][k]) / median(sps["old"][k]) for k in args.kinds)
    lines = [
        f"# new: {seen['new']['per_dqn']} (git {git_head(ROOT)})",
        f"# old: {seen['old']['per_dqn']} (git {git_head(args.against)})",
        "",
        markdown_table(headers, rows),
        "",
        f"new/old SPS, worst kind: {worst:.3f}x ({'no' if worst >= 1 else 'some'} slow-down; "
        f"repeats alternate which side goes first, each side in a fresh process)",
    ]
    differences = config_differences(seen["new"]["config"], seen["old"]["config"])
    if differences:
        lines.append("Resolved configs differ (new vs old): " + "; ".join(differences))
    else:
        lines.append("Resolved configs identical.")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser)
    parser.add_argument("--config", default="cartpole.yaml")
    parser.add_argument("--steps", type=int, help="env steps per run (20000; smoke 400)")
    parser.add_argument("--repeats", type=int, help="runs per kind (3; smoke 1)")
    parser.add_argument(
        "--learning-starts", type=int, help="train.learning_starts (the config's; smoke 200)"
    )
    parser.add_argument(
        "--warmup-steps", type=int, help="env steps of each untimed warm-up run (2000; smoke 250)"
    )
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help="comma-separated replay kinds (default all)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--against", type=Path, help="another checkout (git worktree) to compare this one with"
    )
    args = parser.parse_args(argv)
    fill_defaults(
        args,
        {
            "steps": (20_000, 20_000, 400),
            "repeats": (3, 3, 1),
            "warmup_steps": (2_000, 2_000, 250),
            "learning_starts": (None, None, 200),
        },
    )
    require_at_least(parser, args, 1, "steps", "repeats", "warmup_steps")
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not args.kinds or set(args.kinds) - set(KINDS):
        parser.error(f"--kinds must name some of {', '.join(KINDS)}, got {args.kinds}")
    if args.against is not None:
        args.against = args.against.resolve()
        if not (args.against / "per_dqn" / "__init__.py").is_file():
            parser.error(f"--against: {args.against} holds no per_dqn/ package (not a checkout)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.against is None:
        # Imported here, not at the top: with --against this process trains nothing, and the
        # import costs seconds (torch).
        importlib.import_module("_train_child")
    print(f"# {machine_line({'torch': version('torch'), 'numpy': version('numpy')})}")
    print(
        f"# config {args.config}, {args.steps:,} env steps per run, {args.repeats} repeats; "
        f"command `{command_line()}`"
    )
    if args.against is not None:
        print(against(args))
        return
    sps, updates = in_process(args)
    print()
    print(render_kinds(args, sps, updates))


if __name__ == "__main__":
    main()
