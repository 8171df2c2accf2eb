"""Integrations of the reward service with RL frameworks that need more than a reward function (verifiers)."""
