"""``per-dqn eval`` on real runs: the printed statistics against a hand-rolled greedy loop, which
weights a run dir or a checkpoint dir resolves to, a run that is still rotating its checkpoints,
the GIF a ``--video`` writes (CartPole's renderer, and the real ALE's frames, enlarged), and
one-line errors for a truncated, corrupt or planted ``model.pt``."""

from __future__ import annotations

import copy
import os
import re
import shutil
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from PIL import Image, ImageSequence
from support import Plant, reseal, start_cli
from typer.testing import CliRunner

import per_dqn
from per_dqn.cli import app
from per_dqn.config import load_config, parse_override, resolve_config_path
from per_dqn.envs.make import describe
from per_dqn.logs.video import write_gif
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.training import checkpoints as run_ckpt
from per_dqn.training.build import make_agent
from per_dqn.training.run import Trainer
from per_dqn.training.seeding import RunSeeds

SETTINGS = [
    "train.total_env_steps=1000", "train.learning_starts=300", "train.eval_interval=0",
    "train.final_eval_episodes=1", "checkpoint.interval_steps=500", "run.device=cpu",
]  # fmt: skip
runner = CliRunner()


def train(run_dir: Path, *extra: str) -> Path:
    overrides = map(parse_override, [*SETTINGS, *extra])
    trainer = Trainer(load_config(resolve_config_path("cartpole.yaml"), overrides), "cartpole")
    try:
        trainer.run(run_dir)
    finally:
        trainer.close()
    return run_dir


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return train(tmp_path_factory.mktemp("eval") / "run")


def evaluate(*args: str):
    return runner.invoke(app, ["eval", *args])


def hand_rolled_returns(weights: dict, episodes: int, seed: int) -> np.ndarray:
    """Greedy play written out with gymnasium and torch alone (the network is built as training
    builds it; what is checked is the episode loop, the seeding and the statistics)."""
    env = gym.make("CartPole-v1")
    config = load_config(resolve_config_path("cartpole.yaml"))
    agent = make_agent(config, describe(env), torch.device("cpu"))
    agent.online.load_state_dict(weights)
    returns = []
    for episode in range(episodes):
        # `--seed S` plays the evaluation episodes of run seed S: the env reset once with its
        # eval_env stream (as a run's eval env is at the start), then every episode from its RNG.
        if episode == 0:
            env.reset(seed=RunSeeds.from_seed(seed).eval_env)
        obs, _ = env.reset()
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                q = agent.online(torch.as_tensor(obs[None], dtype=torch.float32))
            obs, reward, terminated, truncated, _ = env.step(int(q.argmax()))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return np.array(returns)


def test_prints_the_statistics_of_greedy_episodes(run_dir):
    result = evaluate(str(run_dir), "--episodes", "4", "--seed", "11")
    assert result.exit_code == 0, result.output
    weights = torch.load(run_dir / "model.pt", weights_only=True)  # == the final checkpoint's
    r = hand_rolled_returns(weights, 4, 11)
    newest = ckpt.checkpoints_dir(run_dir) / "step_000001000"
    assert result.stdout.splitlines()[:3] == [
        f"weights: {newest} (env step 1,000)",
        "env: CartPole-v1, 4 episodes, epsilon 0, seed 11",
        f"return: mean {r.mean():.2f}  std {r.std():.2f}  min {r.min():.2f}  max {r.max():.2f}",
    ]


def test_eval_runs_on_the_run_s_torch_threads(run_dir):
    """Bug pinned: `per-dqn eval` played on torch's default intra-op threads (one per core),
    whatever `run.torch_threads` said: 10 CartPole episodes took 21 s on a many-core machine,
    against 3.6 s on the config's one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # what torch's default would be on a 3-core machine
    try:
        result = evaluate(str(run_dir), "--episodes", "1")
        assert result.exit_code == 0, result.output
        assert torch.get_num_threads() == load_config(run_dir / "config.yaml").run.torch_threads
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_checkpoint_dir_plays_its_own_weights(run_dir):
    older = ckpt.checkpoints_dir(run_dir) / "step_000000500"
    result = evaluate(str(older), "--episodes", "2", "--seed", "3")
    assert result.exit_code == 0, result.output
    weights = torch.load(older / run_ckpt.AGENT_FILE, weights_only=True)["online"]
    r = hand_rolled_returns(weights, 2, 3)
    assert result.stdout.splitlines()[0] == f"weights: {older} (env step 500)"
    assert f"mean {r.mean():.2f}  std {r.std():.2f}" in result.stdout


def test_epsilon_one_plays_at_random(run_dir):
    """Uniform random CartPole play averages ~22 steps; the trained greedy policy does not."""
    result = evaluate(str(run_dir), "--episodes", "20", "--epsilon", "1")
    assert result.exit_code == 0, result.output
    mean = float(result.stdout.splitlines()[2].split()[2])
    assert 10 < mean < 40


def test_video_is_a_playable_gif_of_the_first_episode(run_dir):
    result = evaluate(str(run_dir), "--episodes", "1", "--seed", "5", "--video")
    assert result.exit_code == 0, result.output
    gif = run_dir / "videos" / "eval-step1000.gif"
    length = int(result.stdout.splitlines()[3].split()[2].split(".")[0])
    assert result.stdout.splitlines()[4] == f"video: {gif} ({length + 1} frames, 20 ms each)"
    with Image.open(gif) as image:
        assert image.format == "GIF" and image.size == (600, 400)  # CartPole's 600x400 canvas
        durations = [frame.info["duration"] for frame in ImageSequence.Iterator(image)]
    # The reset frame and one per step at CartPole's 50 fps (Pillow merges repeated frames
    # into longer ones, so the total time is what is fixed).
    assert sum(durations) == (length + 1) * 20


def test_small_frames_are_enlarged_sharply(tmp_path):
    """84x84 frames (Atari after preprocessing) become 252x252 with each pixel a 3x3 block."""
    rng = np.random.default_rng(0)
    gray = rng.integers(0, 256, size=(3, 84, 84), dtype=np.uint8)
    frames = [np.repeat(g[:, :, None], 3, axis=2) for g in gray]
    assert write_gif(frames, tmp_path / "a.gif", fps=15) == 70  # 1/15 s in GIF's 10 ms units
    with Image.open(tmp_path / "a.gif") as image:
        assert image.size == (252, 252) and image.n_frames == 3
        assert image.info["duration"] == 70
        image.seek(1)
        pixels = np.asarray(image.convert("L"))
    np.testing.assert_array_equal(pixels[::3, ::3], gray[1])
    np.testing.assert_array_equal(pixels[1::3, 2::3], gray[1])


def test_gif_keeps_exact_colours_and_maps_an_unsampled_one_to_the_nearest(tmp_path):
    """The palette comes from 8 frames spread over the film; frame 1 of 20 is not among them, so
    its one new colour (250, 0, 0) is drawn in the nearest sampled one, (255, 0, 0)."""
    frames = [np.zeros((5, 5, 3), dtype=np.uint8) for _ in range(20)]
    for i, frame in enumerate(frames):
        frame[4, 4] = (255, 0, 0)
        frame[divmod(i, 5)] = (255, 255, 255)  # moves, so no two frames are merged
    frames[1][3, 3] = (250, 0, 0)
    write_gif(frames, tmp_path / "c.gif", fps=50)
    with Image.open(tmp_path / "c.gif") as image:
        got = [np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(image)]
    assert len(got) == 20
    for i in (0, 2, 19):  # sampled frames come back exactly (enlarged 48x: pixel (r, c) at 48r)
        np.testing.assert_array_equal(got[i][::48, ::48], frames[i])
    assert tuple(got[1][3 * 48, 3 * 48]) == (255, 0, 0)


def test_a_minatar_film_keeps_its_colours(tmp_path):
    """Pins black MinAtar films: MinAtar's ``rgb_array`` frames are floats in [0, 1], which the
    writer cast to bytes (every pixel 0). A real MinAtar Breakout frame comes back as its colours
    times 255, enlarged (10 x 10 cells of 24 x 24 pixels)."""
    pytest.importorskip("minatar")
    from per_dqn.config import load_config, resolve_config_path
    from per_dqn.envs.make import make_eval_env

    env = make_eval_env(load_config(resolve_config_path("minatar.yaml")).env, render=True)
    try:
        env.reset(seed=0)
        frame = env.render()
    finally:
        env.close()
    assert frame.dtype == np.float64 and frame.max() <= 1.0  # MinAtar's own convention
    write_gif([frame, frame], tmp_path / "m.gif", fps=10)
    with Image.open(tmp_path / "m.gif") as image:
        got = np.asarray(image.convert("RGB"))
    assert got.shape == (240, 240, 3)
    np.testing.assert_array_equal(got[::24, ::24], np.rint(frame * 255).astype(np.uint8))
    assert got.max() > 0


def test_damaged_newest_checkpoint_is_skipped_with_a_warning(run_dir, tmp_path):
    copy = Path(shutil.copytree(run_dir, tmp_path / "run"))
    newest = ckpt.checkpoints_dir(copy) / "step_000001000"
    with open(newest / run_ckpt.AGENT_FILE, "r+b") as file:
        file.truncate(1000)
    result = evaluate(str(copy), "--episodes", "1")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"warning: checkpoint {newest}: agent.pt has 1,000 bytes")
    warned, playing = result.stderr.splitlines()  # the warning, then what it plays
    assert warned.startswith("warning: ") and playing.startswith("playing ")
    assert result.stdout.startswith(f"weights: {newest.parent / 'step_000000500'}")
    # Named explicitly, a damaged checkpoint is an error, not a fallback.
    result = evaluate(str(newest))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {newest}: agent.pt has 1,000 bytes")


@pytest.fixture(scope="module")
def model_only(tmp_path_factory) -> Path:
    """A run with checkpoints switched off: ``model.pt`` is all there is to play."""
    run_dir = tmp_path_factory.mktemp("model") / "run"
    return train(run_dir, "checkpoint.enabled=false", "train.total_env_steps=400")


def test_a_run_without_checkpoints_plays_its_model(model_only):
    assert not ckpt.checkpoints_dir(model_only).exists()
    assert not [p for p in model_only.iterdir() if p.name.startswith(".tmp-")]  # atomic write
    result = evaluate(str(model_only), "--episodes", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"weights: {model_only / 'model.pt'} (env step 400)"


def flip_a_weight(data: bytes) -> bytes:
    """One bit of the first float32 weight stored in a ``torch.save`` zip (the first member whose
    name ends in ``data/0``), found with the stdlib's zip reader."""
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("data/0"))
    # The member's data follow its local header: 30 bytes, then its name and extra field.
    name_len, extra_len = (int.from_bytes(data[info.header_offset + k : info.header_offset + k + 2],
                           "little") for k in (26, 28))  # fmt: skip
    at = info.header_offset + 30 + name_len + extra_len
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda d: d[: len(d) // 2], "truncated or corrupt, not a whole torch file"),
        (lambda d: d[:100], "truncated or corrupt, not a whole torch file"),
        (flip_a_weight, "corrupt: its member archive/data/0 fails its CRC-32 check"),
        (lambda d: b"", "truncated or corrupt, not a whole torch file"),
    ],
    ids=["half", "100-bytes", "flipped-weight", "empty"],
)
def test_a_truncated_or_corrupt_model_pt_is_one_line_naming_it(
    model_only, tmp_path, damage, problem
):
    """Pins the traceback (or, for a flipped bit, the silent play of other weights: torch.load
    does not check the zip's CRC-32s) that ``eval`` gave for a damaged model.pt."""
    run_dir = Path(shutil.copytree(model_only, tmp_path / "run"))
    model = run_dir / "model.pt"
    model.write_bytes(damage(model.read_bytes()))
    result = evaluate(str(run_dir), "--episodes", "1")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {model}: {problem}"), line
    assert result.stdout == ""


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_a_model_pt_holding_nan_or_inf_is_one_line_naming_its_tensor(model_only, tmp_path, value):
    """Pins the silent play of non-finite weights: a model.pt with one NaN (or inf) weight, a
    whole torch file that passes its CRC-32s, loaded and played, every Q-value NaN. ``eval`` now
    refuses it with one line naming the file and the tensor, exit 2, and ``per_dqn.load``
    raises the same line."""
    run_dir = Path(shutil.copytree(model_only, tmp_path / "run"))
    model = run_dir / "model.pt"
    weights = torch.load(model, weights_only=True)
    name = sorted(weights)[-1]
    weights[name].view(-1)[0] = value
    torch.save(weights, model)
    line = f"{model}: its parameter {name!r} holds NaN or infinite values; these weights cannot act"
    result = evaluate(str(run_dir), "--episodes", "1")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"error: {line}"]
    with pytest.raises(ValueError) as caught:
        per_dqn.load(run_dir, device="cpu")
    assert str(caught.value) == line


def test_a_checkpoint_whose_online_network_holds_nan_is_one_line(run_dir, tmp_path):
    """The same for a checkpoint's ``agent.pt`` (an edited file that passes its checksums),
    played by ``eval``."""
    import io

    source = ckpt.checkpoints_dir(run_dir) / "step_000000500" / run_ckpt.AGENT_FILE
    agent = torch.load(source, weights_only=True)
    name = sorted(agent["online"])[0]
    agent["online"][name].view(-1)[-1] = float("nan")
    buffer = io.BytesIO()
    torch.save(agent, buffer)
    step = edited_checkpoint(run_dir, tmp_path, run_ckpt.AGENT_FILE, buffer.getvalue())
    result = evaluate(str(step), "--episodes", "1")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: {step / run_ckpt.AGENT_FILE}: its parameter {name!r} holds NaN or infinite "
        "values; these weights cannot act"
    ]


def test_a_planted_model_pt_runs_no_code(model_only, tmp_path):
    """``eval`` keeps ``weights_only=True``: a model.pt whose pickle would create a marker (shown
    live with a plain ``torch.load`` first) is refused with one line, and no marker appears."""
    run_dir = Path(shutil.copytree(model_only, tmp_path / "run"))
    model = run_dir / "model.pt"
    marker = tmp_path / "ran"
    torch.save({"w": Plant(marker)}, tmp_path / "control.pt")
    torch.load(tmp_path / "control.pt", weights_only=False)
    assert marker.exists()
    marker.unlink()
    torch.save({"w": Plant(marker)}, model)
    result = evaluate(str(run_dir), "--episodes", "1")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: {model}: refused: it holds more than tensors (Unsupported global: GLOBAL io.open "
        "was not an allowed global by default), and loading it could run code"
    ]
    assert not marker.exists()


@pytest.mark.slow
def test_eval_beside_a_run_that_rotates_its_checkpoints(tmp_path):
    """Pins the FileNotFoundError ``eval RUN_DIR`` raised beside a run still training: the
    checkpoint it found could be deleted by the run's keep-last rotation before it was read. A
    real ``per-dqn train`` process writes a checkpoint every 20 env steps and keeps one, while
    ``eval`` runs again and again beside it (a real race, so how often it is hit varies): every
    eval exits 0 with no warning and plays a checkpoint no older than the previous eval's."""
    run_dir = tmp_path / "run"
    args = ["train", "-c", "cartpole.yaml", "--run-dir", str(run_dir), "-q"]
    for text in [
        "train.total_env_steps=800", "train.learning_starts=100", "train.eval_interval=0",
        "train.final_eval_episodes=1", "train.log_interval=1000", "replay.capacity=800",
        "checkpoint.interval_steps=20", "checkpoint.keep_last=1", "run.device=cpu",
    ]:  # fmt: skip
        args += ["--set", text]
    process = start_cli(args, tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir)):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        played = []
        while process.poll() is None:
            result = evaluate(str(run_dir), "--episodes", "1")
            assert result.exit_code == 0, result.output
            # What it plays, and no warning (a checkpoint deleted while read is not one).
            assert [line.split(" ")[0] for line in result.stderr.splitlines()] == ["playing"]
            found = re.fullmatch(r"weights: \S+/step_(\d+) \(env step [\d,]+\)",
                                 result.stdout.splitlines()[0])  # fmt: skip
            assert found is not None, result.stdout
            played.append(int(found.group(1)))
    finally:
        if process.poll() is None:
            process.kill()
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert played == sorted(played) and len(set(played)) >= 5, played


def test_bad_input_is_one_line_each(tmp_path):
    result = evaluate(str(tmp_path), "--episodes", "0", "--epsilon", "1.5")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: --episodes must be in [1, 1,000,000], got 0",
        "error: --epsilon must be in [0, 1], got 1.5",
    ]
    # Pins a bug: --episodes had no upper bound, and 10**12 died of a MemoryError traceback
    # allocating its returns; the bound is the config's on its own evaluations.
    result = evaluate(str(tmp_path), "--episodes", "1000000000000")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: --episodes must be in [1, 1,000,000], got 1000000000000"
    ]
    result = evaluate(str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {tmp_path}: neither a run dir (no config.yaml) nor a checkpoint dir "
        "(no manifest.json)"
    ]
    assert result.stdout == ""
    # Issue 45: a path that does not exist, or a file, said "neither a run dir (no config.yaml)".
    result = evaluate(str(tmp_path / "no-such-run"))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {tmp_path / 'no-such-run'}: no such run dir or checkpoint dir (the path does not "
        "exist)"
    ]
    (tmp_path / "model.pt").write_bytes(b"")
    result = evaluate(str(tmp_path / "model.pt"))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {tmp_path / 'model.pt'}: not a directory (a run dir or a checkpoint dir)"
    ]


@pytest.mark.atari
def test_atari_checkpoint_plays_and_films(tmp_path):
    """The real ALE: a few steps of Pong with the CNN, checkpointed, then evaluated with a video
    of the game's own 210x160 RGB screen enlarged to 420x320 (issue 13, part 3, item 5: it
    filmed the agent's grayscale view), and with `--video-view agent`, of its preprocessed 84x84
    frames enlarged to 252x252."""
    run_dir = train(
        tmp_path / "run", "env.id=ALE/Pong-v5", "env.max_episode_steps=60", "replay.capacity=200",
        "train.total_env_steps=80", "train.learning_starts=64", "train.batch_size=32",
        "agent.hidden_sizes=[32]", "checkpoint.interval_steps=0",
    )  # fmt: skip
    result = evaluate(str(run_dir), "--episodes", "1", "--video")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].startswith("env: ALE/Pong-v5, 1 episodes")
    assert lines[3] == "length: mean 60.0  min 60  max 60"  # the time limit
    with Image.open(run_dir / "videos" / "eval-step80.gif") as image:
        assert image.size == (320, 420)
        rgb = np.asarray(image.convert("RGB"))
    colours = np.unique(rgb.reshape(-1, 3), axis=0)
    assert (colours[:, 0] != colours[:, 1]).any()  # Pong's orange, green and white, not gray
    result = evaluate(str(run_dir), "--episodes", "1", "--video", "--video-view", "agent")
    assert result.exit_code == 0, result.output
    with Image.open(run_dir / "videos" / "eval-step80-agent.gif") as image:
        assert image.size == (252, 252)
        gray = np.asarray(image.convert("RGB"))
    assert (gray[..., 0] == gray[..., 1]).all()


def test_video_view_needs_video_and_an_image_env(run_dir):
    result = evaluate(str(run_dir), "--video-view", "agent")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: --video-view agent needs --video"]
    result = evaluate(str(run_dir), "--video", "--video-view", "agent")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: video view 'agent': CartPole-v1's observations are not images; its video is the "
        "game's own render (view 'game')"
    ]
    assert not (run_dir / "videos" / "eval-step1000-agent.gif").exists()


# --- evaluation caps (issue 13, part 3, item 2) ---------------------------------------------------


class Balancer:
    """A hand-written CartPole controller (push towards where the pole falls) that keeps the
    pole up for hundreds of steps: long episodes for the caps to cut, without training."""

    num_actions = 2

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        return (3.0 * obs[:, 2] + obs[:, 3] > 0).astype(np.int64)


def test_caps_cut_episodes_and_the_whole_evaluation_by_hand():
    """5 episodes asked, at most 100 agent steps each and 250 in all: two episodes cut at 100,
    the third cut at 50 when the budget runs out, and no fourth; each cut one counts as
    truncated, the returns are the steps played (CartPole pays 1 a step), and progress is
    reported at the start and after each episode."""
    from per_dqn.training.evaluate import play

    env = gym.make("CartPole-v1")
    full = play(Balancer(), env, 1, 0.0, seed=3)
    assert full.lengths[0] > 100  # the controller alone outlasts the cap
    seen = []
    cut = play(Balancer(), env, 5, 0.0, seed=3, max_episode_steps=100, max_total_steps=250,
               on_progress=lambda *a: seen.append(a))  # fmt: skip
    assert cut.lengths.tolist() == [100, 100, 50]
    assert cut.returns.tolist() == [100.0, 100.0, 50.0]
    assert cut.truncated.tolist() == [True, True, True]
    assert (cut.reached_episode_cap, cut.reached_total_cap) == (2, True)
    assert seen == [(0, 5, 0), (1, 5, 100), (2, 5, 200), (3, 5, 250)]
    assert cut.cap_warning() == (
        "2 of 3 episodes reached train.eval_max_episode_steps (100 agent steps) and count as "
        "truncated; the evaluation reached train.eval_max_total_steps (250 agent steps) after 3 "
        "of 5 episodes (an episode it cut counts as truncated)"
    )
    uncut = play(Balancer(), env, 2, 0.0, seed=3, max_episode_steps=10_000)
    assert uncut.cap_warning() is None and uncut.lengths[0] == full.lengths[0]
    assert uncut.truncated[0] == (full.lengths[0] == 500)  # CartPole's own time limit
    with pytest.raises(ValueError, match="`max_total_steps` must be >= 1 or None, got 0"):
        play(Balancer(), env, 1, 0.0, seed=3, max_total_steps=0)


def test_caps_of_one_step_are_allowed_and_a_cap_of_zero_is_named():
    """Pins the caps' lower bound, 1 included: a one-step episode cap cuts every episode after
    its first step, a one-step budget stops the evaluation after one episode of one step; a cap
    of 0 is refused in a line that names that cap (the check named both alike)."""
    from per_dqn.training.evaluate import play

    env = gym.make("CartPole-v1")
    each = play(Balancer(), env, 2, 0.0, seed=3, max_episode_steps=1)
    assert each.lengths.tolist() == [1, 1] and each.truncated.tolist() == [True, True]
    budget = play(Balancer(), env, 3, 0.0, seed=3, max_total_steps=1)
    assert budget.lengths.tolist() == [1] and budget.reached_total_cap
    for name in ("max_episode_steps", "max_total_steps"):
        with pytest.raises(ValueError) as caught:
            play(Balancer(), env, 1, 0.0, seed=3, **{name: 0})
        assert str(caught.value) == f"`{name}` must be >= 1 or None, got 0"


def test_training_s_final_evaluation_is_capped_and_warns(tmp_path):
    """Bug pinned: a 1,500-step Breakout smoke run spent 17 minutes in its final evaluation, an
    untrained agent playing every episode to the time limit. The final evaluation stops at
    `train.eval_max_total_steps`, warns once naming the key, and the summary counts the
    episodes it played."""
    import json

    with pytest.warns(RuntimeWarning) as caught:
        run_dir = train(tmp_path / "run", "train.eval_max_total_steps=5",
                        "train.final_eval_episodes=3")  # fmt: skip
    lines = [str(w.message) for w in caught if "eval_max" in str(w.message)]
    assert lines == [
        "the final evaluation: the evaluation reached train.eval_max_total_steps (5 agent steps) "
        "after 1 of 3 episodes (an episode it cut counts as truncated)"
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_eval_episodes"] == 1
    assert summary["final_eval_return_mean"] <= 5.0


def test_eval_command_warns_when_a_cap_cut_it(run_dir, tmp_path):
    copy = tmp_path / "capped"
    shutil.copytree(run_dir, copy)
    config = (copy / "config.yaml").read_text()
    (copy / "config.yaml").write_text(
        config.replace("eval_max_episode_steps: null", "eval_max_episode_steps: 3")
    )
    for checkpoint in (copy / "checkpoints").iterdir():
        shutil.rmtree(checkpoint)  # plays model.pt with the edited config
    result = evaluate(str(copy), "--episodes", "2")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == (
        "warning: 2 of 2 episodes reached train.eval_max_episode_steps (3 agent steps) and count "
        "as truncated"
    )
    assert "length: mean 3.0  min 3  max 3" in result.stdout


def test_eval_replays_the_final_evaluation_of_a_run_seed(tmp_path):
    """One eval seed convention (issue 13 found two: training's eval stream, and ``per-dqn
    eval``'s run.seed + 20000): with no periodic evaluation, ``per-dqn eval`` on the finished run,
    at its defaults, plays exactly the episodes of the run's final evaluation, so it reports the
    same returns; another --seed plays other episodes (the control)."""
    import json

    run_dir = tmp_path / "run"
    argv = ["train", "--config", "cartpole.yaml", "--run-dir", str(run_dir), "-q",
            "--set", "train.total_env_steps=1500", "--set", "train.learning_starts=200",
            "--set", "train.eval_interval=0", "--set", "train.final_eval_episodes=5",
            "--set", "agent.hidden_sizes=[32,32]", "--set", "train.eval_epsilon=0.2"]  # fmt: skip
    assert CliRunner().invoke(app, argv).exit_code == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    same = CliRunner().invoke(app, ["eval", str(run_dir / "checkpoints" / "step_000001500"),
                                    "--episodes", "5"])  # fmt: skip
    assert same.exit_code == 0, same.output
    mean = float(re.search(r"return: mean (\S+)", same.stdout).group(1))
    assert mean == pytest.approx(summary["final_eval_return_mean"], abs=0.005)
    other = CliRunner().invoke(app, ["eval", str(run_dir), "--episodes", "5", "--seed", "7"])
    other_mean = float(re.search(r"return: mean (\S+)", other.stdout).group(1))
    assert other_mean != pytest.approx(summary["final_eval_return_mean"], abs=0.005)


def test_a_run_dir_s_config_with_two_problems_is_one_line_naming_both(tmp_path):
    """Pins the line for a run dir whose ``config.yaml`` (read for its ``model.pt``) fails two
    checks: both problems, each naming the file, joined by "; "."""
    from per_dqn.training.evaluate import resolve_source

    torch.save({"w": torch.zeros(1)}, tmp_path / "model.pt")
    (tmp_path / "config.yaml").write_text("agent:\n  gamma: 2\ntrain:\n  batch_size: 0\n")
    with pytest.raises(ValueError) as caught:
        resolve_source(tmp_path)
    config = tmp_path / "config.yaml"
    assert str(caught.value) == (
        f"{config}: agent.gamma: must be <= 1, got 2; {config}: train.batch_size: must be >= 1, "
        "got 0"
    )


def hand_rolled_random_returns(episodes: int, seed: int) -> np.ndarray:
    """Play at epsilon 1 written out with gymnasium and numpy alone: the env reset once with the
    run seed's eval_env stream, then each step one uniform draw (against epsilon) and one action
    from the eval_explore stream."""
    env = gym.make("CartPole-v1")
    streams = RunSeeds.from_seed(seed)
    rng = np.random.default_rng(streams.eval_explore)
    env.reset(seed=streams.eval_env)
    returns = []
    for _ in range(episodes):
        env.reset()
        total, done = 0.0, False
        while not done:
            assert rng.random() < 1.0
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(2)))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return np.array(returns)


def test_epsilon_one_plays_the_exploration_stream_s_random_actions(run_dir):
    """Pins ``--epsilon``: at 1 every action is drawn from the run seed's eval_explore stream (the
    returns are those of the hand-rolled random play), and the report says epsilon 1."""
    result = evaluate(str(run_dir), "--episodes", "5", "--epsilon", "1", "--seed", "4")
    assert result.exit_code == 0, result.output
    r = hand_rolled_random_returns(5, 4)
    assert result.stdout.splitlines()[1:3] == [
        "env: CartPole-v1, 5 episodes, epsilon 1, seed 4",
        f"return: mean {r.mean():.2f}  std {r.std():.2f}  min {r.min():.2f}  max {r.max():.2f}",
    ]


def test_eval_builds_its_agent_on_the_gpu_when_there_is_one(run_dir, monkeypatch):
    """Pins the device ``eval`` plays on: CUDA when torch sees a GPU, else the CPU (checked here
    without one: ``torch.cuda.is_available`` is patched, and the agent is built on the CPU by a
    wrapper that records the device it was asked for)."""
    from per_dqn.training.evaluate import evaluate_source, resolve_source

    asked = []

    def make_on_cpu(config, spec, device):
        asked.append(device)
        return make_agent(config, spec, torch.device("cpu"))

    source = resolve_source(run_dir)
    for available, device in ((True, "cuda"), (False, "cpu")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda available=available: available)
        evaluate_source(source, make_on_cpu, episodes=1)
        assert asked.pop() == torch.device(device)


def test_a_film_sets_a_headless_video_driver_unless_one_is_set(run_dir, tmp_path, monkeypatch):
    """Pins ``SDL_VIDEODRIVER=dummy`` for a filmed evaluation (pygame's display driver otherwise
    prints an SDL "error:" line on a headless machine), and a driver the user set is kept."""
    from per_dqn.training.evaluate import evaluate_source, resolve_source

    copy = Path(shutil.copytree(run_dir, tmp_path / "run"))
    source = resolve_source(copy)
    monkeypatch.delenv("SDL_VIDEODRIVER", raising=False)
    evaluate_source(source, make_agent, episodes=1, video=True)
    assert os.environ["SDL_VIDEODRIVER"] == "dummy"
    monkeypatch.setenv("SDL_VIDEODRIVER", "offscreen")
    evaluate_source(source, make_agent, episodes=1, video=True)
    assert os.environ["SDL_VIDEODRIVER"] == "offscreen"


def test_a_videos_link_out_of_the_run_dir_stops_only_a_filmed_evaluation(run_dir, tmp_path):
    """Pins where the videos dir is checked: a ``videos`` link that leaves the run dir refuses
    ``--video`` (one line, before anything is played) and is ignored by an evaluation that films
    nothing."""
    from per_dqn.training.evaluate import evaluate_source, resolve_source

    copy = Path(shutil.copytree(run_dir, tmp_path / "run"))
    shutil.rmtree(copy / "videos", ignore_errors=True)  # another test may have filmed run_dir
    (tmp_path / "elsewhere").mkdir()
    (copy / "videos").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    source = resolve_source(copy)
    report = evaluate_source(source, make_agent, episodes=1)
    assert report.video is None and len(report.episodes.returns) == 1
    with pytest.raises(ValueError, match=r"videos: leads outside .*refused"):
        evaluate_source(source, make_agent, episodes=1, video=True)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_checkpoint_named_through_a_checkpoints_link_out_of_its_run_dir_is_refused(
    run_dir, tmp_path
):
    """Pins the fuzz harness's find: ``eval RUN/checkpoints/step_N`` where ``RUN/checkpoints``
    is a link to another dir's (here a twin of the run, the same run id and intact files) read
    the checkpoint outside the run dir without a word; it is one line and exit 2, as the run dir
    itself (``eval RUN``) and a step dir link already were."""
    copy = Path(shutil.copytree(run_dir, tmp_path / "run", symlinks=True))
    twin = Path(shutil.copytree(run_dir, tmp_path / "outside" / "twin", symlinks=True))
    shutil.rmtree(copy / "checkpoints")
    (copy / "checkpoints").symlink_to(twin / "checkpoints", target_is_directory=True)
    step = sorted(p.name for p in (twin / "checkpoints").iterdir())[-1]
    for target in (copy / "checkpoints" / step, copy):
        result = evaluate(str(target), "--episodes", "1")
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: {copy / 'checkpoints'}") and "leads outside" in line, line


def test_eval_command_warns_when_its_step_budget_cut_it(run_dir, tmp_path):
    """Pins ``train.eval_max_total_steps`` in ``per-dqn eval`` (not only in training's
    evaluations): 2 episodes asked, a budget of 5 agent steps, one episode played and cut."""
    copy = tmp_path / "capped"
    shutil.copytree(run_dir, copy)
    config = (copy / "config.yaml").read_text()
    (copy / "config.yaml").write_text(
        config.replace("eval_max_total_steps: null", "eval_max_total_steps: 5")
    )
    for checkpoint in (copy / "checkpoints").iterdir():
        shutil.rmtree(checkpoint)  # plays model.pt with the edited config
    result = evaluate(str(copy), "--episodes", "2")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == (
        "warning: the evaluation reached train.eval_max_total_steps (5 agent steps) after 1 of 2 "
        "episodes (an episode it cut counts as truncated)"
    )
    assert "length: mean 5.0  min 5  max 5" in result.stdout


def test_weights_that_do_not_fit_the_network_are_one_line_with_torch_s_reason(model_only, tmp_path):
    """Pins the line for weights of another network (a run dir whose config.yaml was edited to
    other layer sizes): the file, "does not fit the network", and torch's reason on one line,
    its whitespace folded, cut at 300 characters."""
    from per_dqn.training.evaluate import evaluate_source, resolve_source

    run_dir = Path(shutil.copytree(model_only, tmp_path / "run"))
    config = (run_dir / "config.yaml").read_text()
    (run_dir / "config.yaml").write_text(config.replace("- 256\n  - 256\n", "- 32\n"))
    source = resolve_source(run_dir)
    network = make_agent(source.config, describe(gym.make("CartPole-v1")), torch.device("cpu"))
    with pytest.raises(RuntimeError) as torch_says:
        network.online.load_state_dict(source.weights)
    reason = " ".join(str(torch_says.value).split())
    assert len(reason) > 300
    for read in (lambda: evaluate_source(source, make_agent, episodes=1),
                 lambda: per_dqn.load(run_dir, device="cpu")):  # fmt: skip
        with pytest.raises(ValueError) as caught:
            read()
        assert str(caught.value) == (
            f"{run_dir / 'model.pt'}: does not fit the network ({reason[:300]})"
        )


def test_a_loaded_policy_acts_greedily_by_its_q_values_on_the_device_asked_for(model_only):
    """``per_dqn.load`` gives a policy of the run's network on the device asked for: ``act`` at
    epsilon 0 is the argmax of ``q_values``; a device it does not know is refused in one line
    (pins a bug: it was torch's RuntimeError, listing every device type torch knows)."""
    policy = per_dqn.load(model_only, device="cpu")
    obs = np.array([[0.01, -0.02, 0.03, 0.04], [0.1, 0.2, -0.1, -0.3]], dtype=np.float32)
    q = policy.q_values(obs)
    assert q.shape == (2, 2)
    np.testing.assert_array_equal(policy.act(obs), q.argmax(axis=1))
    with pytest.raises(ValueError) as caught:
        per_dqn.load(model_only, device="nonsense")
    assert str(caught.value) == "`device` must be 'auto', 'cpu' or 'cuda', got 'nonsense'"


def test_an_env_that_cannot_render_is_one_line_naming_it(run_dir, tmp_path, monkeypatch):
    """Pins the line for a film whose renderer fails (here gymnasium's error for a missing
    dependency, raised by the env's ``render``): the env id and the renderer's message."""
    import per_dqn.envs.make
    from per_dqn.training.evaluate import evaluate_source, resolve_source

    make = per_dqn.envs.make.make_eval_env

    def unrenderable(config, render=False, view="game"):
        env = make(config, render=render, view=view)

        def render():
            raise gym.error.DependencyNotInstalled("pygame is not installed")

        env.render = render
        return env

    monkeypatch.setattr(per_dqn.envs.make, "make_eval_env", unrenderable)
    source = resolve_source(Path(shutil.copytree(run_dir, tmp_path / "run")))
    with pytest.raises(ValueError) as caught:
        evaluate_source(source, make_agent, episodes=1, video=True)
    assert str(caught.value) == "CartPole-v1: cannot render (pygame is not installed)"


def test_a_film_of_weights_of_unknown_step_is_eval_final(model_only, tmp_path):
    """Pins the film's name: ``eval-step<N>.gif`` for weights of a known env step (model.pt
    with its summary), ``eval-final.gif`` when the step is unknown (no summary.json); no film,
    no frame time."""
    from per_dqn.training.evaluate import evaluate_source, resolve_source

    run_dir = Path(shutil.copytree(model_only, tmp_path / "run"))
    report = evaluate_source(resolve_source(run_dir), make_agent, episodes=1, video=True)
    assert report.video == run_dir / "videos" / "eval-step400.gif" and report.video.exists()
    (run_dir / "summary.json").unlink()
    report = evaluate_source(resolve_source(run_dir), make_agent, episodes=1, video=True)
    assert report.video == run_dir / "videos" / "eval-final.gif" and report.video.exists()
    report = evaluate_source(resolve_source(run_dir), make_agent, episodes=1)
    assert (report.video, report.frame_ms) == (None, 0)


# --- a checkpoint dir's own files, edited and resealed --------------------------------------------


def edited_checkpoint(run_dir: Path, tmp_path: Path, name: str, data: bytes) -> Path:
    """A copy of ``run_dir``'s step-500 checkpoint with ``name`` replaced by ``data`` and its
    manifest resealed (what someone who edits a checkpoint on purpose can do), on its own."""
    step = Path(shutil.copytree(ckpt.checkpoints_dir(run_dir) / "step_000000500", tmp_path / "c"))
    (step / name).write_bytes(data)
    reseal(step)
    return step


def test_a_checkpoint_s_config_is_named_in_its_problems(run_dir, tmp_path):
    """Pins the lines for a checkpoint whose own config.yaml is bad: each problem names that
    file, several are joined by "; ", and bytes that are not UTF-8 are "cannot read"."""
    from per_dqn.training.evaluate import resolve_source

    text = (ckpt.checkpoints_dir(run_dir) / "step_000000500" / "config.yaml").read_text()
    bad = text.replace("batch_size: 64", "batch_size: 0").replace("gamma: 0.99", "gamma: 2")
    step = edited_checkpoint(run_dir, tmp_path, "config.yaml", bad.encode())
    config = step / "config.yaml"
    with pytest.raises(ValueError) as caught:
        resolve_source(step)
    assert str(caught.value) == (
        f"{config}: agent.gamma: must be <= 1, got 2; {config}: train.batch_size: must be >= 1, "
        "got 0"
    )
    step = edited_checkpoint(run_dir, tmp_path / "b", "config.yaml", b"env: {id: \xff}\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(step / 'config.yaml'))}: cannot "
                       r"read \('utf-8' codec can't decode byte 0xff"):  # fmt: skip
        resolve_source(step)
    step = edited_checkpoint(run_dir, tmp_path / "c", "config.yaml", b"env: [1\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(step / 'config.yaml'))}: "):
        resolve_source(step)  # YAML that does not parse names the file too


@pytest.mark.parametrize(
    "payload", [{"target": {}}, [1, 2], {"online": [1]}], ids=["no-online", "a-list", "not-a-dict"]
)
def test_a_checkpoint_whose_agent_holds_no_online_network_is_one_line(run_dir, tmp_path, payload):
    """Pins the check of a checkpoint's ``agent.pt``: weights that are not a mapping with an
    ``online`` mapping (an edited file that passes its checksums) are one line naming the file,
    not an AttributeError or KeyError."""
    import io

    from per_dqn.training.evaluate import resolve_source

    buffer = io.BytesIO()
    torch.save(payload, buffer)
    step = edited_checkpoint(run_dir, tmp_path, run_ckpt.AGENT_FILE, buffer.getvalue())
    with pytest.raises(ValueError) as caught:
        resolve_source(step)
    assert str(caught.value) == (
        f"{step / run_ckpt.AGENT_FILE}: holds no online network (key 'online')"
    )


def test_a_planted_agent_pt_in_a_checkpoint_is_named(run_dir, tmp_path):
    """Pins the name in the refusal of a checkpoint's ``agent.pt`` that would run code: the
    checkpoint's file, not some other path."""
    import io

    from per_dqn.training.evaluate import resolve_source

    buffer = io.BytesIO()
    torch.save({"online": Plant(tmp_path / "ran")}, buffer)
    step = edited_checkpoint(run_dir, tmp_path, run_ckpt.AGENT_FILE, buffer.getvalue())
    with pytest.raises(ValueError) as caught:
        resolve_source(step)
    assert str(caught.value).startswith(
        f"{step / run_ckpt.AGENT_FILE}: refused: it holds more than"
    )
    assert not (tmp_path / "ran").exists()


def test_a_checkpoint_dir_on_its_own_films_into_itself(run_dir, tmp_path):
    """Pins where a checkpoint outside any run dir keeps its film: in its own ``videos/``."""
    from per_dqn.training.evaluate import evaluate_source, resolve_source

    step = Path(shutil.copytree(ckpt.checkpoints_dir(run_dir) / "step_000000500", tmp_path / "c"))
    source = resolve_source(step)
    assert source.run_dir == step
    report = evaluate_source(source, make_agent, episodes=1, video=True)
    assert report.video == step / "videos" / "eval-step500.gif" and report.video.exists()


def test_a_run_dir_with_nothing_to_play_is_one_line(tmp_path):
    """Pins the line for a run dir (it has its config.yaml) with neither a usable checkpoint nor
    a model.pt."""
    from per_dqn.training.evaluate import resolve_source

    (tmp_path / "config.yaml").write_text("env:\n  id: CartPole-v1\n")
    with pytest.raises(ValueError) as caught:
        resolve_source(tmp_path)
    assert str(caught.value) == f"{tmp_path}: no usable checkpoint and no model.pt to evaluate"


def test_a_summary_too_large_to_be_one_is_not_read_for_its_step(model_only, tmp_path):
    """Pins ``SUMMARY_MAX_BYTES`` (16 MiB): a summary.json larger than that is not read (a run
    dir from elsewhere could hold anything there), so model.pt's env step is unknown; one of 16
    MiB exactly is read."""
    from per_dqn.training.evaluate import SUMMARY_MAX_BYTES, resolve_source

    run_dir = Path(shutil.copytree(model_only, tmp_path / "run"))
    text = '{"env_steps": 400}'
    (run_dir / "summary.json").write_text(text + " " * (SUMMARY_MAX_BYTES - len(text)))
    assert resolve_source(run_dir).env_steps == 400
    (run_dir / "summary.json").write_text(text + " " * (SUMMARY_MAX_BYTES + 1 - len(text)))
    source = resolve_source(run_dir)
    assert source.env_steps is None and source.label == str(run_dir / "model.pt")


@pytest.mark.parametrize(
    "steps", ["Infinity", "1e400", "-Infinity", '"12"', "1e30", "true", "-5", str(2**63)]
)
def test_a_summary_whose_step_no_run_records_leaves_the_step_unknown(model_only, tmp_path, steps):
    """Pins bugs: a summary.json (a run dir from elsewhere) whose ``env_steps`` is ``Infinity``
    (or ``1e400``, which JSON reads as infinity) made ``eval`` die of an ``OverflowError``
    traceback converting it to an int, and ``"12"``, ``1e30``, ``true`` or ``-5`` became the
    policy's ``env_steps``. Each is read as any unreadable step is: unknown, and the weights are
    still played."""
    from per_dqn.training.evaluate import resolve_source

    run_dir = Path(shutil.copytree(model_only, tmp_path / "run"))
    (run_dir / "summary.json").write_text(f'{{"env_steps": {steps}}}')
    source = resolve_source(run_dir)
    assert source.env_steps is None and source.label == str(run_dir / "model.pt")


# --- what eval shows while it plays ---------------------------------------------------------------


def test_eval_says_what_it_plays_before_the_first_episode(run_dir):
    """Pins ``per-dqn eval`` printing nothing, not even its header, until it ended (issue 26:
    23 s of a blank terminal for 400 CartPole episodes): stderr's first line now says what is
    played, written before the first episode; stdout keeps the report alone."""
    result = evaluate(str(run_dir), "--episodes", "2")
    assert result.exit_code == 0, result.output
    newest = ckpt.checkpoints_dir(run_dir) / "step_000001000"
    assert result.stderr.splitlines()[0] == (
        f"playing {newest} (env step 1,000) on CartPole-v1: 2 episodes, epsilon 0, seed 0"
    )
    assert result.stdout.splitlines()[0].startswith("weights: ")


def test_evaluate_run_reports_each_episode_and_the_progress(run_dir):
    """The API's feeds, which the eval display is drawn from: ``on_start`` once before the
    first episode, ``on_episode`` with each episode's return and length (the report's own),
    ``on_progress`` from (0, N, 0) to (N, N, all agent steps)."""
    import per_dqn.api as api

    events: list = []
    report = api.evaluate_run(
        run_dir, episodes=3, on_start=lambda line: events.append(("start", line)),
        on_episode=lambda ret, n: events.append(("episode", ret, n)),
        on_progress=lambda *a: events.append(("progress", *a)),
    )  # fmt: skip
    assert events[0][0] == "start" and events[1] == ("progress", 0, 3, 0)
    episodes = [e[1:] for e in events if e[0] == "episode"]
    assert episodes == list(zip(report.episodes.returns.tolist(),
                                report.episodes.lengths.tolist(), strict=True))  # fmt: skip
    assert events[-1] == ("progress", 3, 3, int(report.episodes.lengths.sum()))


def test_the_eval_display_prints_plain_progress_off_a_terminal():
    """Off a terminal (a pipe, Slurm) the eval display prints the start line at once and a plain
    line every ``plain_interval_s`` seconds: episodes done, the mean return so far, agent steps
    and elapsed time; one more at the end where it ended."""
    import io
    import time

    from rich.console import Console

    from per_dqn.logs.console import EvalDisplay

    buffer = io.StringIO()
    with EvalDisplay(console=Console(file=buffer, width=80), plain_interval_s=0.2) as display:
        display.start("playing r on CartPole-v1: 4 episodes, epsilon 0, seed 0")
        display.progress(0, 4, 0)
        display.episode(10.0, 10)
        display.progress(1, 4, 10)
        assert buffer.getvalue().count("\n") == 1  # only the start line: none due yet
        time.sleep(0.25)
        display.episode(20.0, 20)
        display.progress(2, 4, 30)
    lines = buffer.getvalue().splitlines()
    assert lines[0] == "playing r on CartPole-v1: 4 episodes, epsilon 0, seed 0"
    assert lines[1].startswith("progress: 2/4 episodes  mean return 15.0  30 agent steps  elapsed ")
    assert lines[2] == lines[1]  # where it ended
    assert len(lines) == 3


def test_the_eval_display_draws_one_bar_row_in_80_columns():
    """On a terminal the eval display is one row: ``eval``, a bar of the episodes done, and the
    episodes with the mean return so far and the elapsed time, within 80 columns."""
    import io

    from rich.console import Console

    from per_dqn.logs.console import EvalDisplay

    display = EvalDisplay(console=Console(file=io.StringIO()), enabled=False)
    display.progress(3, 10, 1_234)
    for ret in (100.0, 120.0, 150.4):
        display.episode(ret, 100)
    buffer = io.StringIO()
    Console(file=buffer, width=80, force_terminal=True, color_system=None).print(display)
    (line,) = buffer.getvalue().splitlines()
    assert len(line) <= 80 and line.startswith("eval ")
    assert "3/10 episodes  mean return 123.5  elapsed 0:00:0" in line


class _ResetSeeds(gym.Wrapper):
    """Keeps the seed of every reset."""

    def __init__(self, env) -> None:
        super().__init__(env)
        self.seeds: list = []

    def reset(self, *, seed=None, options=None):
        self.seeds.append(seed)
        return self.env.reset(seed=seed, options=options)


def test_run_episodes_seeds_the_first_reset_only_and_a_greedy_one_draws_nothing():
    """Pins ``run_episodes``' contract with its caller: only the first episode's reset takes
    ``first_reset_seed`` (the later ones go on from the env's own RNG, as a run's evaluations
    do); at epsilon 0 the exploration generator, the caller's, is left as it was (a greedy step
    drew from it and moved the run's evaluation stream); ``truncated`` is a bool array (an
    episode's flag is negated with ``~`` as numpy bools)."""
    from per_dqn.training.evaluate import run_episodes

    env = _ResetSeeds(gym.make("CartPole-v1"))
    rng = np.random.default_rng(5)
    before = copy.deepcopy(rng.bit_generator.state)
    played = run_episodes(Balancer(), env, 3, 0.0, rng, first_reset_seed=11, max_episode_steps=5)
    assert env.seeds == [11, None, None]
    assert rng.bit_generator.state == before
    assert played.truncated.dtype == np.bool_ and played.truncated.tolist() == [True] * 3
    explored = run_episodes(Balancer(), env, 1, 0.5, rng, max_episode_steps=5)
    assert env.seeds == [11, None, None, None] and explored.lengths.tolist() == [5]
    assert rng.bit_generator.state != before


def test_progress_comes_every_progress_interval_inside_an_episode(monkeypatch):
    """Pins ``run_episodes``' progress inside an episode, by hand, with the interval set to 40
    agent steps: two episodes cut at 100 steps report (0, 2, 0) at the start, (0, 2, 40) and
    (0, 2, 80) inside the first, (1, 2, 100) at its end, (1, 2, 120) and (1, 2, 160) inside the
    second and (2, 2, 200) at the end; a step that ends an episode on the interval (step 200
    here) reports only the end. Without a progress callback nothing is called."""
    import per_dqn.training.evaluate as evaluate

    monkeypatch.setattr(evaluate, "PROGRESS_EVERY_STEPS", 40)
    env = gym.make("CartPole-v1")
    seen = []
    evaluate.play(Balancer(), env, 2, 0.0, seed=3, max_episode_steps=100,
                  on_progress=lambda *a: seen.append(a))  # fmt: skip
    assert seen == [(0, 2, 0), (0, 2, 40), (0, 2, 80), (1, 2, 100), (1, 2, 120), (1, 2, 160),
                    (2, 2, 200)]  # fmt: skip
    quiet = evaluate.play(Balancer(), env, 2, 0.0, seed=3, max_episode_steps=100)
    assert quiet.lengths.tolist() == [100, 100]


def test_a_film_keeps_at_most_the_frame_limit(monkeypatch):
    """Pins the film's length limit: with ``VIDEO_MAX_FRAMES`` at 5, a 20-step episode keeps 5
    frames (the reset's and four steps'), not 6."""
    import per_dqn.training.evaluate as evaluate

    monkeypatch.setattr(evaluate, "VIDEO_MAX_FRAMES", 5)
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    filmed = evaluate.play(Balancer(), env, 1, 0.0, seed=3, film=True, max_episode_steps=20)
    assert filmed.lengths.tolist() == [20] and len(filmed.frames) == 5


def test_a_budget_met_exactly_by_the_last_episode_s_own_end_is_no_cut():
    """Pins the step budget against an episode that ends by itself on the budget's last step:
    the evaluation played every episode asked, so it did not reach the budget and nothing is
    cut or warned (the check read "not both ended", and so cut a finished game)."""
    from per_dqn.training.evaluate import play

    env = gym.make("CartPole-v1")
    natural = play(Balancer(), env, 1, 0.0, seed=3, max_episode_steps=30)
    length = int(natural.lengths[0])
    exact = play(Balancer(), env, 1, 0.0, seed=3, max_episode_steps=30, max_total_steps=length)
    assert exact.lengths.tolist() == [length] and not exact.reached_total_cap
    assert exact.reached_episode_cap == 1 and exact.truncated.tolist() == [True]


class _EndsBothWays(gym.Env):
    """A one-step game whose only step both terminates and truncates (a game that ends on the
    time limit's own step)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 1.0, True, True, {}


def test_an_episode_that_terminates_on_its_time_limit_s_step_is_not_cut():
    """Pins the truncation flag: an episode the game ended counts as terminated even when the
    time limit fell on the same step (``truncated and not terminated``)."""
    from per_dqn.training.evaluate import play

    played = play(Balancer(), _EndsBothWays(), 2, 0.0, seed=3)
    assert played.lengths.tolist() == [1, 1] and played.truncated.tolist() == [False, False]


def test_a_policy_loaded_with_a_seed_explores_the_same_way_each_time(run_dir):
    """``load(..., seed=)`` seeds the policy's own generator: two loads with one seed take the
    same epsilon-greedy actions, draw for draw, and the draws are those of numpy's generator of
    that seed (another seed gives others)."""
    obs = np.zeros((64, 4), dtype=np.float32)

    def actions(seed):
        policy = per_dqn.load(run_dir, device="cpu", seed=seed)
        return [policy.act(obs, epsilon=0.5).tolist() for _ in range(3)]

    first = actions(7)
    assert actions(7) == first
    assert actions(8) != first
    greedy = per_dqn.load(run_dir, device="cpu").act(obs).tolist()
    rng = np.random.default_rng(7)
    coin = rng.random(64) < 0.5  # the draws ``act`` makes, in its order
    assert [a for a, c in zip(first[0], coin, strict=True) if not c] == [
        g for g, c in zip(greedy, coin, strict=True) if not c
    ]


def test_the_eval_display_says_starting_before_its_first_episode_not_0_of_0():
    """Issue 45: `eval` showed `0/0 episodes` for about a second while it loaded the agent and
    its env. Until it knows how many episodes it plays, it says it is starting."""
    import io

    from rich.console import Console

    from per_dqn.logs.console import EvalDisplay

    display = EvalDisplay(console=Console(file=io.StringIO()), enabled=False)
    assert display.plain_line().startswith("starting  elapsed 0:00:0")
    buffer = io.StringIO()
    Console(file=buffer, width=80, force_terminal=True, color_system=None).print(display)
    (line,) = buffer.getvalue().splitlines()
    assert line.startswith("eval  starting  elapsed 0:00:0") and "0/0" not in line
    display.progress(0, 4, 0)
    assert display.plain_line().startswith("0/4 episodes")


def test_epsilon_0_plays_greedily_whatever_the_config_s_eval_epsilon(tmp_path):
    """Issue 45 (tests with teeth): no test checked the command's own resolution of
    ``--epsilon``, so ``epsilon or config.train.eval_epsilon`` (0 read as "not given") would
    have survived the suite. A run whose config evaluates at random (``eval_epsilon: 1``):
    ``--epsilon 0``, from the CLI and from the API, plays the hand-rolled greedy episodes; left
    out, the config's 1 plays at random."""
    import per_dqn

    run = train(tmp_path / "run", "checkpoint.enabled=false", "train.total_env_steps=400",
                "train.eval_epsilon=1.0")  # fmt: skip
    weights = torch.load(run / "model.pt", weights_only=True)
    greedy = hand_rolled_returns(weights, 6, 11)
    line = (
        f"return: mean {greedy.mean():.2f}  std {greedy.std():.2f}  min {greedy.min():.2f}  "
        f"max {greedy.max():.2f}"
    )
    result = evaluate(str(run), "--episodes", "6", "--seed", "11", "--epsilon", "0")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:3] == ["env: CartPole-v1, 6 episodes, epsilon 0, seed 11",
                                               line]  # fmt: skip
    played = per_dqn.load(run).evaluate(episodes=6, epsilon=0.0, seed=11)
    assert list(played.returns) == list(greedy)
    result = evaluate(str(run), "--episodes", "6", "--seed", "11")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1] == "env: CartPole-v1, 6 episodes, epsilon 1, seed 11"
    assert result.stdout.splitlines()[2] != line
