"""Smoke runs of the scripts in ``benchmarks/``: each runs with ``--smoke`` and prints its table.

The figures of a smoke run mean nothing; these tests keep the scripts working on the public APIs
they use as the package changes under them. Each script runs as a user runs it,
``python benchmarks/x.py`` from the repo root, with no ``PYTHONPATH``: the scripts put their own
checkout first on ``sys.path`` (``benchmarks/_common.py``), and the tests check that the code
they timed is this checkout's, not an installed ``per_dqn``. Peers (cpprb, Tianshou,
Stable-Baselines3: the ``bench`` extra) are expected in the output only where they import.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from per_dqn.memory import KINDS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_LINE = f"per_dqn from {ROOT / 'per_dqn'}"
# A figure as the tables print it: 1,234 / 0.93 / 1.2e-05 / 3.40x / 12% / 0.03 GB / **5.01**.
NUMBER = re.compile(r"\**[-+]?[\d,]*\.?\d+(e[-+]\d+)?(x|%| GB| h)?\**")
HAVE = {
    name: importlib.util.find_spec(name) is not None
    for name in ("cpprb", "tianshou", "stable_baselines3", "ray")
}


def run(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs ``benchmarks/<name> ARGS`` from the repo root, without ``PYTHONPATH``."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, f"benchmarks/{name}", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def run_script(name: str, *args: str, timeout: float = 300) -> str:
    """``run``, asserting exit 0; returns stdout."""
    proc = run(name, *args, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def tables(text: str) -> list[tuple[list[str], dict[str, list[str]]]]:
    """The markdown tables in ``text``: header cells, and body rows by their first cell."""
    found = []
    block: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            continue
        if len(block) >= 2 and set("".join(block[1])) <= set("-:"):
            found.append((block[0], {row[0]: row[1:] for row in block[2:]}))
        block = []
    return found


def table_with(text: str, first_header: str) -> tuple[list[str], dict[str, list[str]]]:
    """The one table whose first header cell is ``first_header``."""
    matches = [t for t in tables(text) if t[0][0] == first_header]
    assert len(matches) == 1, (first_header, text)
    return matches[0]


def assert_numbers(cells: list[str]) -> None:
    """Every cell is a figure."""
    assert cells and all(NUMBER.fullmatch(cell) for cell in cells), cells


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_replay_benchmark_smoke_prints_a_table():
    proc = run("replay.py", "--smoke")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "baselines agree with per_dqn proportional" in proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 7 and not set(cells[1]) <= {"-", ":"}:
            rows[cells[0]] = cells[1:]
    assert rows.pop("implementation")[0] == "add/s"
    ours = {name.split()[1]: name for name in rows if name.startswith("per_dqn ")}
    assert list(ours) == list(KINDS)  # one row per kind, in the registry's order
    assert ours["proportional"] == "per_dqn proportional (alpha 0.6)"
    assert ours["rank"] == "per_dqn rank (alpha 0.7)"
    for name in (
        *ours.values(),
        "vectorised-numpy sum tree (alpha 0.6)",
        "pure-Python sum tree (alpha 0.6)",
    ):
        cells = rows[name]  # every kind's update is timed (uniform's: the input checks)
        assert all(re.fullmatch(r"[\d,]+(\.\d+)?", c) for c in cells), (name, cells)


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_variants_smoke_prints_each_kind_s_cost_against_proportional():
    out = run_script("variants.py", "--smoke")
    assert PACKAGE_LINE in out
    found = [t for t in tables(out) if t[0][0] == "kind"]
    assert len(found) == 2  # CartPole and MinAtar
    for headers, rows in found:
        assert headers == ["kind", "us/step (median)", "min", "max", "/ proportional"]
        # every kind, then LaBER's large-batch forward passes alone (its floor)
        assert list(rows) == [*KINDS, "laber: its large batch's 3 forward passes alone"]
        for cells in rows.values():
            assert_numbers(cells)
        assert rows["proportional"][-1] == "1.00x"


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_train_loop_smoke_prints_each_kinds_sps():
    out = run_script("train_loop.py", "--smoke")
    assert PACKAGE_LINE in out
    headers, rows = table_with(out, "replay")
    assert headers == ["replay", "SPS (median)", "min", "max", "updates", "overhead"]
    assert list(rows) == list(KINDS)
    for cells in rows.values():
        assert_numbers(cells)
    assert rows["uniform"][-1] == "1.000x"  # uniform is the overhead's baseline
    assert "PER overhead (uniform SPS / PER SPS, worst kind)" in out


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_train_loop_against_an_old_layout_checkout_times_each_checkouts_code(tmp_path):
    """``--against PATH`` times PATH's code, also when PATH has the old layout.

    PATH here is a checkout shaped like dcc030f (``per_dqn/train.py`` holds the Trainer; no
    ``per_dqn/training/run.py``), made of links to this checkout's files. Pins two bugs of the first
    version: the child chose the Trainer's module by trying the import, and an editable install of
    another checkout then served it from there (the child now chooses by file and refuses any
    ``per_dqn`` module from outside PATH); and the old side must print where its code came from.
    """
    old = tmp_path / "old-checkout"
    for part in ("per_dqn", "per_dqn/training"):
        (old / part).mkdir(parents=True)
        for entry in (ROOT / part).iterdir():
            if entry.name not in ("training", "run.py", "__pycache__"):
                (old / part / entry.name).symlink_to(entry)
    (old / "per_dqn" / "train.py").symlink_to(ROOT / "per_dqn" / "training" / "run.py")
    out = run_script("train_loop.py", "--smoke", "--against", str(old), "--kinds", "proportional")
    assert f"# new: {ROOT / 'per_dqn'} " in out
    assert f"# old: {old / 'per_dqn'} " in out
    headers, rows = table_with(out, "replay")
    assert headers[:6] == [
        "replay", "new SPS (median)", "new per repeat", "old SPS (median)", "old per repeat",
        "new/old",
    ]  # fmt: skip
    assert list(rows) == ["proportional"]
    assert_numbers(rows["proportional"][:5])
    assert "Resolved configs identical." in out


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_cartpole_vs_sb3_smoke_times_both_processes():
    out = run_script("cartpole_vs_sb3.py", "--smoke")
    assert PACKAGE_LINE in out
    headers, rows = table_with(out, "run")
    assert headers[:5] == ["run", "wall s (median)", "min", "env steps", "SPS"]
    per_dqn = rows.pop("per_dqn: per-dqn train --config cartpole.yaml")
    assert_numbers(per_dqn)
    assert per_dqn[2] == "1,200"
    if HAVE["stable_baselines3"]:
        assert_numbers(rows.pop("SB3 DQN, rl-zoo CartPole-v1 settings"))
        assert re.search(r"per_dqn / SB3 wall time \(medians\): [\d.]+ ", out)
    else:
        assert "SB3 not measured" in out
    assert rows == {}


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_bit_storage_smoke_measures_both_layouts_on_a_real_stream():
    out = run_script("bit_storage.py", "--smoke")
    assert PACKAGE_LINE in out
    headers, rows = table_with(out, "storage")
    assert headers == ["storage", "bytes a transition", "pool entries used", "write us",
                       "gather of 32 us"]  # fmt: skip
    shared, whole = rows.pop("shared (BitStorage)"), rows.pop("whole (packed obs and next_obs)")
    assert rows == {}
    # 125-byte rows: whole keeps two a slot, shared one plus links and the pool's rows
    assert float(whole[0]) > float(shared[0]) > 125
    assert "checked" in out


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_minatar_vs_sb3_smoke_times_each_side_and_states_the_goal_and_target():
    out = run_script("minatar_vs_sb3.py", "--smoke")
    assert PACKAGE_LINE in out
    headers, rows = table_with(out, "run")
    assert headers[:4] == ["run", "wall s (median)", "env steps", "SPS"]
    for side in ("per_dqn, uniform replay", "per_dqn, proportional PER",
                 "per_dqn, uniform replay, DQN target (no Double)"):  # fmt: skip
        row = rows.pop(side)
        assert_numbers(row)
        assert row[1] == "1,500"
    assert re.search(r"per_dqn uniform: 1M env steps at this SPS take [\d.]+ min; target", out)
    assert re.search(
        r"learner \(uniform, one thread\): [\d.]+ ms an update, sampling [\d.]+ ms", out
    )
    parts = re.search(
        r"per env step \(uniform\): (\d+) us, of which the update's arithmetic kernels "
        r"\(torch.profiler self time: matrix products ([\d.]+), convolution ([\d.]+), Adam "
        r"([\d.]+) ms; ([\d.]+) ms an update\) (\d+) us, the rest of learn (\d+) us, everything "
        r"else (\d+) us",
        out,
    )
    # every group ran, and the total is their sum
    assert parts and all(float(parts[i]) > 0 for i in (2, 3, 4)) and int(parts[6]) > 0
    assert abs(sum(float(parts[i]) for i in (2, 3, 4)) - float(parts[5])) <= 0.02
    # the three parts add up to the step, within rounding
    assert abs(sum(int(parts[i]) for i in (6, 7, 8)) - int(parts[1])) <= 2
    if HAVE["stable_baselines3"]:
        assert_numbers(rows.pop("SB3 DQN, same settings"))
        assert re.search(r"SB3 / per_dqn uniform wall time: [\d.]+x; goal >= 2x", out)
        assert re.search(r"; the 2x goal allows \d+ us\.", out)
    else:
        assert "SB3 not measured" in out
    assert rows == {}


@pytest.mark.ray
@pytest.mark.bench_smoke
@pytest.mark.skipif(not HAVE["ray"], reason="needs the ray extra")
def test_ray_overhead_smoke_times_both_backends_and_checks_their_runs_agree():
    """Both sides' sweeps run through the CLI, the ratio is stated against the goal, the
    breakdown has every phase, the runs are identical across the backends, and nothing of the
    Ray side's cluster outlives its command (the script says so on stderr otherwise). The
    local cluster starts no dashboard by default."""
    proc = run("ray_overhead.py", "--smoke")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning:" not in proc.stderr, proc.stderr
    out = proc.stdout
    assert PACKAGE_LINE in out
    workers = os.cpu_count()
    headers, rows = table_with(out, "backend")
    assert headers == ["backend", "wall s (median)", "min", "runs", "runs/min",
                       "wall s per repeat"]  # fmt: skip
    labels = [f"local: --workers {workers}", f"ray: local cluster of {workers} CPUs"]
    assert list(rows) == labels
    for cells in rows.values():
        assert_numbers(cells)
        assert cells[2] == "2"
    assert re.search(
        r"ray / local wall time \(medians\): [\d.]+ \(per repeat [\d.]+ to [\d.]+\): "
        r"[-+][\d.]+% extra wall time; goal <= 10%: (met|NOT met)\.",
        out,
    )
    headers, rows = table_with(out, "backend (s, medians)")
    assert headers[1:] == ["start-up", "runs", "report", "exit", "one run's own wall (mean)"]
    assert list(rows) == labels
    for cells in rows.values():
        assert_numbers(cells)
    fixed = re.search(
        r"Ray's fixed cost: its `ray: \.\.\.` line came [\d.]+ s into [\d.]+ s; "
        r".*\(ray: a local Ray cluster at 127\.0\.0\.1:\d+: 1 node.*",
        out,
    )
    assert fixed is not None
    # Off by default: the cluster that ablate starts runs no dashboard unless asked (--dashboard).
    assert "dashboard" not in fixed.group(0)
    assert (
        "Summaries agree: final_eval_return_mean and model.pt identical for all 2 runs, on both "
        "backends, in each of 1 repeat(s)." in out
    )


@pytest.mark.ray
@pytest.mark.bench_smoke
@pytest.mark.skipif(not HAVE["ray"], reason="needs the ray extra")
def test_apex_shard_smoke_feeds_samples_and_updates_a_shard_over_ray():
    """The shard takes blocks from its feeder while the learner samples and updates it: the row
    states transitions in against the goal, batches out, and the updates set and dropped."""
    proc = run("apex_shard.py", "--smoke")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    row = next(line for line in out.splitlines() if line.startswith("| CartPole"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].endswith("x") and NUMBER.fullmatch(cells[1])
    assert float(cells[3]) > 0 and int(cells[4].replace(",", "")) > 0
    assert PACKAGE_LINE in out


@pytest.mark.ray
@pytest.mark.bench_smoke
@pytest.mark.skipif(not HAVE["ray"], reason="needs the ray extra")
def test_apex_actors_smoke_measures_each_way_of_acting():
    """A row for CartPole: the single run's acting-only rate, one actor in process and its share
    of the single run, one and two Ray actors (each one's rate), and the two against one."""
    proc = run("apex_actors.py", "--smoke")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    row = next(line for line in out.splitlines() if line.startswith("| CartPole"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert all(NUMBER.fullmatch(cells[i]) for i in (1, 2, 4, 5))
    assert cells[3].endswith("x") and cells[7].endswith("x")
    each = [float(v.replace(",", "")) for v in cells[6].split(" / ")]
    assert len(each) == 2 and all(v > 0 for v in each)
    assert sum(each) == pytest.approx(float(cells[5].replace(",", "")), abs=2)
    assert 0 < float(cells[8]) < 2
    assert PACKAGE_LINE in out


def test_apex_actors_plays_every_row_at_one_epsilon(monkeypatch):
    """Pins the benchmark's claim "every row explores at epsilon 0.4": its Ray rows took the
    paper's ladder, so the second of two actors explored at 0.4 ** 8 and ran the network on
    nearly every step, the first on about 60% of them. Every actor of its Ray rows is at 0.4,
    as the single run and the in-process actor are."""
    from per_dqn.training.schedules import epsilon_ladder

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    script = importlib.import_module("apex_actors")

    class Given(Exception):
        """What ``on_ray`` handed the run's source of blocks."""

    def source(ray, config, agent, actors):
        raise Given(config, actors)

    monkeypatch.setattr(script, "RayActors", source)
    for name in script.CONFIGS:
        single = script.config_of(name)
        assert single.train.epsilon_start == single.train.epsilon_end == script.EPSILON == 0.4
        for actors in (1, 2):
            with pytest.raises(Given) as given:
                script.on_ray(None, name, actors, 0.0)
            config, count = given.value.args
            run = config.run
            ladder = epsilon_ladder(count, run.actor_epsilon, run.actor_epsilon_alpha)
            assert (count, ladder) == (actors, [0.4] * actors), name


def test_ray_overhead_names_every_run_where_the_backends_differ(monkeypatch):
    """The agreement check of ``ray_overhead.py`` (its smoke run only meets agreeing runs): a score
    that differs, a model that differs and a missing run are each named, against the first local
    sweep; identical sweeps give nothing."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    script = importlib.import_module("ray_overhead")

    def timed(scores: dict[str, float], models: dict[str, str]):
        return script.Timed(1.0, {}, None, scores, models, 1.0)

    same = timed({"uniform/s0": 9.5, "uniform/s1": 10.0}, {"uniform/s0": "a", "uniform/s1": "b"})
    assert script.disagreements({"local": [same, same], "ray": [same, same]}) == []
    score = timed({"uniform/s0": 9.5, "uniform/s1": 10.5}, same.models)
    model = timed(same.scores, {"uniform/s0": "a", "uniform/s1": "c"})
    fewer = timed({"uniform/s0": 9.5}, {"uniform/s0": "a"})
    assert script.disagreements({"local": [same, fewer], "ray": [score, model]}) == [
        "local repeat 2 ran ['uniform/s0'], local repeat 1 ['uniform/s0', 'uniform/s1']",
        "uniform/s1: ray repeat 1 final_eval_return_mean 10.5, local repeat 1 10.0",
        "uniform/s1: ray repeat 2 model.pt differs",
    ]


@pytest.mark.slow
@pytest.mark.bench_smoke
@pytest.mark.atari
def test_checkpoint_smoke_writes_and_loads_both_cases():
    """CartPole's files, then an Atari run's checkpoints at its two points (and, at the first,
    one as before), each measured."""
    out = run_script("checkpoint.py", "--smoke")
    assert PACKAGE_LINE in out
    found = [t for t in tables(out) if t[0] == ["file", "MB"]]
    assert len(found) == 1
    for name in ("agent.pt", "loop.npz", "memory.npz", "**total**"):
        assert_numbers(found[0][1][name])
    assert len(re.findall(r"write [\d.]+ s, verify \+ load [\d.]+ s", out)) == 1
    headers, rows = table_with(out, "env steps")
    assert headers[1:3] == ["transitions", "GB on disk"]
    assert list(rows) == ["600 as before", "600", "1,200"]
    assert [cells[0] for cells in rows.values()] == ["600", "600", "1,200"]
    for cells in rows.values():
        assert_numbers(cells)
    before, now, later = (float(cells[1]) for cells in rows.values())
    assert before > later > now  # sized to 600, then 1,200, of 2,000
    assert re.search(r"verify \+ load of the last [\d.]+ s", out)


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_learner_smoke_times_every_row_and_checks_its_numerics():
    out = run_script("learner.py", "--smoke")
    headers, rows = table_with(out, "variant")
    assert headers[:5] == ["variant", "ms median", "p10", "p90", "speed-up"]
    assert len(rows) == 16  # every row but the torch.compile ones
    for name, cells in rows.items():
        assert_numbers(cells[:7])
        # fp32 rows agree with plain; the verdict column says so.
        assert cells[7].startswith(("bit-exact", "allclose", "NOT close")), (name, cells)
    assert rows["1 plain"][7] == "bit-exact"


@pytest.mark.bench_smoke
@pytest.mark.atari
def test_atari_env_smoke_times_ale_vector_envs():
    out = run_script("atari_env.py", "--smoke")
    headers, rows = table_with(out, "implementation")
    assert headers == ["implementation", "num_envs", "Pong steps/s", "spread"]
    assert set(rows) == {"AtariVectorEnv threads=auto", "AtariVectorEnv threads=1"}
    for cells in rows.values():  # rows share a label across num_envs: the last is kept
        assert_numbers(cells)


@pytest.mark.slow
@pytest.mark.bench_smoke
@pytest.mark.atari
def test_atari_smoke_runs_every_section_with_the_installed_peers():
    out = run_script("atari.py", "--smoke")
    assert PACKAGE_LINE in out
    _, env_rows = table_with(out, "env")
    assert len(env_rows) == 2
    for cells in env_rows.values():
        assert_numbers(cells)
    _, replay = table_with(out, "implementation")
    expected = {
        "per_dqn uniform (dedup_frames)": True,
        "per_dqn proportional (dedup_frames, alpha 0.6)": True,
        "cpprb PrioritizedReplayBuffer (4, 84, 84), next_of + stack_compress": HAVE["cpprb"],
        "cpprb PrioritizedReplayBuffer (84, 84, 4), next_of + stack_compress": HAVE["cpprb"],
        "Tianshou PrioritizedReplayBuffer (4, 84, 84), stack_num 4 + save_only_last_obs": HAVE[
            "tianshou"
        ],
    }
    assert set(replay) == {name for name, present in expected.items() if present}
    for name, cells in replay.items():
        assert_numbers([cells[1], *cells[2:4], *cells[7:9]])
        if name.startswith("per_dqn"):
            assert cells[0] == "bit-exact", (name, cells)
    _, learner = table_with(out, "learner")
    assert len(learner) == 4  # plain and 3 DQNAgent rows, at 1 thread
    for cells in learner.values():
        assert_numbers(cells)
    _, train = table_with(out, "run")
    assert len(train) == (4 if HAVE["stable_baselines3"] else 2)
    for cells in train.values():
        assert_numbers([cells[0], *cells[2:]])


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_precision_curves_smoke_reads_an_fp32_and_a_bf16_run(tmp_path):
    """The figure is drawn as the report's are (issue 26): at 200 dpi, its legend below the
    panels."""
    from PIL import Image

    png = tmp_path / "curves.png"
    out = run_script("precision_curves.py", "--smoke", "--out", str(png))
    _, rows = table_with(out, "precision")
    assert list(rows) == ["fp32", "bf16"]
    for cells in rows.values():
        assert_numbers([cells[0], cells[3]])  # seed, SPS
    curves = re.search(r"Curves: (.+\.png)", out)
    assert curves is not None and Path(curves.group(1)) == png
    with Image.open(png) as image:
        assert min(image.info["dpi"]) >= 199.5 and image.size == (2560, 1520)


@pytest.mark.bench_smoke
def test_train_loop_against_a_dir_without_per_dqn_is_refused_in_one_line(tmp_path):
    """A wrong ``--against`` is bad input: exit 2, one ``error:`` line naming the path."""
    proc = run("train_loop.py", "--against", str(tmp_path), timeout=60)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert errors == [
        f"train_loop.py: error: --against: {tmp_path} holds no per_dqn/ package (not a checkout)"
    ]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


# Private names of peers that have no public equivalent (each use carries a comment saying so).
PEER_PRIVATE = {"_n_updates", "_value"}


def test_benchmarks_use_no_private_per_dqn_names():
    """No script reaches into a private name (issue 13: checkpoint.py timed a run's checkpoints by
    replacing ``Trainer._save_checkpoint``): no ``_name`` imported from ``per_dqn``, and no
    ``obj._name`` but on ``self``/``cls`` or the listed peers' fields. replay.py is another
    slice's and is left out here."""
    found = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        if path.name == "replay.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("per_dqn"):
                parts = [*node.module.split("."), *(alias.name for alias in node.names)]
                found += [f"{path.name}:{node.lineno} {p}" for p in parts if p.startswith("_")]
            elif (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr not in PEER_PRIVATE
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert found == []


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_packs_smoke_times_both_sides_and_checks_their_runs_agree():
    """``packs.py``: the same sweep unpacked and with ``--pack``, the ratio stated against the
    goal, and the two sides' runs checked to be identical (the script exits 1 otherwise); then the
    learner alone, and the ceiling it sets on the ratio, recomputed by hand."""
    out = run_script("packs.py", "--smoke", "--section", "cartpole")
    assert PACKAGE_LINE in out
    headers, rows = table_with(out, "sweep")
    assert headers == ["sweep", "wall s (median)", "min", "runs/hour", "wall s per repeat"]
    assert list(rows) == ["--workers 2", "--workers 2 --pack 2"]
    for cells in rows.values():
        assert_numbers(cells)
    assert re.search(
        r"packed / unpacked runs per hour \(medians\): [\d.]+x; goal >= 3x: (met|NOT met)\.", out
    )
    assert (
        "Runs agree: final_eval_return_mean and model.pt identical for all 2 runs, packed and "
        "unpacked, in each of 1 repeat(s)." in out
    )
    # The learner alone, and the ceiling it sets. Updates by the loop's rule: due from env step
    # 200 (the smoke sets' learning_starts), then every 4 (replay_period), through step 600: 200,
    # 204, ..., 600, 101 of them (the memory holds 196 >= 64 transitions at the first). The 2 runs
    # are one pack of 2, so one worker trains both.
    headers, rows = table_with(out, "learner")
    assert headers == ["learner", "ms per update per run", "speed-up"]
    assert list(rows) == ["alone (a pack of one each)", "one pack of 2"]
    alone, packed = (float(cells[0]) for cells in rows.values())
    speedup = float(rows["one pack of 2"][1].removesuffix("x"))
    assert speedup == pytest.approx(alone / packed, abs=0.011)  # printed ms are rounded
    assert "101 updates per run of 600 env steps" in out
    ceiling = re.search(
        r"Ceiling: 2 runs a worker x 101 updates x ([\d.]+) ms = ([\d.]+) s, were all else free, "
        r"against the unpacked sweep's ([\d.]+) s: packs can give at most ([\d.]+)x",
        out,
    )
    assert ceiling, out
    ms, floor, unpacked, most = map(float, ceiling.groups())
    assert ms == packed
    assert floor == pytest.approx(2 * 101 * ms / 1e3, abs=0.06)
    assert unpacked == float(table_with(out, "sweep")[1]["--workers 2"][0])
    assert most == pytest.approx(unpacked / (2 * 101 * ms / 1e3), rel=0.01)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("steps", "sets", "exact"),
    [
        (600, {"train.learning_starts": 200}, True),  # the smoke run's
        (603, {"train.learning_starts": 200, "train.replay_period": 5, "train.gradient_steps": 2},
         True),
        # Due from step 64, when the memory holds 64 only if an episode has just flushed its
        # 5-step windows: counted from step 68, where it surely does (one update fewer, or none).
        (400, {"train.learning_starts": 64}, False),
    ],
)  # fmt: skip
def test_packs_counts_a_run_s_updates_as_the_loop_makes_them(
    monkeypatch, tmp_path, steps, sets, exact
):
    """``packs.updates_per_run``, the count behind the ceiling, against the ``update_steps`` of
    real CartPole runs of the same settings: exact where the memory is full enough when learning
    is due, and never more than a run makes (a count too high would lower the ceiling below what
    packs might reach)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    script = importlib.import_module("packs")
    import per_dqn

    overrides = {
        **sets,
        "train.total_env_steps": steps,
        "train.eval_interval": 0,
        "train.final_eval_episodes": 1,
        "checkpoint.enabled": False,
        "run.device": "cpu",
    }
    from per_dqn.config import load_config, resolve_config_path
    from per_dqn.config.loading import parse_override

    result = per_dqn.train("cartpole", overrides=overrides, run_dir=tmp_path / "run")
    sets = [parse_override(f"{key}={value}") for key, value in overrides.items()]
    config = load_config(resolve_config_path("cartpole.yaml"), sets)
    counted, made = script.updates_per_run(config, steps), result.summary["update_steps"]
    assert counted == made if exact else made - 1 <= counted <= made


@pytest.mark.slow
@pytest.mark.bench_smoke
def test_events_smoke_times_both_readers_and_writers_and_checks_they_agree():
    """``events.py``: TensorBoard's reader and writer beside the report's, on an archived
    sweep's runs, each checked to agree (the script exits otherwise), with the ratios."""
    out = run_script("events.py", "--smoke")
    assert PACKAGE_LINE in out
    assert re.search(r"literature-per-beta-over-1m\.tar\.xz: 3 runs, [\d,]+ points", out)
    headers, rows = table_with(out, "")
    assert headers == ["", "TensorBoard's, s", "per_dqn.sweeps.events, s", "ratio"]
    assert list(rows) == ["read every run's scalars", "write them back"]
    for cells in rows.values():
        assert_numbers(cells)
