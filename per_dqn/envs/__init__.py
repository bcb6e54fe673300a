"""Environments: the env families, one module each (``families``: their modules import nothing
at their top, so the config can ask them), what their constructions share (``common``), a run's
envs from its config (``make``), what a checkpoint keeps of them (``state``), MinAtar's games for
releases without gymnasium envs (``minatar_gym``) and Atari's reference scores (``atari_scores``).
"""
