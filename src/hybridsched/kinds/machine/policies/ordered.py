"""``OrderedQueues``: an arrival-mode policy's placement with its device queues in another order.

The placement policy (any arrival-mode policy config, e.g. ``${policies.machine.eft_rank}``
with its tuned weights) decides ``(gpu, fraction)`` when a task becomes ready, exactly as it
does alone; the device queues then run in ``order`` (``fifo``, ``spt`` or ``wspt``;
``ordered_engine.py``) instead of first-come first-served.  One YAML per combination:

    _target_: hybridsched.kinds.machine.policies.ordered.OrderedQueues
    order: spt
    placement: ${policies.machine.eft_rank}
"""

from __future__ import annotations

from typing import Any, ClassVar

from hybridsched.devices import Realization
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.ordered_engine import ORDERS
from hybridsched.kinds.machine.policies.base import Policy


class OrderedQueues(Policy):
    """Placement at arrival by ``placement``, each device's queue in ``order`` (module docstring)."""

    dispatch: ClassVar[str] = "ordered"  # placed at arrival like "arrival", but not FIFO queues

    def __init__(self, placement: dict[str, Any], order: str = "spt") -> None:
        from hybridsched.kinds.base import instantiate

        if order not in ORDERS:
            raise HybridschedError(f"OrderedQueues order: {order!r} is not one of {list(ORDERS)}")
        self.placement = instantiate(placement)
        if getattr(self.placement, "dispatch", "arrival") != "arrival":
            raise HybridschedError(f"OrderedQueues placement: {placement.get('_target_')} is not an arrival-mode policy")
        if self.placement.observe_every:
            raise HybridschedError(f"OrderedQueues placement: {placement.get('_target_')} learns online "
                                   "(observe), which the ordered engine does not run; set its online: false")
        self.queue_order = order  # sim.simulate runs a policy with a queue_order in ordered_engine

    @property
    def clairvoyant(self) -> bool:  # type: ignore[override]
        return self.placement.clairvoyant

    def load(self) -> None:
        """The placement's model, if it has one (simulate loads every policy before the bound)."""
        self.placement.load()

    def reveal(self, realization: Realization) -> None:
        self.placement.reveal(realization)
