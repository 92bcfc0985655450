"""``studies.late_tune_mixture``: the late heuristics tuned on ``cem.machine``'s training
mixture.  Shrunk, it writes byte-identical files twice; trial 0 is the YAML's weights, so the
best cost is never above it; the overrides it writes compose and set the tuned values; bad
flags are one line."""

from __future__ import annotations

import json

import pytest

from studies.late_tune_mixture import main, tune_mixture
from hybridsched.errors import HybridschedError
from tests.runs import untuned_argv

SHRUNK = ["--", "cem.machine.tasks=120"]


def test_shrunk_run_is_identical_on_rerun_and_its_overrides_compose(tmp_path):
    from studies.quality_eval import compose

    for d in ("a", "b"):
        main(["--trials", "4", "--draws", "2", "--policies", "spt_late,heft_late", "--out", str(tmp_path / d), *SHRUNK])
    for f in ("tuned_mixture.json", "overrides.txt"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    doc = json.loads((tmp_path / "a" / "tuned_mixture.json").read_text())
    assert set(doc["heuristics"]) == {"spt_late", "heft_late"} and doc["draws"] == 2 and doc["trials"] == 4
    for r in doc["heuristics"].values():
        assert r["best"] <= r["default"] and r["default"] > 0
    lines = (tmp_path / "a" / "overrides.txt").read_text().split()
    cfg = compose(lines)
    for name, r in doc["heuristics"].items():
        for k, v in r["params"].items():
            assert cfg["policies"]["machine"][name][k] == v


def test_trial_zero_is_the_yaml_weights():
    """With one trial the best is trial 0: the YAML's own weights, unchanged."""
    from studies.quality_eval import compose

    doc = tune_mixture(1, 1, ["cem.machine.tasks=120"], ["wspt_late"], log=lambda m: None)
    r = doc["heuristics"]["wspt_late"]
    assert r["best"] == r["default"]
    yaml_node = compose([])["policies"]["machine"]["wspt_late"]
    assert all(yaml_node.get(k, "fifo") == v for k, v in r["params"].items())


def test_bad_flags_are_one_line(tmp_path):
    with pytest.raises(HybridschedError, match=r"--policies: \['eft_late_plain'\] are not late heuristics"):
        main(["--trials", "1", "--draws", "1", "--policies", "eft_late_plain", "--out", str(tmp_path), *SHRUNK])
    with pytest.raises(HybridschedError, match=r"--trials 0 / --draws 1: both must be at least 1"):
        main(["--trials", "0", "--draws", "1", "--out", str(tmp_path), *SHRUNK])
    assert not (tmp_path / "tuned_mixture.json").exists()


def test_late_eval_takes_the_overrides_and_only_the_tuned_heuristics_move(tmp_path, monkeypatch):
    """The documented second command, shrunk (default only, no LP): with the written overrides
    the tuned heuristic's figure changes and every other policy's, ``pg_late`` included, stays."""
    import sys

    import pandas as pd

    from studies import late_eval

    main(["--trials", "6", "--draws", "2", "--policies", "spt_late", "--out", str(tmp_path / "mix"), *SHRUNK])
    lines = (tmp_path / "mix" / "overrides.txt").read_text().split()
    from tests.machine.late_models import train_tiny

    none = str(tmp_path / "no_model")
    pg = train_tiny(tmp_path / "models", ("pg_late",)) / "pg_late"  # a tiny trained pg_late
    common = ["late_eval", "--no-lp", "--workloads", "default", "--heldout", "0", "--cem-model", none,
              "--cem-late-model", none, "--dqn-late-model", none, "--pg-late-model", str(pg)]
    for d, ov in (("yaml", untuned_argv([])), ("mix", untuned_argv(["--", *lines]))):
        monkeypatch.setattr(sys, "argv", [*common, "--out", str(tmp_path / f"eval_{d}"), *ov])
        late_eval.main()
    a, b = (pd.read_csv(tmp_path / f"eval_{d}" / "default.csv").set_index("policy")["mean_latency"] for d in ("yaml", "mix"))
    moved = a.index[(a - b).abs() > 1e-12].tolist()
    assert moved == ["spt_late"] and "pg_late" in a.index
