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
def dueling_q_into(q, s, params, o, S, H, A):
    """Q = V + A - mean(A) of the weights packed in ``params`` from offset ``o``, for a network
    of ``S`` inputs, ``H`` hidden units and ``A`` actions; written into ``q``."""
    w1, o = o, o + H * S
    b1, o = o, o + H
    w2, o = o, o + H * H
    b2, o = o, o + H
    wv, o = o, o + H
    bv, o = o, o + 1
    wa, o = o, o + A * H
    ba = o
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


def q_values(s: np.ndarray, packed: np.ndarray, hidden: int, n_actions: int) -> np.ndarray:
    """Q-values of one state from weights packed by :func:`pack_weights`."""
    q = np.empty(n_actions)
    dueling_q_into(q, np.ascontiguousarray(s, dtype=np.float64), packed, 0, s.shape[0], hidden, n_actions)
    return q
