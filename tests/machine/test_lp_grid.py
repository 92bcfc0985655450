"""studies.lp_grid, shrunk: the LP bound per grid and piece-cut count on one scenario, each
policy × each bound, the same files twice, and bad flags as one line."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from studies import lp_grid
from studies.late_eval import scenarios
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.machine.sim import simulate
from tests.runs import untuned_argv, untuned_override

SHRINK = ("--", "workload.n_train=300", "workload.n_test=150", untuned_override())


def _main(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["lp_grid", *untuned_argv(argv)])
    lp_grid.main()


def test_grids_tighten_with_cuts_and_repeat(tmp_path, monkeypatch):
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        _main(monkeypatch, "--grids", "1:0", "1:2", "2:2", "--policies", "heft_late", "--out", str(out), *SHRINK)
        runs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert runs[0] == runs[1] and set(runs[0]) == {"lp_grid.json", "lp_grid.md"}
    r = json.loads(runs[0]["lp_grid.json"])
    name, tasks, cluster, seed, cfg = scenarios(["default"], 0, 0, list(SHRINK[1:]))[0]
    own = simulate(tasks, cluster, instantiate(cfg["policies"]["machine"]["heft_late"]),
                   cluster.sample_noise(len(tasks), np.random.default_rng(seed)))
    assert (r["scenario"], r["tasks"]) == ("default", 150)
    assert r["policies"] == {"heft_late": float(np.mean(own.end - own.arrival))}
    lp = [g["bound_lp"] for g in r["grids"]]
    assert [(g["rho"], g["piece_cuts"]) for g in r["grids"]] == [(1.0, 0), (1.0, 2), (2.0, 2)]
    assert lp[1] > lp[0]  # the cuts tighten the coarse grid
    for g in r["grids"]:  # every bound is below the policy, and the ratio is against the larger bound
        assert g["bound_lp"] <= r["policies"]["heft_late"]
        assert g["heft_late_x_bound"] == r["policies"]["heft_late"] / max(g["bound_lp"], g["bound_solo"]) >= 1.0


def test_base_width_comes_from_the_hydra_overrides(tmp_path, monkeypatch):
    bounds = {}
    for delta in ("null", "0.05"):
        out = tmp_path / delta
        _main(monkeypatch, "--grids", "1:2", "--policies", "heft_late", "--out", str(out), *SHRINK, f"sim.bound_lp.delta={delta}")
        r = json.loads((out / "lp_grid.json").read_text())
        bounds[r["delta"]] = r["grids"][0]["bound_lp"]
    assert set(bounds) == {None, 0.05} and bounds[None] != bounds[0.05]


@pytest.mark.parametrize("argv, message", [(["--grids", "4"], "--grids takes RHO:CUTS (e.g. 4:2), got '4'"),
                                           (["--grids", "0.5:2"], "bound.lp.rho must be >= 1, got 0.5"),
                                           (["--grids", "2:9"], "bound.lp.piece_cuts must be an integer in 0..8, got 9"),
                                           (["--policies", "nope"], "--policies: no machine policy nope"),
                                           (["--heldout-tasks", "0"], "--heldout-tasks must be >= 1, got 0")])
def test_bad_flags_are_one_line(tmp_path, monkeypatch, capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        _main(monkeypatch, *argv, "--out", str(tmp_path / "o"), *SHRINK)
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
