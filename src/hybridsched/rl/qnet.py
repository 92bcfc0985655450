"""The one inference implementation of a trained dueling Q-network (numba, no torch).

Every kind's simulator calls it: the machine kind inside its compiled decision kernel
(``kinds/machine/dqn_state.py``), the cluster kind per decision (``kinds/cluster/dqn.py``).
The weights are one flat float64 vector in ``rl.dqn.QNetwork.state_dict()`` order (trunk 1,
trunk 2, value head, advantage head; each weight row-major, then its bias), starting at an
offset so a kind may put its own header in front.  Training uses torch's forward pass of the
same network; a test checks the two agree.
"""

from __future__ import annotations

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


def pack_transposed(weights: list[np.ndarray]) -> np.ndarray:
    """The network's tensors (``state_dict`` order) as one flat float64 vector with every weight
    matrix transposed (column-major): the layout of :func:`dueling_q_t_into`."""
    return np.concatenate([np.asarray(w, dtype=np.float64).T.ravel() for w in weights])


@njit(cache=True)
def transposed_size(S: int, H: int, A: int) -> int:
    """Length of :func:`pack_transposed`'s vector for ``S`` inputs, ``H`` hidden units, ``A`` actions."""
    return H * S + H + H * H + H + H + 1 + A * H + A


@njit(cache=True)
def affine_t(params, w, b, x, out):
    """out = W x + b with W stored transposed (``len(x)`` rows of ``len(out)``): the same sums in
    the same order as :func:`dense_relu` (``b + W[r,0] x[0] + W[r,1] x[1] + ...``, no fused
    multiply-add), but the inner loop runs over the outputs, which are independent, so it
    vectorises; four inputs per pass keep ``out`` in registers four times as long."""
    n_out, n_in = out.shape[0], x.shape[0]
    for r in range(n_out):
        out[r] = params[b + r]
    c = 0
    while c + 4 <= n_in:
        x0, x1, x2, x3 = x[c], x[c + 1], x[c + 2], x[c + 3]
        k0 = w + c * n_out
        k1, k2, k3 = k0 + n_out, k0 + 2 * n_out, k0 + 3 * n_out
        for r in range(n_out):
            out[r] = (((out[r] + params[k0 + r] * x0) + params[k1 + r] * x1) + params[k2 + r] * x2) + params[k3 + r] * x3
        c += 4
    while c < n_in:
        xc = x[c]
        k0 = w + c * n_out
        for r in range(n_out):
            out[r] += params[k0 + r] * xc
        c += 1


@njit(cache=True)
def dense_relu_t(params, w, b, x, out):
    """relu(:func:`affine_t`): :func:`dense_relu` to the bit, on transposed weights."""
    affine_t(params, w, b, x, out)
    for r in range(out.shape[0]):
        v = out[r]
        out[r] = v if v > 0.0 else 0.0  # a select, not a branch: the zeros follow no pattern


@njit(cache=True)
def dueling_q_t_into(q, s, params, o, S, H, A, h1, h2):
    """:func:`dueling_q_into` on weights packed by :func:`pack_transposed` from offset ``o``, with
    the hidden layers written into the caller's ``h1``, ``h2`` (no allocation). Same result to the bit."""
    w1, b1, w2, b2, wv, bv, wa, ba = _offsets(o, S, H, A)
    dense_relu_t(params, w1, b1, s, h1)
    dense_relu_t(params, w2, b2, h1, h2)
    v = params[bv]
    for c in range(H):
        v += params[wv + c] * h2[c]
    affine_t(params, wa, ba, h2, q)
    mean = 0.0
    for a in range(A):
        mean += q[a]
    mean /= A
    for a in range(A):
        q[a] = v + q[a] - mean


def q_values(s: np.ndarray, packed: np.ndarray, hidden: int, n_actions: int) -> np.ndarray:
    """Q-values of one state from weights packed by :func:`pack_weights`."""
    q = np.empty(n_actions)
    dueling_q_into(q, np.ascontiguousarray(s, dtype=np.float64), packed, 0, s.shape[0], hidden, n_actions)
    return q
