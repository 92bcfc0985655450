"""The comparison charts are readable: one colour per policy across a kind's charts, log axes
where values span decades, the best policies in colour, one label per policy, no stand-in
images, and `dvc plots` draws only real series."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.colors import to_hex

from hybridsched import plots
from hybridsched.headline import MainMetric, headline_table
from hybridsched.kinds.base import Run

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["round_robin", "greedy", "eft", "cem", "rollout_late", "eft_late", "pg_late", "dqn", "oracle", "random", "fgd"]


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """The figures the chart functions draw, by file name, instead of PNGs on disk."""
    drawn: dict[str, object] = {}

    def keep(fig, path: Path) -> Path:  # noqa: ANN001
        drawn[Path(path).name] = fig
        return Path(path)

    monkeypatch.setattr(plots, "_save", keep)
    yield drawn
    import matplotlib.pyplot as plt

    plt.close("all")


def _traces(means: dict[str, float]) -> dict[str, pd.DataFrame]:
    """Traces whose latencies are 0.5x, 1x and 1.5x the given mean."""
    return {n: pd.DataFrame({"arrival": [0.0, 0.0, 0.0], "end": [m * 0.5, m, m * 1.5]}) for n, m in means.items()}


def _frames(means: dict[str, float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    table = pd.DataFrame({"energy_j": [100.0 + k for k in range(len(means))], "cost_usd": [0.01] * len(means),
                          "mean_latency": list(means.values()), "dispatch": "arrival"},
                         index=pd.Index(list(means), name="policy"))
    util = pd.DataFrame([{"policy": n, "device": d, "utilisation": 0.5} for n in means for d in ("cpu", "gpu0", "gpu1")])
    util["policy_device"] = util["policy"] + "/" + util["device"]
    return table, util


def _hex(c) -> str:  # noqa: ANN001
    return to_hex(c, keep_alpha=False)


def test_policy_colours_depend_on_the_sorted_names_only_and_are_distinct() -> None:
    many = [f"p{k:02d}" for k in range(29)]
    assert plots.policy_colours(NAMES) == plots.policy_colours(list(reversed(NAMES)))
    assert len({_hex(c) for c in plots.policy_colours(many).values()}) == 29  # no repeats at 29 policies
    assert plots.policy_colours(["b", "a"])["a"] == plots.policy_colours(["a"])["a"]  # tab10 order for few


def test_the_same_policy_has_the_same_colour_in_the_cdf_the_bars_and_the_headline(figures) -> None:
    means = {n: 2.0 ** k for k, n in enumerate(NAMES)}
    table, util = _frames(means)
    plots.save_comparison_pngs(_traces(means), table, util, Path("unused"), best=len(NAMES))
    head = headline_table(table, MainMetric("mean_latency", "mean JCT (s)"), 0.4)
    plots.save_headline_bars(head, "mean_latency", Path("headline.png"), "mean JCT (s)", "t", bound=0.4)
    cdf = figures["latency_cdf.png"].axes[0]
    in_cdf = {line.get_label().split(" (")[0]: _hex(line.get_color()) for line in cdf.get_lines()}
    bars = figures["headline.png"].axes[0]
    in_head = {t.get_text(): _hex(p.get_facecolor()) for t, p in zip(bars.get_yticklabels(), bars.patches, strict=False)}
    energy = figures["energy_cost.png"].axes[0]
    in_energy = {t.get_text(): _hex(p.get_facecolor()) for t, p in zip(energy.get_yticklabels(), energy.patches, strict=False)}
    assert set(in_cdf) == set(in_head) == set(in_energy) == set(NAMES)
    assert in_cdf == in_head == in_energy
    assert len(set(in_cdf.values())) == len(NAMES)


def test_values_over_a_decade_go_on_a_log_axis(figures) -> None:
    spread = {"greedy": 2500.0, "eft": 1.0, "cem": 0.7}
    table, _ = _frames(spread)
    for name, means in (("wide.png", spread), ("narrow.png", {"a": 1.0, "b": 2.0, "c": 3.0})):
        t, _ = _frames(means)
        plots.save_headline_bars(headline_table(t, MainMetric("mean_latency", "s"), None), "mean_latency", Path(name),
                                 "s", "t")
    assert figures["wide.png"].axes[0].get_xscale() == "log"
    assert figures["narrow.png"].axes[0].get_xscale() == "linear"
    table["energy_j"] = [1e6, 10.0, 20.0]
    plots.save_comparison_pngs(_traces(spread), table, _frames(spread)[1], Path("unused"))
    assert figures["latency_cdf.png"].axes[0].get_xscale() == "log"
    assert [ax.get_xscale() for ax in figures["energy_cost.png"].axes[:2]] == ["log", "linear"]
    assert plots.spans_decades([0.5, 6.0]) and not plots.spans_decades([1.0, 9.0, np.nan, 0.0])


def test_the_cdf_draws_the_best_in_colour_and_the_rest_grey_and_unlabelled(figures) -> None:
    means = {n: 1.0 + k for k, n in enumerate(NAMES)}  # NAMES in order of mean latency
    table, util = _frames(means)
    plots.save_comparison_pngs(_traces(means), table, util, Path("unused"), best=3)
    ax = figures["latency_cdf.png"].axes[0]
    coloured = [line for line in ax.get_lines() if _hex(line.get_color()) != plots.OTHER_COLOUR]
    assert sorted(line.get_label().split(" (")[0] for line in coloured) == sorted(NAMES[:3])
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [t.split(" (")[0] for t in legend[:3]] == NAMES[:3]  # best first
    assert legend[-1] == f"{len(NAMES) - 3} other policies"


def test_utilisation_is_one_row_per_policy_not_one_label_per_policy_and_device(figures) -> None:
    means = {n: 1.0 + k for k, n in enumerate(NAMES)}
    table, util = _frames(means)
    plots.save_comparison_pngs(_traces(means), table, util, Path("unused"))
    ax = figures["utilisation.png"].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == NAMES  # best mean latency on top
    assert [t.get_text() for t in ax.get_xticklabels()] == ["cpu", "gpu0", "gpu1"]


def test_cluster_time_series_are_one_panel_per_policy_in_order_in_the_policy_colour(figures) -> None:
    t = np.array([0.0, 1.0, 2.0, 3.0])
    series = {n: (t, np.array([0.1, 0.2, 0.3]) * k) for k, n in enumerate(NAMES)}
    order = list(reversed(NAMES))
    plots.save_step_lines(series, Path("alloc.png"), "Allocated", "share", order=order)
    panels = [ax for ax in figures["alloc.png"].axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == order
    colours = plots.policy_colours(NAMES)
    for ax in panels:
        own = ax.get_lines()[-1]
        assert _hex(own.get_color()) == _hex(colours[ax.get_title()])


def test_the_cluster_headline_is_a_mean_jct_bar_per_policy_best_on_top_with_the_bound(figures) -> None:
    means = {"fgd": 900.0, "random": 3000.0, "eft": 450.0, "cem": 500.0}
    table, _ = _frames(means)
    head = headline_table(table, MainMetric("mean_latency", "mean JCT (s)"), 300.0)
    plots.save_headline_bars(head, "mean_latency", Path("headline.png"), "mean JCT (s)", "cluster", bound=300.0)
    ax = figures["headline.png"].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["random", "fgd", "cem", "eft"]  # drawn bottom-up
    assert [p.get_width() for p in ax.patches] == [3000.0, 900.0, 500.0, 450.0]
    assert any(tuple(line.get_xdata()) == (300.0, 300.0) for line in ax.get_lines())  # the bound


def test_a_stage_with_nothing_to_plot_writes_an_empty_image_folder(tmp_path: Path) -> None:
    from hybridsched.kinds.cluster import stages as cluster

    m = tmp_path / "metrics"
    for stage in ("profile", "tune"):  # an image of an earlier run does not stay behind
        (m / "plots" / stage).mkdir(parents=True)
        (m / "plots" / stage / "old.png").write_bytes(b"\x89PNG")
    run = Run(cfg={"workload": {"kind": "cluster"}, "cluster": {"profile_path": str(tmp_path / "p.json")},
                   "paths": {"metrics_dir": str(m), "best_params": str(tmp_path / "models" / "best_params.yaml")}},
              tracking=False)
    cluster.profile(run)
    cluster.tune(run)
    for stage in ("profile", "tune"):
        assert (m / "plots" / stage).is_dir() and not list((m / "plots" / stage).iterdir()), stage
    assert not list((m / "plots").glob("*.png"))


def _dvc() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())


def test_dvc_plots_are_the_defined_charts_only() -> None:
    """A stage's `plots:` entry makes DVC draw its table as a line of its rows: the tables are
    plain outputs, and every chart of a table names its columns and a template that exists."""
    d = _dvc()
    assert [s for s, v in d["stages"].items() if "plots" in v] == []
    builtin = {"linear", "simple", "scatter", "smooth", "confusion", "confusion_normalized", "bar_horizontal",
               "bar_horizontal_sorted", "scatter_jitter"}
    for entry in d["plots"]:
        if isinstance(entry, str):
            assert not entry.endswith((".csv", ".json", ".tsv", ".yaml")), entry
            continue
        ((name, spec),) = entry.items()
        assert {"x", "y", "template", "title"} <= set(spec), name
        template = spec["template"]
        assert template in builtin or (ROOT / ".dvc" / "plots" / f"{template}.json").is_file(), template


def test_the_dvc_templates_colour_policies_as_the_pngs_do() -> None:
    """Vega sorts the policy names as plots.policy_colours does, so the same colour list gives a
    policy the same colour in `dvc plots` as in the PNGs."""
    expected = list(plots.policy_colours([f"p{k:02d}" for k in range(len(plots.palette()))]).values())
    assert expected == plots.palette() and plots.OTHER_COLOUR not in expected  # grey is for context only
    for name in ("by_policy", "by_policy_log", "policy_bars"):
        spec = json.loads((ROOT / ".dvc" / "plots" / f"{name}.json").read_text())
        assert spec["encoding"]["color"]["scale"]["range"] == expected, name
    log = json.loads((ROOT / ".dvc" / "plots" / "by_policy_log.json").read_text())
    assert log["encoding"]["y"]["scale"]["type"] == "log"
    latency = next(e["latency_quantiles"] for e in _dvc()["plots"] if isinstance(e, dict) and "latency_quantiles" in e)
    assert latency["template"] == "by_policy_log"


@pytest.mark.parametrize("n_trials, images", [(2, ["tune_history.png"]), (3, ["tune_history.png", "tune_importance.png"])])
def test_the_tune_images_are_the_charts_the_study_has(tmp_path: Path, n_trials: int, images: list[str]) -> None:
    """Importances need 3+ trials: with fewer the folder holds the history only, no stand-in."""
    import optuna

    from hybridsched.kinds.machine.tuning import TuneSettings, _storage, save_plots

    s = TuneSettings(n_trials=n_trials, storage=str(tmp_path / "s.journal"))
    study = optuna.create_study(study_name="t", storage=_storage(s.storage), sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: t.suggest_float("a", 0, 1) + t.suggest_float("b", 0, 1), n_trials=n_trials)
    out = tmp_path / "metrics" / "plots" / "tune"
    out.mkdir(parents=True)
    (out / "tune_importance.png").write_bytes(b"\x89PNG")  # an earlier run's image does not stay behind
    assert save_plots(s, "t", out) == [out / n for n in images]
    assert sorted(p.name for p in out.iterdir()) == images
