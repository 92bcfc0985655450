"""Every compiled cluster policy's schedule is byte-identical to the plain scan's over every node
(reference hashes in data/golden_schedules.json, see golden_schedules.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster import golden_schedules as G

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden_schedules.json").read_text())
needs_traces = pytest.mark.skipif(not (G.ALIBABA.is_dir() and G.GAVEL.is_file()), reason="shared traces not present")


@needs_traces
@pytest.mark.parametrize("wname,n,factor", G.WORKLOADS)
def test_schedules_equal_the_recorded_ones(wname, n, factor):
    train, test, cluster = G.workload(n, factor)
    inp = G.run_inputs(test, cluster)
    assert G.workload_hash(inp, cluster) == GOLDEN[wname]["_workload"], ("the fixed workload itself changed (numpy on its AVX-512 kernels? `make test` sets "
                                                                          "NPY_DISABLE_CPU_FEATURES, docs/reproducibility.md)")
    got = {"_workload": GOLDEN[wname]["_workload"]}
    for pname, make in G.POLICIES.items():
        pol = make()
        pol.name = pname
        pol.fit(train)
        got[pname] = G.schedule_hash(G.simulate(inp, cluster, pol))
    assert got == GOLDEN[wname]


GOLDEN_K8S = json.loads((Path(__file__).parent / "data" / "golden_k8s.json").read_text())


@pytest.mark.skipif(not G.ALIBABA.is_dir(), reason="shared traces not present")
def test_k8s_rules_runs_equal_the_recorded_ones():
    """``fgd.rules: k8s_simulator`` (the ``fgd_atc23`` stage): every plugin's placements and curves on
    the real lists, two seeds, default rules and the float-score / random-tie variant."""
    from tests.cluster import golden_k8s

    assert golden_k8s.hashes() == GOLDEN_K8S
