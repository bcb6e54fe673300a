"""Environments: each family's constants (``families``: imports nothing, so the config can ask
it), their construction and state capture (``make``), MinAtar's games for releases without
gymnasium envs (``minatar_gym``) and Atari's reference scores (``atari_scores``).
"""
