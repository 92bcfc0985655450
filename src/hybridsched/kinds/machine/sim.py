"""Discrete-event simulation of task placement.

``simulate`` runs a policy in its own dispatch mode: placement at arrival onto FIFO device
queues (``engine.py``, every policy with ``dispatch = "arrival"``, the default), or late
binding from a central pool when a device frees (``late_engine.py``, ``dispatch = "late"``).
An arrival-mode policy with a ``queue_order`` (``policies/ordered.py``) runs its placement
with device queues in that order (``ordered_engine.py``).
"""

from hybridsched.kinds.machine.engine import Trace, task_matrix
from hybridsched.kinds.machine.engine import simulate as simulate_arrival
from hybridsched.kinds.machine.late_engine import simulate_late
from hybridsched.kinds.machine.ordered_engine import simulate_ordered


def simulate(tasks, cluster, policy, realization, compiled: bool = True, devices=None) -> Trace:
    """Run ``policy`` on ``tasks`` in the policy's dispatch mode (see the module docstring);
    ``devices`` (arrival mode only) as in :func:`engine.simulate`."""
    if getattr(policy, "dispatch", "arrival") == "late":
        run, how = simulate_late, "dispatches late"
    elif getattr(policy, "queue_order", None) is not None:
        run, how = simulate_ordered, "orders its device queues"
    else:
        return simulate_arrival(tasks, cluster, policy, realization, compiled, devices)
    if devices is not None:
        from hybridsched.errors import HybridschedError

        raise HybridschedError(f"policy {policy.name!r} {how}: it cannot continue from given device times")
    return run(tasks, cluster, policy, realization, compiled)

__all__ = ["Trace", "simulate", "simulate_arrival", "simulate_late", "simulate_ordered", "task_matrix"]
