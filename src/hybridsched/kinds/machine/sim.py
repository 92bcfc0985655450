"""Discrete-event simulation of task placement."""

from hybridsched.kinds.machine.engine import Trace, simulate, task_matrix

__all__ = ["Trace", "simulate", "task_matrix"]
