"""The machine kind's scheduling policies; each is a small class behind ``base.Policy``."""
