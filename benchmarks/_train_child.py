"""The training runs of ``benchmarks/train_loop.py``, with whichever ``per_dqn`` the path holds.

Not a benchmark on its own. ``train_loop.py`` calls ``measure`` in its own process; with
``--against PATH`` it runs this file as a script twice per repeat, once with each checkout first
on ``PYTHONPATH``, and reads the one JSON line it prints. It does not import ``_common`` (which
puts the checkout holding this file first on ``sys.path``), so the code it times is the one
``PYTHONPATH`` names, and it works on every layout the package has had:
``per_dqn.training.run.Trainer`` now, ``per_dqn.run.Trainer`` before the layout of subpackages
(0a54d7b and older), ``per_dqn.train.Trainer`` before the redesign (dcc030f and older); each takes
``(config, config_name)`` and ``run(run_dir)`` returns the summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import per_dqn
from per_dqn.config import load_config, parse_override, resolve_config_path

PACKAGE = Path(per_dqn.__file__).absolute().parent

# Chosen by the file, not by trying the import: an editable install of another checkout puts a
# finder on sys.meta_path that serves any per_dqn submodule this checkout lacks from that one.
if (PACKAGE / "training" / "run.py").is_file():
    from per_dqn.training.run import Trainer
elif (PACKAGE / "run.py").is_file():
    from per_dqn.run import Trainer  # type: ignore[no-redef]  # before the subpackages
else:
    from per_dqn.train import Trainer  # type: ignore[no-redef]  # before the redesign


def foreign_modules() -> list[str]:
    """``per_dqn`` modules imported from outside ``PACKAGE`` (see the note on the finder)."""
    return sorted(
        f"{name} ({module.__file__})"
        for name, module in list(sys.modules.items())
        if (name == "per_dqn" or name.startswith("per_dqn."))
        and getattr(module, "__file__", None)
        and not Path(module.__file__).absolute().is_relative_to(PACKAGE)
    )


def overrides(kind: str, steps: int, seed: int, learning_starts: int | None) -> list[str]:
    """The ``--set`` overrides of one timed run: periodic evaluation off, one final episode."""
    out = [
        f"replay.kind={kind}",
        f"train.total_env_steps={steps}",
        f"run.seed={seed}",
        "run.device=cpu",
        "train.eval_interval=0",
        "train.final_eval_episodes=1",
    ]
    if learning_starts is not None:
        out.append(f"train.learning_starts={learning_starts}")
    return out


def load(config_name: str, settings: list[str]) -> Any:
    """The config ``config_name`` (a path or a shipped config's name) with ``settings`` applied."""
    return load_config(
        resolve_config_path(config_name), [parse_override(text) for text in settings]
    )


def one_run(config: Any, config_name: str, run_dir: Path) -> dict[str, Any]:
    """Trains once and returns the summary."""
    trainer = Trainer(config, Path(config_name).stem)
    try:
        return trainer.run(run_dir)
    finally:
        trainer.close()


def measure(
    config_name: str,
    kinds: list[str],
    steps: int,
    seed: int,
    learning_starts: int | None,
    warmup_steps: int,
) -> dict[str, dict[str, Any]]:
    """Trains once per kind, in the given order, after an untimed warm-up run of each kind.

    The warm-up takes the first-call costs out of the timed runs: numba loading (or, the first
    time ever, compiling) each kind's kernels, torch's lazy imports and first allocations.

    Returns:
        Per kind: ``sps`` (``env_steps / wall_seconds`` of the summary: acting, storing,
        sampling, learning, priority updates and logging) and ``update_steps``.
    """
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-train-loop-") as tmp:
        root = Path(tmp)
        for kind in kinds:
            config = load(config_name, overrides(kind, warmup_steps, seed, learning_starts))
            one_run(config, config_name, root / f"warm-up-{kind}")
        for kind in kinds:
            config = load(config_name, overrides(kind, steps, seed, learning_starts))
            summary = one_run(config, config_name, root / kind)
            out[kind] = {
                "sps": summary["env_steps"] / summary["wall_seconds"],
                "update_steps": summary["update_steps"],
            }
    return out


def main() -> None:
    """Prints one JSON line: where ``per_dqn`` came from, the resolved config, the runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--kinds", required=True, help="comma-separated, in the order to run")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--learning-starts", type=int, default=None)
    parser.add_argument("--warmup-steps", type=int, required=True)
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    runs = measure(
        args.config, kinds, args.steps, args.seed, args.learning_starts, args.warmup_steps
    )
    config = load(args.config, overrides(kinds[0], args.steps, args.seed, args.learning_starts))
    foreign = foreign_modules()
    if foreign:
        raise SystemExit(f"error: per_dqn modules from outside {PACKAGE}: {', '.join(foreign)}")
    where = str(Path(per_dqn.__file__).parent)
    print(json.dumps({"per_dqn": where, "config": config.to_yaml(), "runs": runs}))


if __name__ == "__main__":
    main()
