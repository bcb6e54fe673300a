"""An Ape-X actor's work, without Ray (Horgan et al., 2018, Algorithm 1, "Actor").

An actor plays ``config.env.num_envs`` sub-envs epsilon-greedily at its fixed ``epsilon`` with a
copy of the learner's networks, and turns what it sees into n-step transitions exactly as a run's
loop does (``per_dqn.training.loop.experience``: the same rewards clipping, lost lives, windows
and episode ends). Every ``steps`` vector-env steps it hands out a ``Block``: the transitions
completed since the last one, oldest first, with their initial priorities computed under the
networks it holds then (``DQNAgent.td_errors``: ``|y - Q(s, a)|``, the learner's own target), the
paper's "actors compute priorities". New weights replace the held ones between blocks
(``set_weights``), each set numbered by the learner, so that a block says which weights its
priorities came from.

Its state is a run loop's (``LoopState``: counters, open windows, its exploration stream,
episode accumulators), whose learning and logging fields are never due here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from per_dqn.config import Config
from per_dqn.distributed.frames import PackedFrames
from per_dqn.envs.make import describe, make_vector_env
from per_dqn.envs.state import check_env_state, env_state, load_env_state
from per_dqn.memory import Batch
from per_dqn.training.asking import serve
from per_dqn.training.build import make_agent
from per_dqn.training.loop import LoopState, experience, fresh_state, restart_play, tracks_lives
from per_dqn.training.nstep import Transition, Transitions, stack
from per_dqn.training.seeding import RunSeeds, restart_seed


@dataclass(frozen=True)
class Block:
    """What an actor sends in one go.

    Attributes:
        actor: the sending actor's index.
        serial: the block's number among that actor's blocks (0, 1, ...): the replay takes each
            once.
        transitions: the n-step transitions, oldest first (``memory.add_batch``'s arguments);
            empty fields (length 0) where the steps completed none.
        td_abs: float64 ``(len,)``, each transition's ``|delta|`` under weights ``version``; None
            where the actor computes no priorities (``replay.initial_priority: max``, or a kind
            that keeps none): the memory inserts at its own insertion priority then.
        version: the number of the weights the actions and priorities came from (-1: the
            actor's own initial networks, before any ``set_weights``).
        env_steps: the actor's env steps after the block's last step.
        episodes: ``(return, length)`` of each episode that ended in the block's steps.
        frames: on its way between processes, the observations' frames, each once
            (``per_dqn.distributed.frames``); ``transitions`` then holds no observations.
        stored: where the actor stored the transitions itself (a run with replay shards,
            ``run.shards``): their global slots; ``transitions`` then holds none of them (its
            fields are empty) and ``td_abs`` is None. None where the learner stores them.
        written: with ``stored``, the transitions written to that shard once they were.
    """

    actor: int
    serial: int
    transitions: Transitions
    td_abs: np.ndarray | None
    version: int
    env_steps: int
    episodes: list[tuple[float, int]] = field(default_factory=list)
    frames: PackedFrames | None = None
    stored: np.ndarray | None = None
    written: int = 0

    def __len__(self) -> int:
        """The transitions it carries (none where the actor stored them: ``stored``)."""
        return int(self.transitions.actions.shape[0])

    def emptied(self, stored: np.ndarray, written: int) -> Block:
        """This block once its transitions are stored at the global slots ``stored``, its
        shard holding ``written`` then: their slots, without them."""
        empty = Transitions(*(column[:0] for column in self.transitions))
        return replace(self, transitions=empty, td_abs=None, frames=None,
                       stored=np.asarray(stored, dtype=np.int64), written=int(written))  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """The block as a checkpoint holds it (arrays and JSON values; its frames unpacked)."""
        if self.frames is not None:
            raise ValueError("a block is saved with its stacks rebuilt (frames.unpack)")
        return {
            "actor": self.actor, "serial": self.serial, "transitions": list(self.transitions),
            "td_abs": self.td_abs, "version": self.version, "env_steps": self.env_steps,
            "episodes": [[ret, length] for ret, length in self.episodes],
            "stored": self.stored, "written": self.written,
        }  # fmt: skip

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Block:
        """The block ``state_dict`` gave.

        Raises:
            ValueError: not a block's state (a field missing or of another shape).
        """
        try:
            transitions = Transitions(*(np.asarray(a) for a in state["transitions"]))
            episodes = [(float(ret), int(length)) for ret, length in state["episodes"]]
            td_abs = None if state["td_abs"] is None else np.asarray(state["td_abs"], np.float64)
            stored = state.get("stored")  # absent from a checkpoint before replay shards
            stored = None if stored is None else np.asarray(stored, np.int64).reshape(-1)
            block = cls(int(state["actor"]), int(state["serial"]), transitions, td_abs,
                        int(state["version"]), int(state["env_steps"]), episodes,
                        stored=stored, written=int(state.get("written", 0)))  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a block's state ({exc})") from None
        sizes = {len(column) for column in transitions}
        if len(sizes) != 1 or (td_abs is not None and td_abs.shape != (len(block),)):
            raise ValueError(f"not a block's state (fields of lengths {sorted(sizes)})")
        return block


class Actor:
    """One actor: its envs, its networks and its loop state.

    Args:
        config: the run's config (its env, network and n-step settings are the actor's).
        index: the actor's index, 0 to N - 1.
        epsilon: its exploration probability, in [0, 1].
        seeds: its random streams (``RunSeeds.for_actor``): ``env`` its envs' first reset,
            ``explore`` its epsilon-greedy draws, ``network`` its initial networks.
        device: where its networks run.
        priorities: whether its blocks carry their transitions' ``|delta|`` (a distributed
            run's ``Config.actor_priorities()``).

    Raises:
        ValueError: a negative index or an epsilon outside [0, 1].
    """

    def __init__(
        self,
        config: Config,
        index: int,
        epsilon: float,
        seeds: RunSeeds,
        device: torch.device | str = "cpu",
        priorities: bool = True,
    ) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"an actor's `index` must be an integer >= 0, got {index!r}")
        if not 0.0 <= float(epsilon) <= 1.0:
            raise ValueError(f"an actor's `epsilon` must be in [0, 1], got {epsilon}")
        self.config = config
        self.index = index
        self.epsilon = float(epsilon)
        self.priorities = priorities
        self.envs = make_vector_env(config.env)
        spec = describe(self.envs)
        torch.manual_seed(seeds.network)
        self.agent = make_agent(config, spec, torch.device(device))
        obs, info = self.envs.reset(seed=seeds.env)
        self.life_loss = tracks_lives(config, info)
        # The loop's state; its learning and logging fields are never due here.
        self.state: LoopState = fresh_state(config, obs, info, seeds, capacity=1)
        self.seeds = seeds
        self.version = -1
        self.blocks = 0

    def state_dict(self) -> dict[str, Any]:
        """What continues this actor after its last block (a distributed run's checkpoint): its
        loop state, its envs' state (None where they cannot be saved: ale-py's) and its blocks
        sent, copied. Not its weights: a run syncs every actor at each checkpoint. An actor draws
        nothing from torch, so torch's generator states are not its own to keep."""
        loop = self.state.state_dict()
        loop["torch_rng"] = loop["cuda_rng"] = None
        # A copy: the loop state's arrays are the ones the next block changes in place.
        return copy.deepcopy({"loop": loop, "envs": env_state(self.envs), "blocks": self.blocks})

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Continues from ``state_dict()`` output; returns whether exactly: envs that could not
        be saved restart from a reset seeded from the actor's env stream and its env steps,
        their open episodes and n-step windows dropped.

        Raises:
            ValueError: a state of another actor's config (checked before anything changes).
        """
        if not isinstance(state, dict) or set(state) != {"loop", "envs", "blocks"}:
            raise ValueError("an actor's state must hold `loop`, `envs` and `blocks`")
        # Copied: its arrays stay the caller's (and one that came over Ray is read-only).
        state = copy.deepcopy(state)
        blocks, envs = state["blocks"], state["envs"]
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 0:
            raise ValueError(f"an actor's `blocks` must be an integer >= 0, got {blocks!r}")
        # torch's generator states are this process's: loading them back changes nothing.
        loop = {**state["loop"], "torch_rng": torch.get_rng_state().numpy(), "cuda_rng": None}
        LoopState.check_state_dict(loop)
        if envs is not None:
            check_env_state(self.envs, envs)
        if np.shape(loop["obs"]) != self.state.obs.shape:
            raise ValueError(
                f"an actor's observations of shape {np.shape(loop['obs'])}, this actor's are "
                f"{self.state.obs.shape}"
            )
        self.state.load_state_dict(loop)
        self.blocks = blocks
        if envs is not None:
            load_env_state(self.envs, envs)
            return True
        seed = restart_seed(self.seeds.env, self.state.env_steps)
        restart_play(self.state, self.envs, seed, self.config, self.life_loss)
        return False

    def set_weights(self, online: dict[str, torch.Tensor], target: dict[str, torch.Tensor],
                    version: int) -> None:  # fmt: skip
        """Replaces the held networks with the learner's ``online`` and ``target`` state dicts,
        numbered ``version``.

        Raises:
            ValueError: a version below the held one (weights go forward only), or state dicts
                of other networks; the held weights stay then.
        """
        if isinstance(version, bool) or not isinstance(version, int) or version < self.version:
            raise ValueError(
                f"weights version must be an integer >= the held {self.version}, got {version!r}"
            )
        held = self.agent.online.state_dict(), self.agent.target.state_dict()
        try:
            self.agent.online.load_state_dict(online)
            self.agent.target.load_state_dict(target)
        except (RuntimeError, KeyError, TypeError) as exc:
            self.agent.online.load_state_dict(held[0])
            self.agent.target.load_state_dict(held[1])
            raise ValueError(f"weights of other networks than the actor's ({exc})") from None
        self.version = version

    def collect(self, steps: int) -> Block:
        """Plays ``steps`` vector-env steps; returns the block of what they completed.

        Raises:
            ValueError: ``steps`` below 1.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"`steps` must be an integer >= 1, got {steps!r}")
        fresh: list[Transition] = []
        episodes: list[tuple[float, int]] = []
        num_actions = self.agent.num_actions
        for _ in range(steps):
            play = experience(
                self.state, self.envs, self.epsilon, num_actions, self.config.env, self.life_loss
            )
            completed, ended = serve(play, self.agent)
            fresh.extend(completed)
            episodes.extend(ended)
        transitions = stack(fresh) if fresh else self._empty()
        td_abs = self._priorities(transitions) if self.priorities else None
        block = Block(
            self.index, self.blocks, transitions, td_abs, self.version, self.state.env_steps,
            episodes,
        )  # fmt: skip
        self.blocks += 1
        return block

    def _priorities(self, transitions: Transitions) -> np.ndarray:
        """``|delta|`` of ``transitions`` under the held networks."""
        size = transitions.actions.shape[0]
        if size == 0:
            return np.zeros(0)
        batch = Batch(
            transitions.obs, transitions.actions, transitions.rewards, transitions.next_obs,
            transitions.terminated, np.arange(size, dtype=np.int64),
            np.ones(size, dtype=np.float32), transitions.n_steps,
        )  # fmt: skip
        return self.agent.td_errors(batch)

    def _empty(self) -> Transitions:
        """No transitions, in the fields' shapes and dtypes."""
        obs = np.zeros((0, *self.state.obs.shape[1:]), dtype=self.state.obs.dtype)
        return Transitions(
            obs, np.zeros(0, np.int64), np.zeros(0, np.float32), obs.copy(),
            np.zeros(0, np.bool_), np.zeros(0, np.uint8),
        )  # fmt: skip

    def close(self) -> None:
        """Closes its envs."""
        self.envs.close()

    def __enter__(self) -> Actor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
