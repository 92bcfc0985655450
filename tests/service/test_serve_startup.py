"""`hybridsched serve` refuses a bad setting at start-up with one line and exit 1, before the
server starts (never a traceback from uvicorn, never a run that fails when a client starts it)."""

from __future__ import annotations

import pytest

from hybridsched import cli
from tests.bad_input_catalogue import assert_documented, assert_one_plain_line

CASES = [
    (["--port", "70000"], "service.port (or HYBRIDSCHED_PORT): Input should be less than or equal to 65535; got 70000"),
    (["--port", "-1"], "service.port (or HYBRIDSCHED_PORT): Input should be greater than or equal to 1; got -1"),
    (["--log-level", "nosuch"],
     "--log-level: must be one of critical, error, warning, info, debug, trace, got 'nosuch'"),
    (["service.speed=-1"], "service.speed (or HYBRIDSCHED_SPEED): Input should be greater than or equal to 0; got -1"),
    (["service.workload=nosuch"],
     "service.workload (or HYBRIDSCHED_WORKLOAD): 'nosuch' is not a machine-kind workload of conf/workload/; known: "
     "[...]"),
]


@pytest.mark.parametrize("args, message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_serve_refuses_a_bad_setting_at_start_up(args, message, monkeypatch, capsys, tmp_path):
    import uvicorn

    def started(*a, **k):  # the refusal must come first: a server here would never return
        raise AssertionError("the server started")

    monkeypatch.setattr(uvicorn, "run", started)
    monkeypatch.setenv("HYBRIDSCHED_DATABASE_URL", f"sqlite:///{tmp_path}/service.db")
    assert cli.main(["serve", *args]) == 1
    err = capsys.readouterr().err.strip()
    assert_one_plain_line(err)
    if "known: [" in err:  # the list of workloads grows with conf/workload/
        assert "'default'" in err and "'serving'" not in err, err
        err = err[:err.index("known: [")] + "known: [...]"
    assert err == f"hybridsched serve: {message}", err
    assert_documented(err)
