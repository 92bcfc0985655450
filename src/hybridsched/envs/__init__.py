"""The project's Gymnasium environments, registered with Gymnasium when this module is imported.

Gymnasium 1.x reads no plugin entry points, so an id is known once its registering module is
imported: ``import hybridsched.envs`` first, or name the module in the id,
``gymnasium.make("hybridsched.envs:hybridsched/machine-late-v0")``, which imports it.  The entry
points are strings, so importing this module imports no kind (and no numba code).

- ``hybridsched/machine-late-v0``: the machine kind's late dispatch
  (:class:`hybridsched.kinds.machine.env.MachineLateEnv`).
- ``hybridsched/machine-arrival-v0``: the machine kind's arrival dispatch, each task's placement
  (:class:`hybridsched.kinds.machine.arrival_env.MachineArrivalEnv`).
- ``hybridsched/cluster-queue-v0``: the cluster kind's queue mode, which pending pod starts next
  (:class:`hybridsched.kinds.cluster.env.ClusterQueueEnv`).
- ``hybridsched/serving-dispatch-v0``: the serving kind's dispatch, which group's batch starts next
  (:class:`hybridsched.kinds.serving.env.ServingDispatchEnv`).
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

# id -> "module:class"
ENVS: dict[str, str] = {
    "hybridsched/machine-late-v0": "hybridsched.kinds.machine.env:MachineLateEnv",
    "hybridsched/machine-arrival-v0": "hybridsched.kinds.machine.arrival_env:MachineArrivalEnv",
    "hybridsched/cluster-queue-v0": "hybridsched.kinds.cluster.env:ClusterQueueEnv",
    "hybridsched/serving-dispatch-v0": "hybridsched.kinds.serving.env:ServingDispatchEnv",
}


def register_envs() -> None:
    """Register every id of :data:`ENVS` not registered yet (importing this module does it)."""
    for env_id, entry_point in ENVS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=entry_point)


register_envs()
