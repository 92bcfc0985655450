"""A clairvoyant upper bound on SLO attainment (the share of requests that finish by their deadline).

Notation: request r arrives at a_r with deadline d_r, has s_r samples of variant v_r; a batch
of b samples of v runs for ``lat[v, b] * noise`` with ``noise >= nu`` (the smallest factor of
the run's draw), ``lat`` non-decreasing in b (latency.py makes it so); L lanes.

**Claim.** For any schedule the engine can produce (any policy, any batching, even knowing
the future) and any partition of time into intervals I_1, I_2, ...,

    met <= F_out + sum_k K_k,

where F_out counts the *feasible* requests (``a_r + lat[v_r, s_r] * nu <= d_r``) whose
[a_r, d_r] lies in no single interval, and K_k is the largest number of feasible requests with
[a_r, d_r] inside I_k whose weights ``w_r = s_r * c_v * nu`` sum to at most L * |I_k|, with
``c_v = min_b lat[v, b] / b`` the least lane-seconds per sample of v.

**Proof.** (1) A request that meets its deadline runs in a batch of b >= s_r samples that starts
at or after a_r and ends by d_r, so ``d_r - a_r >= lat[v, b] * nu >= lat[v_r, s_r] * nu``:
it is feasible.  (2) Let M_k be the met requests with [a_r, d_r] inside I_k.  The batch of
each lies inside [a_r, d_r], hence inside I_k; those batches are distinct lane intervals or
shared, and a batch of b samples of v occupies a lane for ``lat[v, b] * noise >= b * c_v * nu``
>= the sum of w_r over its member requests.  Summing over the distinct batches, which fit in
L lanes over I_k, gives ``sum_{r in M_k} w_r <= L * |I_k|``, so |M_k| <= K_k (K_k takes the
lightest requests first, which maximises a count under a weight budget).  (3) Every met request
is in exactly one M_k or counted in F_out.  QED.

Each partition gives a valid bound; :func:`slo_bound` takes the minimum over aligned
partitions at several interval lengths (and the whole horizon).  Memory tokens, the batching
window and the policy's ignorance of the future only make real schedules worse, so the bound
ignores them (it is loose, never wrong).
"""

from __future__ import annotations

import numpy as np

from hybridsched.kinds.serving.settings import ServingSettings

DEFAULT_LENGTHS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


def _partition_bound(a: np.ndarray, d: np.ndarray, w: np.ndarray, feasible: np.ndarray, origin: float,
                     length: float, capacity: float) -> int:
    seg = np.floor((a - origin) / length)
    inside = feasible & (np.floor((d - origin) / length) == seg) & (d - origin < (seg + 1) * length)
    out = int((feasible & ~inside).sum())
    if not inside.any():
        return out
    s, ww = seg[inside], w[inside]
    order = np.lexsort((ww, s))
    s, ww = s[order], ww[order]
    starts = np.r_[0, np.flatnonzero(np.diff(s)) + 1]
    cum = np.cumsum(ww)
    base = np.repeat(np.r_[0.0, cum[starts[1:] - 1]], np.diff(np.r_[starts, len(s)]))
    return out + int((cum - base <= capacity + 1e-12).sum())


def slo_bound(reqs, settings: ServingSettings, lat: np.ndarray, noise_min: float = 1.0,
              lengths_s: tuple[float, ...] = DEFAULT_LENGTHS_S) -> dict[str, float]:
    """Upper bound on SLO attainment (overall and per class) for requests ``reqs`` on
    ``settings.lanes`` lanes with latency table ``lat`` (see the module docstring)."""
    a, d = reqs.arrival, reqs.deadline
    b = np.arange(1, lat.shape[1])
    c = np.min(lat[:, 1:] / b, axis=1)  # lane-seconds per sample at the best batch size
    feasible = a + lat[reqs.variant, reqs.size] * noise_min <= d + 1e-12
    w = reqs.size * c[reqs.variant] * noise_min
    span = float(d.max() - a.min()) + 1.0
    partitions = [(float(a.min()) - shift * L, L) for L in (*lengths_s, span) for shift in (0.0, 0.5)]

    def bound(m: np.ndarray) -> int:
        return min(_partition_bound(a[m], d[m], w[m], feasible[m], o, L, settings.lanes * L) for o, L in partitions)

    out = {"slo_attainment": bound(np.ones(len(a), bool)) / len(a), "feasible_share": float(feasible.mean()),
           "noise_min": float(noise_min)}
    for k, name in enumerate(settings.classes):  # per class: as if the class had the machine alone
        m = reqs.cls == k
        if m.any():
            out[f"{name}.slo_attainment"] = bound(m) / int(m.sum())
    return out
