"""A compiled loop bound to its kernel, cached on disk across processes.

The cluster kind's compiled loop takes the policy's node choice as an argument
(``kernels.run_loop(choose, *args)``), and numba caches no function that takes another compiled
function (numba issue 6251): each process would compile the loop again for every choice, half
a minute each on 2 cores.  :func:`bind` writes, once per (loop, kernel) pair, a
module that imports both and calls ``loop(KERNEL, *args)`` with the kernel as a global; numba
caches that entry, loop and kernel compiled into it, beside the module.  The loop is compiled
``inline="always"`` (and so are the helpers it hands the kernel to): a kernel passed as an
argument to a compiled call is a run-time value, which numba does not cache.  CPython packs a
call of more than 30 arguments into a tuple, which numba does not inline: such a loop is bound
but not cached.

numba notices an edit of the entry's own file only, not of the loop or kernel compiled into
it, so the module's name holds a hash of every source of this package (and of the kernel's
module, when it lives elsewhere): an edit compiles fresh entries.  The folder is
``$HYBRIDSCHED_COMPILE_CACHE``, by default ``~/.cache/hybridsched/compiled``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

_PACKAGE = Path(__file__).resolve().parent
_ENTRIES: dict[tuple[int, int], Callable[..., Any]] = {}


def bind(loop: Any, kernel: Any) -> Callable[..., Any]:
    """``lambda *args: loop(kernel, *args)``, through a cached compiled entry where ``loop`` is a
    numba dispatcher and both are module-level names; otherwise (plain Python, a kernel built at
    run time, no writable cache folder) the loop itself, called with the kernel."""
    key = (id(loop), id(kernel))
    if key not in _ENTRIES:
        _ENTRIES[key] = _entry(loop, kernel) or functools.partial(loop, kernel)
    return _ENTRIES[key]


def cache_folder() -> Path:
    """Where the entry modules (and numba's cache of them) live."""
    if os.environ.get("HYBRIDSCHED_COMPILE_CACHE"):
        return Path(os.environ["HYBRIDSCHED_COMPILE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hybridsched" / "compiled"


def _entry(loop: Any, kernel: Any) -> Callable[..., Any] | None:
    if not (hasattr(loop, "targetoptions") and hasattr(kernel, "py_func")):
        return None
    where = _name_of(loop), _name_of(kernel)
    if None in where:
        return None
    import numba

    options = {k: v for k, v in loop.targetoptions.items() if k != "boundscheck" and isinstance(v, bool)}
    (loop_mod, loop_attr), (kernel_mod, kernel_attr) = where  # type: ignore[misc]
    # the loop's parameters after the kernel, written out: numba inlines no call with *args
    params = ", ".join(list(inspect.signature(loop.py_func).parameters)[1:])
    source = (f"# {loop_mod}.{loop_attr} bound to {kernel_mod}.{kernel_attr} (hybridsched.bound_loops)\n"
              f"import numba\n\nimport {loop_mod} as _loop_module\nimport {kernel_mod} as _kernel_module\n\n"
              f"LOOP = _loop_module.{loop_attr}\nKERNEL = _kernel_module.{kernel_attr}\n\n\n"
              f"@numba.jit(cache=True, **{options!r})\ndef entry({params}):\n    return LOOP(KERNEL, {params})\n")
    kernel_file = Path(sys.modules[kernel_mod].__file__ or "").resolve()
    outside = b"" if kernel_file.is_relative_to(_PACKAGE) else kernel_file.read_bytes()
    digest = hashlib.sha256(b"\0".join([_package_hash().encode(), numba.__version__.encode(),
                                        sys.version.encode(), source.encode(), outside])).hexdigest()[:20]
    name = f"hybridsched_entry_{digest}"
    try:
        path = cache_folder() / f"{name}.py"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)  # whole or absent: another process may be writing it too
        return _load(name, path).entry
    except OSError:
        return None


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba's cache looks the entry's module up by name
    spec.loader.exec_module(module)
    return module


def _name_of(obj: Any) -> tuple[str, str] | None:
    """(module, attribute) under which ``obj`` is a global of its defining module, or None."""
    module = sys.modules.get(getattr(getattr(obj, "py_func", obj), "__module__", "") or "")
    if module is None:
        return None
    for attr, value in vars(module).items():
        if value is obj and attr.isidentifier():
            return module.__name__, attr
    return None


@functools.lru_cache(maxsize=1)
def _package_hash() -> str:
    h = hashlib.sha256()
    for f in sorted(_PACKAGE.rglob("*.py")):
        h.update(str(f.relative_to(_PACKAGE)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()
