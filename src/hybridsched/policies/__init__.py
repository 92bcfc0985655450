"""Scheduling policies; each is a small class behind ``policies.base.Policy``."""
