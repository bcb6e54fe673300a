"""The learner: the Q-network (MLP torso, dueling head) and the Double-DQN update."""

from per_dqn.agent.dqn import DQNAgent, LearnResult, td_targets
from per_dqn.agent.networks import QNetwork

__all__ = ["DQNAgent", "LearnResult", "QNetwork", "td_targets"]
