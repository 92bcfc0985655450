"""Every setting any stage reads, with its declared type and range: the ``check`` stage's table.

:func:`check_settings` walks the composed config (plain, resolved dicts) and checks each leaf
against the rule of the first pattern in :data:`SCHEMA` that matches its dotted key (``*`` and
shell wildcards match one key segment).  A leaf no pattern matches is a key no stage reads (a
typo such as ``+workload.rte=5``): refused with the keys that are known there.  Rules that
depend on other settings (mix shares against ``serving.models``, ``sim.policies`` against the
policies that exist) get the whole config.  Then :func:`check_memory` estimates what the run
will hold in memory and refuses sizes that cannot fit, before anything is allocated.

The kinds' own ``check_config`` functions still run after this (they know the semantics: a
trace file, a latency table); this table makes sure no setting goes unchecked, and
``tests/test_settings_schema.py`` fails on a setting of any composed config that no rule covers.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hybridsched.errors import HybridschedError

Config = dict[str, Any]


def show(value: Any) -> str:
    """A value as the user wrote it: plain numbers (``-5.0``, never ``np.float64(-5.0)``),
    quoted strings, lists in brackets."""
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, list | dict | str):
        try:
            value = value.item()  # a numpy scalar
        except (TypeError, ValueError):
            pass
    if isinstance(value, list | tuple):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _bound(x: float) -> str:
    """A rule's bound as written: ``0.5``, ``100``, and a large whole number in full
    (``2147483647``, not ``2.14748e+09``)."""
    return str(int(x)) if abs(x) >= 1e6 and x == int(x) else f"{x:g}"


def _number(value: Any) -> float | None:
    """The value as a finite float, or None where it is not a number (text, bool, NaN, inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class Num:
    """A number (``integer``: a whole number) within the bounds; ``null`` allows None."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    integer: bool = False
    null: bool = False

    def describe(self, cfg: Config | None = None) -> str:
        parts = [f">= {_bound(self.ge)}" if self.ge is not None else "", f"> {_bound(self.gt)}" if self.gt is not None else "",
                 f"<= {_bound(self.le)}" if self.le is not None else "", f"< {_bound(self.lt)}" if self.lt is not None else ""]
        lo, hi = [p for p in parts[:2] if p], [p for p in parts[2:] if p]
        noun = "an integer" if self.integer else "a number"
        if lo and hi:
            left = "[" if self.ge is not None else "("
            right = "]" if self.le is not None else ")"
            a = self.ge if self.ge is not None else self.gt
            b = self.le if self.le is not None else self.lt
            text = f"{noun} in {left}{_bound(a)}, {_bound(b)}{right}"
        else:
            text = " ".join([noun, *lo, *hi])
        return text + (" or null" if self.null else "")

    def ok(self, value: Any) -> bool:
        if value is None:
            return self.null
        x = _number(value)
        if x is None or (self.integer and (isinstance(value, float) or x != int(x))):
            return False
        return ((self.ge is None or x >= self.ge) and (self.gt is None or x > self.gt)
                and (self.le is None or x <= self.le) and (self.lt is None or x < self.lt))

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        if not self.ok(value):
            raise HybridschedError(f"{key}: must be {self.describe()}, got {show(value)}")


@dataclass(frozen=True)
class NonZeroInt(Num):
    """A worker count in joblib's and Optuna's sense: ``n`` workers, or ``-1`` (``-k``) for every
    core (but k - 1); 0 has no meaning there."""

    def describe(self, cfg: Config | None = None) -> str:
        return "a non-zero integer (-1: every core)"

    def ok(self, value: Any) -> bool:
        return super().ok(value) and value != 0


@dataclass(frozen=True)
class Storage:
    """``tune.storage``: an Optuna journal file path, or a database URL whose scheme SQLAlchemy
    knows (``sqlite:///FILE`` in an existing folder, ``postgresql://``, ``mysql://``), whose
    driver is installed and, for a server, whose host answers within :data:`CONNECT_TIMEOUT_S`."""

    def describe(self, cfg: Config | None = None) -> str:
        return "a journal file path or a sqlite:///, postgresql:// or mysql:// URL"

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        Text()(key, value, cfg)
        if "://" not in value:
            return  # a journal file: its folder is made when the study opens
        scheme = value.split("://", 1)[0]
        dialect = scheme.split("+", 1)[0]
        if dialect not in DB_SCHEMES:
            raise HybridschedError(f"{key}: unknown database scheme {scheme!r}; use a journal file path or a "
                                   f"{', '.join(s + '://' for s in DB_SCHEMES)} URL")
        from sqlalchemy import create_engine
        from sqlalchemy.engine import make_url

        try:
            url = make_url(value)
            create_engine(url)  # imports the driver; connects to nothing
        except Exception as e:  # noqa: BLE001 - a malformed URL or a missing driver: one line
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise HybridschedError(f"{key}: cannot use the {scheme}:// URL ({type(e).__name__}: {first})") from None
        if dialect == "sqlite":
            folder = os.path.dirname(os.path.abspath(url.database)) if url.database else None
            if folder and url.database != ":memory:" and not os.path.isdir(folder):
                raise HybridschedError(f"{key}: folder {folder!r} of the sqlite file does not exist")
            return
        import socket

        host, port = url.host or "localhost", url.port or DB_PORTS[dialect]
        try:
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as e:
            raise HybridschedError(f"{key}: cannot reach the database server at {host}:{port} "
                                   f"({e.strerror or type(e).__name__})") from None


# tune.storage's database URLs: SQLAlchemy dialects Optuna's RDB storage is tested with, their
# servers' default ports, and how long the check waits for one to answer
DB_SCHEMES = ("sqlite", "postgresql", "mysql")
DB_PORTS = {"postgresql": 5432, "mysql": 3306}
CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class NotFor:
    """A workload setting of some kinds only: refused under a built-in kind none of whose
    stages reads it (``+workload.trace_path=...`` with the machine kind is a mistake)."""

    kinds: tuple[str, ...]  # the kinds that do not read it
    rule: Any

    def describe(self, cfg: Config | None = None) -> str:
        return describe(self.rule, cfg)

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        kind = (cfg.get("workload") or {}).get("kind")
        if key.startswith("workload.") and kind in self.kinds:
            raise HybridschedError(f"{key}: not read by the {kind} kind (a setting of the serving kind's workloads)")
        self.rule(key, value, cfg)


@dataclass(frozen=True)
class Pair:
    """A ``[low, high]`` pair of numbers within ``item``'s bounds, with low <= high."""

    item: Num

    def describe(self, cfg: Config | None = None) -> str:
        return f"a [low, high] pair, low <= high, each {self.item.describe()}"

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        if not isinstance(value, list) or len(value) != 2:
            raise HybridschedError(f"{key}: must be a [low, high] pair of {self.item.describe().replace('a number', 'numbers').replace('an integer', 'integers')}, got {show(value)}")
        for v in value:
            if not self.item.ok(v):
                raise HybridschedError(f"{key}: both ends must be {self.item.describe()}, got {show(value)}")
        if value[0] > value[1]:
            raise HybridschedError(f"{key}: low must be <= high, got {show(value)}")


@dataclass(frozen=True)
class Nums:
    """A list of at least ``min_len`` numbers, each within ``item``'s bounds; ``null`` allows None."""

    item: Num
    min_len: int = 1
    null: bool = False

    def describe(self, cfg: Config | None = None) -> str:
        return (f"{_list_of(self.min_len)} numbers, each {self.item.describe()}"
                + ("; or null" if self.null else ""))

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        if value is None and self.null:
            return
        if not isinstance(value, list) or len(value) < self.min_len:
            raise HybridschedError(f"{key}: must be a list of at least {self.min_len} value(s), got {show(value)}")
        bad = [v for v in value if not self.item.ok(v)]
        if bad:
            raise HybridschedError(f"{key}: every value must be {self.item.describe()}, got {show(bad[0])} in {show(value)}")


@dataclass(frozen=True)
class Choice:
    """One of ``options``; ``null`` allows None."""

    options: tuple[Any, ...]
    null: bool = False

    def describe(self, cfg: Config | None = None) -> str:
        return "one of " + ", ".join(map(str, self.options)) + (" or null" if self.null else "")

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        if (value is None and self.null) or (value is not None and not isinstance(value, bool) and value in self.options):
            return
        raise HybridschedError(f"{key}: must be one of {', '.join(map(str, self.options))}, got {show(value)}")


@dataclass(frozen=True)
class Bool:
    """true or false."""

    def describe(self, cfg: Config | None = None) -> str:
        return "true or false"

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        if not isinstance(value, bool):
            raise HybridschedError(f"{key}: must be true or false, got {show(value)}")


@dataclass(frozen=True)
class Text:
    """A non-empty string (a path, a name, a ``_target_``); ``null`` allows None."""

    null: bool = False

    def describe(self, cfg: Config | None = None) -> str:
        return "a non-empty string" + (" or null" if self.null else "")

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        if value is None and self.null:
            return
        if not isinstance(value, str) or not value:
            raise HybridschedError(f"{key}: must be a non-empty string{' or null' if self.null else ''}, got {show(value)}")


@dataclass(frozen=True)
class OutDir(Text):
    """A folder a stage writes (and swaps in whole): a non-empty string that is not an existing
    file nor a path under one, which the swap would replace."""

    def describe(self, cfg: Config | None = None) -> str:
        return "a folder path (not an existing file)" + (" or null" if self.null else "")

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        super().__call__(key, value, cfg)
        if value is None:  # allowed by ``null``
            return
        from hybridsched.io import check_output_dir

        check_output_dir(value, key)


def _train_late_names(cfg: Config) -> list[str]:
    """The machine policies with a settings block in ``train_late`` (the policies that stage can
    train; read from the config, so the check imports no policy class)."""
    late = cfg.get("train_late") or {}
    return [n for n in (cfg.get("policies") or {}).get("machine") or {} if isinstance(late.get(n), dict)]


@dataclass(frozen=True)
class Names:
    """A list of names, each one of ``known(cfg)`` (None: any string); ``null`` allows None."""

    known: Callable[[Config], list[str]] | None = None
    what: str = "name"
    min_len: int = 1
    null: bool = False

    def describe(self, cfg: Config | None = None) -> str:
        """The rule as a phrase; with ``cfg``, the known names too (when they are few)."""
        known = self.known(cfg) if self.known is not None and cfg is not None else None
        among = f" from {', '.join(known)}" if known and len(known) <= 8 else ""
        plural = self.what + ("es" if self.what.endswith(("s", "x", "ch")) else "s")
        return (f"{_list_of(self.min_len)} {plural}{among}, none twice"
                + ("; or null" if self.null else ""))

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        if value is None and self.null:
            return
        if not isinstance(value, list) or len(value) < self.min_len or not all(isinstance(v, str) for v in value):
            raise HybridschedError(f"{key}: must be a list of at least {self.min_len} {self.what}(s), got {show(value)}")
        if self.known is not None:
            known = self.known(cfg)
            unknown = [v for v in value if v not in known]
            if unknown:
                raise HybridschedError(f"{key}: unknown {self.what}(s) {show(unknown)}; known: {', '.join(sorted(known))}")
        if len(set(value)) != len(value):
            raise HybridschedError(f"{key}: a {self.what} is listed twice in {show(value)}")


@dataclass(frozen=True)
class Shares:
    """A ``{name: share}`` mix: names from ``known(cfg)``, shares >= 0 that sum to 1.  A mix that
    does not sum to 1 is refused, not renormalised (a typo would silently change the mix)."""

    known: Callable[[Config], list[str]]
    what: str

    def describe(self, cfg: Config | None = None) -> str:
        return f"a {{{self.what}: share}} mapping, shares >= 0 that sum to 1"

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        if not isinstance(value, dict) or not value:
            raise HybridschedError(f"{key}: must be a non-empty {{{self.what}: share}} mapping, got {show(value)}")
        known = self.known(cfg)
        unknown = [k for k in value if k not in known]
        if unknown:
            raise HybridschedError(f"{key}: unknown {self.what}(s) {show(unknown)}; known: {', '.join(sorted(known))}")
        bad = {k: v for k, v in value.items() if _number(v) is None or v < 0}
        if bad:
            k, v = next(iter(bad.items()))
            raise HybridschedError(f"{key}.{k}: a share must be a number >= 0, got {show(v)}")
        total = sum(float(v) for v in value.values())
        if abs(total - 1.0) > 1e-6:
            raise HybridschedError(f"{key}: shares must sum to 1, got {total:g} ({show(value)}); they are not renormalised")


@dataclass(frozen=True)
class ByKind:
    """The rule of the workload's kind (``workload.kind``), ``default`` for the others."""

    rules: tuple[tuple[str, Rule], ...]
    default: Rule

    def describe(self, cfg: Config | None = None) -> str:
        return "; ".join([*(f"{kind} kind: {describe(rule, cfg)}" for kind, rule in self.rules),
                          f"other kinds: {describe(self.default, cfg)}"])

    def __call__(self, key: str, value: Any, cfg: Config) -> None:
        kind = str((cfg.get("workload") or {}).get("kind"))
        dict(self.rules).get(kind, self.default)(key, value, cfg)


def _policies(kind: str) -> Callable[[Config], list[str]]:
    return lambda cfg: list((cfg.get("policies") or {}).get(kind) or {})


def _keys(*path: str) -> Callable[[Config], list[str]]:
    def known(cfg: Config) -> list[str]:
        node: Any = cfg
        for p in path:
            node = (node or {}).get(p) if isinstance(node, dict) else None
        return list(node or [])

    return known


def _list_of(min_len: int) -> str:
    """``a list of``, as :meth:`Nums.describe` and :meth:`Names.describe` say it."""
    return {0: "a list (maybe empty) of", 1: "a non-empty list of"}.get(min_len, f"a list of at least {min_len}")


def _real_mix(key: str, value: Any, cfg: Config) -> None:
    """``serving.real.mix``: null (the workload's mix) or a mix like ``workload.mix``."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise HybridschedError(f"{key}: must be null or a mix like workload.mix, got {show(value)}")
    for part, shares in value.items():
        rule = SCHEMA.get(f"workload.mix.{part}")
        if rule is None:
            raise HybridschedError(f"{key}.{part}: unknown setting (no stage reads it); known here: backends, classes, models, precisions")
        rule(f"{key}.{part}", shares, cfg)


def describe(rule: Rule, cfg: Config | None = None) -> str:
    """A rule as a short phrase (``an integer >= 1``, ``one of csv, parquet or null``): its
    ``describe``, else the first line of a rule function's docstring after its ``key:``."""
    if hasattr(rule, "describe"):
        return rule.describe(cfg)
    doc = (getattr(rule, "__doc__", None) or "").strip().split("\n\n")[0]
    return " ".join(doc.split(": ", 1)[-1].split()).rstrip(".") or "checked by its own function"


# shorthands for the table
POS = Num(gt=0)
NONNEG = Num(ge=0)
POS_INT = Num(ge=1, integer=True)
NONNEG_INT = Num(ge=0, integer=True)
# numpy's legacy generator, scikit-learn and Optuna's samplers take seeds below 2**32; a stage
# adds a worker, episode or size number to some seeds, hence the margin
SEED = Num(ge=0, le=2**31 - 1, integer=True)
SERVING_ONLY = ("machine", "cluster")
FRACTION = Num(gt=0, le=1)      # (0, 1]
UNIT = Num(ge=0, le=1)          # [0, 1]
OPEN_UNIT = Num(gt=0, lt=1)     # (0, 1)
ANY_NUM = Num()
PATH = Text()
OUT_DIR = OutDir()
FLAG = Bool()
# a search space bound of tune.spaces: {low, high, log, int} or [low, high] (or {choices: [...]})
SPACE_BOUND = Num(ge=0)

Rule = Callable[[str, Any, Config], None]

# Dotted key pattern -> rule.  First match wins; ``*`` matches one key segment.  Keep the
# groups in the order of params.yaml.
SCHEMA: dict[str, Rule] = {
    # top level
    "tracking.enabled": FLAG,
    "tracking.experiment": Text(),
    "policy": Text(null=True),
    "use_tuned": FLAG,
    "paths.workload_dir": OUT_DIR,  # folders a stage writes whole: never an existing file
    "paths.traces_dir": OUT_DIR,
    "paths.metrics_dir": OUT_DIR,
    "paths.tuned": OUT_DIR,
    "paths.bound_cache": OutDir(null=True),  # the LP bound memo's folder; null: no memo
    "paths.*": PATH,
    # cluster: the machine kind's devices, power and price (also read by the other kinds)
    "cluster.source": Choice(("config", "profile")),
    "cluster.profile_path": PATH,
    "cluster.n_gpus": NONNEG_INT,
    "cluster.gpu_mem_mb": POS,
    "cluster.cpu_mem_mb": POS,
    "cluster.cpu_gflops": POS,
    "cluster.gpu_max_speedup": POS,
    "cluster.gpu_speedup_exponent": POS,
    "cluster.launch_s": NONNEG,
    "cluster.transfer_mb_per_s": POS,
    # a lognormal of mean 1 has median exp(-sigma²/2): past 3 nearly every run time is ~0
    "cluster.noise_sigma": Num(ge=0, le=3),
    "cluster.*_w": NONNEG,
    "cluster.price_per_kwh": NONNEG,
    # workload (union over conf/workload/*.yaml; workload.test.X takes the rule of workload.X)
    "workload.name": Text(),
    "workload.kind": Text(),
    "workload.seed": SEED,
    "workload.n_train": POS_INT,
    "workload.n_test": POS_INT,
    # serving: null = from workload.load
    "workload.rate": ByKind((("serving", Num(gt=0, null=True)),), POS),
    "workload.load": POS,
    "workload.size_range": Pair(POS),
    "workload.intensity_range": Pair(UNIT),
    "workload.memory_range": Pair(POS),
    "workload.burst_amplitude": Num(ge=0, lt=1),
    "workload.burst_period_s": POS,
    "workload.dag_job_size": NONNEG_INT,
    "workload.dag_max_parents": POS_INT,
    "workload.priority_levels": POS_INT,
    "workload.deadline_slack": NONNEG,
    "workload.path": Text(null=True),
    "workload.format": Choice(("csv", "parquet"), null=True),
    "workload.split.test_fraction": OPEN_UNIT,
    "workload.split.column": Text(null=True),
    "workload.time_compression": POS,
    "workload.max_tasks": Num(ge=1, integer=True, null=True),
    "workload.untimed_duration_s": Num(gt=0, null=True),
    "workload.test_fraction": OPEN_UNIT,
    "workload.nodes.path": PATH,
    "workload.nodes.sample.n_nodes": Num(ge=1, integer=True, null=True),
    "workload.nodes.sample.seed": SEED,
    "workload.nodes.sample.min_per_model": NONNEG_INT,
    "workload.arrival": Choice(("poisson", "gamma", "replay")),
    "workload.cv": NotFor(SERVING_ONLY, POS),
    "workload.trace_path": NotFor(SERVING_ONLY, PATH),
    "workload.time_column": NotFor(SERVING_ONLY, Text()),
    "workload.size_column": NotFor(SERVING_ONLY, Text(null=True)),
    "workload.tokens_per_sample": NotFor(SERVING_ONLY, POS_INT),
    "workload.max_request_size": NotFor(SERVING_ONLY, POS_INT),
    "workload.request_size": NotFor(SERVING_ONLY, POS_INT),
    "workload.mix.models": Shares(_keys("serving", "models"), "model"),
    "workload.mix.classes": Shares(_keys("serving", "classes"), "class"),
    "workload.mix.backends": Shares(_keys("serving", "backends"), "backend"),
    "workload.mix.precisions": Shares(_keys("serving", "precisions"), "precision"),
    "workload.slo.rule": NotFor(SERVING_ONLY, Choice(("factor", "absolute_ms"))),
    "workload.slo.*": NotFor(SERVING_ONLY, POS),
    # sim
    "sim.seed": SEED,
    "sim.dispatch": Choice(("all", "arrival", "ordered", "late")),
    "sim.compiled": FLAG,
    "sim.stream.enabled": FLAG,
    "sim.stream.chunk_size": POS_INT,
    "sim.stream.write_trace": FLAG,
    "sim.stream.relative_accuracy": OPEN_UNIT,
    "sim.bound_lp.enabled": FLAG,
    "sim.bound_lp.delta": Num(gt=0, null=True),
    "sim.bound_lp.rho": Num(ge=1),
    "sim.bound_lp.max_levels": POS_INT,
    "sim.bound_lp.max_variables": Num(ge=1, integer=True, null=True),
    "sim.bound_lp.piece_cuts": Num(ge=0, le=8, integer=True),
    "sim.policies.machine": Names(_policies("machine"), "machine policy name", null=True),
    "sim.policies.cluster": Names(_policies("cluster"), "cluster policy name", null=True),
    "sim.policies.serving": Names(_policies("serving"), "serving policy name", null=True),
    # rf
    "rf.model": Choice(("random_forest", "xgboost")),
    "rf.model_dir": OUT_DIR,
    "rf.seed": SEED,
    "rf.test_fraction": OPEN_UNIT,
    "rf.importance_repeats": POS_INT,
    "rf.max_train_rows": Num(ge=2, integer=True),
    "rf.random_forest.n_estimators": POS_INT,
    "rf.random_forest.max_depth": Num(ge=1, integer=True, null=True),
    "rf.random_forest.min_samples_leaf": POS_INT,
    "rf.random_forest.max_features": FRACTION,
    "rf.*.n_jobs": NonZeroInt(integer=True),
    "rf.xgboost.n_estimators": POS_INT,
    "rf.xgboost.max_depth": POS_INT,
    "rf.xgboost.learning_rate": POS,
    "rf.xgboost.min_child_weight": NONNEG,
    "rf.xgboost.subsample": FRACTION,
    "rf.xgboost.colsample_bytree": FRACTION,
    # dqn (machine kind) and its cluster / serving counterparts
    "dqn.model_dir": OUT_DIR,
    "dqn.fractions": Nums(FRACTION),
    "dqn.tau": FRACTION,
    "dqn.alpha": UNIT,
    "dqn.beta": UNIT,
    "dqn.max_grad_norm": POS,
    "dqn.observe_every": POS_INT,
    # cem: the search, and what each kind trains on
    "cem.model_dir": OUT_DIR,
    "cem.seed": SEED,
    "cem.population": Num(ge=2, integer=True),
    "cem.generations": POS_INT,
    "cem.elite_frac": FRACTION,
    "cem.init_std": POS,
    "cem.min_std": NONNEG,
    "cem.smoothing": UNIT,
    "cem.antithetic": FLAG,
    "cem.machine.scenarios": POS_INT,
    "cem.machine.tasks": Num(ge=2, integer=True),
    "cem.machine.validation_scenarios": POS_INT,
    "cem.machine.select_from": NONNEG_INT,
    "cem.machine.selection_scenarios": POS_INT,
    "cem.machine.hidden": POS_INT,
    "cem.machine.fraction_step": FRACTION,
    "cem.machine.load": Pair(POS),
    "cem.machine.intensity_low": Pair(UNIT),
    "cem.machine.intensity_width": Pair(UNIT),
    "cem.machine.*_log": Pair(POS),
    "cem.machine.burst_amplitude": Pair(Num(ge=0, lt=1)),
    "cem.machine.burst_period_s": POS,
    "cem.machine.dag_share": UNIT,
    "cem.machine.dag_job_size": Pair(Num(ge=2, integer=True)),
    "cem.machine.dispatch": Choice(("arrival", "late")),
    "cem.machine.late_base": Choice(("spt_late", "wspt_late", "eft_late", "heft_late")),
    "cem.serving.scenarios": POS_INT,
    "cem.serving.requests": Num(ge=2, integer=True),
    "cem.serving.load": Pair(POS),
    "cem.serving.bursty_share": UNIT,
    "cem.serving.cv": Pair(POS),
    "cem.serving.request_size": Pair(POS_INT),
    "cem.serving.interactive_factor": Pair(POS),
    "cem.serving.batch_factor": Pair(POS),
    "cem.serving.slo_scale": Pair(POS),
    "cem.serving.select_from": NONNEG_INT,
    "cem.serving.selection_scenarios": POS_INT,
    "cem.serving.heldout_requests": Num(ge=2, integer=True),
    "cem.serving.heldout_loads": Nums(POS),
    "cem.serving.heldout_trace": PATH,
    "cem.cluster.windows": POS_INT,
    "cem.cluster.min_pods": Num(ge=2, integer=True),
    "cem.cluster.max_pods": Num(ge=2, integer=True),
    "cem.cluster.min_rate": POS,
    "cem.cluster.max_rate": POS,
    "cem.cluster.eval_windows": POS_INT,
    "cem.cluster.search": Choice(("all", "queue")),
    # the cluster kind's searches (kinds/cluster/late_train.py): rl.cem's keys and each mixture's
    "train_late.cluster.*.generations": POS_INT,
    "train_late.cluster.*.population": Num(ge=2, integer=True),
    "train_late.cluster.*.elite_frac": FRACTION,
    "train_late.cluster.*.init_std": POS,
    "train_late.cluster.*.min_std": NONNEG,
    "train_late.cluster.*.smoothing": FRACTION,
    "train_late.cluster.*.antithetic": FLAG,
    "train_late.cluster.*.seed": SEED,
    "train_late.cluster.*.windows": POS_INT,
    "train_late.cluster.*.min_pods": Num(ge=2, integer=True),
    "train_late.cluster.*.max_pods": Num(ge=2, integer=True),
    "train_late.cluster.*.eval_windows": NONNEG_INT,
    "train_late.cluster.eft_queue.min_rate": POS,
    "train_late.cluster.eft_queue.max_rate": POS,
    "train_late.cluster.learned_queue.base_rate": POS,
    "train_late.cluster.learned_queue.min_load": POS,
    "train_late.cluster.learned_queue.max_load": POS,
    "train_late.cluster.learned_queue.strata": NONNEG_INT,
    "train_late.cluster.learned_queue.select": Choice(("mean", "worst")),
    "train_late.cluster.learned_queue.calibrate": Choice(("rate", "wait_share", "wait_curve")),
    "train_late.cluster.learned_queue.wait_share": OPEN_UNIT,
    "train_late.cluster.learned_queue.min_fade": Num(null=True),
    "train_late.cluster.learned_queue.node_start": Choice(("cem", "eft")),
    "train_late.cluster.learned_queue.node_search": Choice(("all", "fade")),
    # train_late (machine kind; kinds/machine/late_train.py): a trainer's own settings are checked
    # by its settings class when the stage runs
    "train_late.model_dir": OUT_DIR,
    "train_late.policies": Names(_train_late_names, "learned late policy"),
    "train_late.*.expert": Text(),   # a policies.machine name (the stage checks it)
    "train_late.base": Text(),
    "train_late.workers": POS_INT,
    "train_late.*.seed": SEED,
    "train_late.*.charge_from_base": FLAG,
    "train_late.*.reserved_order": Choice(("fifo", "spt", "rank")),
    "train_late.*.*": ANY_NUM,
    # train_ppo (machine kind; kinds/machine/ppo_train.py, PPOSettings)
    "train_ppo.model_dir": OUT_DIR,
    "train_ppo.seed": SEED,
    "train_ppo.total_timesteps": POS_INT,
    "train_ppo.tasks": Num(ge=2, integer=True),
    "train_ppo.n_steps": Num(ge=2, integer=True),
    "train_ppo.batch_size": Num(ge=2, integer=True),
    "train_ppo.n_epochs": POS_INT,
    "train_ppo.learning_rate": POS,
    "train_ppo.gamma": UNIT,
    "train_ppo.gae_lambda": UNIT,
    "train_ppo.clip_range": POS,
    "train_ppo.ent_coef": NONNEG,
    "train_ppo.hidden": POS_INT,
    "train_ppo.tau": POS,
    "train_ppo.max_candidates": POS_INT,
    "train_ppo.select_every": NONNEG_INT,
    "train_ppo.selection_draws": POS_INT,
    "train_ppo.validation_draws": NONNEG_INT,
    "train_ppo.eval_tasks": Num(ge=2, integer=True),
    # profile (machine kind)
    "profile.sizes": Nums(POS_INT),
    "profile.repeats": POS_INT,
    "profile.warmup": NONNEG_INT,
    "profile.min_sample_s": POS,
    "profile.threads": NONNEG_INT,
    "profile.dtype": Choice(("float32", "float64")),
    "profile.use_gpu": FLAG,
    "profile.seed": SEED,
    "profile.fit_min_size": POS_INT,
    "profile.outlier_mads": POS,
    "profile.reference_gpu_speedup": POS,
    # tune
    "tune.target": Text(),
    "tune.n_trials": POS_INT,
    "tune.n_jobs": NonZeroInt(integer=True),  # -1: every core (Optuna)
    "tune.objectives": Names(None, "metric"),
    "tune.pruning": FLAG,
    "tune.seed": SEED,
    "tune.storage": Storage(),
    "tune.validation_fraction": OPEN_UNIT,
    "tune.dqn_episodes": POS_INT,
    "tune.heuristic_trials": POS_INT,
    "tune.heuristic_workers": POS_INT,
    "tune.spaces.*.*.low": SPACE_BOUND,
    "tune.spaces.*.*.high": SPACE_BOUND,
    "tune.spaces.*.*.log": FLAG,
    "tune.spaces.*.*.int": FLAG,  # an integer range (a count)
    "tune.spaces.*.*.choices": Names(None, "choice"),
    "tune.spaces.*.*": Pair(SPACE_BOUND),
    # load_sweep
    "load_sweep.loads": Nums(POS),
    "load_sweep.n_tasks": Num(ge=2, integer=True),
    "load_sweep.lp": FLAG,
    "load_sweep.seed": SEED,
    "load_sweep.out": OUT_DIR,
    "load_sweep.policies": Names(_policies("machine"), "machine policy name", null=True),
    # scenarios (the per-scenario report, stages/scenarios.py); scenarios.workloads.<name>.* take
    # workload.*'s rules (rule_for)
    "scenarios.skip_trained_by": Names(None, "stage name", min_len=0),  # one that trains none: the stage's own check
    "scenarios.exclude": Names(_policies("machine"), "machine policy name", min_len=0),
    "scenarios.heldout": NONNEG_INT,
    "scenarios.heldout_tasks": Num(ge=2, integer=True),
    "scenarios.max_tasks": Num(ge=2, integer=True, null=True),
    "scenarios.loads": Nums(POS, min_len=0),
    "scenarios.sweep_tasks": Num(ge=2, integer=True),
    "scenarios.workers": POS_INT,
    "scenarios.lp.enabled": FLAG,
    "scenarios.lp.rho": Num(ge=1),
    "scenarios.lp.delta": Num(gt=0, null=True),
    "scenarios.lp.max_levels": POS_INT,
    "scenarios.lp.piece_cuts": Num(ge=0, le=8, integer=True),
    "scenarios.split": Choice(("test", "train")),
    "scenarios.targets.geomean": POS,
    "scenarios.targets.worst": POS,
    # nodes (cluster kind)
    "nodes.gavel_path": PATH,
    "nodes.reference_model": Text(),
    # serving
    "serving.models.*": POS_INT,
    "serving.backends": Names(None, "backend"),  # any runtime a given table has (clockwork_v100: tvm)
    "serving.precisions": Names(lambda cfg: ["fp32", "fp16"], "precision"),
    "serving.classes": Names(lambda cfg: ["interactive", "batch"], "class"),
    "serving.lanes": POS_INT,
    "serving.token_capacity": POS_INT,
    "serving.tokens_per_sample": POS_INT,
    "serving.fp16_token_factor": FRACTION,
    "serving.window_ms": NONNEG,
    "serving.max_batch": POS_INT,
    "serving.latency_table": Text(),
    "serving.profile_path": PATH,
    "serving.service_sigma": NONNEG,
    "serving.sigma_source": Choice(("profile", "fixed")),
    "serving.contention": Choice(("overlap", "start", "served", "alone")),
    "serving.*_w": NONNEG,
    "serving.price_per_kwh": NONNEG,
    "serving.seed": SEED,
    "serving.load_sweep": Nums(POS),
    "serving.profile.models": Names(_keys("serving", "models"), "model"),
    "serving.profile.backends": Names(lambda cfg: ["torch", "onnx"], "backend"),
    "serving.profile.measure_batches": Nums(POS_INT),
    "serving.profile.fit_batches": Nums(POS_INT, min_len=0),
    "serving.profile.warmup": NONNEG_INT,
    "serving.profile.repeats": POS_INT,
    "serving.profile.threads": NONNEG_INT,
    "serving.profile.lanes": POS_INT,
    "serving.profile.budget_s": NONNEG,
    "serving.profile.idle_ms": NONNEG,
    "serving.predictor.model": Choice(("random_forest", "gradient_boosting")),
    "serving.predictor.n_estimators": POS_INT,
    "serving.predictor.test_batches": Nums(POS_INT, min_len=0),
    "serving.predictor.use": Choice(("learned", "table")),
    "serving.predictor.model_dir": OUT_DIR,
    "serving.predictor.seed": SEED,
    "serving.tune.n_trials": POS_INT,
    "serving.tune.objective": Choice(("slo_attainment", "goodput_rps")),
    "serving.tune.validation_fraction": OPEN_UNIT,
    "serving.tune.dir": OUT_DIR,
    "serving.tune.seed": SEED,
    "serving.real.enabled": FLAG,
    "serving.real.duration_s": POS,
    "serving.real.rate": POS,
    "serving.real.lanes": POS_INT,
    "serving.real.policies": Names(_policies("serving"), "serving policy name"),
    "serving.real.mix": _real_mix,
    # fgd: the FGD paper's fragmentation experiment (stages/fgd_atc23.py)
    "fgd.rules": Choice(("k8s_simulator", "exact")),
    "fgd.k8s_policies.*": Choice(("RandomScore", "DotProductScore", "GpuClusteringScore", "GpuPackingScore",
                                  "BestFitScore", "FGDScore")),
    "fgd.ours": Names(lambda cfg: ["tie_order", "integer_scores", "cpu_pods", "idle_node", "typical_weights",
                                   "cpu_typical"], "rule", min_len=0),
    "fgd.pod_list": PATH,
    "fgd.node_list": PATH,
    "fgd.seeds": Nums(SEED),
    "fgd.inflation": POS,
    "fgd.coverage": FRACTION,
    "fgd.zero_cpu_milli": NONNEG_INT,
    "fgd.workers": POS_INT,
    "fgd.name": Text(),
    "fgd.fgd_policy": Text(),
    "fgd.packing": Names(_keys("fgd", "policies"), "fgd policy"),
    "fgd.headline_from_x": NONNEG,
    "fgd.figure_from_x": NONNEG,
    "fgd.report_x": Nums(NONNEG),
    "fgd.table_x": Nums(NONNEG),
    "fgd.policies.*._target_": Text(),
    "fgd.policies.fgd.coverage": FRACTION,
    "fgd.policies.random.random_gpus": FLAG,
    # policies: every parameter of every policy, with its declared range
    "policies.*.*._target_": Text(),
    "policies.*.*.model_dir": PATH,
    "policies.*.*.tuned": Text(null=True),  # the tune_heuristics stage's file (kinds.base.with_tuned)
    "policies.*.*.*.tuned": Text(null=True),
    "policies.*.*.seed": SEED,
    "policies.machine.*.fraction_step": FRACTION,
    "policies.machine.random.gpu_fractions": Nums(FRACTION),
    "policies.machine.*_late.aging": NONNEG,
    "policies.machine.*_late.backlog_s": NONNEG,
    "policies.machine.*_late.beta_cpu": NONNEG,
    "policies.machine.*_late.beta_gpu": NONNEG,
    "policies.machine.*_late*.queue_slack": NONNEG,  # the split hold (late.start_device)
    "policies.machine.*_late*.reserved_order": Choice(("fifo", "spt", "rank")),  # the late engine's reserved queues
    "policies.machine.wspt_late.kappa": NONNEG,
    "policies.machine.heft_late.w_rank": NONNEG,
    "policies.machine.heft_late.w_fin": NONNEG,
    "policies.machine.rollout_late.candidates": POS_INT,  # policies/late_rollout.py
    "policies.machine.rollout_late.shares": NONNEG_INT,
    "policies.machine.rollout_late.base._target_": Text(),
    "policies.machine.rollout_late.base.fraction_step": FRACTION,
    "policies.machine.rollout_late.base.reserved_order": Choice(("fifo", "spt", "rank")),
    "policies.machine.rollout_late.base.*": NONNEG,
    "policies.serving.cem.drop": FLAG,
    # ordered device queues (policies/ordered.py): the order, and the placement policy's config
    # (its weights are eft's, eft_rank's or dmda's, all >= 0)
    "policies.machine.*.order": Choice(("fifo", "spt", "wspt")),
    "policies.machine.*.placement._target_": Text(),
    "policies.machine.*.placement.fraction_step": FRACTION,
    "policies.machine.*.placement.*": NONNEG,
    "policies.machine.dmda.alpha": NONNEG,
    "policies.machine.dmda.beta": NONNEG,
    "policies.machine.dmda.gamma": NONNEG,
    "policies.machine.dqn*.epsilon": UNIT,
    "policies.machine.dqn*.learning_rate": Num(gt=0, null=True),
    "policies.machine.dqn*.online": FLAG,
    "policies.machine.dqn*.update_every": POS_INT,
    "policies.machine.dqn*.batch_size": POS_INT,
    "policies.machine.dqn*.train_frequency": POS_INT,
    "policies.machine.eft_*.backlog_s": NONNEG,
    "policies.machine.eft_*.beta_cpu": NONNEG,
    "policies.machine.eft_*.beta_gpu": NONNEG,
    "policies.machine.eft_rank.kappa": NONNEG,
    "policies.machine.hybrid_ml*.correction": Choice(("ridge", "forest")),
    "policies.machine.hybrid_ml*.correction_forest.n_estimators": POS_INT,
    "policies.machine.hybrid_ml*.correction_forest.max_depth": POS_INT,
    "policies.machine.hybrid_ml*.correction_forest.min_samples_leaf": POS_INT,
    "policies.machine.hybrid_ml*.lookahead": POS_INT,
    "policies.machine.hybrid_ml*.min_obs": POS_INT,
    "policies.machine.hybrid_ml*.online": FLAG,
    "policies.machine.hybrid_ml*.retrain_every": POS_INT,
    "policies.machine.hybrid_ml*.ridge_alpha": NONNEG,
    "policies.machine.hybrid_ml*.ridge_update": Choice(("incremental", "refit")),
    "policies.machine.hybrid_ml*.window": POS_INT,
    "policies.cluster.*.backfill": Choice(("easy", "greedy", "none")),  # a queue-mode policy's (queue_engine.BACKFILL)
    "policies.cluster.fgd.coverage": FRACTION,
    "policies.cluster.random.random_gpus": FLAG,
    "policies.serving.*.online_alpha": UNIT,
    "policies.serving.dqn.epsilon": UNIT,
    "policies.serving.dynamic.w_*": NONNEG,
}

# the DQN settings shared by the machine (dqn), cluster (nodes.dqn) and serving (serving.dqn) kinds
DQN_COMMON: dict[str, Rule] = {
    "episodes": POS_INT,
    "hidden": POS_INT,
    "learning_rate": POS,
    "gamma": UNIT,
    "batch_size": POS_INT,
    "buffer_size": POS_INT,
    "learning_starts": NONNEG_INT,
    "train_frequency": POS_INT,
    "target_network_frequency": POS_INT,
    "exploration_fraction": FRACTION,
    "start_e": UNIT,
    "end_e": UNIT,
    "seed": SEED,
}
SCHEMA.update({f"{prefix}.{k}": r for prefix in ("dqn", "nodes.dqn", "serving.dqn") for k, r in DQN_COMMON.items()})
SCHEMA["serving.dqn.model_dir"] = OUT_DIR

# Dict-valued settings checked whole by their rule (not walked key by key).
WHOLE = (*(k for k, r in SCHEMA.items() if isinstance(r, Shares)), "serving.real.mix")


def _match(key: str, pattern: str) -> bool:
    parts, pats = key.split("."), pattern.split(".")
    return len(parts) == len(pats) and all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pats, strict=True))


def as_workload_key(key: str) -> str:
    """``scenarios.workloads.<name>.X`` (a workload config of the scenarios stage) as ``workload.X``."""
    if key.startswith("scenarios.workloads.") and key.count(".") >= 3:
        return "workload." + key.split(".", 3)[3]
    return key


def rule_for(key: str) -> Rule | None:
    """The rule of the first pattern matching ``key`` (``workload.test.X`` as ``workload.X``)."""
    key = as_workload_key(key)
    if key.startswith("workload.test."):
        key = "workload." + key[len("workload.test."):]
    return next((r for p, r in SCHEMA.items() if _match(key, p)), None)


def known_here(key: str) -> list[str]:
    """The setting names the schema knows beside ``key`` (same parent), for the error line."""
    parent = key.rsplit(".", 1)[0] if "." in key else ""
    depth = key.count(".")
    out = set()
    for p in SCHEMA:
        segs = p.split(".")
        if len(segs) > depth and (not parent or _match(parent, ".".join(segs[:depth]))):
            out.add(segs[depth])
    return sorted(out)


def leaves(cfg: Config, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every setting: a non-dict, an empty dict, or a whole-checked dict."""
    for k, v in cfg.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        whole = (key.replace("workload.test.", "workload.", 1) if key.startswith("workload.test.") else key) in WHOLE
        if isinstance(v, dict) and v and not whole and not key.startswith("hydra"):
            yield from leaves(v, key)
        elif not key.startswith("hydra") and not (v == {} and key.startswith("scenarios.workloads.")
                                                  and as_workload_key(key) == "workload.test"):
            yield key, v  # (a scenario workload's empty test overrides: nothing to check)


def kind_settings() -> dict[str, Rule]:
    """The rules kinds added outside this table declare: a kind's stages module may define
    ``SETTINGS`` (pattern -> rule) for its own settings (docs/adding-a-kind.md).  Imported
    only when a setting is not in :data:`SCHEMA`."""
    import importlib

    from hybridsched.kinds import KINDS

    out: dict[str, Rule] = {}
    for module in KINDS.values():
        out.update(getattr(importlib.import_module(module), "SETTINGS", None) or {})
    return out


def check_settings(cfg: Config, read_files: bool = True) -> None:
    """Refuse, with one line, the first setting that is unknown or out of its declared range.
    ``read_files=False`` leaves out the memory estimate of workload files (it opens them): a
    stage's own preflight, which must read only its declared deps, passes it."""
    extra: dict[str, Rule] | None = None
    for key, value in leaves(cfg):
        if key == "workload.test" and value == {}:
            continue  # no test-split overrides
        rule = rule_for(key)
        if rule is None:
            extra = kind_settings() if extra is None else extra
            rule = next((r for p, r in extra.items() if _match(key, p)), None)
        if rule is None:
            raise HybridschedError(f"{key}: unknown setting (no stage reads it); known here: {', '.join(known_here(key))}")
        rule(key, value, cfg)
    check_memory(cfg, read_files)


# ---- memory: estimate before allocating ------------------------------------------------------
# Bytes held per task while a stage runs, measured with /usr/bin/time (max RSS) on the machine
# kind: generate grew 434 B per task from 3,000 to 200,000 test tasks; simulate with 4 policies
# (traces kept, LP off) 1,118 B per task, so ~280 B per task and policy.  The serving kind is
# assumed alike.  Not inflated: the check refuses only what clearly cannot fit.
BYTES_PER_TASK = 500
BYTES_PER_TASK_AND_POLICY = 300
# serving: a (variants x max_batch + 1) float64 latency table; the profile's and the
# predictor's, and interpolation temporaries
SERVING_TABLE_COPIES = 4
# a DQN's replay buffer, allocated whole (rl/replay.py): state and next state (float32, at least
# 8 features each), action, reward and done; a lower bound per transition
DQN_BYTES_PER_TRANSITION = 2 * 8 * 4 + 8 + 4 + 4
# the profile stage's matmul holds three n x n matrices (a, b, out) of profile.dtype
PROFILE_MATRICES = 3
# a workload file (workload.path, workload.trace_path): the validate stage's expectation suite
# peaked at 12.8 GB RSS on a 2-million-row task file, ~6,400 B per row, the most of any stage
# (train_rf's forest is bounded by rf.max_train_rows)
VALIDATE_BYTES_PER_ROW = 6_400
# the rows of a csv file are estimated from the mean length of the lines in its first bytes
ROW_SAMPLE_BYTES = 64 * 1024
# refuse above this share of the available memory: the estimates are of the largest arrays,
# and the interpreter, libraries and temporaries need the rest
MEMORY_MARGIN = 0.7


def available_memory() -> int:
    """Bytes this process may still allocate: ``$HYBRIDSCHED_MEMORY_BYTES`` if set, else the
    system's available memory (``MemAvailable``), else 8 GiB."""
    raw = os.environ.get("HYBRIDSCHED_MEMORY_BYTES")
    if raw:
        try:
            n = float(raw)
        except ValueError:
            n = math.nan
        if not (math.isfinite(n) and n > 0):
            raise HybridschedError(f"HYBRIDSCHED_MEMORY_BYTES: must be a number of bytes > 0, got {raw!r}")
        return int(n)
    found: list[int] = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    room = cgroup_memory_room()
    if room is not None:  # a container's limit, which MemAvailable does not show
        found.append(room)
    return min(found) if found else 8 * 2**30


def cgroup_memory_room(root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes left under this process's cgroup (v2) memory limit, or None where there is none."""
    try:
        with open(f"{root}/memory.max") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(f"{root}/memory.current") as f:
            used = int(f.read().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def gib(n: float) -> str:
    """Bytes as GiB, or as MiB below 1 GiB (a small budget reads ``5.6 MiB``, not ``0.0 GiB``)."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def memory_estimate(cfg: Config, read_files: bool = True) -> dict[str, float]:
    """Setting -> estimated bytes it makes a stage hold, for the sizes that scale (workload
    files' rows only with ``read_files``)."""
    w = cfg.get("workload") or {}
    kind = str(w.get("kind", "machine"))
    chosen = ((cfg.get("sim") or {}).get("policies") or {}).get(kind)
    n_pol = max(1, len((cfg.get("policies") or {}).get(kind) or {} if chosen is None else chosen))
    est: dict[str, float] = {}
    keeps_trace = not ((cfg.get("sim") or {}).get("stream") or {}).get("enabled", False)
    for key in ("n_train", "n_test"):
        n = _number(w.get(key))
        if n and kind in ("machine", "serving") and not w.get("path"):
            # the split is generated whole; simulate keeps one trace per policy unless streaming
            est[f"workload.{key}"] = n * (BYTES_PER_TASK + (BYTES_PER_TASK_AND_POLICY * n_pol if keeps_trace and key == "n_test" else 0))
    s = cfg.get("serving") or {}
    mb = _number(s.get("max_batch"))
    if kind == "serving" and mb:
        variants = max(1, len(s.get("models") or {}) * len(s.get("backends") or []) * len(s.get("precisions") or []))
        est["serving.max_batch"] = variants * (mb + 1) * 8 * SERVING_TABLE_COPIES
    for prefix in ("dqn", "nodes.dqn", "serving.dqn"):
        size = _number(_get(cfg, f"{prefix}.buffer_size"))
        if size:
            est[f"{prefix}.buffer_size"] = size * DQN_BYTES_PER_TRANSITION
    for key in ("path", "trace_path") if read_files else ():
        rows = file_rows(w.get(key))
        if rows:
            est[f"workload.{key}"] = rows * max(VALIDATE_BYTES_PER_ROW, BYTES_PER_TASK + BYTES_PER_TASK_AND_POLICY * n_pol)
    sizes = _get(cfg, "profile.sizes")
    if isinstance(sizes, list) and sizes:
        largest = max((_number(n) or 0.0) for n in sizes)
        per = 8 if _get(cfg, "profile.dtype") == "float64" else 4
        est["profile.sizes"] = PROFILE_MATRICES * largest**2 * per
    return est


def file_rows(path: Any) -> int | None:
    """The rows of a csv or parquet workload file, estimated before reading it: a parquet
    file's footer, or a csv file's size over the mean length of its first lines; None where
    it is not such a file (the file's own checks say why)."""
    from pathlib import Path

    if not isinstance(path, str) or not path:
        return None
    p = Path(path)
    if not p.is_file():
        return None
    try:
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(p).metadata.num_rows)
        if p.suffix != ".csv":
            return None
        size = p.stat().st_size
        with open(p, "rb") as f:
            head = f.read(ROW_SAMPLE_BYTES)
    except Exception:  # unreadable or corrupt: the reader's checks name the problem
        return None
    lines = head.count(b"\n")
    if lines <= 1:
        return max(0, lines)
    header = head.index(b"\n") + 1
    body = head[header:head.rindex(b"\n") + 1]
    return int(round((size - header) * (lines - 1) / max(1, len(body))))


def _get(cfg: Config, key: str) -> Any:
    """The setting at dotted ``key``, or None."""
    node: Any = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def check_memory(cfg: Config, read_files: bool = True) -> None:
    """Refuse a size whose estimated memory exceeds :data:`MEMORY_MARGIN` of what is available,
    before allocating it; a workload file by its estimated rows, before reading it."""
    limit = available_memory()
    usable = MEMORY_MARGIN * limit
    for key, need in memory_estimate(cfg, read_files).items():
        if need > usable:
            what = (f"{show(_get(cfg, key))} (about {file_rows(_get(cfg, key))} rows)"
                    if key in ("workload.path", "workload.trace_path") else show(_get(cfg, key)))
            raise HybridschedError(f"{key}={what}: needs about {gib(need)} of memory, more than the "
                                   f"{gib(usable)} usable ({MEMORY_MARGIN:.0%} of the {gib(limit)} available); "
                                   + ("use a smaller file" if key in ("workload.path", "workload.trace_path")
                                      else "use a smaller value")
                                   + (" or sim.stream.enabled=true" if key == "workload.n_test" else ""))


def check_run(run: Any) -> None:
    """The ``check`` stage: every setting against :data:`SCHEMA` and the memory estimate, then
    the kind's own ``check_config`` (files, tables, policies built once), then what the
    ``fgd_atc23`` stage reads (its settings, pod and node lists)."""
    from hybridsched.kinds import get_kind

    check_settings(run.cfg)
    get_kind(run.kind).check_config(run)
    if run.cfg.get("fgd"):  # the fgd_atc23 stage runs in every kind's pipeline
        from hybridsched.kinds.cluster.fgd_protocol import check as check_fgd

        check_files(run.cfg, ("fgd.pod_list", "fgd.node_list"))
        check_fgd(dict(run.cfg["fgd"]))


def check_files(cfg: Config, keys: tuple[str, ...]) -> None:
    """Each dotted setting in ``keys`` names an existing file; else one line naming that setting
    (``fgd.pod_list``, not the cluster kind's ``workload.path``, which it resembles)."""
    from pathlib import Path

    for key in keys:
        node: Any = cfg
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if not node or not Path(str(node)).is_file():
            raise HybridschedError(f"{key}: file {show(node)} not found (the public traces are under paths.traces "
                                   f"or $HYBRIDSCHED_TRACES, see docs/traces.md)")
