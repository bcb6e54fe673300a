"""Tracking what was run (issue 14, part 4), on real CartPole runs read back with TensorBoard's
own reader: provenance, AUC and mean IS weight in summary.json (across a resume), the HParams and
Custom Scalars records in the run's event file, the priority-ratio and unweighted-loss tags, and
Weights & Biases in offline mode."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from support import CHECKOUT, StopAtCheckpoint, read_scalars, summary_of
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata
from typer.testing import CliRunner

import per_dqn
from per_dqn.cli import app
from per_dqn.config import load_config
from per_dqn.logs import metrics, tags
from per_dqn.rundir import dirs as rundir
from per_dqn.rundir import provenance as prov
from per_dqn.rundir.summary import normalized_auc

SHORT = {
    "train.total_env_steps": 1_500, "train.learning_starts": 200, "train.eval_interval": 500,
    "train.eval_episodes": 2, "train.final_eval_episodes": 2, "train.log_interval": 250,
    "checkpoint.interval_steps": 500, "agent.hidden_sizes": [32, 32], "replay.capacity": 2_000,
    "run.device": "cpu",
}  # fmt: skip


def events(run_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """A finished proportional run."""
    run_dir = tmp_path_factory.mktemp("full") / "run"
    per_dqn.train("cartpole", overrides=SHORT, run_dir=run_dir)
    return run_dir


# --- provenance -----------------------------------------------------------------------------------


SECRETS = ("hf-secret-1111", "db-secret-2222", "key-secret-3333", "env-secret-4444")


def test_an_api_call_records_the_call_not_the_scripts_secrets(tmp_path):
    """Issue 23 item 3: ``python myscript.py --hf-token=... --db-password ...``, where the script
    calls ``per_dqn.train``, left both secrets in summary.json. Now summary.json records the call
    (function, config, overrides), no file of the run dir holds a secret, even with wandb tracking
    (offline; wandb stores ``sys.argv``), and a secret in an environment variable lands nowhere."""
    home, run_dir = tmp_path / "home", tmp_path / "run"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "WANDB_MODE": "offline", "PYTHONPATH": str(CHECKOUT),
           "HF_TOKEN": SECRETS[3], "MY_PASSWORD": SECRETS[3]}  # fmt: skip
    for key in WANDB_DIR_VARIABLES:
        env.pop(key, None)
    overrides = {**SHORT, "train.total_env_steps": 600, "run.track": "wandb"}
    script = tmp_path / "myscript.py"
    script.write_text(
        "import per_dqn\n"
        f"per_dqn.train('cartpole', overrides={overrides!r}, run_dir={str(run_dir)!r})\n"
    )
    argv = [f"--hf-token={SECRETS[0]}", "--db-password", SECRETS[1], "--set",
            f"x.api_key={SECRETS[2]}"]  # fmt: skip
    done = subprocess.run([sys.executable, str(script), *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = summary_of(run_dir)["provenance"]
    assert record["call"] == {"function": "per_dqn.train", "config": "cartpole",
                              "overrides": overrides}  # fmt: skip
    assert record["command"] is None and record["command_line"] is None
    files = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.suffix == ".wandb" for p in files)  # wandb's own record of the run is there
    for path in files:
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, (path, secret)


def test_a_cli_run_records_its_command_line_with_secrets_redacted(tmp_path, monkeypatch):
    """Issue 23 item 3, the command line's side: ``per-dqn train`` records its argument list,
    secrets redacted. The CLI takes no secret option today, so the command line a run records
    (``sys.argv``) is given one as a wrapper script would leave it, ``--api-token`` included."""
    run_dir = tmp_path / "run"
    argv = ["per-dqn", "train", "-c", "cartpole", "--run-dir", str(run_dir), "--api-token",
            SECRETS[0], f"--db-password={SECRETS[1]}", "--set",
            f"x.secret={SECRETS[2]}"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    short = settings({**SHORT, "train.total_env_steps": 600})
    args = ["train", "-c", "cartpole", "--run-dir", str(run_dir), "-q", *short]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    record = summary_of(run_dir)["provenance"]
    R = prov.REDACTED
    assert record["command"] == [*argv[:7], R, f"--db-password={R}", "--set", f"x.secret={R}"]
    assert shlex.split(record["command_line"]) == record["command"]
    assert record["call"] is None
    for path in (p for p in run_dir.rglob("*") if p.is_file()):
        assert not any(secret.encode() in path.read_bytes() for secret in SECRETS), path


# --- AUC and mean IS weight -----------------------------------------------------------------------


def test_auc_and_is_weight_mean_are_those_of_the_logged_curves(full):
    """auc is normalized_auc over eval/return_mean (periodic evaluations and the final one) and
    is_weight_mean the mean of the logged per/is_weight_mean points, both read back from the
    event file (float32 there, hence the tolerance)."""
    summary, curves = summary_of(full), read_scalars(full)
    evals = curves[tags.EVAL_RETURN_MEAN]
    assert [step for step, _ in evals] == [500, 1000, 1500]
    assert summary["auc"] == pytest.approx(normalized_auc(evals), rel=1e-6)
    # By hand: trapezoids over 500..1500.
    (_, a), (_, b), (_, c) = evals
    assert summary["auc"] == pytest.approx((500 * (a + b) / 2 + 500 * (b + c) / 2) / 1000, rel=1e-6)
    weights = [value for _, value in curves[tags.PER_IS_WEIGHT_MEAN]]
    assert len(weights) == 6
    assert summary["is_weight_mean"] == pytest.approx(np.mean(weights), rel=1e-6)
    assert 0 < summary["is_weight_mean"] < 1  # proportional: weights below 1


@pytest.mark.slow
def test_auc_and_is_weight_mean_survive_a_resume(full, tmp_path):
    """A run stopped by a callback at its step-500 checkpoint and resumed reports the auc and
    is_weight_mean of the run never stopped (they would otherwise cover the resumed part only)."""
    stopped = per_dqn.train(
        "cartpole", overrides=SHORT, run_dir=tmp_path / "run", callbacks=[StopAtCheckpoint(500)]
    )
    assert stopped.summary["interrupted"] and stopped.summary["env_steps"] == 500
    resumed = per_dqn.resume(tmp_path / "run")
    expected = summary_of(full)
    assert resumed.summary["resumed_from_env_steps"] == 500
    assert resumed.summary["auc"] == expected["auc"]
    assert resumed.summary["is_weight_mean"] == expected["is_weight_mean"]
    assert resumed.summary["final_eval_return_mean"] == expected["final_eval_return_mean"]
    # The finished run's HParams metrics are written once, at its end: the curves match too.
    ours, theirs = read_scalars(tmp_path / "run"), read_scalars(full)
    for tag in (tags.SUMMARY_AUC, tags.SUMMARY_FINAL_RETURN, tags.SUMMARY_IS_WEIGHT_MEAN):
        assert ours[tag] == theirs[tag] and len(ours[tag]) == 1


def test_uniform_has_no_is_weight_mean_nor_ratio_and_equal_losses(tmp_path):
    """Uniform replay: summary is_weight_mean is null, no per/priority_ratio, and the
    IS-weighted loss equals the unweighted one at every log point (all weights are 1). The
    HParams tab's ``summary/is_weight_mean`` is 1 (issue 26: without it TensorBoard dropped
    uniform runs from its parallel-coordinates and scatter views)."""
    run = per_dqn.train(
        "cartpole", overrides={**SHORT, "replay.kind": "uniform"}, run_dir=tmp_path / "run"
    )
    assert run.summary["is_weight_mean"] is None and run.summary["auc"] is not None
    curves = read_scalars(tmp_path / "run")
    assert tags.PER_PRIORITY_RATIO not in curves
    assert curves[tags.SUMMARY_IS_WEIGHT_MEAN] == [(1500, 1.0)]
    assert len(curves[tags.TRAIN_LOSS]) == 6
    assert curves[tags.TRAIN_LOSS] == curves[tags.TRAIN_LOSS_UNWEIGHTED]


# --- the ratio and the unweighted loss ------------------------------------------------------------


def test_priority_ratio_is_sampled_over_mean_priority_at_every_log_point(full):
    curves = read_scalars(full)
    ratio = dict(curves[tags.PER_PRIORITY_RATIO])
    sampled, stored = dict(curves[tags.PER_SAMPLED_PRIORITY]), dict(curves[tags.PER_MEAN_PRIORITY])
    assert sorted(ratio) == sorted(sampled) == [250, 500, 750, 1000, 1250, 1500]
    for step, value in ratio.items():
        assert value == pytest.approx(sampled[step] / stored[step], rel=1e-6), step
    assert max(ratio.values()) > 1  # proportional prioritises: what is drawn outranks the mean


def test_weighted_and_unweighted_losses_differ_under_proportional(full):
    """The negative control of the uniform test: IS weights below 1 make the losses differ."""
    curves = read_scalars(full)
    weighted, plain = dict(curves[tags.TRAIN_LOSS]), dict(curves[tags.TRAIN_LOSS_UNWEIGHTED])
    assert weighted.keys() == plain.keys()
    assert all(weighted[step] < plain[step] for step in weighted)


# --- HParams and Custom Scalars -------------------------------------------------------------------


def test_hparams_hold_the_flat_config_and_the_summary_metrics(full):
    """The HParams plugin's records sit in the run's own event file (TensorBoard's
    ``add_hparams`` would make a subfolder): every dotted config key with its value, and the
    metrics, whose scalars equal summary.json's values."""
    assert [p for p in full.rglob("events.out.tfevents.*") if p.parent != full] == []
    acc = events(full)
    content = acc.PluginTagToContent("hparams")
    start = hparams_metadata.parse_session_start_info_plugin_data(
        content[hparams_metadata.SESSION_START_INFO_TAG]
    )
    config = load_config(full / "config.yaml")
    flat = metrics.flatten_config(config.model_dump(mode="json"))
    assert set(start.hparams) == set(flat)
    assert "replay.alpha" in flat and "agent.hidden_sizes" in flat
    for key, value in flat.items():
        field = start.hparams[key]
        got = {
            "bool_value": field.bool_value,
            "number_value": field.number_value,
            "string_value": field.string_value,
        }[field.WhichOneof("kind")]
        # Integers as their text: TensorBoard shows a number as 3.0000.
        is_int = isinstance(value, int) and not isinstance(value, bool)
        assert got == (str(value) if is_int else value), key
    assert start.hparams["agent.hidden_sizes"].string_value == "[32, 32]"
    assert start.hparams["replay.kind"].string_value == "proportional"
    assert start.hparams["run.seed"].string_value == "0"
    assert start.hparams["replay.alpha"].number_value == pytest.approx(0.6)
    assert start.group_name == "run"  # the run's name, not a hash of its values
    experiment = hparams_metadata.parse_experiment_plugin_data(
        content[hparams_metadata.EXPERIMENT_TAG]
    )
    # A run of no sweep: what an ablation varies, marked as differing, and nothing else: the
    # tab's columns are these and the metrics (issue 45, item 6: the whole config filled its
    # default columns with agent.adam_eps and agent.channels_last, past a 1280-pixel screen).
    names = [info.name for info in experiment.hparam_infos]
    assert names == ["replay.kind", "run.seed", "env.id"]
    assert all(info.differs for info in experiment.hparam_infos)
    logged = [info.name.tag for info in experiment.metric_infos]
    assert logged == [tags.SUMMARY_FINAL_RETURN, tags.SUMMARY_AUC, tags.SUMMARY_IS_WEIGHT_MEAN]
    summary, curves = summary_of(full), read_scalars(full)
    for tag, key in ((tags.SUMMARY_FINAL_RETURN, "final_eval_return_mean"),
                     (tags.SUMMARY_AUC, "auc"),
                     (tags.SUMMARY_IS_WEIGHT_MEAN, "is_weight_mean")):  # fmt: skip
        ((step, value),) = curves[tag]
        assert step == 1500 and value == np.float32(summary[key]), tag


def test_a_log_point_is_one_event_holding_every_tag(tmp_path):
    """``TensorBoardLogger.scalars`` writes a step's points as one event, each value as
    ``add_scalar`` writes it (a float32 ``simple_value``), NaN left out, and TensorBoard's
    reader gives each tag its point. Pins a cost: an event per tag handed each point to the
    writer's thread on its own, 11% of a MinAtar pack's time in a profile on a busy machine."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event

    logger = metrics.TensorBoardLogger(tmp_path)
    logger.scalars({"a": 1.5, "b": float("nan"), "c": 1 / 3}, 10)
    logger.scalars({"a": 2.0}, 20)
    logger.scalars({"b": float("nan")}, 30)  # nothing to write
    logger.close()
    (path,) = tmp_path.glob("events.out.tfevents.*")
    events = [Event.FromString(record) for record in RawEventFileLoader(str(path)).Load()]
    points = [
        (event.step, [(v.tag, v.simple_value) for v in event.summary.value])
        for event in events
        if event.HasField("summary")
    ]
    assert points == [(10, [("a", 1.5), ("c", float(np.float32(1 / 3)))]), (20, [("a", 2.0)])]
    assert read_scalars(tmp_path) == {
        "a": [(10, 1.5), (20, 2.0)], "c": [(10, float(np.float32(1 / 3)))]
    }  # fmt: skip


def test_flatten_config_by_hand():
    data = {"a": {"x": 1, "y": [2, 3], "z": None}, "b": {"c": {"d": True}}, "e": "s"}
    assert metrics.flatten_config(data) == {
        "a.x": 1, "a.y": "[2, 3]", "a.z": "null", "b.c.d": True, "e": "s"
    }  # fmt: skip


def test_custom_scalars_give_each_quantity_its_chart_and_the_ratio_one(full):
    """Pins the Custom Scalars tab drawing a run's sampled and memory-mean priority on one chart
    (issue 26), where TensorBoard told the two lines apart only by the marker's shape: each
    quantity has its own chart now, every run's line on it, and the comparison is a chart of
    its own, ``per/priority_ratio`` (1 under uniform sampling). Every chart's tag is in the
    catalogue, and the PER and loss charts' are ones this proportional run logs (the priority
    signal's charts are those of the kinds that log them: tests/test_train.py)."""
    (record,) = events(full).Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout()
    layout.ParseFromString(record.tensor_proto.string_val[0])
    charts = {chart.title: list(chart.multiline.tag) for c in layout.category for chart in c.chart}
    assert all(len(patterns) == 1 for patterns in charts.values())
    assert charts["sampled / memory mean priority (1: no prioritisation)"] == [
        "^per/priority_ratio$"
    ]
    assert charts["priority of the sampled batches"] == ["^per/sampled_priority$"]
    assert charts["mean priority of the memory"] == ["^per/mean_priority$"]
    logged = set(read_scalars(full))
    assert {p.strip("^$") for patterns in charts.values() for p in patterns} <= set(
        tags.SCALAR_TAGS
    )
    shared = [chart for c in layout.category if c.title in ("PER", "loss") for chart in c.chart]
    assert {p.strip("^$") for chart in shared for p in chart.multiline.tag} <= logged


# --- Weights & Biases -----------------------------------------------------------------------------


def wandb_records(path: Path):
    """The records of an offline run's ``run-<id>.wandb`` file: wandb's leveldb-style log (a
    7-byte ``:W&B`` header, then 32 KiB blocks of chunks with a 7-byte header: crc32, length,
    type full/first/middle/last), each a ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 2):
            pending = b""
        pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def wandb_history(run_dir: Path) -> tuple[list[str], dict, dict[str, list[tuple[int, float]]]]:
    """Every offline run's id, the config of the last (wandb's own ``_wandb`` key left out),
    and the logged points by tag."""
    ids, config, points = [], {}, {}
    for path in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.append(record.run.run_id)
                config = {u.key: json.loads(u.value_json) for u in record.run.config.update}
                config.pop("_wandb", None)
            elif kind == "history":
                row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json)
                       for i in record.history.item}  # fmt: skip
                for tag, value in row.items():
                    if not tag.startswith("_") and tag != "env_steps":
                        points.setdefault(tag, []).append((row["env_steps"], value))
    return ids, config, points


# Where wandb would write outside the run dir unless told: cleared, so HOME is its only default.
WANDB_DIR_VARIABLES = ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR",
                       "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")  # fmt: skip


# wandb's own dirs in a user's HOME (settings, cache, data): wandb's, never the run dir's.
USER_WANDB_DIRS = {".config/wandb", ".cache/wandb", ".local/share/wandb"}


def outside_wandb_dirs(home: Path) -> list[Path]:
    """The files under ``home`` outside wandb's own dirs."""
    dirs = [home / name for name in USER_WANDB_DIRS]
    return [p for p in home.rglob("*") if p.is_file() and not any(d in p.parents for d in dirs)]


def cli(args: list[str], env: dict[str, str], cwd: Path, block_wandb: bool = False):
    """The real ``per-dqn`` command in its own process, running this checkout's package; with
    ``block_wandb``, as where wandb is not installed (the import fails)."""
    prelude = "import sys; sys.modules['wandb'] = None; " if block_wandb else ""
    return subprocess.run(
        [sys.executable, "-c", f"{prelude}from per_dqn.cli import app; app()", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(CHECKOUT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def settings(overrides: dict) -> list[str]:
    args = []
    for key, value in overrides.items():
        args += ["--set", f"{key}={json.dumps(value)}"]
    return args


@pytest.mark.slow
def test_wandb_offline_gets_the_config_and_the_tensorboard_scalars_and_resumes_its_run(tmp_path):
    """``train --track wandb`` (offline: no network here), then ``train --resume --steps
    --track wandb`` on the same run dir (a read-back ``run.track`` asks for the opt-in, and
    ``--track`` naming the run's own tracker is it: issue 43, E2; ``--track none`` is refused in
    one line, as a resume keeps its run's tracker): both processes write to one wandb run id;
    the config is config.yaml's; logged points
    equal the event file's at the same env steps; every wandb run file is inside the run dir,
    and wandb's own dirs are the user's (HOME), never the run dir's."""
    home, run_dir = tmp_path / "home", tmp_path / "run"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "WANDB_MODE": "offline"}
    for key in WANDB_DIR_VARIABLES:
        env.pop(key, None)
    short = {**SHORT, "train.total_env_steps": 1000}
    first = cli(["train", "-c", "cartpole.yaml", "--run-dir", str(run_dir), "-q", "--track",
                 "wandb", *settings(short)], env, tmp_path)  # fmt: skip
    assert first.returncode == 0, first.stderr
    resume = ["train", "--resume", str(run_dir), "--steps", "1500", "-q"]
    refused = cli(resume, env, tmp_path)
    assert refused.returncode == 2 and "run.track: 'wandb' would send" in refused.stderr
    other = cli([*resume, "--track", "none"], env, tmp_path)
    assert other.returncode == 2 and other.stderr == (
        f"error: --track: 'none' is not the tracker {run_dir / 'config.yaml'} names (run.track: "
        "'wandb'); a resume keeps its run's tracker\n"
    )
    second = cli([*resume, "--track", "wandb"], env, tmp_path)
    assert second.returncode == 0, second.stderr
    assert outside_wandb_dirs(home) == []
    assert not any((run_dir / "wandb" / name).exists() for name in ("cache", "config", "data"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "run"]

    ids, config, points = wandb_history(run_dir)
    run_id = (run_dir / "wandb" / "per-dqn-run-id").read_text().strip()
    assert ids == [run_id, run_id]
    assert config == yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["run"]["track"] == "wandb" and config["train"]["total_env_steps"] == 1500
    tensorboard = read_scalars(run_dir)
    for tag in (tags.TRAIN_LOSS, tags.EVAL_RETURN_MEAN, tags.PER_PRIORITY_RATIO,
                tags.EPISODE_RETURN, tags.SUMMARY_AUC):  # fmt: skip
        expected = tensorboard[tag]
        got = [(step, float(np.float32(value))) for step, value in points[tag]]
        assert got == expected, tag
    assert [step for step, _ in points[tags.EVAL_RETURN_MEAN]] == [500, 1000, 1500]
    assert set(points) <= set(tags.SCALAR_TAGS)
    assert set(points) == set(tensorboard)


@pytest.mark.slow
def test_track_wandb_without_the_extra_is_one_line_and_creates_nothing(tmp_path):
    for flag in (["--track", "wandb"], ["--set", "run.track=wandb"]):
        result = cli(["train", "-c", "cartpole.yaml", "--run-dir", str(tmp_path / "run"), "-q",
                      *flag], dict(os.environ), tmp_path, block_wandb=True)  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("error: cartpole.yaml: run.track: 'wandb' needs the ")
        assert "pip install 'per-dqn[wandb]'" in result.stderr
        assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_wandb_that_cannot_start_stops_the_run_before_it_writes(tmp_path):
    """Online without a login (no API key, no network here): one line, exit 2, and the run dir
    holds nothing but its lock file, so the same --run-dir can be used again."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "WANDB_MODE": "online"}
    for key in ("WANDB_API_KEY", *WANDB_DIR_VARIABLES):
        env.pop(key, None)
    run_dir = tmp_path / "run"
    result = cli(["train", "-c", "cartpole.yaml", "--run-dir", str(run_dir), "-q", "--track",
                  "wandb", *settings(SHORT)], env, tmp_path)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: run.track: wandb could not start a run: ")
    assert [p.name for p in run_dir.iterdir()] == [rundir.LOCK_FILE]
    assert outside_wandb_dirs(home) == []


# --- issue 43, E2: nothing from a run dir configures wandb ----------------------------------------

# What the tests below put in WANDB_API_KEY (wandb wants 40 characters or more before it sends
# one): never to be seen by a host a run dir names.
API_KEY = "sentinel43e2" + "0123456789abcdef" * 3


@contextlib.contextmanager
def listener() -> Iterator[tuple[str, list[bytes]]]:
    """A real HTTP server on 127.0.0.1 (a free port) in a thread: its base URL and the requests
    it received so far, each as its raw request line, headers and body. Every request gets a
    401. On leaving, the server is shut down (a request being handled is finished first), so the
    list is complete; every socket wait is bounded."""
    received: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = 10  # a client that stops sending cannot hold the server

        def answer(self) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
            body = self.rfile.read(length) if length else b""
            received.append(f"{self.requestline}\r\n{self.headers}".encode() + body)
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_PUT = do_HEAD = do_PATCH = do_DELETE = answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
        assert not thread.is_alive()


def wandb_settings(path: Path, base_url: str) -> None:
    """A wandb settings file (``WANDB_CONFIG_DIR/settings``: INI, a ``[default]`` section) that
    points wandb at ``base_url``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[default]\nbase_url = {base_url}\n")


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """A run stopped at its step-500 checkpoint (run.track none): ``train --resume`` goes on."""
    run_dir = tmp_path_factory.mktemp("stopped") / "run"
    overrides = {**SHORT, "train.total_env_steps": 1000}
    per_dqn.train(
        "cartpole", overrides=overrides, run_dir=run_dir, callbacks=[StopAtCheckpoint(500)]
    )
    return run_dir


def planted(stopped: Path, where: Path, base_url: str) -> Path:
    """A copy of ``stopped`` as a shared dir's could be: ``run.track: wandb`` in its
    ``config.yaml`` (no checksum) and wandb settings naming ``base_url`` in
    ``RUN_DIR/wandb/config/settings``, where per-dqn used to point ``WANDB_CONFIG_DIR``."""
    run_dir = where / "run"
    shutil.copytree(stopped, run_dir)
    data = yaml.safe_load((run_dir / "config.yaml").read_text())
    data["run"]["track"] = "wandb"
    (run_dir / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    wandb_settings(run_dir / "wandb" / "config" / "settings", base_url)
    return run_dir


def online_env(home: Path) -> dict[str, str]:
    """A user's environment with wandb online and an API key: HOME is ``home``, no wandb dir
    set, no proxy (a request to 127.0.0.1 goes there and nowhere else) and no error reports
    (wandb's would go to another host)."""
    env = {**os.environ, "HOME": str(home), "WANDB_MODE": "online", "WANDB_API_KEY": API_KEY,
           "WANDB_INIT_TIMEOUT": "60", "WANDB_ERROR_REPORTING": "false",
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}  # fmt: skip
    for key in (*WANDB_DIR_VARIABLES, "WANDB_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
                "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):  # fmt: skip
        env.pop(key, None)
    return env


def carries_key(request: bytes) -> bool:
    """Whether a request holds ``API_KEY``: as it is, or in an ``Authorization`` header's
    base64 (wandb sends ``Basic base64("api:KEY")``)."""
    if API_KEY.encode() in request:
        return True
    for line in request.splitlines():
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            token = value.split()[-1] if value.split() else b""
            with contextlib.suppress(ValueError):
                if API_KEY.encode() in base64.b64decode(token):
                    return True
    return False


def assert_none_received(received: list[bytes]) -> None:
    keyed = sum(carries_key(request) for request in received)
    assert received == [], f"{len(received)} requests, {keyed} of them with WANDB_API_KEY"


def assert_key_in_no_file(root: Path) -> None:
    for path in (p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        assert API_KEY.encode() not in path.read_bytes(), path


def test_a_planted_run_track_is_refused_and_no_key_reaches_the_host_its_settings_name(
    stopped, tmp_path
):
    """Issue 43, E2: a run dir with ``run.track: wandb`` in its ``config.yaml`` and
    ``RUN_DIR/wandb/config/settings`` naming a host started wandb on ``train --resume`` with no
    opt-in, and wandb, its config dir pointed into the run dir, sent ``WANDB_API_KEY`` to that
    host. Now the read-back ``run.track`` is refused in one line, exit 2, like code: the host (a
    listener on 127.0.0.1) receives no request, and the key is written nowhere."""
    home = tmp_path / "home"
    with listener() as (planted_url, planted_received), listener() as (own_url, own_received):
        # The user's own settings name a host of theirs: a wandb started anyway goes nowhere else.
        wandb_settings(home / ".config" / "wandb" / "settings", own_url)
        run_dir = planted(stopped, tmp_path, planted_url)
        done = cli(["train", "--resume", str(run_dir), "-q"], online_env(home), tmp_path)
    assert_none_received(planted_received)
    assert_none_received(own_received)  # refused before wandb starts
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: {run_dir / 'config.yaml'}: run.track: 'wandb' would send the run to a tracker's "
        "service with your credentials, and a run dir read back turns on no tracker; if you "
        "trust where it came from, pass --track wandb (Python: track='wandb')"
    ]
    assert_key_in_no_file(tmp_path)
    assert not (run_dir / "checkpoints" / "step_000001000").exists()


@pytest.mark.slow
def test_wandb_reads_the_user_s_own_settings_never_the_run_dir_s(stopped, tmp_path):
    """Issue 43, E2: with the opt-in (``--trust-code``), the planted run dir's
    ``wandb/config/settings`` is still not wandb's settings: per-dqn pointed ``WANDB_CONFIG_DIR``
    into the run dir, so its ``base_url`` got the user's ``WANDB_API_KEY``. Now wandb's settings
    are the user's own (``~/.config/wandb/settings``, which names a second listener here):
    wandb goes online to the user's host only, the planted one receives no request, and the
    run dir holds none of wandb's home dirs."""
    home = tmp_path / "home"
    with listener() as (planted_url, planted_received), listener() as (own_url, own_received):
        wandb_settings(home / ".config" / "wandb" / "settings", own_url)
        run_dir = planted(stopped, tmp_path, planted_url)
        done = cli(["train", "--resume", str(run_dir), "-q", "--trust-code"], online_env(home),
                   tmp_path)  # fmt: skip
    assert_none_received(planted_received)
    assert own_received  # wandb did go online, to the user's own host
    # The user's host answers 401 to everything: wandb cannot start, one line, exit 2.
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: run.track: wandb could not start a run: "
    ), done.stderr
    assert str(run_dir / "wandb" / "config") not in done.stderr  # wandb's "Loading settings"
    assert not any((run_dir / "wandb" / name).exists() for name in ("cache", "data"))
    assert not (run_dir / "checkpoints" / "step_000001000").exists()
