"""A compiled DQN learner for online adaptation: the same TD learning as
``rl.dqn.DQNLearner`` (replay, target network, Huber loss, gradient-norm clipping, Adam), with
the gradient steps in numba on the ``rl.qnet.Net`` arrays instead of per-step torch calls.

The forward pass is ``rl.qnet.dueling_q_net`` (what the simulator's kernel runs), the backward
pass is written out by hand for the dueling network's four layers, and the weights are updated
in place, so the policy's kernel sees every step without repacking.  It is float64 throughout
(torch trains in float32), so its steps are not torch's to the bit; a test checks its gradients
against torch's autograd on random networks and batches.  Minibatch indices are drawn by the
caller's numpy Generator, so a run is identical on rerun.

Torch is not imported: the service and the online policy load no torch for their learning.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hybridsched.rl.qnet import Net, dueling_q_net

# Adam's defaults (torch.optim.Adam): betas and eps
_B1, _B2, _EPS = 0.9, 0.999, 1e-8
# Step events handed to the compiled loop, in the order they fall due.
TRAIN, SYNC = 1, 2


def flat_net(flat: np.ndarray, like: Net) -> Net:
    """A ``Net`` of views into the flat vector ``flat``, shaped as ``like`` (fields in order), so a
    compiled loop can run over all parameters at once (Adam, norm, target update)."""
    out, o = [], 0
    for a in like:
        out.append(flat[o:o + a.size].reshape(a.shape))
        o += a.size
    return Net(*out)


class CompiledLearner:
    """Online network, target network, Adam state and a replay buffer, all float64 numpy arrays
    driven by compiled steps.  ``add`` has ``DQNLearner.add``'s semantics: store the transitions,
    then take the gradient steps (every ``train_frequency`` transitions once more than
    ``learning_starts`` were seen) and target updates (every ``target_network_frequency``) due."""

    def __init__(self, net: Net, settings, rng: np.random.Generator, batch_size: int | None = None,
                 train_frequency: int | None = None) -> None:
        self.settings = settings
        self.batch_size = int(batch_size or settings.batch_size)
        self.train_frequency = int(train_frequency or settings.train_frequency)
        self.learning_starts = int(settings.learning_starts)
        self.rng = rng
        # each network as one flat vector + a Net of views into it; the online one is updated in
        # place, so the policy's kernel reads every step without repacking
        self.flat = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in net])
        self.net = flat_net(self.flat, net)
        self.tflat = self.flat.copy()
        self.target = flat_net(self.tflat, net)
        self.gflat, self.mflat, self.vflat = np.zeros_like(self.flat), np.zeros_like(self.flat), np.zeros_like(self.flat)
        self.grad = flat_net(self.gflat, net)
        n_state, hidden, n_actions = net.w1.shape[0], net.w1.shape[1], net.ba.shape[0]
        cap = int(settings.buffer_size)
        # written through at once (np.full, not np.zeros, whose pages the system maps in only as
        # transitions land): the buffer is resident from the start, so a long online run (the
        # live race) holds a flat RSS rather than one that climbs until the buffer is full
        self.states = np.full((cap, n_state), 0.0)
        self.next_states = np.full((cap, n_state), 0.0)
        self.actions = np.full(cap, 0, dtype=np.int64)
        self.rewards = np.full(cap, 0.0)
        self.dones = np.full(cap, 0.0)
        self._cursor = 0
        self._size = 0
        # per-step work space: (h1, h2, q, target h1, h2, q, grad h1, h2, adv) + indices
        self._work = (np.zeros(hidden), np.zeros(hidden), np.zeros(n_actions), np.zeros(hidden), np.zeros(hidden),
                      np.zeros(n_actions), np.zeros(hidden), np.zeros(hidden), np.zeros(n_actions),
                      np.zeros(max(n_state, hidden), dtype=np.int64))
        self.global_step = 0
        self.grad_steps = 0
        self.target_updates = 0
        self.losses: list[float] = []

    def weights(self) -> Net:
        """The online network (the arrays the steps update in place)."""
        return self.net

    def __len__(self) -> int:
        return self._size

    def add(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray,
            dones: np.ndarray) -> None:
        """Store transitions; take the gradient steps and target updates that fall due."""
        k = len(actions)
        if k == 0:
            return
        cap = self.states.shape[0]
        slots = (self._cursor + np.arange(k)) % cap  # as rl.replay.ReplayBuffer (k <= cap here)
        self.states[slots], self.next_states[slots] = states, next_states
        self.actions[slots], self.rewards[slots], self.dones[slots] = actions, rewards, dones
        self._cursor = int((self._cursor + k) % cap)
        self._size = min(self._size + k, cap)
        s = self.settings
        steps = np.arange(self.global_step + 1, self.global_step + k + 1)
        train = (steps > self.learning_starts) & (steps % self.train_frequency == 0)
        sync = steps % s.target_network_frequency == 0
        self.global_step += k
        if not (train.any() or sync.any()):
            return
        events = (train * TRAIN + sync * SYNC).astype(np.int64)
        events = events[events > 0]
        n_train = int(train.sum())
        idx = self.rng.integers(0, self._size, (n_train, self.batch_size))
        losses = np.zeros(n_train)
        _run_events(events, idx, self.net, self.target, self.grad, self.flat, self.tflat, self.gflat, self.mflat,
                    self.vflat, self.states, self.actions, self.rewards, self.next_states, self.dones, float(s.gamma), float(s.learning_rate),
                    float(s.max_grad_norm), float(s.tau), self.grad_steps, losses, *self._work)
        self.grad_steps += n_train
        self.target_updates += int(sync.sum())
        self.losses.extend(losses.tolist())


# nogil: in the live service the race thread learns while the API threads answer
@njit(cache=True, nogil=True)
def _run_events(events, idx, net, tgt, g, flat, tflat, gflat, mflat, vflat, S, A_, R, S2, D, gamma, lr, max_norm,
                tau, steps_before, losses, h1, h2, q, th1, th2, tq, gh1, gh2, gadv, nz):
    """The due steps in order: TRAIN (a TD step on minibatch ``idx[k]``), SYNC (target update).
    ``net``, ``tgt``, ``g`` are views into ``flat``, ``tflat``, ``gflat``."""
    k = 0
    for e in events:
        if e & TRAIN:
            losses[k] = train_step(idx[k], net, tgt, g, flat, gflat, mflat, vflat, S, A_, R, S2, D, gamma, lr,
                                   max_norm, steps_before + k + 1, h1, h2, q, th1, th2, tq, gh1, gh2, gadv, nz)
            k += 1
        if e & SYNC:
            for i in range(tflat.shape[0]):
                tflat[i] = tau * flat[i] + (1.0 - tau) * tflat[i]


# Reassociation lets the backward pass's dot products vectorise; the step stays deterministic
# (the same code gives the same bits on every run) but is not the reference order of a sum,
# which a learner does not need. The forward passes it calls are compiled without these flags.
_FAST = {"reassoc", "contract", "nsz", "arcp"}


@njit(cache=True, fastmath=_FAST, nogil=True)
def train_step(rows, net, tgt, g, flat, gflat, mflat, vflat, S, A_, R, S2, D, gamma, lr, max_norm, t,
               h1, h2, q, th1, th2, tq, gh1, gh2, gadv, nz):
    """One TD step on the transitions ``rows`` of the replay arrays: Huber loss of
    ``Q(s, a)`` against ``r + gamma * max_a' Q_target(s', a') * (1 - done)``, mean over the batch,
    gradients by hand, global norm clipped to ``max_norm`` (as ``clip_grad_norm_``), then Adam
    step ``t`` (torch's defaults) on the flat vectors. Returns the loss."""
    gflat[:] = 0.0
    B = rows.shape[0]
    H = h1.shape[0]
    nA = q.shape[0]
    n_in = S.shape[1]
    loss = 0.0
    for j in range(B):
        r = rows[j]
        dueling_q_net(tq, S2[r], tgt, th1, th2, nz)
        best = tq[0]
        for a in range(1, nA):
            best = max(best, tq[a])
        td = R[r] + gamma * best * (1.0 - D[r])
        s = S[r]
        dueling_q_net(q, s, net, h1, h2, nz)  # leaves the hidden layers (after ReLU) in h1, h2
        a_j = A_[r]
        d = q[a_j] - td
        ad = abs(d)
        loss += 0.5 * d * d if ad < 1.0 else ad - 0.5
        gq = (d if ad < 1.0 else (1.0 if d > 0 else -1.0)) / B  # d(mean Huber)/dQ(s, a)
        # Q = V + adv - mean(adv): dQ_a/dV = 1, dQ_a/dadv_k = [k == a] - 1/nA
        for a in range(nA):
            gadv[a] = -gq / nA
        gadv[a_j] += gq
        g.bv[0] += gq
        for a in range(nA):
            g.ba[a] += gadv[a]
        for c in range(H):
            hc = h2[c]
            if hc > 0.0:
                g.wv[c] += gq * hc
                for a in range(nA):
                    g.wa[c, a] += hc * gadv[a]
                acc = 0.0
                for a in range(nA):
                    acc += net.wa[c, a] * gadv[a]
                gh2[c] = acc + gq * net.wv[c]
            else:
                gh2[c] = 0.0  # ReLU: no gradient where the unit is off
        for k in range(H):
            g.b2[k] += gh2[k]
        for c in range(H):
            hc = h1[c]
            if hc > 0.0:
                for k in range(H):
                    g.w2[c, k] += hc * gh2[k]
                acc = 0.0
                for k in range(H):
                    acc += net.w2[c, k] * gh2[k]
                gh1[c] = acc
            else:
                gh1[c] = 0.0
        for k in range(H):
            g.b1[k] += gh1[k]
        for c in range(n_in):
            sc = s[c]
            if sc != 0.0:
                for k in range(H):
                    g.w1[c, k] += sc * gh1[k]
    # clip the global gradient norm (torch: coef = max_norm / (norm + 1e-6), applied if < 1)
    sq = 0.0
    for i in range(gflat.shape[0]):
        sq += gflat[i] * gflat[i]
    coef = max_norm / (np.sqrt(sq) + 1e-6)
    if coef > 1.0:
        coef = 1.0
    # Adam with bias correction (torch.optim.Adam, no weight decay)
    bc1 = 1.0 - _B1 ** t
    bc2s = np.sqrt(1.0 - _B2 ** t)
    step = lr / bc1
    for i in range(flat.shape[0]):
        gi = gflat[i] * coef
        mi = _B1 * mflat[i] + (1.0 - _B1) * gi
        vi = _B2 * vflat[i] + (1.0 - _B2) * gi * gi
        mflat[i], vflat[i] = mi, vi
        flat[i] -= step * mi / (np.sqrt(vi) / bc2s + _EPS)
    return loss / B
