"""The FGD paper's experiment under ``fgd.rules: k8s_simulator`` on the real pod and node lists:
a hash of every plugin's placements and curves for fixed seeds.

``python -m tests.cluster.golden_k8s`` prints the hashes as JSON; the reference hashes, from the
plain ``k8s_rules._simulate`` of commit a506693, are stored in
``tests/cluster/data/golden_k8s.json``, and ``test_golden_schedules.py`` checks that the current
code gives the same bytes."""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np

from hybridsched.kinds.cluster.fgd_protocol import k8s_rules as K
from hybridsched.kinds.cluster.fgd_protocol.protocol import workload_rng
from hybridsched.kinds.cluster.trace import read_node_list, read_pod_requests
from tests.cluster.golden_schedules import ALIBABA

SEEDS = (0, 3)
# (name, rules switched back to ours): the default rules, and the float-score / random-tie path
VARIANTS = (("default", ()), ("ours", ("tie_order", "integer_scores", "cpu_pods", "cpu_typical")))


def curve_hash(c) -> str:
    h = hashlib.sha256()
    for a in (c.node, c.gpu_mask, c.unallocated_gpu_pct, c.frag_pct):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def hashes() -> dict[str, str]:
    pods = read_pod_requests(ALIBABA / "openb_pod_list_default.csv", 100.0)
    nodes = K.gpu_nodes(read_node_list(ALIBABA / "openb_node_list_all_node.csv"))
    typical = K.typical_pods(pods, K.models_of(nodes), 0.95)
    cap = float(nodes.n_gpu.sum() * 1000)
    out = {}
    for vname, ours in VARIANTS:
        for seed in SEEDS:
            order = K.arrival_order(pods, cap, 1.3, workload_rng(seed))
            rank = K.tie_order(nodes.name, K.order_rng(seed))
            for plugin in K.PLUGINS:
                c = K.run_seed(plugin, pods, nodes, order, typical, rank, K.draw_seed(seed, plugin), ours)
                out[f"{vname}/{seed}/{plugin}"] = curve_hash(c)
    return out


if __name__ == "__main__":
    json.dump(hashes(), sys.stdout, indent=1, sort_keys=True)
    print()
