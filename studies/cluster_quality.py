"""Policy quality on the cluster kind: every node policy, unchanged, on the test split and on
rate-scaled copies of it (arrivals divided by the factor), against eft and the lower bound.

Run (after generate, train_rf, train_dqn and train_cem of `workload=alibaba_gpu_2023`):

    python -m studies.cluster_quality --out /tmp/cluster_quality --rates 1 0.75 1.25 1.5 \
        -- workload=alibaba_gpu_2023 [paths.workload_dir=... rf.model_dir=... dqn.model_dir=... cem.model_dir=...]

The arguments after ``--`` are Hydra overrides of conf/ (as for the stages).  Writes
``cluster_quality.md`` and ``cluster_quality.csv`` under ``--out`` (never into metrics/) and
prints the table; each row is one (rate, policy).  Nothing here is timed, so a loaded
machine changes no figure.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POLICIES = ("eft", "eft_queue", "cem", "hybrid_ml", "dqn", "fgd", "best_fit", "greedy", "oracle")


def _run(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from hybridsched.kinds.base import Run

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=["tracking.enabled=false", *overrides])
    return Run(cfg=OmegaConf.to_container(cfg, resolve=True))


def evaluate(run, policies: list[str], rates: list[float]) -> pd.DataFrame:
    """One row per (rate, policy): mean / P95 / P99 JCT, mean wait, share that waited, ratio to eft,
    and the lower bounds of that scenario."""
    from hybridsched.kinds.cluster import bounds as B
    from hybridsched.kinds.cluster import workload as W
    from hybridsched.kinds.cluster.engine import simulate
    from hybridsched.kinds.cluster.nodes import run_inputs

    wd = run.workload_dir
    train, test, nodes = W.read_split(wd, "train"), W.read_split(wd, "test"), W.read_nodes(wd)
    cluster = W.build_cluster(nodes, run.cfg["nodes"], run.cfg["cluster"])
    specs = run.policy_specs()
    rows = []
    for rate in rates:
        pods = test.subset(np.arange(len(test)))
        pods.arrival = pods.arrival / rate
        inp = run_inputs(pods, cluster)
        bound = asdict(B.lower_bound(inp, cluster))
        contention = getattr(B, "contention_bound", None)
        pooled = contention(inp, cluster) if contention else float("nan")
        res = {}
        for name in policies:
            from hybridsched.kinds.base import instantiate

            pol = instantiate(specs[name])
            pol.name = name
            pol.fit(train)
            tr = simulate(inp, cluster, pol)
            jct, wait = tr.end - inp.arrival, tr.start - inp.arrival
            res[name] = {"rate": rate, "policy": name, "mean_jct": float(jct.mean()),
                         "p95_jct": float(np.quantile(jct, 0.95)), "p99_jct": float(np.quantile(jct, 0.99)),
                         "mean_wait": float(wait.mean()), "waited": float((wait > 0).mean()),
                         "bound_solo": bound["mean_latency"], "bound_contention": pooled}
        for r in res.values():
            r["vs_eft"] = r["mean_jct"] / res["eft"]["mean_jct"] if "eft" in res else float("nan")
            r["vs_bound"] = r["mean_jct"] / np.nanmax([r["bound_solo"], r["bound_contention"]])
            rows.append(r)
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/tmp/cluster_quality"))
    ap.add_argument("--rates", type=float, nargs="+", default=[1.0, 0.75, 1.25, 1.5])
    ap.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES))
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (after --)")
    args = ap.parse_args()
    run = _run(args.overrides or ["workload=alibaba_gpu_2023"])
    df = evaluate(run, args.policies, args.rates)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "cluster_quality.csv", index=False)
    show = df.copy()
    for c in ("mean_jct", "p95_jct", "p99_jct", "mean_wait", "bound_solo", "bound_contention"):
        show[c] = show[c].round(0)
    for c in ("waited", "vs_eft", "vs_bound"):
        show[c] = show[c].round(3)
    (args.out / "cluster_quality.md").write_text(show.to_markdown(index=False) + "\n")
    plot(df, args.out / "cluster_quality.png")
    print(show.to_string(index=False))
    print(f"saved {args.out / 'cluster_quality.md'} and cluster_quality.png")


def plot(df: pd.DataFrame, path: Path) -> None:
    """Mean and P95 JCT against the arrival-rate factor, one line per policy, the bound dashed."""
    from hybridsched.plots import _pyplot

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, col, label in zip(axes, ("mean_jct", "p95_jct"), ("mean JCT (s)", "P95 JCT (s)"), strict=True):
        for name, g in df.sort_values("rate").groupby("policy", sort=False):
            ax.plot(g["rate"], g[col], marker="o", label=name)
        if col == "mean_jct":
            b = df.groupby("rate")["bound_contention"].first()
            ax.plot(b.index, b.values, "k--", label="bound")
        ax.set_xlabel("arrival rate (x the test split's)")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Cluster kind (Alibaba GPU trace, test split): JCT against load")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
