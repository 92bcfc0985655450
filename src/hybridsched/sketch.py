"""A mergeable quantile sketch with a relative-error guarantee, fed with numpy batches.

The same log-bucket scheme as DDSketch (Masson et al., VLDB 2019), vectorised: a value
``x > 0`` falls into bucket ``k = ceil(log_gamma(x))`` with ``gamma = (1 + a) / (1 - a)``,
so the bucket covers ``(gamma**(k-1), gamma**k]`` and its representative
``2 gamma**k / (gamma + 1)`` is within relative error ``a`` of every value in it.

Guarantee: ``quantile(q)`` is within ``a * |x|`` of ``x``, the exact lower quantile
(the sorted sample's element at index ``floor(q * (n - 1))``, numpy's ``method="lower"``),
for every ``q`` in [0, 1], however the values were split into batches and merged.  Zeros
are counted exactly; negative values are refused (latencies and waits are never negative).
Memory: one int64 counter per bucket between the smallest and largest positive value seen
(~1,400 buckets for values spanning 12 decades at a = 1 %).
"""

from __future__ import annotations

import math

import numpy as np


class LogBucketSketch:
    """Counts of values in geometric buckets; ``add`` takes whole arrays."""

    def __init__(self, relative_accuracy: float = 0.01) -> None:
        if not 0 < relative_accuracy < 1:
            raise ValueError(f"relative_accuracy must be in (0, 1), got {float(relative_accuracy)}")
        self.relative_accuracy = float(relative_accuracy)
        self.gamma = (1 + relative_accuracy) / (1 - relative_accuracy)
        self._inv_log_gamma = 1.0 / math.log(self.gamma)
        self.zeros = 0
        self.offset = 0  # key of counts[0]
        self.counts = np.zeros(0, dtype=np.int64)

    @property
    def count(self) -> int:
        """How many values were added."""
        return int(self.counts.sum()) + self.zeros

    def add(self, values: np.ndarray) -> None:
        """Add every value of ``values`` (finite, >= 0)."""
        v = np.asarray(values, dtype=np.float64).ravel()
        if v.size == 0:
            return
        lo = float(v.min())
        if not (lo >= 0 and math.isfinite(float(v.max()))):
            raise ValueError(f"sketch values must be finite and >= 0, got min {lo} max {float(v.max())}")
        pos = v[v > 0] if lo == 0 else v
        self.zeros += v.size - pos.size
        if pos.size == 0:
            return
        keys = np.ceil(np.log(pos) * self._inv_log_gamma).astype(np.int64)
        kmin, kmax = int(keys.min()), int(keys.max())
        self._cover(kmin, kmax)
        self.counts += np.bincount(keys - self.offset, minlength=self.counts.size)

    def merge(self, other: LogBucketSketch) -> None:
        """Add the values another sketch of the same accuracy has seen."""
        if other.gamma != self.gamma:
            raise ValueError("cannot merge sketches of different relative accuracy")
        self.zeros += other.zeros
        if other.counts.size == 0:
            return
        self._cover(other.offset, other.offset + other.counts.size - 1)
        start = other.offset - self.offset
        self.counts[start : start + other.counts.size] += other.counts

    def quantile(self, q: float) -> float:
        """An estimate of the lower ``q``-quantile within the relative accuracy; NaN if empty."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile must be in [0, 1], got {float(q)}")
        n = self.count
        if n == 0:
            return float("nan")
        rank = math.floor(q * (n - 1))  # index of the lower quantile in the sorted sample
        if rank < self.zeros:
            return 0.0
        cum = np.cumsum(self.counts)
        b = int(np.searchsorted(cum, rank - self.zeros, side="right"))
        return 2.0 * self.gamma ** (b + self.offset) / (self.gamma + 1.0)

    def _cover(self, kmin: int, kmax: int) -> None:
        """Grow the counter array so it spans keys kmin..kmax."""
        if self.counts.size == 0:
            self.offset = kmin
            self.counts = np.zeros(kmax - kmin + 1, dtype=np.int64)
            return
        lo = min(kmin, self.offset)
        hi = max(kmax, self.offset + self.counts.size - 1)
        if lo == self.offset and hi == self.offset + self.counts.size - 1:
            return
        grown = np.zeros(hi - lo + 1, dtype=np.int64)
        grown[self.offset - lo : self.offset - lo + self.counts.size] = self.counts
        self.offset, self.counts = lo, grown
