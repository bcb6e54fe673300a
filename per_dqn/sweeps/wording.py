"""What the report says of a sweep's runs beside their scores: the compute they took, how they
explored, and the game releases they played.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from per_dqn.sweeps.runs import Run


def compute_seconds(runs: Sequence[Run]) -> tuple[float, int, int]:
    """What training ``runs`` took, as ``(seconds, pack sessions, untimed)``: the wall time of
    the pack sessions that trained them, summed. A pack trains its runs in one process, so each
    pack session counts once, by the longest of its runs' sessions here (a run alone is a pack of
    one). A run whose summary does not record its sessions counts its last one (``wall_seconds``,
    in the pack its provenance names); if it was resumed, the earlier ones are missing, it is
    counted in ``untimed``, and the sum is a lower bound."""
    longest: dict[tuple[str, ...], float] = {}

    def count(key: tuple[str, ...], seconds: float) -> None:
        longest[key] = max(longest.get(key, 0.0), seconds)

    untimed = 0
    for run in runs:
        if run.sessions is not None:
            for pack, seconds in run.sessions:
                count(("session", pack), seconds)
        else:
            count(("pack", *(run.pack or (run.path,))), run.wall_seconds)
            untimed += run.resumed
    return sum(longest.values()), len(longest), untimed


def exploration_text(train: dict[str, Any]) -> str | None:
    """A config's ``train`` section's exploration after its decay: ``epsilon 0.01 from 250k``,
    the floor and the env step it is reached at (``epsilon_decay_steps``, after
    ``learning_starts`` where the decay starts there). None where a key is missing."""
    try:
        floor, steps = float(train["epsilon_end"]), int(train["epsilon_decay_steps"])
        if train.get("epsilon_decay_from", "start") == "learning_starts":
            steps += int(train["learning_starts"])
    except (KeyError, TypeError, ValueError):
        return None
    at = f"{steps // 1000}k" if steps % 1000 == 0 and steps else f"{steps:,}"
    return f"epsilon {floor:g} from {at}"


def env_games(runs: Sequence[Run], env: str) -> list[str]:
    """The game releases ``env``'s runs recorded (``Run.game``), oldest first."""

    def key(game: str) -> tuple[tuple[int, int | str], ...]:
        parts = re.split(r"[.\-+]", game.split(" ", 1)[-1])
        return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)

    return sorted({r.game for r in runs if r.env_id == env and r.game is not None}, key=key)


def env_label(runs: Sequence[Run], env: str) -> str:
    """``env``, with the game releases its runs played where the summaries say
    (``MinAtar/Seaquest-v1, minatar 1.0.15``; two releases are both named, ``minatar 1.0.10
    and 1.0.15``: the runs did not all play one game)."""
    games = env_games(runs, env)
    if not games:
        return env
    name = games[0].split(" ")[0]
    versions = [g.split(" ", 1)[1] for g in games]
    listed = versions[0] if len(versions) == 1 else f"{', '.join(versions[:-1])} and {versions[-1]}"
    return f"{env}, {name} {listed}"
