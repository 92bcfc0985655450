"""Training the queue mode's learned policy across node samples (``queue_train.Domain``,
``studies.cluster_queue --train-node-seeds``): every window is drawn on one of the samples, run
on that sample's cluster with the policy fitted on its training split and costed ÷ eft's there;
the shrunk documented run is byte-identical on rerun; bad flags are one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybridsched.errors import HybridschedError
from tests.cluster.test_node_seeds import _fixture

SHRUNK = ["--train-only", "--generations", "2", "--population", "4", "--windows", "2", "--min-pods", "20",
          "--max-pods-window", "40", "--eval-windows", "2", "--node-start", "eft"]


def test_windows_run_on_their_own_sample_and_eft_costs_one(tmp_path):
    """Each window of :func:`draw_across` is one domain's: its cluster and split are that
    domain's, and the all-zero joint vector (eft, trace for trace) costs exactly 1 on every
    window, which holds only if the window runs on its own cluster with the policy fitted on its
    own split.  Both samples are drawn, and the draw is the same on rerun."""
    from studies.cluster_queue import node_sample
    from hybridsched.kinds.cluster.queue_policy import JOINT_FEATURES
    from hybridsched.kinds.cluster.queue_train import Domain, QueueTrainSettings, draw_across, window_costs
    from tests.runs import compose_run

    ov = _fixture(tmp_path)
    # the fixture's 5-of-8 samples differ only in names and CPUs: the second domain is a 2-node
    # sample, so a window run on the other domain's cluster could not cost 1
    small = ["workload.nodes.sample.n_nodes=2", "workload.nodes.sample.min_per_model=0"]
    domains = [Domain.of(tr, cl) for tr, _, cl in (node_sample(compose_run(*ov), 1),
                                                    node_sample(compose_run(*ov, *small), 1))]
    assert (domains[0].cluster.n_nodes, domains[1].cluster.n_nodes) == (5, 2)
    s = QueueTrainSettings(windows=2, min_pods=20, max_pods=40, min_load=0.75, max_load=1.75, strata=2)
    scen = draw_across(domains, s, 8, seed=5)
    on = [next(i for i, d in enumerate(domains) if d.cluster is sc.cluster) for sc in scen]
    assert set(on) == {0, 1}
    assert all(sc.fit_pods is domains[i].pods for sc, i in zip(scen, on, strict=True))
    # window j's load lies in stratum j % 2
    assert all((0.75 <= sc.load < 1.25) if j % 2 == 0 else (1.25 <= sc.load <= 1.75) for j, sc in enumerate(scen))
    costs = window_costs(np.zeros(len(JOINT_FEATURES)), scen, None, None, "greedy")
    assert np.array_equal(costs, np.ones(len(scen)))
    again = draw_across(domains, s, 8, seed=5)
    assert [(sc.start, sc.pods, sc.rate) for sc in again] == [(sc.start, sc.pods, sc.rate) for sc in scen]


def test_train_order_with_domains_needs_the_joint_policy(tmp_path):
    from hybridsched.kinds.cluster.queue_train import Domain, QueueTrainSettings, train_order
    from hybridsched.rl.cem import CEMSettings

    with pytest.raises(HybridschedError, match="domains .* need joint = True"):
        train_order(None, None, None, CEMSettings(generations=1, population=2), QueueTrainSettings(),
                    domains=[Domain(None, None, None)])


def test_documented_training_across_samples_runs_shrunk_and_is_identical_on_rerun(tmp_path):
    """The documented ``--train-node-seeds`` run, shrunk (fixture workload, samples 1 and 2, eft's
    node start): the same ``learned_order.json`` twice, recording the samples and which of them
    each check window was on."""
    from studies.cluster_queue import main

    ov = _fixture(tmp_path)
    for d in ("a", "b"):
        main(["--out", str(tmp_path / d), *SHRUNK, "--train-node-seeds", "1", "2", "--", *ov])
    a, b = ((tmp_path / d / "learned_order.json").read_bytes() for d in ("a", "b"))
    assert a == b
    doc = json.loads(a)
    assert doc["train"]["train_node_seeds"] == [1, 2]
    assert len(doc["train"]["check_domains"]) == 2 and set(doc["train"]["check_domains"]) <= {0, 1}
    # without the flag no sample is recorded (the earlier runs' records are as they were)
    main(["--out", str(tmp_path / "c"), *SHRUNK, "--", *ov])
    plain = json.loads((tmp_path / "c" / "learned_order.json").read_text())
    assert "train_node_seeds" not in plain["train"] and "check_domains" not in plain["train"]


def test_train_node_seeds_bad_flags_are_one_line(tmp_path):
    from studies.cluster_queue import main

    ov = _fixture(tmp_path)
    w = tmp_path / "w.json"
    w.write_text(json.dumps({"node_policy": "learned", "weights": {}}))
    for flags, msg in ((["--train-node-seeds", "1", "1"], r"--train-node-seeds 1 1: needs distinct seeds"),
                       (["--train-node-seeds", "1", "--weights", str(w)], r"not with --weights"),
                       (["--train-node-seeds", "1", "--node", "cem"], r"not with --weights, --node cem/eft"),
                       (["--train-node-seeds", "1", "--fade-scan", "0,1"], r"or --fade-scan")):
        with pytest.raises(HybridschedError, match=msg):
            main(["--out", str(tmp_path / "x"), *SHRUNK, *flags, "--", *ov])
    nosample = _fixture(tmp_path / "ns", sample=False)
    with pytest.raises(HybridschedError, match=r"--train-node-seeds: workload.nodes.sample is null"):
        main(["--out", str(tmp_path / "x"), *SHRUNK, "--train-node-seeds", "1", "--", *nosample])
    assert not (tmp_path / "x" / "learned_order.json").exists()
