"""Packs: several runs in one process, in lock-step, sharing one batched learner (issue 24).

- ``grouping``: which runs may share a pack, from their configs alone (no torch: a sweep's
  planning asks it);
- ``lockstep``: ``run_pack``, the runs of one pack driven together, their requests to act and to
  learn answered in batched calls;
- ``many``: ``per_dqn.train_many``, seeds by arms trained in this process, in packs.

The pack's arithmetic, K agents' layers stacked and one update for all, is the learner's own
(``per_dqn.agent.pack``): a single run's agent is a pack of one.
"""
