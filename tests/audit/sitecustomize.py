"""File-access recorder for the stages (tests/file_access.py): with this folder on PYTHONPATH
and ``HYBRIDSCHED_AUDIT_DIR`` set, every ``python -m stages.NAME`` process (as DVC runs them)
appends each ``open`` (path, read or write), rename and directory listing to
``$HYBRIDSCHED_AUDIT_DIR/NAME.log``, one JSON line each, via ``sys.addaudithook``.  Other
Python processes (DVC itself) record nothing.  Parquet is read by pyarrow's C++ code, past
Python's ``open``: the readers of ``pyarrow.parquet`` (which ``pd.read_parquet`` calls) are
wrapped to report their paths.  Other native readers would not be seen; the stages' other
readers (pandas csv, numpy, json, joblib, torch, yaml) go through ``open``.  At exit, each
module the process imported from the project's own code (``src/``, ``stages/``) is appended as an
``import`` line.
"""

from __future__ import annotations

import atexit
import json
import os
import sys

_DIR = os.environ.get("HYBRIDSCHED_AUDIT_DIR")


def _install(folder: str) -> None:
    state: dict[str, object] = {"log": None, "busy": False}

    def stage_log():  # noqa: ANN202 - the log of this process's stage, or None (not a stage)
        if state["log"] is None:
            argv0 = sys.argv[0] if sys.argv else ""
            parent, name = os.path.split(argv0)
            if os.path.basename(parent) != "stages" or not name.endswith(".py") or name.startswith("_"):
                return None  # not yet known (imports before runpy sets argv[0]) or not a stage
            state["busy"] = True  # opening the log fires the hook again
            try:
                state["log"] = open(os.path.join(folder, name[:-3] + ".log"), "a", buffering=1)
            finally:
                state["busy"] = False
        return state["log"]

    def hook(event: str, a: tuple) -> None:
        if event not in ("open", "os.rename", "os.listdir", "os.scandir") or state["busy"]:
            return
        log = stage_log()
        if log is None:
            return
        if event == "open":
            path, mode, flags = a
            if not isinstance(path, (str, bytes, os.PathLike)):
                return  # an already open file descriptor
            writes = bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)) if mode is None else any(c in str(mode) for c in "wax+")
            rec = {"op": "write" if writes else "read", "path": os.path.abspath(os.fsdecode(path))}
        elif event == "os.rename":
            rec = {"op": "rename", "path": os.path.abspath(os.fsdecode(a[0])), "to": os.path.abspath(os.fsdecode(a[1]))}
        elif isinstance(a[0], (str, bytes, os.PathLike)):
            rec = {"op": "list", "path": os.path.abspath(os.fsdecode(a[0]))}
        else:
            return
        log.write(json.dumps(rec) + "\n")

    sys.addaudithook(hook)
    sys.meta_path.insert(0, _PatchParquet(lambda path, mode="r": hook("open", (path, mode, 0))))

    def record_imports() -> None:
        """At exit, every module imported from the project (``src/``, ``stages/``): the opens
        of an import are its cached ``.pyc`` or its source, which other code reads too (a memo
        hashing the sources), and the ones before ``runpy`` names the stage are not logged.  A
        spawned worker exits through ``sys.exit`` and records its own; a forked one runs
        functions its parent imported."""
        log = stage_log()
        if log is None:
            return
        state["busy"] = True
        # the project: the folder above stages/ (a stage may run elsewhere, as the results stage's do)
        root = os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[0])))
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str) and os.path.realpath(path).startswith(root + os.sep):
                log.write(json.dumps({"op": "import", "path": os.path.abspath(path)}) + "\n")

    atexit.register(record_imports)


class _PatchParquet:
    """pyarrow reads parquet files in C++, past Python's ``open`` (``pd.read_parquet(path)``
    goes to ``pyarrow.parquet.read_table``): once ``pyarrow.parquet`` is imported, its readers
    report each path they are given as an ``open`` for reading."""

    def __init__(self, report) -> None:  # noqa: ANN001
        self.report = report

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        if name != "pyarrow.parquet":
            return None
        import importlib.util

        sys.meta_path.remove(self)  # find the real spec, then wrap its loader
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader, report = spec.loader, self.report

        class Loader:
            def create_module(self, spec):  # noqa: ANN001, ANN201
                return loader.create_module(spec)

            def exec_module(self, module):  # noqa: ANN001
                loader.exec_module(module)
                _wrap(module, report)

        spec.loader = Loader()
        return spec


def _wrap(pq, report) -> None:  # noqa: ANN001
    import functools

    def paths(source):  # noqa: ANN001, ANN202
        items = source if isinstance(source, (list, tuple)) else [source]
        return [os.fspath(x) for x in items if isinstance(x, (str, os.PathLike))]

    for name in ("read_table", "read_schema", "read_metadata", "read_pandas"):
        fn = getattr(pq, name, None)
        if fn is None:
            continue

        def wrapped(source, *a, _fn=fn, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
            for p in paths(source):
                report(p)
            return _fn(source, *a, **kw)

        setattr(pq, name, functools.wraps(fn)(wrapped))
    write = getattr(pq, "write_table", None)
    if write is not None:
        def write_table(table, where, *a, _fn=write, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
            for p in paths(where):
                report(p, "w")
            return _fn(table, where, *a, **kw)

        pq.write_table = functools.wraps(write)(write_table)
    for cls_name in ("ParquetFile", "ParquetDataset"):
        cls = getattr(pq, cls_name, None)
        if cls is None:
            continue
        init = cls.__init__

        def new_init(self, source, *a, _init=init, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
            for p in paths(source):
                report(p)
            _init(self, source, *a, **kw)

        cls.__init__ = functools.wraps(init)(new_init)


if _DIR:
    os.makedirs(_DIR, exist_ok=True)
    _install(_DIR)
