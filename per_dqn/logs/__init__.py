"""What a run shows and logs: the TensorBoard logger (``metrics``) and its tag catalogue
(``tags``), the live progress display (``console``), Weights & Biases (``tracking``, the optional
extra) and ``eval --video``'s GIFs (``video``).

Each writes what it is handed and reaches into no part of a run.
"""
