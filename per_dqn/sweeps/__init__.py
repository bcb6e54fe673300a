"""Sweeps: paired multi-seed ablations, their reports and the statistics behind them.

- ``ablate``: plans a sweep (every env x replay arm x seed) and runs it in worker processes,
  resuming what an earlier call left unfinished.
- ``runs``: reads run dirs and sweep dirs back (summaries, eval curves, ``sweep.json``).
- ``report``: writes ``report.md``, ``scores.csv`` and the figures (curves, performance
  profiles) from a sweep dir: reads it, then measures, renders and draws with the three below.
- ``measure``: each run's numbers (final score, AUC, steps to threshold), cells, baselines, the
  normalisation across games, the seeded intervals.
- ``markdown``: the text of ``report.md`` and ``scores.csv``.
- ``figures``: the plots, as PNG and SVG bytes (the package's only matplotlib importer).
- ``stats``: IQM, stratified bootstrap intervals, probability of improvement, performance
  profiles (pure numpy).

Nothing is imported here, so that ``import per_dqn.sweeps.ablate`` loads neither the report
writer nor matplotlib.
"""
