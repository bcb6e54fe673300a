"""Published training curves, read from a CSV file, and the runs' own curve at the same steps.

``per-dqn report SWEEP --published FILE`` draws a source's curve beside the sweep's runs, under
the source's measure: the EMA of training-episode returns (``measure.train_return_ema``) that the
MinAtar curves of the literature report. The file (``docs/results/published/`` holds one,
reducible-loss's released MinAtar curves) has one row per source curve and step::

    # comment lines start with '#'
    env_id,label,step,mean,sd,seeds,exploration,logged_every
    MinAtar/Breakout-v1,reducible-loss DQN,1000000,7.87,0.55,5,epsilon 0.1 from 105k,50000

``env_id`` names the env as a run's config does; ``label`` names the curve in the figure's legend
(one label is one curve: a method of a source); ``step`` is an env step (MinAtar has no frame
skip, so a frame); ``mean`` the value published at it, ``sd`` its spread over the source's seeds
(empty where not known), ``seeds`` how many seeds it is over (empty where not known) and
``exploration`` the exploration the source's training returns were measured under (free text,
empty where not known): training returns depend on it as much as on the agent, so the report
names it beside the runs' own. ``logged_every`` (empty where not known) is how often, in env
steps, the source logged its EMA; the published value at ``x`` is then the mean of what a run
logged in the bin ``(x - 50k, x]``, the way reducible-loss's ``plotting.py`` bins its logs.

A run's curve at those steps is read the way the curve beside it was: ``read_as_logged`` replays
the source's logger over the run's own episodes (``logged``: at the first episode end past each
mark, as its ``utils.Every``) and bins what it would have logged (``binned``, as its
``bin_scores``). Without ``logged_every``, a run is read at the step itself (``ema_at``): the EMA
after the last training episode that ended at or before it, 0 before its first (the EMA starts at
0, as the sources' does).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from per_dqn.sweeps.measure import train_return_ema
from per_dqn.sweeps.runs import collect
from per_dqn.sweeps.stats import Estimate

COLUMNS = ("env_id", "label", "step", "mean", "sd", "seeds", "exploration", "logged_every")
REQUIRED = ("env_id", "label", "step", "mean")
MAX_BYTES = 10 * 1024 * 1024  # a published curve file is kilobytes; refuse anything huge
# The bin of the runs' curve on an env that no published point covers.
BIN_STEPS = 50_000


@dataclass(frozen=True)
class Point:
    """One published value: the curve ``label`` on ``env_id`` at env step ``step``."""

    env_id: str
    label: str
    step: int
    mean: float
    sd: float | None = None
    seeds: int | None = None
    exploration: str | None = None
    logged_every: int | None = None


def read_published(path: Path) -> tuple[Point, ...]:
    """The points of a published-curve file (see the module docstring), in file order.

    Raises:
        ValueError: one line naming the file (and the line and column) for a missing or unreadable
            file, a missing column, a value that is not a number, a negative step, or two
            values for one label, env and step.
    """
    where = f"--published {path}"
    try:
        # Read at most one byte past the limit: a device or a pipe reports no size
        # (``--published /dev/zero`` read on until the machine ran out of memory).
        with path.open("rb") as file:
            data = file.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ValueError(f"{where}: larger than {MAX_BYTES // (1024 * 1024)} MB")
        text = data.decode()  # UTF-8, whatever the locale
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: cannot be read ({type(exc).__name__})") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]  # fmt: skip
    if not lines:
        raise ValueError(f"{where}: no header and no rows")
    header_line, header = lines[0][0], next(csv.reader([lines[0][1]]))
    header = [h.strip() for h in header]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ValueError(f"{where}: line {header_line}: no column {missing[0]!r} (columns: "
                         + ", ".join(COLUMNS) + ")")  # fmt: skip
    points, seen = [], set()
    for n, line in lines[1:]:
        values = next(csv.reader([line]))
        if len(values) != len(header):
            raise ValueError(f"{where}: line {n}: {len(values)} values for {len(header)} columns")
        row = dict(zip(header, (v.strip() for v in values), strict=True))
        seeds = _optional(row, "seeds", where, n, integer=True)
        every = _optional(row, "logged_every", where, n, integer=True)
        if every == 0:
            raise ValueError(f"{where}: line {n}: logged_every: '0' is out of range")
        point = Point(
            env_id=_text(row, "env_id", where, n),
            label=_text(row, "label", where, n),
            step=int(_number(row, "step", where, n, integer=True)),
            mean=_number(row, "mean", where, n),
            sd=_optional(row, "sd", where, n),
            seeds=None if seeds is None else int(seeds),
            exploration=_text(row, "exploration", where, n) if row.get("exploration") else None,
            logged_every=None if every is None else int(every),
        )
        key = (point.env_id, point.label, point.step)
        if key in seen:
            raise ValueError(f"{where}: line {n}: a second value for {point.label!r} on "
                             f"{point.env_id} at step {point.step}")  # fmt: skip
        seen.add(key)
        points.append(point)
    return tuple(points)


def _text(row: dict[str, str], column: str, where: str, n: int) -> str:
    value = row[column]
    if not value or not value.isprintable():
        raise ValueError(f"{where}: line {n}: {column}: {value!r} is not a name")
    return value


def _number(row: dict[str, str], column: str, where: str, n: int, integer: bool = False) -> float:
    text = row[column]
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise ValueError(f"{where}: line {n}: {column}: {text!r} is not {kind}") from None
    if not math.isfinite(value) or (
        column in ("step", "sd", "seeds", "logged_every") and value < 0
    ):
        raise ValueError(f"{where}: line {n}: {column}: {text!r} is out of range")
    return value


def _optional(row: dict[str, str], column: str, where: str, n: int, integer: bool = False):
    if not row.get(column):
        return None
    return _number(row, column, where, n, integer)


def ema_at(returns: Sequence[tuple[int, float]], steps: Sequence[int]) -> list[float]:
    """A run's training-return EMA at each of ``steps`` (ascending): its value after the last
    episode that ended at or before the step, 0 before the first episode."""
    ema = train_return_ema(returns)
    out, i, value = [], 0, 0.0
    for step in steps:
        while i < len(ema) and ema[i][0] <= step:
            value = ema[i][1]
            i += 1
        out.append(value)
    return out


def logged(returns: Sequence[tuple[int, float]], every: int) -> list[tuple[int, float]]:
    """The ``(step, EMA)`` points a run would have logged under reducible-loss's logger: asked at
    every episode end, ``utils.Every(every)`` logs the first one, then whenever the step has
    reached its last mark plus ``every``, moving the mark on by ``every`` (so after a long
    episode it catches up one mark an episode)."""
    out: list[tuple[int, float]] = []
    mark = None
    for step, value in train_return_ema(returns):
        if mark is None:
            mark = step
        elif step >= mark + every:
            mark += every
        else:
            continue
        out.append((step, value))
    return out


def binned(
    points: Sequence[tuple[int, float]], steps: Sequence[int], bin_steps: int = BIN_STEPS
) -> list[float]:
    """Logged ``(step, value)`` points binned as reducible-loss's ``plotting.bin_scores`` bins
    them, read at ``steps`` (multiples of ``bin_steps``): 0 at step 0; at ``x``, the mean of the
    values logged in ``(x - bin_steps, x]``; an empty bin, linearly between the nearest bins
    that are not (the last one held past the last point).

    Raises:
        ValueError: a step that is not a multiple of ``bin_steps``.
    """
    bad = [s for s in steps if s % bin_steps]
    if bad:
        raise ValueError(f"steps must be multiples of {bin_steps:,}, got {bad[0]:,}")
    # Every bin up to the last one the points fill, as the source bins a run to its last
    # border at or before its last point (a later bin bounds the interpolation of an empty one),
    # and up to the last step asked for.
    last_point = max((t for t, _ in points), default=0)
    last = max(max(steps, default=0), last_point) // bin_steps
    sums, counts = [0.0] * (last + 1), [0] * (last + 1)
    for step, value in points:
        index = -(-step // bin_steps)  # the bin (x - bin, x] that holds step: ceil
        if 1 <= index <= last:
            sums[index] += value
            counts[index] += 1
    known = [(0, 0.0)] + [(i, sums[i] / counts[i]) for i in range(1, last + 1) if counts[i]]
    xs, ys = [i for i, _ in known], [v for _, v in known]
    out = []
    for s in steps:
        i = s // bin_steps
        out.append(ys[xs.index(i)] if i in xs else _interpolate(xs, ys, i))
    return out


def _interpolate(xs: Sequence[int], ys: Sequence[float], x: int) -> float:
    """``numpy.interp`` at ``x`` from ``xs[0]`` on (xs ascending): linear inside, the last value
    past the end (``binned`` asks at no ``x`` before its first knot, step 0)."""
    if x >= xs[-1]:
        return ys[-1]
    right = next(k for k, v in enumerate(xs) if v > x)
    x0, x1, y0, y1 = xs[right - 1], xs[right], ys[right - 1], ys[right]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def read_as_logged(
    returns: Sequence[tuple[int, float]], steps: Sequence[int], every: int | None
) -> list[float]:
    """A run's training-return EMA at ``steps``, read as a source that logged it every
    ``every`` env steps published it (``logged`` then ``binned``); with ``every`` None, at the
    steps themselves (``ema_at``)."""
    if every is None:
        return ema_at(returns, steps)
    return binned(logged(returns, every), steps)


def values_at(sweep: Path, arm: str, env_id: str, step: int, every: int | None) -> dict[int, float]:
    """Seed -> the training-return EMA at ``step`` of each run of ``arm`` on ``env_id`` in the
    sweep dir ``sweep`` that reached it, read as a curve logged every ``every`` env steps was
    published (``read_as_logged``): what a page sets beside a published value."""
    return {
        r.seed: read_as_logged(r.train_returns, [step], every)[0]
        for r in collect(sweep).runs
        if r.arm == arm and r.env_id == env_id and r.env_steps >= step
    }


def in_reach(
    env_id: str, points: Sequence[Point], env_steps: Sequence[int]
) -> tuple[int, list[Point]]:
    """The last env step that every run of ``env_id`` reached (``env_steps``: each run's; 0
    without runs), and the published points of that env up to it."""
    last = min(env_steps, default=0)
    return last, [p for p in points if p.env_id == env_id and p.step <= last]


def steps_for(reached: Sequence[Point], last_step: int) -> list[int]:
    """Where runs that trained ``last_step`` env steps are read: the steps of the published
    points within reach (``in_reach``), or every ``BIN_STEPS`` where there are none."""
    return sorted({p.step for p in reached}) or list(range(0, last_step + 1, BIN_STEPS))


def difference(
    points: Sequence[Point], env_id: str, label: str, baseline: str, step: int
) -> Estimate:
    """A source's published effect: curve ``label`` minus curve ``baseline`` on ``env_id`` at
    ``step``, a difference of two independent means (``.interval()``: Welch's t interval). A
    source publishes each curve's mean, sd and number of seeds, not its runs, so neither a
    paired nor a bootstrap interval can be had.

    Raises:
        ValueError: one line naming the curve, env and step for a point that is not in
            ``points`` or has no sd or fewer than 2 seeds.
    """
    found = {(p.env_id, p.label, p.step): p for p in points}
    ends = []
    for name in (label, baseline):
        point = found.get((env_id, name, step))
        if point is None:
            raise ValueError(f"no published value for {name!r} on {env_id} at step {step}")
        if point.sd is None or point.seeds is None or point.seeds < 2:
            raise ValueError(f"{name!r} on {env_id} at step {step}: no sd or fewer than 2 seeds")
        ends.append(Estimate.of_mean(point.mean, point.sd, point.seeds))
    return ends[0] - ends[1]
