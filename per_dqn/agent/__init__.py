"""The learner: Q-networks (MLP or Nature CNN torso, dueling head) and the Double-DQN update."""

from per_dqn.agent.dqn import DQNAgent, LearnResult, td_targets
from per_dqn.agent.networks import NatureCNN, QNetwork, make_q_network

__all__ = ["DQNAgent", "LearnResult", "NatureCNN", "QNetwork", "make_q_network", "td_targets"]
