"""The one inference implementation of a trained dueling Q-network (numba, no torch).

Every kind's simulator calls it: the machine kind inside its compiled decision kernel
(``kinds/machine/dqn_state.py``), the cluster kind per decision (``kinds/cluster/dqn.py``).
The weights are one flat float64 vector in ``rl.dqn.QNetwork.state_dict()`` order (trunk 1,
trunk 2, value head, advantage head; each weight row-major, then its bias), starting at an
offset so a kind may put its own header in front.  The machine kind's kernel runs the fused
pass on separate arrays (``Net``, ``dueling_q_net``: the same Q-values, ~6x faster).  Training
uses torch's forward pass of the same network (the online learner: ``rl/qnet_train.py``); tests
check they agree.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit


def pack_weights(weights: list[np.ndarray]) -> np.ndarray:
    """The network's tensors (``state_dict`` order) as one flat float64 vector."""
    return np.concatenate([np.asarray(w, dtype=np.float64).ravel() for w in weights])


@njit(cache=True)
def dense_relu(params, w, b, x, out):
    """out = relu(W x + b), with W (row-major, len(out) x len(x)) and b packed in params at w, b."""
    n_in = x.shape[0]
    for r in range(out.shape[0]):
        acc = params[b + r]
        base = w + r * n_in
        for c in range(n_in):
            acc += params[base + c] * x[c]
        out[r] = acc if acc > 0.0 else 0.0


@njit(cache=True)
def _offsets(o, S, H, A):
    """Where each tensor starts in a packed vector from offset ``o`` (``state_dict`` order)."""
    w1, o = o, o + H * S
    b1, o = o, o + H
    w2, o = o, o + H * H
    b2, o = o, o + H
    wv, o = o, o + H
    bv, o = o, o + 1
    wa, o = o, o + A * H
    return w1, b1, w2, b2, wv, bv, wa, o


@njit(cache=True)
def dueling_q_into(q, s, params, o, S, H, A):
    """Q = V + A - mean(A) of the weights packed in ``params`` from offset ``o``, for a network
    of ``S`` inputs, ``H`` hidden units and ``A`` actions; written into ``q``."""
    w1, b1, w2, b2, wv, bv, wa, ba = _offsets(o, S, H, A)
    h1 = np.empty(H)
    dense_relu(params, w1, b1, s, h1)
    h2 = np.empty(H)
    dense_relu(params, w2, b2, h1, h2)
    v = params[bv]
    for c in range(H):
        v += params[wv + c] * h2[c]
    mean = 0.0
    for a in range(A):
        acc = params[ba + a]
        base = wa + a * H
        for c in range(H):
            acc += params[base + c] * h2[c]
        q[a] = acc
        mean += acc
    mean /= A
    for a in range(A):
        q[a] = v + q[a] - mean


@njit(cache=True)
def transposed_size(S: int, H: int, A: int) -> int:
    """Number of values in a network of ``S`` inputs, ``H`` hidden units, ``A`` actions."""
    return H * S + H + H * H + H + H + 1 + A * H + A


def q_values(s: np.ndarray, packed: np.ndarray, hidden: int, n_actions: int) -> np.ndarray:
    """Q-values of one state from weights packed by :func:`pack_weights`."""
    q = np.empty(n_actions)
    dueling_q_into(q, np.ascontiguousarray(s, dtype=np.float64), packed, 0, s.shape[0], hidden, n_actions)
    return q


# --- the fused forward pass on separate arrays ---------------------------------------------------
# A flat vector with the scratch space inside it keeps LLVM from vectorising (every store may
# alias every load) and its offsets from being hoisted; separate 2-D arrays do not, and with the
# zero inputs skipped (the ReLU leaves about half of each hidden layer at 0) the pass is ~6x
# faster with every Q-value equal in value to :func:`dueling_q_into`'s.
Net = namedtuple("Net", "w1 b1 w2 b2 wv bv wa ba")
Net.__doc__ = """A dueling network's tensors as float64 arrays, each weight matrix transposed
(``w1`` is inputs x hidden, ``wa`` hidden x actions), ``bv`` a 1-element array: the layout of
:func:`dueling_q_net`. The online learner (``rl/qnet_train.py``) updates them in place."""


def net_from_weights(weights: list[np.ndarray]) -> Net:
    """A :class:`Net` from the tensors in ``QNetwork.state_dict()`` order (float32 or float64)."""
    w1, b1, w2, b2, wv, bv, wa, ba = (np.asarray(w, dtype=np.float64) for w in weights)
    t = np.ascontiguousarray
    return Net(t(w1.T), t(b1), t(w2.T), t(b2), t(wv.ravel()), t(bv.ravel()), t(wa.T), t(ba))


def net_weights(net: Net) -> list[np.ndarray]:
    """The inverse of :func:`net_from_weights`: ``state_dict``-shaped float64 copies."""
    return [net.w1.T.copy(), net.b1.copy(), net.w2.T.copy(), net.b2.copy(), net.wv[None, :].copy(),
            net.bv.copy(), net.wa.T.copy(), net.ba.copy()]


@njit(cache=True)
def affine_skip0(W, b, x, out, nz):
    """out = W^T x + b for ``W`` of shape (len(x), len(out)), skipping the inputs that are 0.

    The sums run in the reference order (``b + W[0] x[0] + W[1] x[1] + ...``, no fused
    multiply-add) over the non-zero inputs only: adding ``w * 0.0`` leaves a finite sum unchanged
    (at most a -0.0 turns into +0.0, which compares equal), so the result equals the dense sum's
    in value. ``nz`` is caller-provided room for the non-zero inputs' indices (no allocation)."""
    n_out, n_in = out.shape[0], x.shape[0]
    m = 0
    for c in range(n_in):
        if x[c] != 0.0:
            nz[m] = c
            m += 1
    for r in range(n_out):
        out[r] = b[r]
    j = 0
    while j + 4 <= m:  # four inputs per pass keep ``out`` in registers four times as long
        c0, c1, c2, c3 = nz[j], nz[j + 1], nz[j + 2], nz[j + 3]
        x0, x1, x2, x3 = x[c0], x[c1], x[c2], x[c3]
        for r in range(n_out):
            out[r] = (((out[r] + W[c0, r] * x0) + W[c1, r] * x1) + W[c2, r] * x2) + W[c3, r] * x3
        j += 4
    while j < m:
        c0 = nz[j]
        x0 = x[c0]
        for r in range(n_out):
            out[r] += W[c0, r] * x0
        j += 1


@njit(cache=True)
def dueling_q_net(q, s, net, h1, h2, nz):
    """Q = V + A - mean(A) of ``net`` (a :class:`Net`) for state ``s``, written into ``q``; the
    hidden layers go to the caller's ``h1``, ``h2`` and ``nz`` holds indices (len >= max(S, H)).
    Equal in value to :func:`dueling_q_into` on the same weights (a test checks the bits)."""
    affine_skip0(net.w1, net.b1, s, h1, nz)
    for k in range(h1.shape[0]):
        v = h1[k]
        h1[k] = v if v > 0.0 else 0.0  # a select, not a branch
    affine_skip0(net.w2, net.b2, h1, h2, nz)
    for k in range(h2.shape[0]):
        v = h2[k]
        h2[k] = v if v > 0.0 else 0.0
    v = net.bv[0]
    for c in range(h2.shape[0]):
        v += net.wv[c] * h2[c]
    affine_skip0(net.wa, net.ba, h2, q, nz)
    A = q.shape[0]
    mean = 0.0
    for a in range(A):
        mean += q[a]
    mean /= A
    for a in range(A):
        q[a] = v + q[a] - mean
