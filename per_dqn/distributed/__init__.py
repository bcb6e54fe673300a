"""One run across many processes: distributed prioritized experience replay (Ape-X; Horgan et
al., "Distributed Prioritized Experience Replay", ICLR 2018), issue 47.

Actors play with their own envs and a copy of the network, each at its own epsilon of a ladder
(``per_dqn.training.schedules.epsilon_ladder``), build n-step transitions as a run's loop does
(``per_dqn.training.loop.experience``), compute their initial priorities from their own Q-values
(``DQNAgent.td_errors``) and send them in blocks; replay shards (``per_dqn.memory.Shard``) store
them; one learner samples, learns and sends priority updates back.

- ``actor.py``: an actor's work, without Ray: its envs, its network, its blocks.
- ``learner.py``: the learner's side, a ``Trainer``'s loop fed by the actors' blocks, and the
  actors stepped in this process.
- ``frames.py``: a block's stacked frames, each sent once between processes.
- ``remote.py``: the actors as Ray actor processes, and a run's connection to its cluster.

The package imports nothing at its top: ``RunStoppedError`` and ``ActorLostError`` are here for
the CLI to catch.
"""


class RunStoppedError(RuntimeError):
    """A run with actors cannot go on (an actor or replay shard lost, a block lost or repeated on
    the way): the run stops with one line, its checkpoints as they were."""


class ActorLostError(RunStoppedError):
    """An actor's process died (killed, out of memory, its node gone): the run stops, with its
    checkpoints as they were."""
