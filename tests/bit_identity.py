"""Short real runs trained by this checkout and by an earlier commit write the same bytes.

    .venv/bin/python tests/bit_identity.py BASE_COMMIT

A refactor that claims to change no behaviour runs this against the commit before it. It checks
out BASE_COMMIT into a temporary git worktree, then trains the same short runs with each tree's
``per_dqn`` on the import path (the same virtual environment for both): CartPole with every
replay kind the base commit has, a MinAtar run, and a pack of two CartPole runs whose members
differ in their discount. It prints one row per run, the ``model.pt`` digest under each tree, and
exits 1 if any differs. The runs are seconds each: CPU, one env, a few thousand steps, learning
from step 200, so every kind samples, learns and updates its priorities hundreds of times.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--set", "train.learning_starts=200", "--set", "train.eval_interval=1000",
         "--set", "train.eval_episodes=1", "--set", "train.final_eval_episodes=1",
         "--set", "train.log_interval=500", "--device", "cpu", "--quiet"]  # fmt: skip
CLI = "import sys; from per_dqn.cli import app; sys.argv[0] = 'per-dqn'; app()"


def kinds(tree: Path) -> list[str]:
    """The replay kinds ``tree``'s registry names."""
    code = "from per_dqn.memory.kinds import KINDS; print(' '.join(KINDS))"
    return run_python(tree, ["-c", code], capture=True).split()


def run_python(tree: Path, args: list[str], capture: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, *args], cwd=tree, env=env, text=True,
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(args[:3])} ...: exit {done.returncode}\n"
                         f"{done.stderr[-2000:]}")  # fmt: skip
    return done.stdout


def runs(kinds_here: list[str]) -> dict[str, list[str]]:
    """name -> the per-dqn arguments of each run (train or ablate)."""
    cartpole = ["train", "-c", "cartpole.yaml", "--steps", "3000", *SHORT]
    table = {f"cartpole/{kind}": [*cartpole, "--replay", kind] for kind in kinds_here}
    table["minatar-breakout/proportional"] = [
        "train", "-c", "minatar.yaml", "--replay", "proportional", "--steps", "1500",
        "--set", "env.id=MinAtar/Breakout-v1", "--set", "replay.capacity=5000", *SHORT,
    ]  # fmt: skip
    pack_short = [arg for arg in SHORT if arg not in ("--device", "cpu", "--quiet")]
    table["cartpole-pack/gamma"] = [
        "ablate", "-c", "cartpole.yaml", "--replay", "proportional", "--steps", "3000",
        "--seeds", "1", "--pack", "2", "--workers", "1", "--grid", "agent.gamma=0.99,0.9",
        "--set", "run.device=cpu", *pack_short,
    ]  # fmt: skip
    return table


def train(tree: Path, args: list[str], out: Path) -> dict[str, str]:
    """Run ``per-dqn args`` under ``tree``; the digest of each model.pt it wrote, by path."""
    place = ["--run-dir", str(out)] if args[0] == "train" else ["--out", str(out)]
    run_python(tree, ["-c", CLI, *args, *place])
    return {str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(out.rglob("model.pt"))}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit to compare against (before the change)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bit-identity-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base),
                        args.base], check=True)  # fmt: skip
        try:
            table = runs(kinds(base))
            differ = 0
            print(f"{'run':<34} {'base ' + args.base[:10]:<18} {'this checkout':<18} same")
            for name, cli_args in table.items():
                before = train(base, cli_args, Path(tmp) / "before" / name)
                after = train(ROOT, cli_args, Path(tmp) / "after" / name)
                for key in sorted(before.keys() | after.keys()):
                    one, two = before.get(key, "-"), after.get(key, "-")
                    label = name if key == "model.pt" else f"{name}/{Path(key).parent}"
                    same = "yes" if one == two else "NO"
                    print(f"{label:<34} {one[:16]:<18} {two[:16]:<18} {same}")
                    differ += one != two
            print("all the same" if not differ else f"{differ} differ")
            return 1 if differ else 0
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                           check=False)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
