"""The cluster kind's workload: import the trace, split it, build the node cluster, run policies.

The kind's stage functions (``stages.py``) turn the config into calls of these; every
function takes plain dicts and paths and knows nothing of Hydra or DVC.

Files (under ``paths.workload_dir``): ``train.parquet`` / ``test.parquet`` (pod tables, the
chronological split) and ``nodes.parquet`` (the sampled node list); the import report goes to
``metrics/import_report.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybridsched.kinds.cluster.trace import (
    POD_TIME_COLUMNS,
    NodeTable,
    PodTable,
    chronological_split,
    GPU_SPEC_SEP,
    read_node_list,
    read_pod_trace,
    sample_nodes,
)
from hybridsched.devices import Cluster
from hybridsched.errors import WorkloadError
from hybridsched.io import write_frame
from hybridsched.kinds.cluster.nodes import CPU_MODEL, NodeCluster, fits_some_node, run_inputs
from hybridsched.kinds.cluster.speeds import speed_table
from hybridsched.progress import progress

SPLITS = ("train", "test")


def known_gpu_models(pods: PodTable, known: set[str]) -> np.ndarray:
    """(n,) bool: every GPU model the pod's ``gpu_spec`` names is one of ``known`` (empty: any)."""
    return np.array([not s or set(str(s).split(GPU_SPEC_SEP)) <= known for s in pods.gpu_spec.tolist()], dtype=bool)


def load_workload(workload: dict) -> tuple[PodTable, PodTable, NodeTable, dict[str, Any]]:
    """Import the pod trace and node list, drop pods no sampled node can ever hold (counted as
    ``fits_no_sampled_node``), split chronologically: ``(train, test, nodes, report)``, nothing
    written.  An untimed pod list needs ``workload.untimed_duration_s``."""
    node_cfg = workload.get("nodes") or {}
    if "path" not in node_cfg:
        raise WorkloadError("workload.nodes.path: missing (the node list CSV of the trace)")
    every_node = read_node_list(node_cfg["path"])
    nodes = sample_nodes(every_node, **node_cfg["sample"]) if node_cfg.get("sample") else every_node
    untimed = workload.get("untimed_duration_s")
    # a gpu_spec naming a GPU model no node of the trace has (a typo, another trace's model) is
    # its own reason, not lost among the pods the sample cannot hold
    known = set(every_node.model.astype(str)) - {""}
    pods, report = read_pod_trace(workload["path"], float(workload.get("time_compression", 1.0)),
                                  workload.get("max_tasks"), untimed,
                                  keep_pods=[("unknown_gpu_model", lambda p: known_gpu_models(p, known)),
                                             ("fits_no_sampled_node", lambda p: fits_some_node(p, nodes))])
    if not report.timed and untimed is None:
        raise WorkloadError(f"{workload['path']}: no time columns ({', '.join(POD_TIME_COLUMNS)}), so no pod has "
                            f"a duration; set workload.untimed_duration_s (seconds every pod runs) to use it")
    if len(pods) < 2:
        dropped = ", ".join(f"{k} {v}" for k, v in report.dropped.items() if v) or "none"
        raise WorkloadError(f"{workload['path']}: only {len(pods)} of {report.rows_read} pod(s) left to "
                            f"schedule (dropped: {dropped})")
    test_fraction = float(workload.get("test_fraction", 0.5))
    train, test = chronological_split(pods, test_fraction)
    rep = {"kind": "cluster", "workload": workload.get("name"), **report.to_dict(),
           "split": {"train": len(train), "test": len(test), "test_fraction": test_fraction,
                     "train_span_s": float(train.arrival.max()), "test_span_s": float(test.arrival.max())},
           "nodes": {"path": str(node_cfg["path"]), "sample": node_cfg.get("sample"), **nodes.summary()}}
    return train, test, nodes, rep


def import_workload(workload: dict, out_dir: str | Path) -> dict[str, Any]:
    """:func:`load_workload`, then write ``train``/``test``/``nodes.parquet``; returns the report."""
    train, test, nodes, report = load_workload(workload)
    out = Path(out_dir)
    write_frame(out / "train.parquet", train.to_frame())
    write_frame(out / "test.parquet", test.to_frame())
    write_frame(out / "nodes.parquet", nodes.to_frame())
    return report


def read_split(workload_dir: str | Path, split: str) -> PodTable:
    """The pod table of one split written by generate; WorkloadError if missing or empty."""
    p = Path(workload_dir) / f"{split}.parquet"
    if not p.exists():
        raise WorkloadError(f"{p}: not found (run the generate stage)")
    pods = PodTable.from_frame(pd.read_parquet(p), source=str(p))
    if len(pods) == 0:  # every stage reads its split here: none runs on an empty one
        raise WorkloadError(f"{p}: 0 pods (an empty workload has nothing to schedule)")
    return pods


def read_nodes(workload_dir: str | Path) -> NodeTable:
    p = Path(workload_dir) / "nodes.parquet"
    if not p.exists():
        raise WorkloadError(f"{p}: not found (run the generate stage on a node workload)")
    return NodeTable.from_frame(pd.read_parquet(p), source=str(p))


def build_cluster(nodes: NodeTable, settings: dict, cluster: dict) -> NodeCluster:
    """The node cluster with Gavel speeds (``nodes.gavel_path``, ``nodes.reference_model``)
    and the power numbers of the ``cluster`` config."""
    models = sorted({str(m) for m in nodes.model if m != CPU_MODEL})
    speeds = speed_table(settings["gavel_path"], models, str(settings.get("reference_model", "G2")))
    return NodeCluster.build(nodes, speeds, Cluster.from_dict(cluster))


def run_policies(train: PodTable, test: PodTable, cluster: NodeCluster, policies: dict) -> dict[str, pd.DataFrame]:
    """Fit every policy on the training split, run it on the test split; name -> trace frame.
    A policy with a ``run_queue(inp, cluster)`` method (the queue mode's ``learned_queue``) runs
    its own engine; every other policy runs in the default engine."""
    from hybridsched.kinds.cluster.engine import simulate

    inp = run_inputs(test, cluster)
    out = {}
    for name, policy in progress(policies.items(), desc="simulate", unit="policy"):
        policy.name = name
        policy.fit(train)
        own = getattr(policy, "run_queue", None)
        out[name] = (own(inp, cluster) if own is not None else simulate(inp, cluster, policy)).to_frame(cluster)
    return out


def utilisation_long(traces: dict[str, pd.DataFrame], nodes: NodeTable) -> pd.DataFrame:
    """Long table: one row per (policy, GPU model) with that model's GPU utilisation."""
    from hybridsched.kinds.cluster.metrics import utilisation_by_model

    rows = [{"policy": p, "device": m, "utilisation": u}
            for p, tr in traces.items() for m, u in utilisation_by_model(tr, nodes).items()]
    df = pd.DataFrame(rows)
    df["policy_device"] = df["policy"] + "/" + df["device"]
    return df
