"""The race's lanes: the machine kind's engine over consecutive segments of one stream."""

from __future__ import annotations

import numpy as np
import pytest

from hybridsched.devices import cluster_from_config
from hybridsched.service.engine import Lane
from hybridsched.service.stream import GeneratedStream


def _segments(settings, n: int, k: int):
    cluster = cluster_from_config(settings.machine["cluster"])
    stream = GeneratedStream(settings.workload_config(), cluster, 0, n)
    out, offset = [], 0.0
    for i in range(k):
        seg = stream.segment(i, offset)
        offset = float(seg.tasks.arrival[-1])
        out.append(seg)
    return cluster, out


def test_segments_continue_the_clock_and_the_devices(make_settings):
    s = make_settings()
    cluster, segs = _segments(s, 300, 2)
    assert segs[1].tasks.arrival[0] > segs[0].tasks.arrival[-1]
    assert segs[1].tasks.task_id[0] == 300
    lane = Lane("eft", s.machine["policies"]["eft"], cluster)
    a = lane.run(segs[0]).trace
    free = lane.free_at.copy()
    b = lane.run(segs[1]).trace
    # a part of the second segment never starts before its device finished the first segment's work
    assert np.all(np.nan_to_num(b.cpu_start, nan=np.inf) >= min(free[0], np.nanmin(b.cpu_start)))
    assert free[0] == np.nanmax(a.cpu_end)
    for g in range(cluster.n_gpus):
        starts = b.gpu_start[b.gpu == g]
        if len(starts) and free[g + 1] > starts.min():
            raise AssertionError(f"GPU {g}: a part starts at {starts.min()} before the device is free at {free[g + 1]}")


def test_learning_policies_carry_on_across_segments(learned_settings):
    s = learned_settings()
    cluster, segs = _segments(s, 400, 3)
    hml = Lane("hybrid_ml", s.machine["policies"]["hybrid_ml"], cluster)
    dqn = Lane("dqn_online", s.machine["policies"]["dqn_online"], cluster)
    hml.run(segs[0])
    dqn.run(segs[0])
    windows, refits = hml.policy._windows, hml.policy.n_refits
    learner = dqn.policy._learner
    seen = learner.global_step
    assert refits > 0
    out = hml.run(segs[1])
    dqn.run(segs[1])
    assert hml.policy._windows is windows and hml.policy.n_refits > refits  # kept, still refitting
    # the same learner goes on (the untrained test network overloads its cluster, so few
    # completions are observed: only its identity and its monotone step count are checked)
    assert dqn.policy._learner is learner and learner.global_step >= seen
    assert out.events and all(e["total"] > refits for e in out.events)


def test_race_statistics_stay_bounded_over_a_long_race():
    """The Gantt window keeps only parts that can still show, however long the race and however
    late a policy books its parts: an overloaded policy (one part of each block ends far ahead)
    kept every block before, so memory grew with the run."""
    from hybridsched.service.stats import MAX_PARTS, WINDOW_S, RaceStats

    stats = RaceStats(["ok", "overloaded"], n_devices=2)
    rng = np.random.default_rng(0)
    n, now = 2000, 0.0
    for k in range(60):
        arrival = now + np.sort(rng.uniform(0, 300, n))
        start_ok = arrival + 0.1
        start_late = arrival + 10.0 * k * 300  # a backlog that grows with the run
        results = []
        for name, start in (("ok", start_ok), ("overloaded", start_late)):
            results.append({"policy": name, "task_id": np.arange(k * n, (k + 1) * n), "latency": start + 1 - arrival,
                            "energy_j": np.ones(n), "cost_usd": np.ones(n), "fraction": np.zeros(n),
                            "gpu": np.full(n, -1), "cpu_start": start, "cpu_end": start + 1.0,
                            "gpu_start": np.full(n, np.nan), "gpu_end": np.full(n, np.nan)})
        now = float(arrival[-1])
        stats.add_block(rng.uniform(1, 400, n), rng.uniform(0, 1, n), results)
        stats.trim(now)
    kept = {p: sum(len(a) for a in s.parts) for p, s in stats.by_policy.items()}
    assert kept["ok"] <= n  # about WINDOW_S worth of tasks, not the run
    assert kept["overloaded"] <= MAX_PARTS
    ok = stats.recent_parts("ok", now)
    assert len(ok) and np.all(ok[:, 2] >= now - WINDOW_S)
    assert stats.by_policy["ok"].n == 60 * n  # the totals still count every task


def test_online_replay_buffer_is_resident_from_the_start():
    """The online DQN's replay buffer, the largest thing a race holds (2 x 50,000 x 45 floats,
    34 MB, for the pipeline's model), is written through when the learner is built: the server's
    RSS does not climb over the race's first 50,000 tasks as transitions land in untouched pages
    (the service benchmark read that climb as memory growth)."""
    import gc
    from dataclasses import replace

    psutil = pytest.importorskip("psutil")
    from hybridsched.kinds.machine.dqn import DQNSettings
    from hybridsched.rl.qnet import net_from_weights
    from hybridsched.rl.qnet_train import CompiledLearner

    S, H, A, cap = 64, 8, 5, 100_000  # 2 x 51 MB of states
    rng = np.random.default_rng(0)
    net = net_from_weights([rng.normal(size=(H, S)), np.zeros(H), rng.normal(size=(H, H)), np.zeros(H),
                            rng.normal(size=(1, H)), np.zeros(1), rng.normal(size=(A, H)), np.zeros(A)])
    gc.collect()
    me = psutil.Process()
    before = me.memory_info().rss
    learner = CompiledLearner(net, replace(DQNSettings(), buffer_size=cap, hidden=H), rng)
    grew = me.memory_info().rss - before
    assert learner.states.nbytes + learner.next_states.nbytes == 2 * cap * S * 8
    assert grew >= 0.9 * 2 * cap * S * 8, f"{grew / 2**20:.1f} MB resident of {2 * cap * S * 8 / 2**20:.1f} MB"
    del learner
