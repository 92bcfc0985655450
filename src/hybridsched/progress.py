"""Progress bars for the loops a user waits on (tqdm), quiet when output is not a terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], desc: str, total: int | None = None, unit: str = "it") -> Iterator[T]:
    """``items`` with a tqdm bar on stderr when it is a terminal; the plain iterable otherwise
    (DVC logs, CI, tests)."""
    if not sys.stderr.isatty():
        return iter(items)
    from tqdm import tqdm

    return iter(tqdm(items, desc=desc, total=total, unit=unit, leave=False, dynamic_ncols=True))
