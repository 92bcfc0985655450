"""What every stage script shares: config to a plain Run, the kind's stage function, and bad
input as a one-line error."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from hybridsched.errors import HybridschedError
from hybridsched.io import write_json


# the exit status of a process ended by SIGINT (128 + 2), as shells report it
INTERRUPTED = 130


def as_dict(node: Any) -> Any:
    """A plain, resolved Python container for the library (which knows nothing of Hydra)."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def multirun_dir() -> Path | None:
    """This job's output folder when running under Hydra multirun (``-m``), else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    return Path(hc.runtime.output_dir) if hc.mode == RunMode.MULTIRUN else None


def apply_tuned(cfg: DictConfig) -> None:
    """With ``use_tuned: true``, overlay the tune stage's ``paths.best_params`` onto the config."""
    if not cfg.get("use_tuned"):
        return
    import yaml

    path = Path(cfg.paths.best_params)
    try:
        tuned = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise HybridschedError(f"{path}: not found (run the tune stage, or set use_tuned=false)") from None
    except yaml.YAMLError as e:
        raise HybridschedError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    try:
        cfg.merge_with(tuned)
    except Exception as e:  # a key the config does not have
        raise HybridschedError(f"{path}: does not fit the config ({str(e).splitlines()[0]})") from None


def run_stage(stage: str | Callable[[Any], Any], cfg: DictConfig, outputs: tuple[str, ...] = (), hint: str = "") -> Any:
    """Look the workload's kind up in the registry and call its ``stage`` function (or call
    ``stage(run)`` itself, for a stage outside the kind interface); bad input ends the process
    with ``error: ...`` and exit code 1.

    Under multirun, the ``paths`` entries named in ``outputs`` move into the job's folder (so
    jobs never overwrite the DVC outputs or each other), the kind builds its inputs in memory,
    and the stage's result (a DataFrame or a dict of metrics) is saved there as
    ``result.json`` for the sweep's comparison table (stages/multirun.py).  With
    ``use_tuned``, the tuned values are applied first.  ``hint`` is appended to an error line
    (the check stage says how to get back after a refused ``dvc exp run``).
    """
    from hybridsched.kinds import get_kind
    from hybridsched.kinds.base import Run

    job = multirun_dir()
    if job is not None:
        for key in outputs:
            OmegaConf.update(cfg, f"paths.{key}", str(job / Path(cfg.paths[key]).name), merge=False)
    try:
        apply_tuned(cfg)
        run = Run(cfg=as_dict(cfg), in_memory=job is not None, policy=cfg.get("policy"))
        # every stage checks every setting first (milliseconds), so a stage run by hand, or a
        # worker it starts, never meets a bad value the check stage would have refused; the
        # workload files' memory estimate opens them, so only the check stage (which declares
        # them) makes it
        from hybridsched.settings_schema import check_settings

        check_settings(run.cfg, read_files=False)
        if callable(stage):
            result = stage(run)
        else:
            fn = getattr(get_kind(run.kind), stage, None)
            if fn is None:  # an optional function only some kinds have (e.g. serving's sim_vs_real)
                raise HybridschedError(f"workload.kind {run.kind!r}: this kind has no {stage!r} step")
            result = fn(run)
    except HybridschedError as e:
        print(f"error: {e}{hint}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        # Ctrl-C: every output is written atomically, so what is on disk is whole (old or new)
        print("interrupted", file=sys.stderr)
        sys.exit(INTERRUPTED)
    except OSError as e:
        import errno

        if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT):
            raise
        # a read-only metrics/ (or a full disk) is the user's setup, not a bug: one line
        where = f"{e.filename}: " if e.filename is not None else ""
        print(f"error: {where}cannot write ({e.strerror})", file=sys.stderr)
        sys.exit(1)
    if job is not None:
        from hydra.core.hydra_config import HydraConfig

        rows = result.reset_index().to_dict(orient="records") if isinstance(result, pd.DataFrame) else [result]
        write_json(job / "result.json", {"overrides": list(HydraConfig.get().overrides.task), "rows": rows})
    return result


def check_group_options(argv: list[str], conf: Path = Path(__file__).resolve().parents[1] / "conf") -> None:
    """An unknown option of a config group (``experiment=tiyn``) ends the process with one line
    listing the known options, before Hydra prints its page of search paths.  Also (every stage
    calls this before ``main()``): Hydra's own errors become one line (:func:`one_line_hydra_errors`)
    and a multirun sweep is checked whole before its first job runs (:func:`check_sweep`)."""
    one_line_hydra_errors()
    _check_group_options(argv, conf)
    check_sweep(argv, conf)


def hydra_error_line(e: BaseException) -> str:
    """Hydra's / OmegaConf's multi-line error as one line: each message line that is not an
    indented detail, the causes' first lines too, without the HYDRA_FULL_ERROR advice."""
    parts: list[str] = []
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        for line in str(e).splitlines():
            line = line.strip()
            if line and not line.startswith(("full_key:", "object_type=", "reference_type=", "See https://",
                                             "Set the environment variable HYDRA_FULL_ERROR")) and line not in parts:
                parts.append(line.rstrip("."))
        e = e.__cause__  # type: ignore[assignment]
    return "; ".join(parts)


def one_line_hydra_errors() -> None:
    """Make a bad override (``workload.rte=5``, ``workload.rate=[1,2``) end the process with
    ``error: ...`` on one line and exit code 1, instead of Hydra's five lines, and Ctrl-C
    outside the stage function print ``interrupted``, not a traceback.  Hydra re-raises
    its errors with HYDRA_FULL_ERROR=1; an exception hook prints those in one line and leaves
    every other exception's traceback as it was."""
    import os

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    previous = sys.excepthook

    def hook(kind, value, tb):  # type: ignore[no-untyped-def]
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if isinstance(value, HydraException | OmegaConfBaseException):
            print(f"error: {hydra_error_line(value)}", file=sys.stderr)
            return
        if isinstance(value, KeyboardInterrupt):  # Ctrl-C outside the stage function
            print("interrupted", file=sys.stderr)
            return
        previous(kind, value, tb)

    sys.excepthook = hook


def check_sweep(argv: list[str], conf: Path) -> None:
    """With ``-m``, compose every job of the sweep (comma lists of the overrides) and check its
    settings and policy name before the first job runs: ``-m policy=eft,nosuch`` used to run
    eft and then fail.  Sweeps of the Optuna sweeper (ranges) and other config dirs are left
    to Hydra."""
    import itertools

    if not {"-m", "--multirun"} & set(argv) or any(a in ("-cp", "-cn", "--config-path", "--config-name")
                                                     or a.startswith(("-cp=", "-cn=", "--config")) for a in argv):
        return
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hybridsched.errors import HybridschedError
    from hybridsched.kinds.base import Run
    from hybridsched.settings_schema import check_settings

    args = [a for a in argv if not a.startswith("-") and "=" in a and not a.startswith("hydra")]
    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except Exception:
        return  # a syntax error: Hydra reports it (in one line) when main() starts
    choices = []
    for o in parsed:
        if o.is_sweep_override():
            if not o.is_discrete_sweep():
                return  # a range for the Optuna sweeper
            choices.append([f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()])
        else:
            choices.append([o.input_line])
    jobs = list(itertools.product(*choices))
    if len(jobs) < 2:
        return
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        for job in jobs:
            try:
                cfg = as_dict(compose(config_name="config", overrides=list(job)))
                check_settings(cfg)
                Run(cfg=cfg, policy=cfg.get("policy")).policy_names()
            except HybridschedError as e:
                print(f"error: sweep job {' '.join(job)}: {e} (nothing of the sweep ran)", file=sys.stderr)
                sys.exit(1)
            except Exception as e:  # a composition error: Hydra's, in one line
                print(f"error: sweep job {' '.join(job)}: {hydra_error_line(e)} (nothing of the sweep ran)",
                      file=sys.stderr)
                sys.exit(1)


def _check_group_options(argv: list[str], conf: Path) -> None:
    for arg in argv:
        group, sep, option = arg.lstrip("+~").partition("=")
        folder = conf / group
        if not sep or "." in group or group.startswith("hydra/") or not folder.is_dir():
            continue  # a key, Hydra's own groups (plugins add options), or not a group
        if option in ("null", "") or "," in option:
            continue
        if not (folder / f"{option}.yaml").is_file():
            known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
            print(f"error: {group}={option}: unknown option of config group '{group}'; known: {known}", file=sys.stderr)
            sys.exit(1)
