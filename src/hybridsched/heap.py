"""A binary min-heap of (time, task) pairs in preallocated arrays, usable from numba."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def heap_push(times: np.ndarray, items: np.ndarray, size: int, t: float, item: int) -> int:
    """Push (t, item); ties pop in item order, so runs are deterministic. Returns the new size."""
    k = size
    while k > 0:
        parent = (k - 1) >> 1
        if times[parent] < t or (times[parent] == t and items[parent] <= item):
            break
        times[k] = times[parent]
        items[k] = items[parent]
        k = parent
    times[k] = t
    items[k] = item
    return size + 1


@njit(cache=True)
def heap_pop(times: np.ndarray, items: np.ndarray, size: int) -> int:
    """Remove the minimum (read it from times[0], items[0] first). Returns the new size."""
    size -= 1
    t = times[size]
    item = items[size]
    k = 0
    while True:
        c = 2 * k + 1
        if c >= size:
            break
        if c + 1 < size and (times[c + 1] < times[c] or (times[c + 1] == times[c] and items[c + 1] < items[c])):
            c += 1
        if t < times[c] or (t == times[c] and item <= items[c]):
            break
        times[k] = times[c]
        items[k] = items[c]
        k = c
    times[k] = t
    items[k] = item
    return size
