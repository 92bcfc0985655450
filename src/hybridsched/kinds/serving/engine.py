"""The event-driven serving simulator (numba).

Requests of one *group* (same model, backend, precision and SLO class) queue in arrival
order; only they may share a micro-batch.  A group's *candidate batch* starts at its head
request and gathers the following requests of the group that arrive within ``window`` of
the head, up to ``max_batch`` samples; it *closes* (becomes eligible) when the window ends
or when it is full, whichever comes first.

Decisions happen at ``t = max(previous decision, earliest free lane, earliest closed batch)``.
At ``t`` the engine frees the lanes whose batch ended (releasing its memory tokens and, with
online correction, updating the predictor's per-variant factor), trims every eligible
candidate to the tokens still free (a batch runs only if its tokens fit), and asks the
policy's kernel to choose one eligible group; that batch starts at ``t`` on the free lane and
holds ``tokens[v, samples]`` until it ends after ``lat[v, samples] * noise`` (with the
profile's single-lane rows, ``serving.contention`` decides how the other lanes slow it: by
default processor sharing between the single-lane and served rows, :func:`share_lanes`).  When nothing
eligible fits, time moves to the next completion or the next closing batch.

With ``drop`` (the Clockwork-style predictive scheduler) a head request whose predicted
completion ``t + pred[v, size]`` is past its deadline is dropped (a violation), and a batch
is trimmed to the largest prefix whose predicted latency still meets the head's deadline
(the rest is deferred to the next batch).

Policy kernels: ``choose(t, gs, elig, n_elig, pdata, params) -> group`` where ``gs[g]`` holds
the per-group features below (row ``G`` the global ones) and ``elig[:n_elig]`` the eligible
groups.  Policies see only requests that have arrived and the *predicted* latency table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from hybridsched.kinds.serving.settings import CONTENTION  # serving.contention's names, in the C_* order

# per-group features gs[g, :] (valid where ELIGIBLE = 1)
(ELIGIBLE, HEAD_ARRIVAL, HEAD_DEADLINE, CLASS, SAMPLES, NREQ, PRED_S, TOKENS, SLO, NORM_SLACK, DOOMED, GAIN,
 WAIT_NORM, INTERACTIVE) = range(14)
NF = 14
# global features gs[G, :]
G_FREE_LANES, G_FREE_TOKENS, G_NOW, G_MAX_BATCH = range(4)
# engine parameters
P_WINDOW, P_MAX_BATCH, P_CAPACITY, P_DROP, P_ALPHA, P_RECORD = range(6)
# contention models (``serving.contention``, CONTENTION; docs/serving.md "Contention model")
C_SERVED, C_ALONE, C_START, C_OVERLAP = range(4)
N_OBS_PER_GROUP = 4


@njit(cache=True)
def observation(gs: np.ndarray, out: np.ndarray) -> None:
    """The learned dispatcher's state from the features: per group (eligible, wait / SLO,
    slack / SLO, samples / max batch), then the free-lane and free-token fractions."""
    G = gs.shape[0] - 1
    mb = gs[G, G_MAX_BATCH]
    for g in range(G):
        k = N_OBS_PER_GROUP * g
        if gs[g, ELIGIBLE] > 0:
            out[k] = 1.0
            out[k + 1] = min(gs[g, WAIT_NORM], 4.0)
            out[k + 2] = min(max(gs[g, NORM_SLACK], -4.0), 4.0)
            out[k + 3] = gs[g, SAMPLES] / mb
        else:
            out[k] = 0.0
            out[k + 1] = 0.0
            out[k + 2] = 0.0
            out[k + 3] = 0.0
    out[N_OBS_PER_GROUP * G] = gs[G, G_FREE_LANES]
    out[N_OBS_PER_GROUP * G + 1] = gs[G, G_FREE_TOKENS]


@njit(cache=True)
def _candidate(g, h, gptr, gidx, arrival, size, window, max_batch):
    """(end position, samples, close time) of the candidate batch that starts at position h."""
    end_g = gptr[g + 1]
    if h >= end_g:
        return h, 0, np.inf
    a0 = arrival[gidx[h]]
    limit = a0 + window
    s = 0
    q = h
    ready = limit
    while q < end_g:
        i = gidx[q]
        if arrival[i] > limit:
            break
        if s + size[i] > max_batch:  # full: known once this request arrives
            ready = arrival[i]
            break
        s += size[i]
        q += 1
        if s == max_batch:
            ready = arrival[i]
            break
    return q, s, max(ready, a0)


@njit(cache=True)
def decide(t, gptr, gidx, arrival, deadline, size, gvar, gcls, pred_lat, tokens_tab, eparams, lane_free, run_tok,
           run_var, run_ratio, corr, head, cand_end, cand_s, ready, trim_end, trim_s, gs, elig, r_batch, r_drop):
    """The state a policy sees at time ``t``; returns the number of eligible groups.

    Frees the lanes whose batch ended by ``t`` (``lane_free <= t``: releases the tokens and,
    with online correction, folds ``run_ratio`` into ``corr``), drops hopeless heads (``drop``),
    trims every closed candidate to the free tokens (``trim_end``, ``trim_s``) and fills ``gs``
    and ``elig``.  Shared by the simulator and the real mode (real.py), so both decide alike."""
    G = gptr.shape[0] - 1
    n_lanes = lane_free.shape[0]
    window = eparams[P_WINDOW]
    max_batch = int(eparams[P_MAX_BATCH])
    capacity = eparams[P_CAPACITY]
    dropf = eparams[P_DROP]  # > 0: predictive admission, the predicted service time times this factor
    drop = dropf > 0
    alpha = eparams[P_ALPHA]
    used = 0.0
    nfree = 0
    for k in range(n_lanes):
        if lane_free[k] <= t:
            if run_var[k] >= 0:  # completion seen: release tokens, learn from it
                if alpha > 0:
                    v = run_var[k]
                    corr[v] = (1.0 - alpha) * corr[v] + alpha * run_ratio[k]
                run_var[k] = -1
                run_tok[k] = 0.0
            nfree += 1
        else:
            used += run_tok[k]
    free_tok = capacity - used
    ne = 0
    for g in range(G):
        gs[g, ELIGIBLE] = 0.0
        if ready[g] > t:
            continue
        v = gvar[g]
        c = corr[v]
        if drop:  # drop heads that cannot meet their deadline even alone
            changed = False
            while head[g] < gptr[g + 1]:
                i = gidx[head[g]]
                if t + pred_lat[v, size[i]] * c * dropf > deadline[i]:
                    r_batch[i] = -1
                    r_drop[i] = t
                    head[g] += 1
                    changed = True
                else:
                    break
            if changed:
                cand_end[g], cand_s[g], ready[g] = _candidate(g, head[g], gptr, gidx, arrival, size, window, max_batch)
                if ready[g] > t:
                    continue
        first = gidx[head[g]]
        if tokens_tab[v, size[first]] > free_tok:
            continue
        q = cand_end[g]
        s = cand_s[g]
        while tokens_tab[v, s] > free_tok or (drop and t + pred_lat[v, s] * c * dropf > deadline[first]):
            q -= 1
            s -= size[gidx[q]]
        p = pred_lat[v, s] * c
        slo = deadline[first] - arrival[first]
        slack = deadline[first] - t - p
        gs[g, ELIGIBLE] = 1.0
        gs[g, HEAD_ARRIVAL] = arrival[first]
        gs[g, HEAD_DEADLINE] = deadline[first]
        gs[g, CLASS] = gcls[g]
        gs[g, SAMPLES] = s
        gs[g, NREQ] = q - head[g]
        gs[g, PRED_S] = p
        gs[g, TOKENS] = tokens_tab[v, s]
        gs[g, SLO] = slo
        gs[g, NORM_SLACK] = slack / slo
        gs[g, DOOMED] = 1.0 if slack < 0 else 0.0
        gs[g, GAIN] = s * pred_lat[v, 1] / pred_lat[v, s]
        gs[g, WAIT_NORM] = (t - arrival[first]) / slo
        gs[g, INTERACTIVE] = 1.0 if gcls[g] == 0 else 0.0
        trim_end[g] = q
        trim_s[g] = s
        elig[ne] = g
        ne += 1
    gs[G, G_FREE_LANES] = nfree / n_lanes
    gs[G, G_FREE_TOKENS] = free_tok / capacity
    gs[G, G_NOW] = t
    return ne


@njit(cache=True)
def start_batch(g, nb, gptr, gidx, arrival, size, eparams, head, cand_end, cand_s, ready, trim_end, r_batch):
    """Assign the trimmed candidate of group ``g`` to batch ``nb`` and form the group's next candidate."""
    for q in range(head[g], trim_end[g]):
        r_batch[gidx[q]] = nb
    head[g] = trim_end[g]
    cand_end[g], cand_s[g], ready[g] = _candidate(g, head[g], gptr, gidx, arrival, size, eparams[P_WINDOW],
                                                  int(eparams[P_MAX_BATCH]))


@njit(cache=True)
def init_candidates(gptr, gidx, arrival, size, eparams, head, cand_end, cand_s, ready):
    """Every group's first candidate batch."""
    for g in range(gptr.shape[0] - 1):
        cand_end[g], cand_s[g], ready[g] = _candidate(g, head[g], gptr, gidx, arrival, size, eparams[P_WINDOW],
                                                      int(eparams[P_MAX_BATCH]))


@njit(cache=True)
def _slowdown(f, others, denom):
    """How much slower than alone a batch with served/alone ratio ``f`` runs while ``others``
    other lanes are busy: linear in the busy lanes, ``f`` at the ``denom`` others the served
    rows were timed with (beyond them extrapolated when f >= 1; a profile whose served rows
    are faster than its single-lane ones, f < 1, never goes below f)."""
    if others <= 0:
        return 1.0
    x = others / denom
    if f < 1.0 and x > 1.0:
        x = 1.0
    return 1.0 + (f - 1.0) * x


@njit(cache=True)
def share_lanes(rem, fac, u, t_to, ends, denom):
    """Processor sharing of the running batches from time ``u`` to ``t_to`` (``inf``: until all
    end). ``rem[k]`` is lane k's remaining work in single-lane seconds (0: idle), ``fac[k]``
    its batch's served / single-lane ratio; while m lanes run, lane k progresses at
    ``1 / _slowdown(fac[k], m - 1, denom)``. Updates ``rem`` in place and writes the end time
    of every batch that ends by ``t_to`` into ``ends``. Each step runs to the next end, so
    the same state gives the same float operations: advancing to ``t`` and computing the ends
    agree on which batches ended by ``t``."""
    n = rem.shape[0]
    t = u
    while True:
        m = 0
        for k in range(n):
            if rem[k] > 0.0:
                m += 1
        if m == 0:
            return
        dmin = np.inf
        first = -1
        for k in range(n):
            if rem[k] > 0.0:
                dt = rem[k] * _slowdown(fac[k], m - 1, denom)
                if dt < dmin:
                    dmin = dt
                    first = k
        if t + dmin > t_to:  # nothing more ends before t_to: advance to it and stop
            step = t_to - t
            for k in range(n):
                if rem[k] > 0.0:
                    rem[k] = max(rem[k] - step / _slowdown(fac[k], m - 1, denom), 1e-300)
            return
        for k in range(n):
            if rem[k] > 0.0:
                sl = _slowdown(fac[k], m - 1, denom)
                if k == first or rem[k] * sl <= dmin * (1.0 + 1e-12):
                    rem[k] = 0.0
                    ends[k] = t + dmin
                else:
                    rem[k] -= dmin / sl
        t += dmin


@njit(cache=True)
def next_decision(now, gptr, gidx, arrival, deadline, size, gvar, gcls, pred_lat, tokens_tab, eparams, lane_free,
                  run_tok, run_var, run_ratio, corr, head, cand_end, cand_s, ready, trim_end, trim_s, gs, elig, r_batch,
                  r_drop):
    """:func:`_run`'s loop up to its policy call, for :class:`DispatchRun`.  Move the clock from
    ``now`` to the next decision: ``t = max(now, earliest free lane,
    earliest closed batch)``, past the instants where nothing eligible fits (to the next
    completion or closing batch).  Returns ``(t, lane, ne)``: the decision's time, the lane its
    batch runs on and the eligible groups (``gs``, ``elig`` filled by :func:`decide`); ``ne = 0``
    when every request is batched or dropped."""
    G = gptr.shape[0] - 1
    n_lanes = lane_free.shape[0]
    while True:
        rmin = np.inf
        for g in range(G):
            if ready[g] < rmin:
                rmin = ready[g]
        if rmin == np.inf:
            return now, -1, 0
        lane = 0
        for k in range(1, n_lanes):
            if lane_free[k] < lane_free[lane]:
                lane = k
        t = max(now, lane_free[lane], rmin)
        ne = decide(t, gptr, gidx, arrival, deadline, size, gvar, gcls, pred_lat, tokens_tab, eparams, lane_free,
                    run_tok, run_var, run_ratio, corr, head, cand_end, cand_s, ready, trim_end, trim_s, gs, elig,
                    r_batch, r_drop)
        if ne > 0:
            return t, lane, ne
        nxt = np.inf  # nothing can start now: move to the next completion or closing batch
        for k in range(n_lanes):
            if lane_free[k] > t and lane_free[k] < nxt:
                nxt = lane_free[k]
        for g in range(G):
            if ready[g] > t and ready[g] < nxt:
                nxt = ready[g]
        now = t if nxt == np.inf else nxt


@njit(cache=True)
def start_chosen(g, t, lane, nb, u, gptr, gidx, arrival, size, gvar, tables, noise, noise_col, eparams, lane_free,
                 run_tok, run_var, run_ratio, head, cand_end, cand_s, ready, trim_end, trim_s, overlap, r_batch, bout,
                 mode, denom):
    """:func:`_run`'s loop after its policy call, for :class:`DispatchRun`.  Start group ``g``'s
    trimmed candidate as batch ``nb`` on ``lane`` at ``t`` (the decision
    :func:`next_decision` returned) under the contention model ``mode`` (:func:`_run`); returns
    the time ``u`` the overlap model's remaining work refers to.  ``tables``: (served,
    single-lane, predicted latency, tokens); ``overlap``: (remaining work, served / single-lane
    ratio, end times, scratch, batch) per lane; ``bout``: the per-batch outputs in
    :data:`BATCH_FIELDS` order."""
    true_lat, alone_lat, pred_lat, tokens_tab = tables
    rem, fac, ends, tmp, run_b = overlap
    b_start, b_end, b_lane, b_group, b_samples, b_tokens, b_first, b_count = bout
    n_lanes = lane_free.shape[0]
    v = gvar[g]
    s = trim_s[g]
    nz = noise[nb, noise_col[v]]
    if mode == C_OVERLAP:
        share_lanes(rem, fac, u, t, ends, denom)  # the running batches' progress up to t
        for k in range(n_lanes):
            if lane_free[k] <= t:
                rem[k] = 0.0
            elif rem[k] <= 0.0:  # ended by t in float terms but not by lane_free: a hair left
                rem[k] = 1e-300
        u = t
        rem[lane] = alone_lat[v, s] * nz
        fac[lane] = true_lat[v, s] / alone_lat[v, s]
        run_b[lane] = nb
        tmp[:] = rem
        share_lanes(tmp, fac, t, np.inf, ends, denom)
        for k in range(n_lanes):
            if k != lane and rem[k] > 0.0 and ends[k] != lane_free[k]:  # slowed by this start
                lane_free[k] = ends[k]
                kb = run_b[k]
                b_end[kb] = ends[k]
                run_ratio[k] = (ends[k] - b_start[kb]) / pred_lat[gvar[b_group[kb]], b_samples[kb]]
        end = ends[lane]
    else:
        base = true_lat[v, s]
        if mode == C_ALONE:
            base = alone_lat[v, s]
        elif mode == C_START:
            base = alone_lat[v, s]
            for k in range(n_lanes):
                if k != lane and lane_free[k] > t:  # another lane busy: the contended (served) time
                    base = true_lat[v, s]
                    break
        end = t + base * nz
    lane_free[lane] = end
    run_tok[lane] = tokens_tab[v, s]
    run_var[lane] = v
    run_ratio[lane] = (end - t) / pred_lat[v, s]  # actual / predicted, before correction
    b_start[nb] = t
    b_end[nb] = end
    b_lane[nb] = lane
    b_group[nb] = g
    b_samples[nb] = s
    b_tokens[nb] = tokens_tab[v, s]
    b_first[nb] = head[g]
    b_count[nb] = trim_end[g] - head[g]
    start_batch(g, nb, gptr, gidx, arrival, size, eparams, head, cand_end, cand_s, ready, trim_end, r_batch)
    return u


@njit
def _run(choose, arrival, deadline, size, variant, cls, gptr, gidx, gvar, gcls, true_lat, alone_lat, pred_lat, tokens_tab,
         noise, noise_col, eparams, pdata, pparams, n_lanes, r_batch, r_drop, b_start, b_end, b_lane, b_group, b_samples,
         b_tokens, b_first, b_count, obs, dec_batch, mode, denom):
    """Run to completion; returns (batches, decisions recorded). ``true_lat`` is the table as
    served (every lane busy), ``alone_lat`` the single-lane one (the same array when the table
    has no single-lane rows). ``mode`` (C_*): every batch the served time; every batch the
    single-lane time; ``start``: single-lane if every other lane is idle when it starts, else
    served; ``overlap``: processor sharing (:func:`share_lanes`), a batch's single-lane work
    runs slower while other lanes are busy, and a later start slows the batches already
    running (their ends move: ``b_end`` and the online correction's ratio follow).
    ``denom``: the other lanes the served rows were timed with."""
    G = gptr.shape[0] - 1
    record = eparams[P_RECORD] > 0
    head = gptr[:G].copy()
    cand_end = np.empty(G, np.int64)
    cand_s = np.zeros(G, np.int64)
    ready = np.full(G, np.inf)
    trim_end = np.empty(G, np.int64)
    trim_s = np.zeros(G, np.int64)
    init_candidates(gptr, gidx, arrival, size, eparams, head, cand_end, cand_s, ready)
    lane_free = np.zeros(n_lanes)
    run_tok = np.zeros(n_lanes)
    run_var = np.full(n_lanes, -1, np.int64)
    run_ratio = np.ones(n_lanes)
    corr = np.ones(true_lat.shape[0])
    rem = np.zeros(n_lanes)  # overlap: remaining single-lane work per lane at time u
    fac = np.ones(n_lanes)
    ends = np.zeros(n_lanes)
    tmp = np.zeros(n_lanes)
    run_b = np.full(n_lanes, -1, np.int64)
    u = 0.0
    gs = np.zeros((G + 1, NF))
    gs[G, G_MAX_BATCH] = eparams[P_MAX_BATCH]
    elig = np.empty(G, np.int64)
    now = -np.inf
    nb = 0
    nd = 0
    while True:
        rmin = np.inf
        for g in range(G):
            if ready[g] < rmin:
                rmin = ready[g]
        if rmin == np.inf:
            break
        lane = 0
        for k in range(1, n_lanes):
            if lane_free[k] < lane_free[lane]:
                lane = k
        t = max(now, lane_free[lane], rmin)
        ne = decide(t, gptr, gidx, arrival, deadline, size, gvar, gcls, pred_lat, tokens_tab, eparams, lane_free,
                    run_tok, run_var, run_ratio, corr, head, cand_end, cand_s, ready, trim_end, trim_s, gs, elig,
                    r_batch, r_drop)
        if ne == 0:  # nothing can start now: move to the next completion or closing batch
            nxt = np.inf
            for k in range(n_lanes):
                if lane_free[k] > t and lane_free[k] < nxt:
                    nxt = lane_free[k]
            for g in range(G):
                if ready[g] > t and ready[g] < nxt:
                    nxt = ready[g]
            now = t if nxt == np.inf else nxt
            continue
        if record:
            observation(gs, obs[nd])
            dec_batch[nd] = nb
            nd += 1
        g = choose(t, gs, elig, ne, pdata, pparams)
        if g < 0 or g >= G or gs[g, ELIGIBLE] == 0.0:
            g = elig[0]  # a kernel's bad choice must not break the run
        v = gvar[g]
        s = trim_s[g]
        nz = noise[nb, noise_col[v]]
        if mode == C_OVERLAP:
            share_lanes(rem, fac, u, t, ends, denom)  # the running batches' progress up to t
            for k in range(n_lanes):
                if lane_free[k] <= t:
                    rem[k] = 0.0
                elif rem[k] <= 0.0:  # ended by t in float terms but not by lane_free: a hair left
                    rem[k] = 1e-300
            u = t
            rem[lane] = alone_lat[v, s] * nz
            fac[lane] = true_lat[v, s] / alone_lat[v, s]
            run_b[lane] = nb
            tmp[:] = rem
            share_lanes(tmp, fac, t, np.inf, ends, denom)
            for k in range(n_lanes):
                if k != lane and rem[k] > 0.0 and ends[k] != lane_free[k]:  # slowed by this start
                    lane_free[k] = ends[k]
                    kb = run_b[k]
                    b_end[kb] = ends[k]
                    run_ratio[k] = (ends[k] - b_start[kb]) / pred_lat[gvar[b_group[kb]], b_samples[kb]]
            end = ends[lane]
        else:
            base = true_lat[v, s]
            if mode == C_ALONE:
                base = alone_lat[v, s]
            elif mode == C_START:
                base = alone_lat[v, s]
                for k in range(n_lanes):
                    if k != lane and lane_free[k] > t:  # another lane busy: the contended (served) time
                        base = true_lat[v, s]
                        break
            end = t + base * nz
        lane_free[lane] = end
        run_tok[lane] = tokens_tab[v, s]
        run_var[lane] = v
        run_ratio[lane] = (end - t) / pred_lat[v, s]  # actual / predicted, before correction
        b_start[nb] = t
        b_end[nb] = end
        b_lane[nb] = lane
        b_group[nb] = g
        b_samples[nb] = s
        b_tokens[nb] = tokens_tab[v, s]
        b_first[nb] = head[g]
        b_count[nb] = trim_end[g] - head[g]
        start_batch(g, nb, gptr, gidx, arrival, size, eparams, head, cand_end, cand_s, ready, trim_end, r_batch)
        nb += 1
        now = t
    return nb, nd


@dataclass
class Trace:
    """Per-request and per-batch results of one run."""

    policy: str
    requests: object  # pandas.DataFrame, one row per request
    batches: object  # pandas.DataFrame, one row per batch
    obs: np.ndarray  # recorded observations (learned dispatcher), else empty
    dec_batch: np.ndarray  # the batch each recorded decision started


def group_index(group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of request indices per group, each in arrival order."""
    # a stable sort of 16-bit keys is numpy's radix sort: O(n), ~5x faster than on int64 at 10^6
    keys = group.astype(np.int16) if n_groups <= np.iinfo(np.int16).max else group
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n_groups + 1, np.int64)
    np.cumsum(np.bincount(group, minlength=n_groups), out=ptr[1:])
    return ptr, order.astype(np.int64)


def noise_table(settings, n: int, seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(noise, col)``: batch k of variant v runs ``lat[v, b] x noise[k, col[v]]``, lognormal
    with mean 1 and the variant's sigma (``settings.sigmas()``: the profile's per-variant ones,
    or ``serving.service_sigma``). One standard-normal draw z_k per batch, shared by every
    variant and every policy of a run (common random numbers); one column per distinct sigma,
    so one sigma for all keeps the draws of ``rng.normal(-sigma^2/2, sigma)`` exactly."""
    rng = np.random.default_rng(settings.seed if seed is None else seed)
    sig = settings.sigmas()
    uniq, col = np.unique(sig, return_inverse=True)
    if len(uniq) == 1:
        s0 = float(uniq[0])
        noise = np.exp(rng.normal(-s0**2 / 2, s0, n)) if s0 > 0 else np.ones(n)
        return noise.reshape(n, 1), col.astype(np.int64)
    z = rng.standard_normal(n)
    noise = np.empty((n, len(uniq)))
    for j, s in enumerate(uniq):
        noise[:, j] = np.exp(-s**2 / 2 + s * z) if s > 0 else 1.0
    return noise, col.astype(np.int64)


def service_noise(settings, n: int, seed: int | None = None) -> np.ndarray:
    """A lower bound on the actual / table service time of batch k = 0..n-1 (the bounds'
    ``noise``): the smallest factor any variant would get with that batch's draw
    (:func:`noise_table`; with one sigma for all, exactly the factor)."""
    noise, _ = noise_table(settings, n, seed)
    return noise.min(axis=1)


@dataclass
class RawRun:
    """The engine's output arrays: per request its batch (-1 dropped) and drop time; per batch
    ``b[key][:nb]``; the recorded observations."""

    r_batch: np.ndarray
    r_drop: np.ndarray
    b: dict[str, np.ndarray]
    nb: int
    obs: np.ndarray
    dec_batch: np.ndarray


BATCH_FIELDS = (("start", float), ("end", float), ("lane", np.int64), ("group", np.int64), ("samples", np.int64),
                ("tokens", float), ("first", np.int64), ("count", np.int64))


def check_inputs(reqs, settings, true_lat: np.ndarray, pred: np.ndarray) -> None:
    """One-line errors: a latency table without the batches the workload uses, or a request
    whose batch of one exceeds the token capacity."""
    from hybridsched.errors import HybridschedError

    used = np.flatnonzero(np.bincount(reqs.variant, minlength=settings.n_variants))  # O(n), no sort
    for name, table in (("latency table", true_lat), ("predicted latency table", pred)):
        bad = used[~np.isfinite(table[used, 1:]).all(axis=1)]
        if len(bad):
            raise HybridschedError(f"{name}: no latency for {settings.variant_names(int(bad[0]))} at some batch in "
                                   f"1..{settings.max_batch}, which the workload uses")
    tok = settings.token_table()[reqs.variant, reqs.size]
    if (tok > settings.token_capacity).any():
        i = int(np.argmax(tok > settings.token_capacity))
        raise HybridschedError(f"serving.token_capacity: request {i} ({settings.variant_names(int(reqs.variant[i]))}, "
                               f"size {int(reqs.size[i])}) needs {float(tok[i])} tokens alone, more than "
                               f"{settings.token_capacity:g}")


def engine_params(settings, policy, record: bool = False) -> np.ndarray:
    """The ``eparams`` vector of a run."""
    drop = float(policy.drop) * float(getattr(policy, "drop_factor", 1.0))  # predictive: exactly 1
    return np.array([settings.window_s, settings.max_batch, settings.token_capacity, drop,
                     float(policy.online_alpha), float(record)])


def group_arrays(settings) -> tuple[np.ndarray, np.ndarray]:
    """(variant, class index) of every group."""
    G = settings.n_groups
    return ((np.arange(G) // len(settings.classes)).astype(np.int64),
            (np.arange(G) % len(settings.classes)).astype(np.int64))


def contention_tables(settings, true_lat: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, float]:
    """(served, single-lane, mode, denom) for the compiled loop: the served table with NaN as
    inf; the single-lane one (``settings.alone_lat``, the served row where it has none, so a
    variant without single-lane rows runs its served time under every model); the
    ``serving.contention`` mode (C_*); the other lanes the served rows were timed with."""
    true_ = np.nan_to_num(true_lat, nan=np.inf)
    if settings.alone_lat is None:  # no single-lane rows: every model is the table (and this the fast path)
        return true_, true_, C_SERVED, 1.0
    alone = true_.copy()
    a = settings.alone_lat
    w = min(a.shape[1], alone.shape[1])
    ok = np.isfinite(a[:, :w]) & (a[:, :w] > 0)
    alone[:, :w] = np.where(ok, a[:, :w], alone[:, :w])
    return true_, alone, CONTENTION.index(settings.contention), float(max(settings.served_lanes - 1, 1))


def run_arrays(reqs, settings, true_lat: np.ndarray, policy, pred_lat: np.ndarray | None = None,
               noise_seed: int | None = None, record: bool = False) -> RawRun:
    """The simulator itself (the compiled loop and its output arrays); :func:`simulate` adds the
    per-request DataFrame. ``true_lat`` is the table as served; ``settings.contention`` with
    ``settings.alone_lat`` (the single-lane rows) says how a batch's time depends on the other
    lanes (:func:`_run`)."""
    n = len(reqs)
    G = settings.n_groups
    pred = true_lat if pred_lat is None else pred_lat
    check_inputs(reqs, settings, true_lat, pred)
    gptr, gidx = group_index(reqs.group, G)
    gvar, gcls = group_arrays(settings)
    noise, noise_col = noise_table(settings, n, noise_seed)
    pdata, pparams = policy.kernel_data(settings, pred)
    r_batch = np.full(n, -2, np.int64)
    r_drop = np.full(n, np.nan)
    b = {k: np.empty(n, dt) for k, dt in BATCH_FIELDS}
    n_obs = N_OBS_PER_GROUP * G + 2
    obs = np.zeros((n if record else 1, n_obs), np.float32)
    dec_batch = np.zeros(n if record else 1, np.int64)
    true_, alone, mode, denom = contention_tables(settings, true_lat)
    nb, nd = _run(policy.kernel, reqs.arrival, reqs.deadline, reqs.size, reqs.variant, reqs.cls, gptr, gidx, gvar,
                  gcls, true_, alone, np.nan_to_num(pred, nan=np.inf),
                  settings.token_table(), noise, noise_col, engine_params(settings, policy, record), pdata, pparams,
                  settings.lanes, r_batch, r_drop, b["start"], b["end"], b["lane"], b["group"], b["samples"],
                  b["tokens"], b["first"], b["count"], obs, dec_batch, mode, denom)
    return RawRun(r_batch, r_drop, b, nb, obs[:nd], dec_batch[:nd])


def trace_frames(reqs, name: str, raw: RawRun):
    """(per-request, per-batch) DataFrames of a run: the trace schema shared by the simulator and
    the real mode."""
    import pandas as pd

    nb, r_batch = raw.nb, raw.r_batch
    batches = pd.DataFrame({k: v[:nb] for k, v in raw.b.items()})
    batches.insert(0, "batch_id", np.arange(nb))
    served = r_batch >= 0
    rb = np.where(served, r_batch, 0)
    start = np.where(served, raw.b["start"][rb], np.nan)
    end = np.where(served, raw.b["end"][rb], np.nan)
    f = reqs.frame
    # the Series themselves: to_numpy() on string columns would build a Python object per row
    cols = {c: f[c] for c in ("request_id", "arrival", "model", "cls", "backend", "precision", "size", "slo_s")}
    cols.update(deadline=reqs.deadline, group=reqs.group, batch_id=r_batch,
                lane=np.where(served, raw.b["lane"][rb], -1), start=start, end=end, dropped=r_batch == -1,
                drop_time=raw.r_drop, latency=end - reqs.arrival, wait=start - reqs.arrival, service=end - start,
                met_slo=served & (end <= reqs.deadline + 1e-12), policy=name)
    return pd.DataFrame(cols), batches


def simulate(reqs, settings, true_lat: np.ndarray, policy, pred_lat: np.ndarray | None = None,
             noise_seed: int | None = None, record: bool = False) -> Trace:
    """Run ``policy`` (a :class:`hybridsched.kinds.serving.policies.ServingPolicy`) on requests
    ``reqs`` (:class:`~hybridsched.kinds.serving.workload.Requests`). ``true_lat`` is the latency
    table as served, which with ``settings.contention`` and the single-lane rows
    (``settings.alone_lat``) gives the time each batch actually takes (times lognormal noise with
    each variant's sigma, :func:`noise_table`, seeded by ``noise_seed``); ``pred_lat`` what the
    scheduler believes (default: the same table)."""
    raw = run_arrays(reqs, settings, true_lat, policy, pred_lat, noise_seed, record)
    df, batches = trace_frames(reqs, policy.name, raw)
    return Trace(policy.name, df, batches, raw.obs, raw.dec_batch)


class DispatchRun:
    """The simulator one decision at a time, driven from Python (the Gymnasium env's loop):
    :meth:`advance` runs :func:`next_decision` and :meth:`start` runs :func:`start_chosen`, the
    two halves of :func:`_run`'s loop, on the inputs :func:`run_arrays` builds.  Choosing
    :meth:`start`'s group with a policy's kernel gives ``run_arrays``'s schedule
    (tests/serving/test_env.py holds the two equal).  ``_run`` keeps its own copy of the loop:
    calling the two halves from it costs the compiled run about 1.8x its time.
    ``online_alpha`` and ``drop`` (the predictive admission's factor, 0: off) are the engine
    parameters a policy carries (:func:`engine_params`)."""

    def __init__(self, reqs, settings, true_lat: np.ndarray, pred_lat: np.ndarray | None = None,
                 noise_seed: int | None = None, online_alpha: float = 0.0, drop: float = 0.0) -> None:
        n = len(reqs)
        G = settings.n_groups
        pred = true_lat if pred_lat is None else pred_lat
        check_inputs(reqs, settings, true_lat, pred)
        self.reqs, self.settings, self.n_groups = reqs, settings, G
        self.gptr, self.gidx = group_index(reqs.group, G)
        self.gvar, self.gcls = group_arrays(settings)
        self.noise, self.noise_col = noise_table(settings, n, noise_seed)
        self.pred = np.nan_to_num(pred, nan=np.inf)
        self.true_, self.alone, self.mode, self.denom = contention_tables(settings, true_lat)
        self.tokens_tab = settings.token_table()
        self.eparams = np.array([settings.window_s, settings.max_batch, settings.token_capacity, float(drop),
                                 float(online_alpha), 0.0])
        self.r_batch = np.full(n, -2, np.int64)
        self.r_drop = np.full(n, np.nan)
        self.b = {k: np.empty(n, dt) for k, dt in BATCH_FIELDS}
        self.head = self.gptr[:G].copy()
        self.cand_end = np.empty(G, np.int64)
        self.cand_s = np.zeros(G, np.int64)
        self.ready = np.full(G, np.inf)
        self.trim_end = np.empty(G, np.int64)
        self.trim_s = np.zeros(G, np.int64)
        init_candidates(self.gptr, self.gidx, reqs.arrival, reqs.size, self.eparams, self.head, self.cand_end,
                        self.cand_s, self.ready)
        L = settings.lanes
        self.lane_free, self.run_tok = np.zeros(L), np.zeros(L)
        self.run_var, self.run_ratio = np.full(L, -1, np.int64), np.ones(L)
        self.corr = np.ones(true_lat.shape[0])
        self.rem, self.fac, self.ends, self.tmp = np.zeros(L), np.ones(L), np.zeros(L), np.zeros(L)
        self.run_b = np.full(L, -1, np.int64)
        self.u = 0.0
        self.gs = np.zeros((G + 1, NF))
        self.gs[G, G_MAX_BATCH] = self.eparams[P_MAX_BATCH]
        self.elig = np.empty(G, np.int64)
        self.now, self.t, self.lane, self.ne, self.nb = -np.inf, -np.inf, -1, 0, 0
        self._tables = (self.true_, self.alone, self.pred, self.tokens_tab)
        self._overlap = (self.rem, self.fac, self.ends, self.tmp, self.run_b)
        self._bout = tuple(self.b[k] for k, _ in BATCH_FIELDS)

    def advance(self) -> int:
        """Run to the next decision; the eligible groups there (``gs``, ``elig[:ne]``), 0 at the end."""
        r = self.reqs
        t, lane, ne = next_decision(self.now, self.gptr, self.gidx, r.arrival, r.deadline, r.size, self.gvar,
                                    self.gcls, self.pred, self.tokens_tab, self.eparams, self.lane_free, self.run_tok,
                                    self.run_var, self.run_ratio, self.corr, self.head, self.cand_end, self.cand_s,
                                    self.ready, self.trim_end, self.trim_s, self.gs, self.elig, self.r_batch,
                                    self.r_drop)
        self.t, self.lane, self.ne = float(t), int(lane), int(ne)
        return self.ne

    def start(self, g: int) -> int:
        """Start eligible group ``g``'s batch at the pending decision; the batch's index."""
        if self.ne == 0 or not 0 <= g < self.n_groups or self.gs[g, ELIGIBLE] == 0.0:
            raise ValueError(f"DispatchRun.start: group {g} is not eligible at the pending decision")
        r = self.reqs
        self.u = start_chosen(g, self.t, self.lane, self.nb, self.u, self.gptr, self.gidx, r.arrival, r.size,
                              self.gvar, self._tables, self.noise, self.noise_col, self.eparams, self.lane_free,
                              self.run_tok, self.run_var, self.run_ratio, self.head, self.cand_end, self.cand_s,
                              self.ready, self.trim_end, self.trim_s, self._overlap, self.r_batch, self._bout,
                              self.mode, self.denom)
        self.now, self.ne = self.t, 0
        self.nb += 1
        return self.nb - 1

    def raw(self) -> RawRun:
        """The run so far as :func:`run_arrays` returns it (no recorded observations)."""
        return RawRun(self.r_batch, self.r_drop, self.b, self.nb, np.zeros((0, N_OBS_PER_GROUP * self.n_groups + 2),
                                                                              np.float32), np.zeros(0, np.int64))
