"""Settings of the live service: the Hydra config (``conf/service/default.yaml`` plus the
machine kind's cluster, workload and policies), with environment overrides for secrets and
URLs (environment beats config):

- ``HYBRIDSCHED_TOKEN``: bearer token of the mutating endpoints (generated when unset)
- ``HYBRIDSCHED_DATABASE_URL``: SQLAlchemy URL (SQLite file by default, or PostgreSQL)
- ``REDIS_URL``: optional Redis for the rate-limit counters and the status cache
- ``HYBRIDSCHED_CORS_ORIGINS``: comma-separated origins allowed by CORS (closed when empty)
- ``HYBRIDSCHED_TRUSTED_PROXIES``: comma-separated proxy addresses/networks whose forwarded
  headers are believed (none by default)
- ``HYBRIDSCHED_ALLOWED_HOSTS``: comma-separated ``Host`` names answered (``*``: any; default:
  localhost, 127.0.0.1, ::1 and the bound host)

Any other field can be set as ``HYBRIDSCHED_<FIELD>`` too (e.g. ``HYBRIDSCHED_SPEED``).
"""

from __future__ import annotations

import functools
import secrets
import threading
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from hybridsched.errors import HybridschedError

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
# relative paths of the config (models, the database, a task file) are relative to the project
# root, as for the stages, so `hybridsched serve` works from any directory
ROOT = CONF_DIR.parent


class ServiceSettings(BaseSettings):
    """Everything the app factory needs; build it with :func:`load_settings` (or directly in tests)."""

    model_config = SettingsConfigDict(env_prefix="HYBRIDSCHED_", validate_by_name=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    token: str | None = None
    database_url: str = "sqlite:///var/service.db"
    redis_url: str | None = Field(None, validation_alias=AliasChoices("REDIS_URL", "HYBRIDSCHED_REDIS_URL", "redis_url"))
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # addresses or networks of reverse proxies whose X-Forwarded-For/-Proto name the client;
    # empty: the socket's peer is the client, whatever the headers say
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Host header names answered (``*``: any; ``*.example.org``: its subdomains); empty:
    # localhost, 127.0.0.1, ::1 and ``host``
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    policies: list[str] = Field(default_factory=lambda: ["round_robin", "greedy", "eft"])
    speed: float = Field(20.0, ge=0.0)
    workload: str | None = None
    workload_file: str | None = None
    segment_tasks: int = Field(2000, ge=10)
    max_tasks: int | None = Field(None, ge=1)
    seed: int = 0
    autostart: bool = False
    tick_s: float = Field(0.1, gt=0.0)
    write_batch: int = Field(5000, ge=1)
    rate_limit: str = "30/minute"
    # wrong or missing tokens, per client address, on every guarded endpoint: guessing costs time
    auth_fail_limit: str = "10/minute"
    # largest request body (bytes); a larger one is refused with 413 before it is read
    max_body_bytes: int = Field(65536, ge=1024, le=2**30)
    # the interpreter's thread switch interval while serving: the race and the database writer
    # are busy Python threads, and a request waits up to this long for the GIL at each hand-over
    switch_interval_s: float = Field(0.005, gt=0.0, le=0.1)
    # the race and its database writer in a worker process (the API's latency does not depend on
    # the race); false: a thread of the API process (an in-memory SQLite database always is)
    race_worker: bool = True
    client_queue: int = Field(8, ge=1)
    stall_drop_s: float = Field(10.0, gt=0.0)
    # the machine kind's composed config: cluster, workload, policies (name -> spec), workloads
    # (name -> config, the choices a client may start), compiled
    machine: dict[str, Any] = Field(default_factory=dict)
    # configured policies left out of the race because their model is missing: name -> why
    left_out: dict[str, str] = Field(default_factory=dict)

    @field_validator("cors_origins", "trusted_proxies", "allowed_hosts", mode="before")
    @classmethod
    def _split_commas(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [o.strip() for o in v.split(",") if o.strip()]
        return v

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        """Each entry an IP address or network (``10.0.0.0/8``), written canonically."""
        import ipaddress

        out = []
        for entry in v:
            try:
                out.append(str(ipaddress.ip_network(entry, strict=False)) if "/" in entry
                           else str(ipaddress.ip_address(entry)))
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or network (e.g. 10.0.0.5 or 10.0.0.0/8)") from None
        return out

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        # the environment overrides the Hydra config passed in as init arguments
        return env_settings, init_settings

    def workload_config(self, name: str | None = None) -> dict[str, Any]:
        """The machine-kind workload config a run draws from: ``name`` (a file of
        ``conf/workload/``), else ``workload``, else the composed ``workload`` config."""
        name = name or self.workload
        if name is None:
            return dict(self.machine.get("workload") or {})
        known = self.workloads()
        if name not in known:
            raise HybridschedError(f"workload {name!r}: not a machine-kind workload; known: {sorted(known)}")
        return dict(known[name])

    def workloads(self) -> dict[str, dict[str, Any]]:
        """Name -> config of the machine-kind workloads a client may start (``machine["workloads"]``
        when given, else composed on first use: Hydra takes seconds for all of them, which the
        server's start-up does not wait for)."""
        known = self.machine.get("workloads")
        return machine_workloads() if known is None else known

    def ensure_token(self) -> bool:
        """Generate a token when none is configured; True if one was generated (print it once)."""
        if self.token:
            return False
        self.token = secrets.token_urlsafe(24)
        return True


def compose(overrides: list[str] | None = None, conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """The project's config (``config.yaml``) with the service group, as plain resolved dicts."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from hydra.errors import HydraException

    overrides = list(overrides or [])
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
            # the group is optional in config.yaml's defaults: add it unless it is there (one
            # composition, not two: composing takes seconds of the server's start-up)
            first = overrides if _lists_service(conf_dir) else ["+service=default", *overrides]
            cfg = hydra_compose("config", overrides=first)
            if "service" not in cfg:
                cfg = hydra_compose("config", overrides=["+service=default", *overrides])
    except HydraException as e:
        raise HybridschedError(f"config overrides {overrides}: {str(e).splitlines()[0]}") from None
    finally:
        GlobalHydra.instance().clear()
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def _lists_service(conf_dir: Path) -> bool:
    """Whether config.yaml's defaults list names the service group."""
    import yaml

    try:
        defaults = yaml.safe_load((conf_dir / "config.yaml").read_text()).get("defaults", [])
    except (OSError, AttributeError, yaml.YAMLError):
        return True
    keys = [next(iter(d)) if isinstance(d, dict) and d else str(d) for d in defaults]
    return any(k.split("@")[0].removeprefix("optional ").strip() == "service" for k in keys)


_WORKLOADS_LOCK = threading.Lock()


def machine_workloads(conf_dir: Path = CONF_DIR) -> dict[str, dict[str, Any]]:
    """:func:`_machine_workloads`, one caller at a time (Hydra's global state is not thread-safe)."""
    with _WORKLOADS_LOCK:
        return _machine_workloads(conf_dir)


@functools.lru_cache(maxsize=4)
def _machine_workloads(conf_dir: Path = CONF_DIR) -> dict[str, dict[str, Any]]:
    """Name -> composed ``workload`` block of every machine-kind option in ``conf/workload/``
    (Hydra composes each, so a scenario's defaults list and interpolations mean what they
    mean in the pipeline).  Cached: the options change only with the code."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    out: dict[str, dict[str, Any]] = {}
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
            for path in sorted((conf_dir / "workload").glob("*.yaml")):
                w = hydra_compose(f"workload/{path.stem}")["workload"]  # the group alone: fast
                if w.get("kind", "machine") == "machine":
                    out[path.stem] = OmegaConf.to_container(w, resolve=True)  # type: ignore[assignment]
    finally:
        GlobalHydra.instance().clear()
    return out


def anchored(path: str, root: Path = ROOT) -> str:
    """``path`` if absolute, else the same path under the project root."""
    return path if Path(path).is_absolute() else str(root / path)


def anchored_url(url: str, root: Path = ROOT) -> str:
    """A SQLite URL with a relative file path made absolute under the project root."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and url != prefix and not url.startswith(prefix + "/") and ":memory:" not in url:
        return prefix + anchored(url.removeprefix(prefix), root)
    return url


def _anchor_paths(spec: Any) -> Any:
    """A policy spec with its files (``model_dir``, the tuned weights' ``tuned``, in nested
    specs too) anchored at the project root, so the race runs from any directory."""
    if not isinstance(spec, dict):
        return spec
    return {k: anchored(str(v)) if k in ("model_dir", "tuned") and v else _anchor_paths(v) for k, v in spec.items()}


def machine_section(cfg: dict[str, Any]) -> dict[str, Any]:
    """What the race needs from a composed config: cluster, workload, policy specs (model
    folders anchored at the project root), workloads."""
    policies = cfg.get("policies", {})
    specs = policies.get("machine", policies)  # the per-kind layout nests specs under the kind
    specs = {name: _anchor_paths(spec) for name, spec in specs.items()}
    return {"cluster": cfg["cluster"], "workload": cfg["workload"], "policies": specs,
            "compiled": bool(cfg.get("sim", {}).get("compiled", True))}


def load_settings(overrides: list[str] | None = None, **fields: Any) -> ServiceSettings:
    """Settings from the Hydra config (with ``overrides`` such as ``service.speed=100``), the
    environment, and explicit ``fields`` (e.g. the CLI's --port), in increasing priority."""
    cfg = compose(overrides)
    base = {**cfg["service"], **{k: v for k, v in fields.items() if v is not None}}
    try:
        settings = ServiceSettings(**base, machine=machine_section(cfg))
    except ValidationError as e:
        raise HybridschedError(settings_error(e)) from None
    for k, v in fields.items():  # the command line beats the environment too
        if v is not None:
            setattr(settings, k, v)
    settings.database_url = anchored_url(settings.database_url)
    if settings.workload_file:
        settings.workload_file = anchored(settings.workload_file)
    return settings


def settings_error(err: ValidationError) -> str:
    """A settings validation error as one line naming the setting (``service.<field>``, or its
    ``HYBRIDSCHED_<FIELD>`` variable) and the value given."""
    first = err.errors()[0]
    field = ".".join(str(x) for x in first.get("loc", ())) or "service"
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    return (f"service.{field} (or HYBRIDSCHED_{field.split('.')[0].upper()}): {msg}; "
            f"got {first.get('input')!r}")


def leave_out_missing_models(settings: ServiceSettings, check: Any, explicit: bool) -> None:
    """Probe each configured policy with ``check([name])`` (builds it, loads its model, decides
    a few tasks).  A policy that fails is left out of the race (``settings.left_out`` says why;
    the status API shows it) with one warning line for all of them; but when the policies were
    asked for ``explicit``ly (``service.policies=...`` or HYBRIDSCHED_POLICIES), or none is
    left, the first failure is the error."""
    import sys

    for name in list(settings.policies):
        try:
            check([name])
        except HybridschedError as e:
            if explicit:
                raise
            settings.left_out[name] = str(e)
    if not settings.left_out:
        return
    kept = [p for p in settings.policies if p not in settings.left_out]
    if not kept:
        raise HybridschedError(f"no policy can run: {'; '.join(settings.left_out.values())}")
    settings.policies = kept
    why = "; ".join(settings.left_out.values())
    print(f"hybridsched serve: warning: left out of the race: {', '.join(settings.left_out)} ({why})",
          file=sys.stderr, flush=True)


def check_policies(settings: ServiceSettings) -> None:
    """One line naming the setting when a policy, or the workload runs draw from, is unknown
    (at start-up: not when a client starts a run)."""
    known = settings.machine.get("policies", {})
    unknown = [p for p in settings.policies if p not in known]
    if unknown:
        raise HybridschedError(f"service.policies: unknown policy name(s) {unknown}; known: {sorted(known)}")
    if settings.workload is not None:
        workloads = settings.workloads()
        if settings.workload not in workloads:
            raise HybridschedError(f"service.workload (or HYBRIDSCHED_WORKLOAD): {settings.workload!r} is not a "
                                   f"machine-kind workload of conf/workload/; known: {sorted(workloads)}")
