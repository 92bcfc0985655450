"""Work in other processes whose results do not depend on where they run: a call in the
background, or named jobs spread over a few workers.  Workers are spawned (a fresh interpreter),
so numba, torch and numpy start in them as in a plain run."""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any


def can_spawn() -> bool:
    """Whether this process can spawn workers: not inside a joblib (loky) worker, e.g. a Hydra
    multirun job, whose start method 'loky' a spawned child cannot set up
    ("cannot find context for 'loky'")."""
    return multiprocessing.get_start_method(allow_none=True) in (None, *multiprocessing.get_all_start_methods())


@contextlib.contextmanager
def background(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Future]:
    """``fn(*args, **kwargs)`` in one spawned process while the block runs; yields its future.
    Leaving the block early (an error) stops the worker instead of waiting for it.  Where this
    process cannot spawn (:func:`can_spawn`), ``fn`` runs here first: the same result, later."""
    if not can_spawn():
        done: Future = Future()
        done.set_result(fn(*args, **kwargs))
        yield done
        return
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    future = pool.submit(fn, *args, **kwargs)
    try:
        yield future
    except BaseException:
        for proc in list(getattr(pool, "_processes", {}).values()):  # a long solve is not waited for
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def run_parallel(jobs: dict[str, tuple], workers: int) -> dict[str, Any]:
    """``{name: fn(*args)}`` for ``jobs = {name: (fn, *args)}``, in ``workers`` spawned processes
    (1: in this one), returned in the order of ``jobs``."""
    if workers <= 1 or len(jobs) <= 1 or not can_spawn():
        return {name: fn(*args) for name, (fn, *args) in jobs.items()}
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        futures = {name: pool.submit(fn, *args) for name, (fn, *args) in jobs.items()}
        return {name: f.result() for name, f in futures.items()}
