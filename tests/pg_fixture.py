"""A throw-away PostgreSQL server for tests (Debian `postgresql`), started and stopped by the fixture.

Use it from any test module with ``from tests.pg_fixture import postgres_server, postgres_url  # noqa:
F401`` and a ``postgres_url`` argument: a SQLAlchemy URL ``postgresql+psycopg://postgres@127.0.0.1:PORT/tests``
of an empty database (``create_database`` makes another on the same server).  Skips (with the
reason) when PostgreSQL or pytest-postgresql is missing.

PostgreSQL refuses to run as root (``pg_ctl: cannot be run as root``) and pytest's temp dirs are
0700, so the server lives in its own 0755 directory under /tmp owned by ``postgres``, and, when the
tests run as root, ``pg_ctl`` is called through a two-line wrapper that runs it as ``postgres``.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

WRAPPER = """#!/bin/sh
# pg_ctl as the postgres user: PostgreSQL refuses to run as root
cd / && exec runuser -u postgres -- {pg_ctl} "$@"
"""


def _pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _connect_when_ready(port: int, timeout: float = 120.0):  # noqa: ANN202
    """A connection to the ``postgres`` database once the server accepts one.

    ``pg_ctl -w`` can return while the server still answers "the database system is starting up"
    (seen on a loaded 2-core CI machine), so connect until it stops refusing or ``timeout`` passes.
    """
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            return psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[int]:
    """Port of a PostgreSQL server on 127.0.0.1 that lives for the whole test run (per xdist worker)."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (Debian package `postgresql`; `make system-deps`)")
    try:
        from pytest_postgresql.executors.proc import PostgreSQLExecutor
    except ImportError:
        pytest.skip("pytest-postgresql is not installed")

    base = Path(tempfile.mkdtemp(prefix="pg", dir="/tmp"))
    os.chmod(base, 0o755)
    pg_ctl = bin_dir / "pg_ctl"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as `postgres`")
        shutil.chown(base, "postgres")
        wrapper = Path(tempfile.mkdtemp(prefix="pgctl", dir="/tmp")) / "pg_ctl"
        wrapper.write_text(WRAPPER.format(pg_ctl=pg_ctl))
        wrapper.chmod(0o755)
        pg_ctl = wrapper
    port = _free_port()
    ex = PostgreSQLExecutor(executable=str(pg_ctl), host="127.0.0.1", port=port, datadir=str(base / "data"),
                            unixsocketdir=str(base), logfile=str(base / "server.log"), startparams="-w",
                            dbname="tests", user="postgres")
    try:
        ex.init_directory()
        ex.start()
        _connect_when_ready(port).close()
        yield port
    finally:
        try:
            ex.stop()
        finally:
            shutil.rmtree(base, ignore_errors=True)
            if pg_ctl.name == "pg_ctl" and pg_ctl.parent.name.startswith("pgctl"):
                shutil.rmtree(pg_ctl.parent, ignore_errors=True)


def create_database(port: int, name: str) -> str:
    """Create an empty database ``name`` on the server at ``port``; its SQLAlchemy URL."""
    with _connect_when_ready(port) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{name}"


@pytest.fixture(scope="session")
def postgres_url(postgres_server: int) -> str:
    """URL of a fresh database ``tests`` on the test run's PostgreSQL server."""
    return create_database(postgres_server, "tests")


ROOT_CONF = Path(__file__).resolve().parents[1] / "conf"
