"""A training run and its parts: the ``Trainer`` (``run``), one step of the loop (``loop``,
``nstep``, ``asking``, ``health``, ``schedules``, ``seeding``), the factories that build a run's
parts (``build``), evaluation (``evaluate``), what a run will hold in memory before it allocates
(``memory_plan``) and the Ctrl-C helper every command shares (``stopping``).
"""
