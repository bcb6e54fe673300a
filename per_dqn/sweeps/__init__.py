"""Sweeps: paired multi-seed ablations, their reports and the statistics behind them.

- ``plan``: plans a sweep (every env x replay arm x grid point x seed), checks its dir, and
  writes its record; a re-run plans only what an earlier call left unfinished.
- ``job``: runs one of its runs in this process (resuming it from a checkpoint when it has one),
  the same under every backend.
- ``backends``: where the runs execute, behind one ``Backend`` protocol: ``local`` (worker
  processes) and ``ray`` (Ray tasks on a cluster).
- ``runs``: reads run dirs and sweep dirs back (summaries, eval curves, ``sweep.json``).
- ``progress``: the live display of a sweep's runs.
- ``report``: writes ``report.md``, ``scores.csv`` and the figures (curves, performance
  profiles) from a sweep dir: reads it, then measures, renders and draws with the three below.
- ``measure``: each run's numbers (final score, AUC, steps to threshold), cells, baselines, the
  normalisation across games, the seeded intervals.
- ``markdown``: the text of ``report.md`` and ``scores.csv``.
- ``figures``: the plots, as PNG and SVG bytes (the package's only matplotlib importer).
- ``stats``: IQM, stratified bootstrap intervals, probability of improvement, performance
  profiles (pure numpy).

Nothing is imported here, so that planning and running a sweep load neither the report writer
nor matplotlib.
"""
