"""The run dir and what it holds, read and written: naming, checks and writer locks (``dirs``),
atomic writes (``fileio``), checkpoints (``checkpoint``), the one reader of every file read back
(``readback``), what produced a run (``provenance``) and what it recorded (``summary``).

Nothing here trains: these modules know files, not the parts of a run.
"""
