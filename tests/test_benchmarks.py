"""The benchmarks compose conf/ through Hydra (as the stages do) and each has a --smoke run;
`make bench BENCH_ARGS=--smoke` running them all is in tests/test_docs_commands.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted(ROOT.glob("benchmarks/bench_*.py"))


def test_settings_resolve_the_traces_from_the_environment(monkeypatch, tmp_path):
    """`make bench` stopped at bench_fgd on an unresolved ``${paths.traces}``: composed by
    Hydra, the FGD trace paths follow $HYBRIDSCHED_TRACES (and work from any directory)."""
    from benchmarks.common import project_path, settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HYBRIDSCHED_TRACES", "/data/traces")
    cfg = settings()
    assert cfg["fgd"]["pod_list"] == "/data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv"
    assert settings(["paths.traces=/x"])["nodes"]["gavel_path"] == "/x/gavel/simulation_throughputs.json"
    assert project_path("models/rf") == ROOT / "models" / "rf" and project_path("/abs") == Path("/abs")


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.stem)
def test_every_benchmark_parses_its_arguments_with_smoke_and_overrides(bench):
    """Each benchmark's main() reads its arguments with benchmarks.common.parse (--smoke and
    Hydra overrides) and does not read conf/ YAML by itself."""
    src = bench.read_text()
    tree = ast.parse(src)
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "parse" in calls, f"{bench.name}: use benchmarks.common.parse(ap) (adds --smoke and overrides)"
    assert "yaml.safe_load" not in src, \
        f"{bench.name}: compose the config with benchmarks.common.settings, not by reading conf/ files"
