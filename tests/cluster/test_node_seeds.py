"""``studies.cluster_queue --node-seeds``: the queue-mode rows on the test split of several
node samples.  A shrunk run on the fixture workload writes byte-identical files twice, its seed
of the generated workload gives the plain run's figures, another seed another cluster, every
ratio is ÷ eft's on the same sample; bad flags and a workload without a node sample are one line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hybridsched.errors import HybridschedError
from tests.cluster.test_stages_e2e import DATA

# cem's node weights as learned_queue has them, the zero order, fade 1
# (docs/findings/cluster.md, "Over ten node samples")
WEIGHTS = {"node_policy": "learned", "weights": {
    "gpus": 0.0, "cpu": 0.0, "wait_ratio": 0.0, "fits_now": 0.0, "slow_now": 0.0, "long": 0.0, "backlog_short": 0.0,
    "backlog_wait": 0.0, "node_slow_long": 0.122618, "node_gpu_left": 0.327357, "node_cpu_left": 0.277324,
    "node_frag": 0.244769, "node_rank": -0.372913, "node_idle": 0.003914, "node_cpu_on_gpu": 0.279872,
    "node_fade": 1.0}}


def _fixture(tmp_path, sample: bool = True) -> list[str]:
    """The fixture workload's overrides (a 5-of-8 node sample, seed 0, unless ``sample`` is
    false), generated under ``tmp_path``."""
    from hybridsched.kinds import get_kind
    from tests.runs import compose_run, outputs_in

    ov = ["workload=alibaba_gpu_2023", f"workload.path={DATA / 'pods.csv'}", f"workload.nodes.path={DATA / 'nodes.csv'}",
          "workload.nodes.sample.n_nodes=5" if sample else "workload.nodes.sample=null",
          "workload.time_compression=1.0", f"nodes.gavel_path={DATA / 'gavel.json'}", *outputs_in(tmp_path)]
    run = compose_run(*ov)
    get_kind(run.kind).generate(run)
    return ov


def test_node_seeds_shrunk_identical_on_rerun_and_seed_zero_is_the_plain_run(tmp_path):
    """The documented command, shrunk: node seeds 0-2 at loads 1 and 2 on the fixture workload."""
    from studies.cluster_queue import main

    ov = _fixture(tmp_path)
    w = tmp_path / "w.json"
    w.write_text(json.dumps(WEIGHTS))
    flags = ["--weights", str(w), "--rows", "eft", "learned", "smallest", "--rates", "1", "2"]
    for d in ("a", "b"):
        main(["--out", str(tmp_path / d), *flags, "--node-seeds", "0", "1", "2", "--", *ov])
    for f in ("node_seeds.csv", "node_seeds.md"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    assert not (tmp_path / "a" / "cluster_queue.csv").exists()
    df = pd.read_csv(tmp_path / "a" / "node_seeds.csv")
    assert sorted(df.node_seed.unique()) == [0, 1, 2] and len(df) == 3 * 2 * 3
    assert np.allclose(df.loc[df.policy == "eft", "vs_eft"], 1.0)
    assert (df["mean_jct"] >= df["bound"] - 1e-6).all()
    # each ratio is ÷ eft's of its own seed and load
    eft = df[df.policy == "eft"].set_index(["node_seed", "load"])["mean_jct"]
    lr = df[df.policy != "eft"]
    assert np.allclose(lr.vs_eft, [m / eft[(s, x)] for s, x, m in zip(lr.node_seed, lr.load, lr.mean_jct)])
    # another seed samples another cluster: eft's figures differ somewhere
    assert df[df.policy == "eft"].groupby("node_seed")["mean_jct"].apply(tuple).nunique() > 1
    # seed 0 is the generated workload's sample: the plain run's figures
    main(["--out", str(tmp_path / "plain"), *flags, "--", *ov])
    plain = pd.read_csv(tmp_path / "plain" / "cluster_queue.csv")
    zero = df[df.node_seed == 0].drop(columns="node_seed").reset_index(drop=True)
    pd.testing.assert_frame_equal(zero[plain.columns], plain)
    md = (tmp_path / "a" / "node_seeds.md").read_text()
    assert "node seeds 0 1 2" in md and md.count(" of 3 ") == 4  # learned and smallest at two loads, no eft row


def test_node_seeds_bad_flags_are_one_line(tmp_path):
    from studies.cluster_queue import main

    ov = _fixture(tmp_path, sample=False)
    w = tmp_path / "w.json"
    w.write_text(json.dumps(WEIGHTS))
    with pytest.raises(HybridschedError, match=r"workload.nodes.sample is null"):
        main(["--out", str(tmp_path / "x"), "--weights", str(w), "--node-seeds", "0", "1", "--", *ov])
    with pytest.raises(HybridschedError, match=r"--node-seeds 1 1: needs distinct seeds"):
        main(["--out", str(tmp_path / "x"), "--weights", str(w), "--node-seeds", "1", "1", "--", *ov])
    with pytest.raises(HybridschedError, match=r"needs distinct seeds and the eft row"):
        main(["--out", str(tmp_path / "x"), "--weights", str(w), "--rows", "learned", "--node-seeds", "0", "--", *ov])
    with pytest.raises(HybridschedError, match=r"--fade-scan .* not with .*--node-seeds"):
        main(["--out", str(tmp_path / "x"), "--fade-scan", "0,1", "--node-seeds", "0", "--", *ov])
    assert not (tmp_path / "x" / "node_seeds.csv").exists()


def test_weights_from_the_policy_yaml_are_its_json(tmp_path):
    """``--weights conf/policies/cluster/learned_queue.yaml`` evaluates the pipeline's policy, the
    train_late stage's model its ``model_dir`` names (here one written with :data:`WEIGHTS`'s
    weights): the same table as those weights written as a ``learned_order.json``; a YAML without
    weights or a model is one line."""
    from studies.cluster_queue import main
    from tests.runs import CONF

    ov = _fixture(tmp_path)
    conf = CONF / "policies" / "cluster" / "learned_queue.yaml"
    model = tmp_path / "models" / "late" / "learned_queue"  # train_late.model_dir of outputs_in
    model.mkdir(parents=True)
    (model / "model.json").write_text(json.dumps({"policy": "learned_queue", **WEIGHTS}))
    w = tmp_path / "w.json"
    w.write_text(json.dumps(WEIGHTS))
    for d, src in (("yaml", conf), ("json", w)):
        main(["--out", str(tmp_path / d), "--weights", str(src), "--rows", "eft", "learned", "--rates", "1", "--", *ov])
    assert (tmp_path / "yaml" / "cluster_queue.csv").read_bytes() == (tmp_path / "json" / "cluster_queue.csv").read_bytes()
    (model / "model.json").unlink()
    with pytest.raises(HybridschedError, match=r"learned_queue: .*learned_queue/model.json not found; run `dvc repro"):
        main(["--out", str(tmp_path / "x"), "--weights", str(conf), "--", *ov])
    bad = tmp_path / "bad.yaml"
    bad.write_text("backfill: greedy\n")
    with pytest.raises(HybridschedError, match=r"--weights .*bad.yaml: no 'weights' mapping"):
        main(["--out", str(tmp_path / "x"), "--weights", str(bad), "--", *ov])
    # a missing or broken file, or JSON without weights: one line too
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    nokey = tmp_path / "nokey.json"
    nokey.write_text("{}")
    for f, msg in ((tmp_path / "missing.json", "cannot read it"), (broken, "cannot read it"),
                   (nokey, "no 'weights' mapping")):
        with pytest.raises(HybridschedError, match=rf"--weights .*{f.name}: {msg}"):
            main(["--out", str(tmp_path / "x"), "--weights", str(f), "--", *ov])
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())
