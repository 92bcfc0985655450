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

Contention (``serving.contention``): the proofs use ``lat`` twice: as what a batch takes *at
least* (feasibility), and as what it costs the L lanes' budget of L seconds per second. With a
profile's single-lane rows and a model other than ``served`` the first is
``settings.fastest(lat)`` (the elementwise minimum of the single-lane and served rows), the
second :func:`cost_table` (``fastest``, or under ``overlap`` the processor-sharing cost M);
both are non-decreasing in b, and both proofs hold with them unchanged.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

from hybridsched.kinds.serving.settings import ServingSettings

DEFAULT_LENGTHS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
# the contention bound checks every deadline inside a segment, so short segments rarely help
CONTENTION_LENGTHS_S = (1.0, 5.0, 30.0, 120.0)


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


def cost_table(settings: ServingSettings, lat: np.ndarray) -> np.ndarray:
    """M[v, b]: what a batch of b samples of v costs the L lanes' budget of L seconds per second
    (before noise), and ``settings.fastest(lat)``, the least time it can take, in general.

    Under ``contention: overlap`` with single-lane rows the lanes share: a batch of single-lane
    work A = alone[v, b] x noise progresses at ``1 / slow(f, m - 1)`` while m lanes run
    (engine.share_lanes; f = served / alone). With ``g(f) = min_{m=1..L} slow(f, m - 1) / m``
    and ``M = L x alone x g(f)``, its cost accrues at ``L g(f) / slow(f, m - 1) <= L / m`` per
    second, so the m running batches accrue at most L per second together, and a batch's whole
    cost is ``M[v, b] x noise``: the lane budget holds with M in place of the table. (2 lanes,
    served rows timed with 2: ``M = min(2 alone, served)``.) M is made non-decreasing in b by a
    minimum over larger batches (a smaller cost keeps the budget valid)."""
    fastest = settings.fastest(lat)
    if settings.contention != "overlap" or settings.alone_lat is None:
        return fastest
    from hybridsched.kinds.serving.engine import contention_tables

    served, alone, _, denom = contention_tables(settings, lat)
    with np.errstate(invalid="ignore", divide="ignore"):
        f = served / alone
        g = np.ones_like(f)
        for m in range(2, settings.lanes + 1):
            x = np.full_like(f, (m - 1) / denom)
            x = np.where(f < 1.0, np.minimum(x, 1.0), x)  # as engine._slowdown
            g = np.minimum(g, (1.0 + (f - 1.0) * x) / m)
        cost = settings.lanes * alone * g
    cost = np.where(np.isfinite(cost), cost, fastest)
    cost[:, 1:] = np.minimum.accumulate(cost[:, :0:-1], axis=1)[:, ::-1]  # non-decreasing in b
    return cost


def slo_bound(reqs, settings: ServingSettings, lat: np.ndarray, noise_min: float = 1.0,
              lengths_s: tuple[float, ...] = DEFAULT_LENGTHS_S, noise: np.ndarray | None = None) -> dict[str, float]:
    """Upper bound on SLO attainment (overall and per class) for requests ``reqs`` on
    ``settings.lanes`` lanes with latency table ``lat``: the clairvoyant bound (module
    docstring) and, given the run's ``noise`` draws, the smaller of it and
    :func:`contention_bound` (each is valid, so their minimum is).  The separate figures are
    kept as ``clairvoyant.*`` and ``contention.*``."""
    if noise is not None:
        noise = np.asarray(noise, dtype=float)
        clair = slo_bound(reqs, settings, lat, float(noise.min()), lengths_s)
        cont = contention_bound(reqs, settings, lat, noise)
        out = {k: (min(v, cont[k]) if k in cont else v) for k, v in clair.items()}
        out.update({f"clairvoyant.{k}": v for k, v in clair.items() if k.endswith("slo_attainment")})
        out.update({f"contention.{k}": v for k, v in cont.items()})
        return out
    cost = cost_table(settings, lat)  # what a batch costs the lanes' budget (contention model)
    lat = settings.fastest(lat)  # the least time any batch can take under the contention model
    a, d = reqs.arrival, reqs.deadline
    b = np.arange(1, cost.shape[1])
    c = np.min(cost[:, 1:] / b, axis=1)  # lane-seconds per sample at the best batch size
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


# ---- the contention bound ---------------------------------------------------------------------
# The bound above is 1.0 wherever every request is feasible alone and the budget of an interval
# is not binding; its weights use the best batch size of the table (max_batch), which real
# streams never reach at the window.  The bound below sees contention: each request's work is
# what its samples cost in the largest batch the window lets its group form around it, the
# budget is checked at every deadline (a scheduling problem solved exactly by Moore-Hodgson),
# and the noise is the run's actual draws instead of their minimum.


def window_batch_cap(reqs, settings: ServingSettings) -> np.ndarray:
    """B_r: the most samples a batch holding request r can have. A batch's requests are one
    group's and arrive within ``window`` of its first request, so every member arrives in
    [a_r - window, a_r + window]; B_r is the samples of r's group arriving there, at most
    ``max_batch``."""
    a, g, s = reqs.arrival, reqs.group, reqs.size.astype(np.float64)
    order = np.lexsort((a, g))
    ga, aa, ss = g[order], a[order], s[order]
    key = ga * (float(np.ptp(a)) + 4 * settings.window_s + 1.0) + (aa - a.min())  # groups far apart
    cum = np.r_[0.0, np.cumsum(ss)]
    lo = np.searchsorted(key, key - settings.window_s - 1e-12, side="left")
    hi = np.searchsorted(key, key + settings.window_s + 1e-12, side="right")
    cap = np.empty(len(a))
    cap[order] = np.minimum(cum[hi] - cum[lo], settings.max_batch)
    return np.maximum(cap, s).astype(np.int64)


def request_work(reqs, settings: ServingSettings, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w_r, D_r): w_r = s_r x the least per-sample cost ``min_{b <= B_r} lat[v, b] / b``, and
    D_r = ``lat[v_r, B_r]``, the longest batch r can be in (table times, before noise)."""
    cap = window_batch_cap(reqs, settings)
    b = np.arange(lat.shape[1], dtype=np.float64)
    b[0] = 1.0
    per = np.nan_to_num(lat / b, nan=np.inf)
    per[:, 0] = np.inf
    best = np.minimum.accumulate(per, axis=1)  # best[v, B] = min_{b <= B} lat[v, b] / b
    return reqs.size * best[reqs.variant, cap], lat[reqs.variant, cap]


def _placement(noise_sorted: np.ndarray, w: np.ndarray, dcap: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """(cum_t, cum_w, unbounded) describing y -> the most work sum w_r of these requests whose
    batches can run in y lane-seconds (see :func:`_capacity`).

    A batch B runs ``D_B x noise[k_B]`` with its own draw; it holds work W_B <= D_B <= D_r of
    each member r.  The least lane time of work Y is reached by cutting each request's w_r into
    pieces of at most its D_r and putting the largest pieces on the smallest draws (every
    prefix of draws then holds the most work any batching could put there), so the most work
    that fits in y is this placement's inverse, linear between pieces."""
    order = np.argsort(-dcap, kind="stable")
    w, dcap = w[order], dcap[order]
    full = np.floor(w / dcap + 1e-12).astype(np.int64)
    rest = w - full * dcap
    pieces = np.r_[np.repeat(dcap, full), rest[rest > 1e-15]]
    pieces = -np.sort(-pieces, kind="stable")[: len(noise_sorted)]
    cum_w = np.r_[0.0, np.cumsum(pieces)]
    cum_t = np.r_[0.0, np.cumsum(pieces * noise_sorted[: len(pieces)])]
    return cum_t, cum_w, len(pieces) < len(noise_sorted)


@njit(cache=True)
def _capacity(y, cum_t, cum_w, noise_sorted, unbounded):
    """The most work that runs in y lane-seconds by the placement of :func:`_placement`."""
    n = cum_t.shape[0] - 1
    k = np.searchsorted(cum_t, y, side="right") - 1
    if k >= n:
        return np.inf if unbounded else cum_w[n]
    return cum_w[k] + (y - cum_t[k]) / noise_sorted[k]


@njit(cache=True)
def _moore_hodgson(d, w, start, lanes, cum_t, cum_w, noise_sorted, unbounded):
    """The most jobs (deadline d, work w) such that for every t the work of the chosen jobs
    with deadline <= t fits ``_capacity(lanes (t - start))`` (non-decreasing in t):
    Moore-Hodgson's rule (deadline order; when the prefix is over capacity, drop the largest
    chosen job), exact for prefix-sum constraints of this kind."""
    order = np.argsort(d, kind="mergesort")
    heap = [0.0]  # max-heap of chosen work, negated (numba needs a typed first element)
    heap.pop()
    total = 0.0
    for i in order:
        heapq.heappush(heap, -w[i])
        total += w[i]
        cap = _capacity(lanes * max(d[i] - start, 0.0), cum_t, cum_w, noise_sorted, unbounded)
        if total > cap * (1 + 1e-9) + 1e-12:
            total += heapq.heappop(heap)
    return len(heap)


def contention_bound_count(reqs, settings: ServingSettings, lat: np.ndarray, noise: np.ndarray,
                           mask: np.ndarray | None = None,
                           lengths_s: tuple[float, ...] = CONTENTION_LENGTHS_S) -> int:
    """Upper bound on the number of requests (of ``mask``) that meet their deadline; see
    :func:`contention_bound`."""
    m = np.ones(len(reqs), bool) if mask is None else mask
    nu = float(noise.min())
    noise_sorted = np.sort(noise)
    w_all, d_all = request_work(reqs, settings, cost_table(settings, lat))
    lat = settings.fastest(lat)
    a, d = reqs.arrival[m], reqs.deadline[m]
    w, dcap = w_all[m], d_all[m]
    feasible = a + lat[reqs.variant[m], reqs.size[m]] * nu <= d + 1e-12
    a, d, w, dcap = a[feasible], d[feasible], w[feasible], dcap[feasible]
    if len(a) == 0:
        return 0
    L = settings.lanes
    best = len(a)
    t0 = float(a.min())
    span = float(d.max() - t0) + 1.0
    for length in (*lengths_s, span):
        for shift in (0.0, 0.5):
            origin = t0 - shift * length
            seg = np.floor((a - origin) / length)
            count = 0
            for k in np.unique(seg):
                j = seg == k
                start = origin + k * length  # every batch of these requests starts after it
                cum_t, cum_w, unbounded = _placement(noise_sorted, w[j], dcap[j])
                count += _moore_hodgson(d[j], w[j], start, float(L), cum_t, cum_w, noise_sorted, unbounded)
                if count >= best:
                    break
            best = min(best, count)
    return best


def contention_bound(reqs, settings: ServingSettings, lat: np.ndarray, noise: np.ndarray,
                     lengths_s: tuple[float, ...] = CONTENTION_LENGTHS_S) -> dict[str, float]:
    """Upper bound on SLO attainment that sees contention (docs/serving.md, "Contention bound").

    Notation as in the module docstring; ``noise[k]`` is the factor of the k-th batch started
    (engine.service_noise: the same draws for every policy), W the window, B_r
    (:func:`window_batch_cap`) the samples of r's group arriving within W of a_r (<= max_batch),
    ``w_r = s_r min_{b <= B_r} lat[v, b] / b`` and ``D = max_r lat[v_r, B_r]``.

    **Claim.** For any schedule the engine can produce and any partition of time into
    segments S_j = [t_j, t_{j+1}), the number of met requests is at most
    ``sum_j MH_j``, where MH_j is the largest set of feasible requests arriving in S_j such
    that for every t, the w_r of its members with d_r <= t sum to at most
    ``G(L (t - t_j))``, with ``G = g^-1`` and ``g(X) = D x (sum of the X / D smallest draws)``.

    **Proof.** Fix j and t; let M be the met requests arriving in S_j with d_r <= t, and 𝓑 the
    batches holding them.  (1) A batch of b samples holds requests of one group arriving
    within W of its first, so for each member r, b <= B_r; its table time
    ``D_B = lat[v, b] = b (lat[v, b] / b) >= sum_{r in B} s_r min_{b' <= B_r} lat[v, b'] / b'
    >= sum_{r in B ∩ M} w_r``, and ``D_B <= lat[v, B_r] <= D``.  (2) Each B in 𝓑 starts after
    its members arrived (>= t_j) and ends by a member's deadline (<= t), on one of L lanes
    without overlap, so ``sum_{B} D_B noise[k_B] <= L (t - t_j)``, the k_B distinct.
    (3) For X = sum_B D_B, the left side is at least g(X) (the least sum of D_B noise[k] with
    D_B <= D over distinct draws puts D on the smallest draws), and g increases, so
    ``sum_{r in M} w_r <= X <= G(L (t - t_j))``.  So the met requests of S_j satisfy MH_j's
    constraints (infeasible ones never meet their deadline), and Moore-Hodgson's rule finds the
    largest such set exactly (its exchange argument only uses these prefix-sum constraints at
    the deadlines, for any non-decreasing capacity).  Every met request arrives in exactly one
    S_j.  QED.

    Under a contention model (``serving.contention`` other than ``served``) a batch takes at
    least ``settings.fastest(lat)[v, b] x noise`` (feasibility) and costs the lane budget
    ``cost_table(settings, lat)[v, b] x noise`` (w_r, D_r and step (2)); the proof holds with
    those tables.

    :func:`contention_bound_count` takes the minimum over aligned partitions of several
    segment lengths (and one segment for the whole stream)."""
    out = {"slo_attainment": contention_bound_count(reqs, settings, lat, noise, None, lengths_s) / len(reqs)}
    for k, name in enumerate(settings.classes):  # per class: as if the class had the machine alone
        m = reqs.cls == k
        if m.any():
            out[f"{name}.slo_attainment"] = contention_bound_count(reqs, settings, lat, noise, m, lengths_s) / int(m.sum())
    return out
