"""Atomic artifact writers: write to a temp file in the target folder, then rename."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

_UMASK = os.umask(0)
os.umask(_UMASK)


def check_output_dir(path: str | os.PathLike[str], setting: str | None = None) -> None:
    """Refuse (HybridschedError, one line naming ``setting`` when given and the path) an output
    folder that is an existing file or lies under one: a stage swaps its output folder in whole,
    which would replace the file."""
    from hybridsched.errors import HybridschedError

    p = Path(path)
    for q in (p, *p.parents):
        if q.is_dir():
            return  # an existing folder: everything above it is a folder too
        if q.exists() or q.is_symlink():
            where = "is an existing file" if q == p else f"lies under {q}, an existing file"
            raise HybridschedError(f"{setting + ': ' if setting else ''}{p} {where}, not a folder "
                                   f"(a stage writes a folder there; choose another path)")


@contextlib.contextmanager
def _naming_target(temp: str, target: Path) -> Iterator[None]:
    """An OSError about a hidden temp path (``temp``, a path inside it, or one starting with it),
    or about no file at all (a write to a full disk), names ``target`` instead: a read-only or
    full metrics/ is reported as the file the user knows, not as
    ``metrics/.config_check.json.XXXX.json`` or ``None``."""
    try:
        yield
    except OSError as e:
        name = os.path.abspath(os.fsdecode(e.filename)) if isinstance(e.filename, str | bytes) else None
        temp = os.path.abspath(temp)  # mkstemp joins a relative folder as given ('./.x.json.k2j4'): compare whole paths
        if name is not None and name.startswith(temp):
            inside = name[len(temp):].lstrip(os.sep) if name.startswith(temp + os.sep) else ""
            e.filename = str(target / inside) if inside else str(target)
            e.filename2 = None
        elif e.filename is None:  # a write to a full disk names no file: it is the target's
            e.filename = str(target)
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    target = Path(path)
    check_output_dir(target.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _naming_target(str(target.parent / f".{target.name}."), target):
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; artifacts get the usual mode
    try:
        with _naming_target(tmp, target):
            yield Path(tmp)
            os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented strict JSON, atomically.  NaN and infinity (which JSON does not
    have; ``json.dumps`` would write a bare ``NaN`` that DVC and other readers reject) become
    ``null``; ``allow_nan=False`` makes sure none slips through."""
    with atomic_path(path) as tmp:
        tmp.write_text(json_text(obj))


def json_safe(obj: Any, fallback: Any = None) -> Any:
    """``obj`` with numpy scalars and arrays as Python values and non-finite floats as None.
    ``fallback(o)`` turns any other object into something JSON can hold (default: numpy's
    ``item``/``tolist``, else TypeError)."""
    fallback = fallback or _json_default
    if isinstance(obj, np.ndarray | np.generic):
        obj = obj.tolist()  # also np.generic: its Python scalar
    if isinstance(obj, dict):
        return {k if isinstance(k, str | int | float | bool) or k is None else str(k): json_safe(v, fallback)
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v, fallback) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, str | int | bool) or obj is None:
        return obj
    return json_safe(fallback(obj), fallback)


def json_text(obj: Any, fallback: Any = None) -> str:
    """Indented strict JSON of ``obj`` (see :func:`json_safe`), with a final newline."""
    return json.dumps(json_safe(obj, fallback), indent=2, sort_keys=False, allow_nan=False) + "\n"


def check_finite(obj: Any, where: str | os.PathLike[str], name: str = "") -> None:
    """Refuse (HybridschedError, one line naming ``where`` and the metric) the first NaN or
    infinity in ``obj``: a dict (keys join ``name`` with dots), list, DataFrame (``row.column``),
    numpy array or number.  A metrics file must not hold one (``write_json`` would write it as
    ``null``, a csv as an empty cell or ``inf``), so a producer checks before it writes."""
    from hybridsched.errors import HybridschedError

    if isinstance(obj, pd.DataFrame):
        obj = {str(r): row for r, row in obj.to_dict(orient="index").items()}
    if isinstance(obj, np.ndarray | np.generic):
        obj = obj.tolist()
    if isinstance(obj, dict):
        for k, v in obj.items():
            check_finite(v, where, f"{name}.{k}" if name else str(k))
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            check_finite(v, where, f"{name}[{i}]")
    elif isinstance(obj, float) and not math.isfinite(obj):
        raise HybridschedError(f"{where}: metric {name or 'value'} is {obj} (not a finite number; "
                               f"nothing of it was written)")


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write a text file atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_frame(path: str | os.PathLike[str], df: pd.DataFrame) -> None:
    """Write a DataFrame as parquet or csv (by suffix), atomically."""
    p = Path(path)
    with atomic_path(p) as tmp:
        if p.suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# Wall-clock timings differ on every run: they go to stdout and MLflow, never into a file
# under version control (a rerun must leave `git status` and `dvc status` clean).
TIMING_KEYS = frozenset({"wall_s", "fit_s", "elapsed_s", "lp_solve_s", "seconds_total"})


def without_timings(obj: Any) -> Any:
    """``obj`` with every dict key in :data:`TIMING_KEYS` removed, recursively."""
    if isinstance(obj, dict):
        return {k: without_timings(v) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_temp_dirs(target: Path) -> list[Path]:
    """Remove the temp folders a killed run of :func:`atomic_dir` left beside ``target``
    (``.workload.tmp-PID-*`` whose process is gone, and unnamed ``.workload.XXXXXXXX`` ones of mkdtemp);
    a live run's folder is left alone.  Returns what was removed."""
    import re
    import shutil

    removed = []
    named = re.compile(rf"^\.{re.escape(target.name)}\.tmp-(\d+)-")
    legacy = re.compile(rf"^\.{re.escape(target.name)}\.[A-Za-z0-9_]{{8}}$")  # mkdtemp's 8 characters
    for p in target.parent.glob(f".{target.name}.*"):
        m = named.match(p.name)
        stale = (m is not None and not _pid_alive(int(m.group(1)))) or (m is None and legacy.match(p.name) is not None)
        if stale and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a fresh temp folder beside ``path``; it replaces ``path`` only if the block succeeds."""
    import shutil

    target = Path(path)
    check_output_dir(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_dirs(target)
    with _naming_target(str(target.parent / f".{target.name}.tmp-"), target):
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes 0700
    try:
        with _naming_target(str(tmp), target):
            yield tmp
            if target.exists():
                old = target.with_name(f".{target.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(target, old)
                os.replace(tmp, target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def staged_files(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp folder inside ``dest`` to write a set of files into; only if the block
    succeeds are they all moved into place (each by an atomic rename, within milliseconds of
    each other), so an interrupted stage never leaves new files beside stale ones."""
    import shutil

    target = Path(dest)
    check_output_dir(target)
    target.mkdir(parents=True, exist_ok=True)
    with _naming_target(str(target / ".staging."), target):
        tmp = Path(tempfile.mkdtemp(prefix=".staging.", dir=target))
    try:
        with _naming_target(str(tmp), target):
            yield tmp
            for f in sorted(p for p in tmp.rglob("*") if p.is_file()):
                final = target / f.relative_to(tmp)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(f, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_model_meta(path: str | os.PathLike[str], made_by: str) -> dict[str, Any]:
    """A model folder's JSON metadata; ModelFileError (naming the file) when it is missing
    or not a JSON object. ``made_by`` says what writes it, for the 'not found' hint."""
    from hybridsched.errors import ModelFileError

    p = Path(path)
    try:
        meta = json.loads(p.read_text())
    except FileNotFoundError:
        raise ModelFileError(f"{p}: not found (run {made_by})") from None
    except (OSError, ValueError) as e:
        raise ModelFileError(f"{p}: corrupt ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    if not isinstance(meta, dict):
        raise ModelFileError(f"{p}: corrupt (not a JSON object)")
    return meta
