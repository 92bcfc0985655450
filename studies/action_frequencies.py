"""What the machine kind's policies do with the default workload's test tasks: the mean share
of each task put on the CPU by task-intensity bin, the share of CPU-only and GPU-only
decisions, and how GPU parts spread over the GPUs.  Reads the traces of the last `dvc repro`
(data/traces/, data/workload/test.parquet); writes nothing.

Run: `python -m studies.action_frequencies [--policies eft eft_rank hybrid_ml dqn cem]`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

BINS = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0 + 1e-9]
LABELS = ["0 – 0.2", "0.2 – 0.4", "0.4 – 0.6", "0.6 – 0.8", "0.8 – 1.0"]


def frequencies(tasks: pd.DataFrame, trace: pd.DataFrame, n_gpus: int = 4) -> tuple[pd.Series, dict[str, float]]:
    """(CPU share by intensity bin, overall shares) of one policy's trace."""
    df = tasks.join(trace[["fraction", "gpu"]])
    cpu_share = (1.0 - df["fraction"]).groupby(pd.cut(df["intensity"], BINS, labels=LABELS, right=False),
                                               observed=True).mean()
    on_gpu = df["fraction"] > 0
    spread = np.bincount(df.loc[on_gpu, "gpu"].astype(int), minlength=n_gpus) / max(int(on_gpu.sum()), 1)
    overall = {"cpu_only": float((df["fraction"] == 0).mean()), "gpu_only": float((df["fraction"] == 1).mean()),
               **{f"gpu{g}": float(s) for g, s in enumerate(spread)}}
    return cpu_share, overall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--policies", nargs="+", default=["eft", "eft_rank", "hybrid_ml", "dqn", "dqn_online", "cem"])
    ap.add_argument("--traces", type=Path, default=Path("data/traces"))
    ap.add_argument("--tasks", type=Path, default=Path("data/workload/test.parquet"))
    args = ap.parse_args()
    tasks = pd.read_parquet(args.tasks).set_index("task_id")
    shares, overall = {}, {}
    for p in args.policies:
        shares[p], overall[p] = frequencies(tasks, pd.read_parquet(args.traces / f"{p}.parquet").set_index("task_id"))
    print("mean share of each task on the CPU, by task intensity:")
    print(pd.DataFrame(shares).round(3).to_markdown())
    print("\nshare of decisions CPU-only / GPU-only, and of GPU parts per GPU:")
    print(pd.DataFrame(overall).T.round(3).to_markdown())


if __name__ == "__main__":
    main()
