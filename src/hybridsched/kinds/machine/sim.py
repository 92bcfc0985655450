"""Discrete-event simulation of task placement.

``simulate`` runs a policy in its own dispatch mode: placement at arrival onto FIFO device
queues (``engine.py``, every policy with ``dispatch = "arrival"``, the default), or late
binding from a central pool when a device frees (``late_engine.py``, ``dispatch = "late"``).
"""

from hybridsched.kinds.machine.engine import Trace, task_matrix
from hybridsched.kinds.machine.engine import simulate as simulate_arrival
from hybridsched.kinds.machine.late_engine import simulate_late


def simulate(tasks, cluster, policy, realization, compiled: bool = True, devices=None) -> Trace:
    """Run ``policy`` on ``tasks`` in the policy's dispatch mode (see the module docstring);
    ``devices`` (arrival mode only) as in :func:`engine.simulate`."""
    if getattr(policy, "dispatch", "arrival") == "late":
        if devices is not None:
            from hybridsched.errors import HybridschedError

            raise HybridschedError(f"policy {policy.name!r} dispatches late: it cannot continue from given device times")
        return simulate_late(tasks, cluster, policy, realization, compiled)
    return simulate_arrival(tasks, cluster, policy, realization, compiled, devices)


__all__ = ["Trace", "simulate", "simulate_arrival", "simulate_late", "task_matrix"]
