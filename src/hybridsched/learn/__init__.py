"""Learning: features, run-time predictors, the DQN agent and its replay buffer."""
