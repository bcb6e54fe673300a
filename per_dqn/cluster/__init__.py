"""A Ray cluster, started here on loopback or joined at an address, for the commands that spread
work over one: ``per-dqn ablate --backend ray`` (whole runs) and a distributed run (one run's
actors). The optional ``ray`` extra; nothing here imports Ray at its top.

- ``housekeeping.py``: the options checked, Ray imported on loopback, an address probed, a
  cluster started here shut down with its orphans.
- ``connection.py``: ``connect``, the connection's lifecycle, and what it tells of the cluster.
"""
