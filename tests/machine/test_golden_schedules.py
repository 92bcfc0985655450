"""Every machine arrival policy's schedule is byte-identical to the reference engine's
(hashes in data/golden_schedules.json, see golden_schedules.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridsched.kinds.machine.sim import simulate
from tests.machine import golden_schedules as G

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden_schedules.json").read_text())
WHY = ("schedule changed (or numpy on its AVX-512 kernels drew another workload: `make test` sets "
       "NPY_DISABLE_CPU_FEATURES, docs/reproducibility.md)")


@pytest.mark.parametrize("wname", sorted(G.WORKLOADS))
def test_compiled_schedules_equal_the_recorded_ones(wname):
    assert G.hashes(wname) == GOLDEN[wname], WHY


@pytest.mark.parametrize("pname", ["eft", "greedy", "hybrid_ml"])
def test_python_reference_gives_the_recorded_schedule_too(pname):
    tasks, cluster, real = G.workload("dag")
    pol = G.policies(cluster)[pname]()
    assert G.schedule_hash(simulate(tasks, cluster, pol, real, compiled=False)) == GOLDEN["dag"][pname], WHY
