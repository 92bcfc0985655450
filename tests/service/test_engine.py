"""The race's lanes: the machine kind's engine over consecutive segments of one stream."""

from __future__ import annotations

import numpy as np

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
