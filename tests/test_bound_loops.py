"""``bound_loops.bind``: a compiled loop bound to its kernel is cached on disk, and an edited
kernel compiles a fresh entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from numba import njit

from hybridsched.bound_loops import bind

ROOT = Path(__file__).resolve().parents[1]


@njit(cache=True)
def _twice(x):  # pragma: no cover - compiled
    return 2 * x


@njit
def _sum_of(kernel, xs):  # pragma: no cover - compiled
    s = 0
    for x in xs:
        s += kernel(x)
    return s


def test_the_bound_loop_gives_the_loop_s_result_and_a_kernel_built_at_run_time_runs_unbound(tmp_path, monkeypatch):
    import numpy as np

    monkeypatch.setenv("HYBRIDSCHED_COMPILE_CACHE", str(tmp_path))
    xs = np.arange(5)
    bound = bind(_sum_of, _twice)
    assert bound(xs) == _sum_of(_twice, xs) == 20
    assert list(tmp_path.glob("hybridsched_entry_*.py"))  # the entry module
    local = njit(lambda x: x + 1)  # no module-level name: the loop itself, called with it
    assert bind(_sum_of, local)(xs) == 15


KERNEL = """
from numba import njit

@njit(cache=True)
def kernel(x):
    return x + {add}

@njit
def loop(kernel, n):
    s = 0
    for i in range(n):
        s += kernel(i)
    return s
"""

RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
import user_kernel
from hybridsched.bound_loops import bind
entry = bind(user_kernel.loop, user_kernel.kernel)
value = entry(4)
print(json.dumps({"value": int(value), "hits": sum(entry.stats.cache_hits.values()),
                  "module": entry.__module__}))
"""


def _run(folder: Path, cache: Path) -> dict:
    env = {**os.environ, "HYBRIDSCHED_COMPILE_CACHE": str(cache), "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-c", RUN, str(folder)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_entry_and_an_edited_kernel_compiles_a_new_one(tmp_path):
    code, cache = tmp_path / "code", tmp_path / "cache"
    code.mkdir()
    (code / "user_kernel.py").write_text(textwrap.dedent(KERNEL.format(add=1)))
    first = _run(code, cache)
    again = _run(code, cache)
    assert first["value"] == again["value"] == 10
    assert first["hits"] == 0 and again["hits"] == 1  # compiled once, then loaded from the cache
    assert again["module"] == first["module"]
    (code / "user_kernel.py").write_text(textwrap.dedent(KERNEL.format(add=2)))
    edited = _run(code, cache)
    assert edited["value"] == 14 and edited["hits"] == 0 and edited["module"] != first["module"]
