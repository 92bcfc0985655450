"""The package's import structure: kinds are peers, and no module imports itself back.

Read from the source with ``ast`` (nothing is imported): every ``import`` and ``from ... import``
of a ``hybridsched`` module, at module level and inside functions alike; only imports under
``if TYPE_CHECKING:`` are left out (they never run).

* A kind (``kinds/<kind>/``) imports shared cores (modules outside ``kinds/``, and
  ``kinds/base.py``), never another kind: what two kinds share moves below ``kinds/``.
* No import cycle: a cycle through a function-level import does not fail at import time, but it
  still ties two modules together so that neither can be read, tested or moved alone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "hybridsched"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that module ``name`` imports (a name imported from a package is the
    package, unless it is a submodule)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for t in targets:
            while t and t not in known:  # `import a.b.c` where c is an attribute, not a module
                t = t.rpartition(".")[0]
            if t.split(".")[0] == PACKAGE and t and t != name:
                out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def kind_of(module: str) -> str | None:
    """``machine`` for ``hybridsched.kinds.machine.engine``; None outside a kind package."""
    parts = module.split(".")
    if parts[:2] != [PACKAGE, "kinds"] or len(parts) < 3:
        return None
    return parts[2] if (SRC / PACKAGE / "kinds" / parts[2]).is_dir() else None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_package() -> None:
    # the checks below are only as good as the graph: it must hold the kinds and their imports
    graph = import_graph()
    assert {"machine", "cluster", "serving"} <= {kind_of(m) for m in graph}
    assert "hybridsched.kinds.base" in graph["hybridsched.kinds.machine.stages"]
    assert sum(len(v) for v in graph.values()) > 300


def test_no_kind_imports_another_kind() -> None:
    bad = sorted(f"{m} imports {t}" for m, targets in import_graph().items()
                 for t in targets if kind_of(m) and kind_of(t) and kind_of(m) != kind_of(t))
    assert not bad, "a kind imports another kind (move what they share below kinds/):\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_checks_catch_a_cycle_and_a_cross_kind_import() -> None:
    # the detectors themselves, on a made-up graph
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert kind_of("hybridsched.kinds.cluster.engine") == "cluster"
    assert kind_of("hybridsched.kinds.base") is None
