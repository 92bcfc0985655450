"""The reinforcement-learning core shared by the kinds: settings, Q-network, learner, replay."""
