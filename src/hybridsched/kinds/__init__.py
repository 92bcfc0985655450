"""Workload kinds: one package each, behind one interface, found by name in one registry.

``workload.kind`` in the config names the kind; :func:`get_kind` imports its ``stages``
module (lazily: a kind's heavy imports cost nothing to the others) and checks that it has
every stage function of :data:`hybridsched.kinds.base.STAGES`.  Adding a kind is one
package with a ``stages`` module plus one line in :data:`KINDS` (docs/adding-a-kind.md).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from hybridsched.errors import HybridschedError
from hybridsched.kinds.base import STAGES

# kind name -> module holding its stage functions
KINDS: dict[str, str] = {
    "machine": "hybridsched.kinds.machine.stages",
    "cluster": "hybridsched.kinds.cluster.stages",
    "serving": "hybridsched.kinds.serving.stages",
}


def register(name: str, module: str) -> None:
    """Add (or replace) a kind at run time, e.g. a kind that lives outside this package."""
    KINDS[name] = module


def get_kind(name: str) -> ModuleType:
    """The stages module of kind ``name``; one clear error for an unknown or incomplete kind."""
    if name not in KINDS:
        raise HybridschedError(f"workload.kind: unknown kind {name!r}; known: {', '.join(sorted(KINDS))}")
    module = importlib.import_module(KINDS[name])
    missing = [s for s in STAGES if not callable(getattr(module, s, None))]
    if missing:
        raise HybridschedError(f"workload.kind {name!r}: {KINDS[name]} lacks stage function(s) {missing}")
    return module
