"""The real ALE: autoreset and life-loss semantics, stacks rebuilt bit-exact from a recorded game,
and a short real Atari training run that writes its TensorBoard tags."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from per_dqn.agent import DQNAgent, NatureCNN
from per_dqn.cli import app
from per_dqn.config import Config, EnvConfig
from per_dqn.envs.families.atari import atari_game
from per_dqn.envs.make import describe, make_eval_env, make_vector_env
from per_dqn.logs.tags import (
    EPISODE_RETURN,
    EVAL_RETURN_MEAN,
    PER_MEAN_PRIORITY,
    PER_SAMPLED_PRIORITY,
    PERF_SPS,
    TRAIN_LOSS,
)
from per_dqn.memory import make_memory
from per_dqn.training.nstep import NStepAccumulator, stack
from per_dqn.training.run import Trainer

pytestmark = pytest.mark.atari


def test_ids_map_to_rom_names_and_unknown_games_are_named():
    assert atari_game("ALE/MsPacman-v5") == "ms_pacman"
    assert atari_game("ALE/Breakout-v5") == "breakout"
    with pytest.raises(ValueError, match=r"env\.id: ale-py ships no ROM for 'tetrisx'"):
        atari_game("ALE/Tetrisx-v5")
    with pytest.raises(ValueError, match="expected ALE/<Game>-v5"):
        atari_game("ALE/breakout")


def play(env, steps, seed):
    """Random play on a vector env; returns every step's outputs."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out = []
    n = env.single_action_space.n
    for _ in range(steps):
        actions = rng.integers(n, size=env.num_envs)
        next_obs, rewards, terminated, truncated, next_info = env.step(actions)
        out.append((obs, actions, rewards, next_obs, terminated, truncated, info, next_info))
        obs, info = next_obs, next_info
    return out


def test_vector_env_emits_84x84_stacks_and_resets_on_the_next_step():
    """Frame stacks shift by one frame per step; after a game ends (here a 40-step cap), the
    next step only resets: its stack does not continue the last one and its reward is 0."""
    env = make_vector_env(EnvConfig(id="ALE/Breakout-v5", max_episode_steps=40, num_envs=1))
    assert describe(env).obs_shape == (4, 84, 84) and describe(env).obs_dtype == np.uint8
    steps = play(env, 90, seed=1)
    env.close()
    ended = [t for t, s in enumerate(steps) if s[4][0] or s[5][0]]
    assert ended, "a 40-step cap must end an episode within 90 steps"
    for t, (obs, _, _, next_obs, _, _, _, _) in enumerate(steps):
        if t - 1 in ended:  # the reset-only step
            assert steps[t][2][0] == 0.0
            assert not np.array_equal(next_obs[0, :3], obs[0, 1:])
        else:
            np.testing.assert_array_equal(next_obs[0, :3], obs[0, 1:])


def test_life_loss_is_reported_without_ending_the_game():
    """The env plays full games (raw scores): a lost life only lowers ``info['lives']``."""
    env = make_vector_env(EnvConfig(id="ALE/Breakout-v5", num_envs=1))
    steps = play(env, 400, seed=0)
    env.close()
    losses = [t for t, s in enumerate(steps) if s[7]["lives"][0] < s[6]["lives"][0]]
    assert losses, "random play loses a Breakout life within 400 steps"
    t = losses[0]
    assert not steps[t][4][0], "a life loss is not a game over"
    np.testing.assert_array_equal(steps[t + 1][3][0, :3], steps[t][3][0, 1:])  # play goes on


@pytest.mark.parametrize("n_step", [1, 3])
def test_recorded_game_is_rebuilt_bit_exact_by_the_frame_memory(n_step):
    """A real 2-env Breakout recording (episode ends every 25 steps, so many episode starts,
    n-step windows flushed at boundaries) through the loop's n-step accumulator into a frame-
    deduplicated memory of 120 slots (wrapped ~4 times) and into a memory storing whole stacks:
    every stored obs and next_obs is bit-identical, from under 2 stored frames per transition."""
    env = make_vector_env(EnvConfig(id="ALE/Breakout-v5", max_episode_steps=25, num_envs=2))
    steps = play(env, 300, seed=2)
    env.close()
    common = {"capacity": 120, "obs_shape": (4, 84, 84), "obs_dtype": np.uint8, "seed": 0}
    dedup = make_memory("proportional", dedup_frames=True, **common)
    whole = make_memory("uniform", **common)
    acc = NStepAccumulator(2, n_step, 0.99)
    autoreset = np.zeros(2, dtype=bool)
    written = 0
    for obs, actions, rewards, next_obs, terminated, truncated, _, _ in steps:
        fresh = acc.step(obs, actions, rewards, next_obs, terminated, truncated, ~autoreset)
        if fresh:
            batch = stack(fresh)
            dedup.add_batch(*batch)
            whole.add_batch(*batch)
            written += len(fresh)
        autoreset = terminated | truncated
    assert written > 4 * 120
    slots = np.arange(120)
    a, b = dedup.storage.gather(slots, np.ones(120)), whole.storage.gather(slots, np.ones(120))
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.next_obs, b.next_obs)
    np.testing.assert_array_equal(a.n_steps, b.n_steps)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    st = dedup.storage.observations
    live_frames = np.unique(np.concatenate((st.obs_ptr.ravel(), st.next_ptr.ravel())))
    assert live_frames.size < 2 * 120  # whole stacks hold 8 frames per transition


def test_cnn_takes_uint8_stacks_and_its_dueling_mean_is_v():
    net = NatureCNN((4, 84, 84), 6, (512,), dueling=True)
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    q = net(obs)
    assert q.shape == (3, 6)
    torch.testing.assert_close(net(obs.float()), q)  # scaled by 1/255 either way
    features = net.features(obs)
    value = torch.nn.functional.linear(features, net.value.weight, net.value.bias).squeeze(1)
    torch.testing.assert_close(q.mean(dim=1), value)
    channels_last = NatureCNN((4, 84, 84), 6, (512,), dueling=True, channels_last=True)
    channels_last.load_state_dict(net.state_dict())
    torch.testing.assert_close(channels_last(obs), q, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="at least 36x36, got 20x20"):
        NatureCNN((4, 20, 20), 6, (512,), dueling=True)


SMOKE = [
    "train.total_env_steps=300", "train.learning_starts=100", "replay.capacity=500",
    "train.final_eval_episodes=1", "env.max_episode_steps=150", "train.log_interval=100",
    "run.torch_threads=1", "train.replay_period=2", "agent.target_update_interval=50",
    "env.id=ALE/Breakout-v5",
]  # fmt: skip


@pytest.mark.slow
def test_real_atari_training_writes_the_tags_and_learns_from_clipped_life_loss_transitions(
    tmp_path,
):
    """A few hundred real Breakout steps through the CLI: the tags are in the event file, the
    summary has the raw score, and the memory holds clipped rewards with a terminal transition
    for every lost life."""
    args = ["train", "-c", "atari100k.yaml", "-q", "--run-dir", str(tmp_path / "run")]
    for text in SMOKE:
        args += ["--set", text]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    events = EventAccumulator(str(tmp_path / "run"), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {PER_SAMPLED_PRIORITY, PER_MEAN_PRIORITY, TRAIN_LOSS, EPISODE_RETURN,
            EVAL_RETURN_MEAN, PERF_SPS} <= tags  # fmt: skip
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps"] == 300 and summary["env_id"] == "ALE/Breakout-v5"


@pytest.mark.slow
def test_learner_sees_clipped_rewards_while_returns_stay_raw(tmp_path):
    """Pins removing reward clipping from the Atari path (random Breakout never scores above 1,
    so a Breakout check of it could not fail). Space Invaders scores 5 to 30 an alien: two runs
    of one seed under random actions store the same transitions, except that with
    ``env.clip_rewards`` every stored reward is the unclipped run's, clipped to [-1, 1]; the
    logged episode returns stay raw game scores in both."""

    def stored_rewards(clip: bool) -> tuple[np.ndarray, list[float]]:
        config = {
            "env": {"id": "ALE/SpaceInvaders-v5", "clip_rewards": clip,
                    "sticky_action_prob": 0.0, "max_episode_steps": 500},
            "agent": {"n_step": 1, "hidden_sizes": [32]},
            "replay": {"capacity": 1000},
            "train": {"total_env_steps": 900, "learning_starts": 850, "batch_size": 32,
                      "epsilon_decay_steps": 1, "epsilon_end": 1.0, "eval_interval": 0,
                      "final_eval_episodes": 1, "log_interval": 1000},
        }  # fmt: skip
        trainer = Trainer(Config.model_validate(config), "space_invaders")
        try:
            trainer.run(tmp_path / f"clip-{clip}")
        finally:
            trainer.close()
        state = trainer.memory.state_dict()["storage"]
        events = EventAccumulator(str(tmp_path / f"clip-{clip}"), size_guidance={"scalars": 0})
        events.Reload()
        returns = [e.value for e in events.Scalars(EPISODE_RETURN)]
        return state["rewards"][: int(state["size"])], returns

    raw, raw_returns = stored_rewards(False)
    clipped, clipped_returns = stored_rewards(True)
    assert raw.max() >= 5  # the stream does hold rewards the clip must change
    np.testing.assert_array_equal(clipped, np.clip(raw, -1.0, 1.0))
    assert raw_returns == clipped_returns and max(raw_returns) > 1


@pytest.mark.slow
def test_loop_clips_rewards_and_ends_transitions_on_life_loss(tmp_path):
    """Breakout's bricks score 1, 4 or 7: clipped, they are at most 1; each lost life (5 per game
    of random play) is one terminal transition, with 1-step returns."""
    overrides = {
        # The episode cap bounds the final evaluation: a greedy untrained agent may never FIRE.
        "env": {"id": "ALE/Breakout-v5", "clip_rewards": True, "terminal_on_life_loss": True,
                "sticky_action_prob": 0.0, "max_episode_steps": 2000},
        "agent": {"n_step": 1, "hidden_sizes": [32]},
        "replay": {"capacity": 2000},
        # learning_starts one short of the budget (the least a config may ask): one update at
        # the last step, which leaves the stored rewards and flags alone.
        "train": {"total_env_steps": 1200, "learning_starts": 1199, "batch_size": 32,
                  "epsilon_decay_steps": 1, "epsilon_end": 1.0, "eval_interval": 0,
                  "final_eval_episodes": 1, "log_interval": 1000},
    }  # fmt: skip
    trainer = Trainer(Config.model_validate(overrides), "breakout")
    lives_lost = []
    real_step = trainer.envs.step

    def counting_step(actions):
        out = real_step(actions)
        lives_lost.append(int(out[4]["lives"][0]))
        return out

    trainer.envs.step = counting_step
    trainer.run(tmp_path)
    trainer.close()
    storage = trainer.memory.storage
    size = len(trainer.memory)
    lives = np.array(lives_lost)
    drops = int(np.sum(np.diff(lives) < 0))
    assert drops >= 5
    assert int(storage.terminated[:size].sum()) == drops
    assert storage.rewards[:size].max() <= 1.0 and storage.rewards[:size].min() >= 0.0


def test_eval_env_plays_one_game_with_the_training_pipeline():
    env = make_eval_env(EnvConfig(id="ALE/Pong-v5"))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84)
    frame = env.render()
    assert frame.shape == (84, 84, 3) and frame.dtype == np.uint8
    env.close()


def test_plan_prints_the_atari_memory_and_train_refuses_what_cannot_fit(tmp_path):
    result = CliRunner().invoke(app, ["plan", "-c", "atari.yaml"])
    assert result.exit_code == 0, result.output
    assert "per transition     7,293 bytes" in result.output
    huge = ["train", "-c", "atari.yaml", "--set", "replay.dedup_frames=false",
            "--set", "replay.capacity=10000000", "--run-dir", str(tmp_path / "r")]  # fmt: skip
    result = CliRunner().invoke(app, huge)
    assert result.exit_code == 2
    assert "replay.capacity: a 10,000,000-transition proportional memory needs" in result.output
    assert not (tmp_path / "r").exists()


def test_plan_gives_a_checkpoint_s_size_and_the_disk_its_copies_take():
    """Issue 45, item 3: the planner did not count a checkpoint. It is about the memory (its
    7,293 bytes a transition and 24 of the health panel's, at 1M: 7.317 GB, here in GiB) once
    full, and keep_last + 1 of them are on disk while one is written; none without the memory."""
    result = CliRunner().invoke(
        app, ["plan", "-c", "atari.yaml", "--set", "checkpoint.keep_last=1"]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    one = (7_293 + 24) * 1_000_000 / (1 << 30)
    assert lines[7] == (
        f"checkpoint         about {one:.2f} GiB once the memory is full, sized to the "
        "transitions held until then; written from the memory (no copy in RAM)"
    )
    assert lines[8] == (
        f"  on disk          up to 2 at once (keep_last 1, and one being written): about "
        f"{2 * one:.2f} GiB"
    )
    result = CliRunner().invoke(
        app, ["plan", "-c", "atari.yaml", "--set", "checkpoint.replay=false"]
    )
    assert "checkpoint" not in result.output


def test_agent_learns_on_uint8_batches():
    """One update on a uint8 batch changes the online net and returns finite TD errors."""
    agent = DQNAgent(
        obs_shape=(4, 84, 84), num_actions=4, hidden_sizes=(64,), dueling=True, double=True,
        gamma=0.99, learning_rate=1e-3, adam_eps=1.5e-4, loss="huber", grad_clip_norm=None,
        target_update_interval=10, tau=1.0, device=torch.device("cpu"),
    )  # fmt: skip
    mem = make_memory("proportional", capacity=64, obs_shape=(4, 84, 84), obs_dtype=np.uint8,
                      dedup_frames=True, seed=0)  # fmt: skip
    rng = np.random.default_rng(0)
    for _ in range(40):
        frames = rng.integers(0, 256, (5, 84, 84), dtype=np.uint8)
        mem.add(frames[:4], int(rng.integers(4)), 1.0, frames[1:], False)
    before = [p.clone() for p in agent.online.parameters()]
    result = agent.learn(mem.sample(16, beta=0.4))
    assert np.all(np.isfinite(result.td_abs)) and result.td_abs.shape == (16,)
    after = list(agent.online.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize("channels_last", [False, True])
def test_bf16_update_tracks_the_fp32_update_and_keeps_fp32_state(channels_last):
    """From the same weights and batch, the bf16-autocast update gives TD errors, loss and new
    weights within bf16's precision of the fp32 update (which itself matches the channels_last
    layout to float rounding); parameters, gradients and Adam state stay float32."""

    def agent(precision: str) -> DQNAgent:
        torch.manual_seed(0)
        return DQNAgent(
            obs_shape=(4, 84, 84), num_actions=4, hidden_sizes=(64,), dueling=True, double=True,
            gamma=0.99, learning_rate=1e-3, adam_eps=1.5e-4, loss="huber", grad_clip_norm=10.0,
            target_update_interval=10, tau=1.0, device=torch.device("cpu"),
            channels_last=channels_last, precision=precision,
        )  # fmt: skip

    mem = make_memory("uniform", capacity=64, obs_shape=(4, 84, 84), obs_dtype=np.uint8, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(40):
        frames = rng.integers(0, 256, (5, 84, 84), dtype=np.uint8)
        mem.add(frames[:4], int(rng.integers(4)), float(rng.normal()) * 3, frames[1:], False)
    batch = mem.sample(16, beta=1.0)
    full, half = agent("fp32"), agent("bf16")
    r_full, r_half = full.learn(batch), half.learn(batch)
    assert r_half.td_abs.dtype == np.float32
    # bf16 keeps 8 significant bits: relative errors of about 2**-8 per product, summed.
    np.testing.assert_allclose(r_half.td_abs, r_full.td_abs, rtol=0.05, atol=0.02)
    assert r_half.metrics["loss"] == pytest.approx(r_full.metrics["loss"], rel=0.05)
    assert not np.array_equal(r_half.td_abs, r_full.td_abs)  # autocast really ran in bf16
    for p_full, p_half in zip(full.online.parameters(), half.online.parameters(), strict=True):
        assert p_half.dtype == p_half.grad.dtype == torch.float32
        # Adam's first step moves each weight by about lr (1e-3) whatever the gradient's size.
        torch.testing.assert_close(p_half, p_full, rtol=0, atol=2.5e-3)
    state = half.optimizer.state_dict()["state"]
    assert all(s["exp_avg"].dtype == torch.float32 for s in state.values())
