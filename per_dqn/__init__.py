"""per-dqn: Double/Dueling DQN with Prioritized Experience Replay."""

__version__ = "0.1.0"
