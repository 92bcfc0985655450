"""File-access recorder for the stages (tests/file_access.py): with this folder on PYTHONPATH
and ``HYBRIDSCHED_AUDIT_DIR`` set, every ``python -m stages.NAME`` process (as DVC runs them)
appends each ``open`` (path, read or write), rename and directory listing to
``$HYBRIDSCHED_AUDIT_DIR/NAME.log``, one JSON line each, via ``sys.addaudithook``.  Other
Python processes (DVC itself) record nothing.  Files opened by native code that bypasses
Python's ``open`` would not be seen; the stages' readers (pandas, numpy, json, joblib, torch,
yaml) all go through it.
"""

from __future__ import annotations

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


if _DIR:
    os.makedirs(_DIR, exist_ok=True)
    _install(_DIR)
