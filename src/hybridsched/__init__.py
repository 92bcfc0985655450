"""hybridsched: learn and evaluate task placement on one CPU plus several GPUs."""

__version__ = "0.1.0"
