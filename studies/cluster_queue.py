"""Late dispatch on the cluster kind: the queue mode (kinds/cluster/queue_engine.py) against eft and cem on the
test split at several loads, with a learned policy (queue order and node choice,
kinds/cluster/queue_policy.py) trained on a stratified load mixture of training windows
(kinds/cluster/queue_train.py).  ``--node cem`` / ``eft`` learns the order alone with that node
policy fixed.

Run (after generate and train_cem of `workload=alibaba_gpu_2023`):

    python -m studies.cluster_queue --out /tmp/cluster_queue --rates 0.75 1 1.25 1.5 \
        -- workload=alibaba_gpu_2023 [paths.workload_dir=... cem.model_dir=...]

The arguments after ``--`` are Hydra overrides of conf/ (as for the stages).  Load ``x`` = the
test split with its arrivals divided by ``x`` (as studies/cluster_quality.py).  Writes under
``--out`` (never into metrics/): ``cluster_queue.csv`` / ``.md`` (one row per load and policy),
``cluster_queue.png`` (mean JCT against load), ``learned_order.json`` (the weights and the
training record).  ``--weights FILE`` evaluates a saved ``learned_order.json`` instead of
training.  ``--fade-scan 0,1,2,4,8,30`` trains nothing and reads no test pod: it scores ``cem``'s
node weights with the ``sjf`` order at each listed backlog fade, and ``eft`` itself, on the
training windows that pick and check a training run, writes ``fade_scan.csv`` / ``.md`` and the
pick's ``learned_order.json`` (for ``--weights``), and stops.  ``--node-seeds 0 1 ...`` evaluates
on the test split of each of those node samples (``workload.nodes.sample.seed``) and writes
``node_seeds.csv`` / ``.md`` (each ratio ÷ eft's on the same sample).  ``--train-node-seeds 10 11
...`` trains on windows of those node samples' training splits (each window on one, drawn at
random) instead of the workload's own sample.  Nothing is timed; every number is
seeded and identical on rerun.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from studies.cluster_quality import _run
from hybridsched.errors import HybridschedError
from hybridsched.io import atomic_path, write_frame, write_text

# name -> (node policy, queue order, backfilling); "default" = the default engine (static key, greedy)
ROWS = {
    "eft": ("eft", "default", "greedy"),
    "cem": ("cem", "default", "greedy"),
    "fifo+easy": ("eft", "fifo", "easy"),
    "sjf+easy": ("eft", "sjf", "easy"),
    "smallest+easy": ("eft", "smallest", "easy"),
    "smallest": ("eft", "smallest", "greedy"),
    "slowdown": ("eft", "slowdown", "greedy"),
    "cem_node+sjf": ("cem", "sjf", "greedy"),
    "learned": ("cem", "learned", "greedy"),
}


def _fade_floor(v: str) -> float | None:
    """``--min-fade``: a number, or ``none`` for no floor."""
    return None if v == "none" else float(v)


def _curve_point(v: str) -> tuple[float, float]:
    """``--wait-curve``: one ``LOAD:SHARE`` point."""
    try:
        load, share = v.split(":")
        return float(load), float(share)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{v!r} is not LOAD:SHARE") from e


def parse_fades(text: str) -> tuple[float, ...]:
    """``--fade-scan``: distinct finite numbers, comma-separated (e.g. ``0,1,2,4,8,30``)."""
    try:
        fades = tuple(float(v) for v in text.split(","))
    except ValueError:
        fades = ()
    if not fades or not all(np.isfinite(fades)) or len(set(fades)) < len(fades):
        raise HybridschedError(f"--fade-scan: {text!r} is not a list of distinct finite numbers, comma-separated "
                               "(e.g. 0,1,2,4,8,30)")
    return fades


def scan_table(rows: list[dict], s, pick: str) -> pd.DataFrame:
    """The fade scan's rows as a table: per candidate the selection and check windows' strata
    (columns named by their load bins), worst stratum and mean, and whether it is ``pick``."""
    edges = np.linspace(s.min_load, s.max_load, s.strata + 1)
    bins = [f"{lo:g}-{hi:g}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    out = []
    for r in rows:
        row = {"candidate": r["candidate"], "fade": r["fade"]}
        for part in ("selection", "check"):
            row.update({f"{part} {b}": c for b, c in zip(bins, r[f"{part}_strata"], strict=False)})
            row.update({f"{part} worst": round(r[f"{part}_cost"], 4), f"{part} mean": round(r[f"{part}_mean"], 4)})
        out.append({**row, "pick": r["candidate"] == pick})
    return pd.DataFrame(out)


def _policy(run, name: str, train):
    from hybridsched.kinds.base import instantiate

    pol = instantiate(run.policy_specs()[name])
    pol.name = name
    pol.fit(train)
    return pol


def main(argv: list[str] | None = None) -> None:
    from hybridsched.kinds.cluster import workload as W
    from hybridsched.kinds.cluster.queue_train import (WAIT_CURVE, Domain, QueueTrainSettings, cem_node_weights,
                                                       train_queue_model)
    from hybridsched.rl.cem import CEMSettings

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/tmp/cluster_queue"))
    ap.add_argument("--rates", type=float, nargs="+", default=[0.75, 1.0, 1.25, 1.5, 1.75])
    ap.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    ap.add_argument("--max-pods", type=int, default=None, help="only the first N test pods (tests)")
    ap.add_argument("--weights", type=Path, default=None,
                    help="a learned_order.json, or a policy YAML with weights (conf/policies/cluster/learned_queue.yaml), "
                         "to evaluate instead of training")
    ap.add_argument("--generations", type=int, default=10)
    ap.add_argument("--population", type=int, default=16)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--min-pods", type=int, default=800)
    ap.add_argument("--max-pods-window", type=int, default=1600)
    ap.add_argument("--eval-windows", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-load", type=float, default=1.0, help="the training load mixture's range")
    ap.add_argument("--max-load", type=float, default=2.0)
    ap.add_argument("--calibrate", choices=["rate", "wait_share", "wait_curve"], default="rate",
                    help="load 1 of a training window: matched per window on eft's waited share, or one rate factor; "
                         "wait_curve: every load matched per window on --wait-curve's share at that load")
    ap.add_argument("--wait-share", type=float, default=0.26, help="calibrate wait_share: eft's waited share at load 1")
    ap.add_argument("--wait-curve", type=_curve_point, nargs="+", default=list(WAIT_CURVE), metavar="LOAD:SHARE",
                    help="calibrate wait_curve: eft's waited share at these loads (linear in between; default: the "
                         "test split's at x0.75-x1.75, " + " ".join(f"{x:g}:{y:g}" for x, y in WAIT_CURVE) + ")")
    ap.add_argument("--min-fade", type=_fade_floor, default=None,
                    help="learned node choice: the fade's floor ('none': unbounded; 0: node preferences never grow "
                         "with the backlog)")
    ap.add_argument("--train-only", action="store_true",
                    help="write learned_order.json and stop (evaluate it later with --weights)")
    ap.add_argument("--strata", type=int, default=4, help="load bins of the mixture (0: plain uniform)")
    ap.add_argument("--select", choices=["mean", "worst"], default="worst", help="the generation pick's rule")
    ap.add_argument("--node", choices=["learned", "cem", "eft"], default="learned",
                    help="the learned row's node policy: learned jointly with the order, or a fixed one")
    ap.add_argument("--node-start", choices=["cem", "eft"], default="cem",
                    help="learned node choice: start from cem's trained node weights, or from eft's (zeros)")
    ap.add_argument("--node-search", choices=["fade", "all"], default="fade",
                    help="learned node choice: move only the backlog fade (node weights held), or all")
    ap.add_argument("--fade-scan", default=None, metavar="F1,F2,...",
                    help="no training: score cem's node weights + sjf at these fades, and eft, on the training "
                         "selection and check windows; write fade_scan.csv/.md and the pick's learned_order.json")
    ap.add_argument("--node-seeds", type=int, nargs="+", default=None, metavar="SEED",
                    help="evaluate on the test split of each of these node samples (workload.nodes.sample.seed, "
                         "the trace imported in memory); write node_seeds.csv/.md instead of cluster_queue.*")
    ap.add_argument("--train-node-seeds", type=int, nargs="+", default=None, metavar="SEED",
                    help="train on windows of these node samples' training splits (--node learned only)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (after --)")
    args = ap.parse_args(argv)
    train_seeds = args.train_node_seeds
    if train_seeds is not None and len(set(train_seeds)) < len(train_seeds):
        raise HybridschedError(f"--train-node-seeds {' '.join(map(str, train_seeds))}: needs distinct seeds")
    if train_seeds is not None and (args.weights is not None or args.node != "learned" or args.fade_scan is not None):
        raise HybridschedError("--train-node-seeds trains the learned joint policy: not with --weights, --node cem/eft "
                               "or --fade-scan")
    if args.node_seeds is not None and (len(set(args.node_seeds)) < len(args.node_seeds) or "eft" not in args.rows):
        raise HybridschedError(f"--node-seeds {' '.join(map(str, args.node_seeds))}: needs distinct seeds and the "
                               f"eft row (every figure is ÷ eft's on the same sample)")
    fades = parse_fades(args.fade_scan) if args.fade_scan is not None else None
    if fades is not None and (args.weights is not None or args.node != "learned" or args.node_seeds is not None):
        raise HybridschedError("--fade-scan scans the learned joint policy on training windows: not with --weights, "
                               "--node cem/eft or --node-seeds")
    run = _run(args.overrides or ["workload=alibaba_gpu_2023"])
    for flag, seeds in (("--node-seeds", args.node_seeds), ("--train-node-seeds", args.train_node_seeds)):
        if seeds is not None and not (run.cfg["workload"].get("nodes") or {}).get("sample"):
            raise HybridschedError(f"{flag}: workload.nodes.sample is null (every node of the list is used), "
                                   "so there is no node sample to draw again")
    wd = run.workload_dir
    train, test, nodes = W.read_split(wd, "train"), W.read_split(wd, "test"), W.read_nodes(wd)
    if args.max_pods:
        test = test.subset(np.arange(min(args.max_pods, len(test))))
    cluster = W.build_cluster(nodes, run.cfg["nodes"], run.cfg["cluster"])
    args.out.mkdir(parents=True, exist_ok=True)

    s = None
    if args.weights is None:
        s = QueueTrainSettings(windows=args.windows, min_pods=args.min_pods, max_pods=args.max_pods_window,
                               eval_windows=args.eval_windows, min_load=args.min_load, max_load=args.max_load,
                               strata=args.strata, select=args.select, joint=args.node == "learned",
                               node_search=args.node_search, calibrate=args.calibrate, wait_share=args.wait_share,
                               wait_curve=tuple(args.wait_curve), min_fade=args.min_fade)
    if fades is not None:
        run_scan(args, run, train, cluster, s, fades)
        return
    if args.weights is not None:
        doc = read_weights(args.weights, run)
        weights = doc["weights"]
        args.node = doc.get("node_policy", "cem")  # files written before the joint policy: cem's nodes
    else:
        cem = CEMSettings(generations=args.generations, population=args.population, antithetic=True, seed=args.seed)
        fixed = None if s.joint else _policy(run, args.node, train)
        start = None
        if s.joint and args.node_start == "cem":
            start = cem_node_weights(run.cfg["policies"]["cluster"]["cem"], train)  # train_cem's node weights
        domains = None
        if args.train_node_seeds:
            domains = [Domain.of(tr, cl) for tr, _, cl in (node_sample(run, sd) for sd in args.train_node_seeds)]
        doc = train_queue_model(train, cluster, fixed, cem, s, node_policy_name=args.node,
                                node_start_name=args.node_start, node_start=start, domains=domains,
                                log=lambda m: print(m, flush=True))
        if domains:
            doc["train"]["train_node_seeds"] = list(args.train_node_seeds)
        weights = doc["weights"]
        write_text(args.out / "learned_order.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print("learned order:", weights, flush=True)
    if args.train_only:
        return

    if args.node_seeds:
        node_seed_table(args, run, weights)
        return
    df = pd.DataFrame(evaluate(args, run, train, test, cluster, weights))
    eft = df[df.policy == "eft"].set_index("load")["mean_jct"] if "eft" in args.rows else None
    df["vs_eft"] = df["mean_jct"] / df["load"].map(eft) if eft is not None else np.nan
    write_frame(args.out / "cluster_queue.csv", df)
    show = df.copy()
    for c in ("mean_jct", "p95_jct", "mean_wait", "bound"):
        show[c] = show[c].round(0)
    for c in ("waited", "vs_eft"):
        show[c] = show[c].round(3)
    write_text(args.out / "cluster_queue.md", show.to_markdown(index=False) + "\n")
    wide = show.pivot_table(index="policy", columns="load", values="vs_eft", sort=False)
    write_text(args.out / "cluster_queue_vs_eft.md", wide.to_markdown() + "\n")
    plot(df, args.out / "cluster_queue.png")
    print(wide.to_string())
    print(f"saved {args.out / 'cluster_queue.md'} and cluster_queue.png")


def read_weights(path: Path, run=None) -> dict:
    """``--weights``: a ``learned_order.json`` as written here (or the train_late stage's
    ``learned_queue`` model.json, the same document), or a queue policy's YAML: its ``weights``,
    or the model its ``model_dir`` names (as ``run`` composes the policy of the YAML's name:
    ``learned_queue.yaml`` reads ``train_late.model_dir/learned_queue/model.json``)."""
    import yaml

    from hybridsched.kinds.cluster.late_model import read_model

    yaml_file = path.suffix in (".yaml", ".yml")
    try:
        doc = yaml.safe_load(path.read_text()) if yaml_file else json.loads(path.read_text())
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise HybridschedError(f"--weights {path}: cannot read it ({type(e).__name__}: {str(e).splitlines()[0]})") from e
    if yaml_file and isinstance(doc, dict) and "weights" not in doc and "model_dir" in doc and run is not None:
        spec = (run.cfg["policies"].get("cluster") or {}).get(path.stem) or {}
        doc = read_model(spec.get("model_dir", doc["model_dir"]), path.stem, "weights")[0]
    if not isinstance(doc, dict) or not isinstance(doc.get("weights"), dict):
        raise HybridschedError(f"--weights {path}: no 'weights' mapping (learned_order.json, a learned_queue "
                               f"model.json and a queue policy's YAML have one)")
    return {"node_policy": "learned", "weights": doc["weights"]} if yaml_file else doc


def evaluate(args: argparse.Namespace, run, train, test, cluster, weights: dict) -> list[dict]:
    """Every row of ``--rows`` on ``test`` at every load of ``--rates`` (the arrivals divided by
    the load): one dict per (load, policy) with mean and P95 JCT, mean wait, the share that
    waited and the lower bound."""
    from hybridsched.kinds.cluster.bounds import lower_bound
    from hybridsched.kinds.cluster.engine import simulate
    from hybridsched.kinds.cluster.nodes import run_inputs
    from hybridsched.kinds.cluster.queue_engine import simulate_queue
    from hybridsched.kinds.cluster.queue_order import FEATURES, ORDERS, LearnedOrder
    from hybridsched.kinds.cluster.queue_policy import joint_vector, split

    rows = []
    for rate in args.rates:
        pods = test.subset(np.arange(len(test)))
        pods.arrival = pods.arrival / rate
        inp = run_inputs(pods, cluster)
        bound = lower_bound(inp, cluster).mean_latency
        for name in args.rows:
            node, order, backfill = ROWS[name]
            node = args.node if name == "learned" else node
            if name == "learned" and node == "learned":
                q, pol = split(joint_vector(weights, "learned_order.json"))
                pol.fit(train)
            else:
                pol = _policy(run, node, train)
                q = (LearnedOrder({f: weights.get(f, 0.0) for f in FEATURES}) if order == "learned"
                     else None if order == "default" else ORDERS[order]())
            if order == "default":
                tr = simulate(inp, cluster, pol)
            else:
                tr = simulate_queue(inp, cluster, pol, q, backfill).trace
            jct, wait = tr.end - inp.arrival, tr.start - inp.arrival
            rows.append({"load": rate, "policy": name, "node": node, "order": order, "backfill": backfill,
                         "mean_jct": float(jct.mean()), "p95_jct": float(np.quantile(jct, 0.95)),
                         "mean_wait": float(wait.mean()), "waited": float((wait > 0).mean()), "bound": bound})
            print(f"load {rate}: {name} mean JCT {jct.mean():.0f} s", flush=True)
    return rows


def node_seed_table(args: argparse.Namespace, run, weights: dict) -> pd.DataFrame:
    """``--node-seeds``: the rows at every load on the test split of each node sample
    (``workload.nodes.sample.seed`` = each seed, the trace imported in memory as ``generate``
    would), each ÷ eft's on the same sample.  Writes ``node_seeds.csv`` (one row per seed, load
    and policy) and ``node_seeds.md`` (per load and policy other than eft: mean, min and max of the ratio over
    the seeds and how many seeds have it below 1); returns the long table."""
    rows = []
    for seed in args.node_seeds:
        train, test, cluster = node_sample(run, seed)
        if args.max_pods:
            test = test.subset(np.arange(min(args.max_pods, len(test))))
        print(f"node seed {seed}: {len(test)} test pods, {cluster.n_nodes} nodes", flush=True)
        rows += [{"node_seed": seed, **r} for r in evaluate(args, run, train, test, cluster, weights)]
    df = pd.DataFrame(rows)
    eft = df[df.policy == "eft"].set_index(["node_seed", "load"])["mean_jct"]
    df["vs_eft"] = [m / eft[(sd, ld)] for sd, ld, m in zip(df.node_seed, df.load, df.mean_jct, strict=True)]
    write_frame(args.out / "node_seeds.csv", df)
    g = df[df.policy != "eft"].groupby(["policy", "load"], sort=False)["vs_eft"]
    summary = pd.DataFrame({"mean": g.mean(), "min": g.min(), "max": g.max(),
                            "seeds ahead": g.apply(lambda v: f"{int((v < 1).sum())} of {len(v)}")}).reset_index()
    for c in ("mean", "min", "max"):
        summary[c] = summary[c].round(3)
    write_text(
        args.out / "node_seeds.md",
        f"Mean JCT ÷ eft's on the same node sample, over node seeds {' '.join(map(str, args.node_seeds))}\n\n"
        + summary.to_markdown(index=False) + "\n")
    print(summary.to_string(index=False))
    print(f"saved {args.out / 'node_seeds.md'} and node_seeds.csv", flush=True)
    return df


def node_sample(run, seed: int):
    """``(train, test, cluster)`` of node sample ``seed`` (``workload.nodes.sample.seed``): the
    trace imported in memory as ``generate`` would, nothing written."""
    import copy

    from hybridsched.kinds.cluster import workload as W

    wcfg = copy.deepcopy(run.cfg["workload"])
    wcfg["nodes"]["sample"]["seed"] = seed
    train, test, nodes, _ = W.load_workload(wcfg)
    return train, test, W.build_cluster(nodes, run.cfg["nodes"], run.cfg["cluster"])


def run_scan(args: argparse.Namespace, run, train, cluster, s, fades: tuple[float, ...]) -> None:
    """``--fade-scan``: ``queue_train.fade_scan`` from ``cem``'s node weights (``--node-start eft``:
    zeros) on the training split; the table and the pick's ``learned_order.json`` under ``--out``."""
    from hybridsched.kinds.cluster.queue_policy import NODE_KEYS
    from hybridsched.kinds.cluster.queue_train import fade_scan

    start = _policy(run, "cem", train).theta[:len(NODE_KEYS)] if args.node_start == "cem" else np.zeros(len(NODE_KEYS))
    _, rows, metrics = fade_scan(train, cluster, start, fades, s, seed=args.seed)
    doc = {"node_policy": "learned", "node_start": args.node_start, "backfill": s.backfill,
           "weights": metrics.pop("weights"), "train": metrics, "history": []}
    write_scan(args.out, scan_table(rows, s, metrics["selected_candidate"]), doc)


def write_scan(out: Path, table: pd.DataFrame, doc: dict) -> None:
    """The fade scan's outputs under ``out``: ``fade_scan.csv`` / ``.md`` and the pick's
    ``learned_order.json`` (what ``--weights`` reads)."""
    write_frame(out / "fade_scan.csv", table)
    write_text(out / "fade_scan.md", table.to_markdown(index=False) + "\n")
    write_text(out / "learned_order.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(table.to_string(index=False))
    print(f"pick: {doc['train']['selected_candidate']}; saved {out / 'fade_scan.md'} and learned_order.json",
          flush=True)


def plot(df: pd.DataFrame, path: Path) -> None:
    """Mean JCT and mean JCT / eft's against the load, one line per policy."""
    from hybridsched.plots import _pyplot

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for name, g in df.sort_values("load").groupby("policy", sort=False):
        style = {"lw": 2.5} if name in ("eft", "cem", "learned") else {"lw": 1, "alpha": 0.8}
        axes[0].plot(g["load"], g["mean_jct"], marker="o", label=name, **style)
        axes[1].plot(g["load"], g["vs_eft"], marker="o", label=name, **style)
    b = df.groupby("load")["bound"].first()
    axes[0].plot(b.index, b.values, "k--", label="lower bound")
    axes[0].set_ylabel("mean JCT (s)")
    axes[0].set_yscale("log")
    axes[1].axhline(1.0, color="k", lw=0.8)
    axes[1].set_ylabel("mean JCT / eft's")
    for ax in axes:
        ax.set_xlabel("load (x the test split's arrival rate)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Cluster kind (Alibaba GPU trace, test split): queue mode against load")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, metadata={"Software": None})
    plt.close(fig)


if __name__ == "__main__":
    try:
        main()
    except HybridschedError as e:  # bad settings: one line, exit 1 (as the stages)
        raise SystemExit(f"error: {e}") from None
