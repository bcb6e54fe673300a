"""Sweeps: paired multi-seed ablations, their reports and the statistics behind them.

- ``ablate``: plans a sweep (every env x replay arm x seed) and runs it in worker processes,
  resuming what an earlier call left unfinished.
- ``runs``: reads run dirs and sweep dirs back (summaries, eval curves, ``sweep.json``).
- ``report``: writes ``report.md``, ``scores.csv`` and the figures (curves, performance
  profiles) from a sweep dir.
- ``stats``: IQM, stratified bootstrap intervals, probability of improvement, performance
  profiles (pure numpy).

Nothing is imported here, so that ``import per_dqn.sweeps.ablate`` loads neither the report
writer nor matplotlib.
"""
