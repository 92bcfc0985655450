"""The ``hybridsched`` command.

- ``hybridsched serve [--port N] [--host H] [OVERRIDE ...]``: the live service under uvicorn
  (Hydra overrides such as ``service.speed=100 workload=dag``); SIGINT/SIGTERM stop the race
  and commit everything before exit (status 0 after a clean SIGTERM shutdown).
- ``hybridsched export-run --run ID --out DIR``: a run's results as per-policy traces (the
  simulate stage's layout), for ``evaluate`` and the plots.
- ``hybridsched openapi --out FILE``: the API reference (markdown) from the app's OpenAPI schema;
  the docs site generates the same page when it is built.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from hybridsched.errors import HybridschedError


# uvicorn's log levels (uvicorn.config.LOG_LEVELS)
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from hybridsched.service.app import create_app, server_options
    from hybridsched.service.engine import Race
    from hybridsched.service.persistence import Store
    from hybridsched.service.settings import check_policies, leave_out_missing_models, load_settings

    if args.log_level.lower() not in LOG_LEVELS:  # uvicorn's own check is a KeyError traceback
        raise HybridschedError(f"--log-level: must be one of {', '.join(LOG_LEVELS)}, got {args.log_level!r}")
    settings = load_settings(args.overrides, host=args.host, port=args.port)
    check_policies(settings)
    # a policy whose model is missing is left out (one warning line), unless it was asked for
    explicit = "HYBRIDSCHED_POLICIES" in os.environ or any(
        o.lstrip("+~").startswith("service.policies") for o in args.overrides)
    leave_out_missing_models(settings, Race(settings, Store("sqlite://")).check, explicit)
    if settings.ensure_token():
        print(f"hybridsched: generated API token (set HYBRIDSCHED_TOKEN to choose one): {settings.token}", flush=True)
    app = create_app(settings)
    print(f"hybridsched: serving on http://{settings.host}:{settings.port}/ (database "
          f"{app.state.svc.store._safe_url()})", flush=True)
    # uvicorn shuts down gracefully on SIGTERM, puts the previous handler back and raises the
    # signal again: this handler turns it into a normal exit (status 0 once all is committed),
    # and ends the process the same way if SIGTERM comes before uvicorn has taken over
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=args.log_level,
                    **server_options(settings.stall_drop_s))
    except SystemExit as e:
        if e.code not in (0, None):  # uvicorn's own failures keep their status
            raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    writer_error = app.state.svc.race.writer_error
    if writer_error is not None:
        raise HybridschedError(f"the last results could not be committed: {writer_error}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from hybridsched.service.persistence import Store
    from hybridsched.service.settings import load_settings

    settings = load_settings(args.overrides)
    store = Store(settings.database_url)
    out = store.export_run(args.run, args.out)
    print(f"export-run: run {args.run} -> {out}")
    return 0


def _openapi(args: argparse.Namespace) -> int:
    import tempfile

    from hybridsched.service.app import create_app
    from hybridsched.service.openapi_doc import render
    from hybridsched.service.settings import load_settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings([], database_url=f"sqlite:///{tmp}/openapi.db", token="unused")
        text = render(create_app(settings).openapi())
    from hybridsched.io import write_text

    write_text(args.out, text)
    print(f"openapi: {args.out}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from hybridsched.compare import compare

    print(compare(list(args.revs)))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hybridsched`` console script."""
    if argv is None:  # the console script, not a caller in a running process
        from hybridsched.reproducible import pin

        pin()  # before numpy or torch loads: the same kernels as the pipeline's stages
    p = argparse.ArgumentParser(prog="hybridsched")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the live service (uvicorn)")
    s.add_argument("--host", default=None, help="bind address (default: service.host, 127.0.0.1)")
    s.add_argument("--port", type=int, default=None, help="port (default: service.port, 8000)")
    s.add_argument("--log-level", default="info")
    s.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. service.speed=100 workload=dag")
    s.set_defaults(fn=_serve)
    e = sub.add_parser("export-run", help="write a run's per-policy traces into a folder")
    e.add_argument("--run", type=int, required=True)
    e.add_argument("--out", required=True)
    e.add_argument("overrides", nargs="*")
    e.set_defaults(fn=_export)
    o = sub.add_parser("openapi", help="write the API reference (markdown) from the OpenAPI schema")
    o.add_argument("--out", required=True)
    o.set_defaults(fn=_openapi)
    c = sub.add_parser("compare", help="the headline of revisions or experiments side by side")
    c.add_argument("revs", nargs="*", help="workspace, commits, branches, tags or DVC experiment names "
                                            "(default: workspace HEAD)")
    c.set_defaults(fn=_compare)
    args = p.parse_args(argv)
    try:
        return int(args.fn(args))
    except HybridschedError as err:
        print(f"hybridsched {args.command}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
