"""DVC stage: time matrix products on this machine's devices and fit the cost model's constants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from hybridsched.io import write_json
from hybridsched.kinds.machine.profiling import ProfileSettings, fit_from_profile, plot_profile, profile_matmul
from stages.common import as_dict, run_stage


def profile(cfg: DictConfig) -> dict[str, Any]:
    """Write metrics/profile.json, metrics/plots/profile.png and ``cluster.profile_path``."""
    settings = ProfileSettings.from_dict(as_dict(cfg.profile))
    result = profile_matmul(settings)
    fitted = fit_from_profile(result, settings)
    metrics = Path(cfg.paths.metrics_dir)
    write_json(metrics / "profile.json", result)
    plot_profile(result, metrics / "plots" / "profile.png")
    write_json(Path(cfg.cluster.profile_path), fitted)
    return {"profile": result, "fitted": fitted}


def _report(out: dict[str, Any]) -> str:
    p, c = out["profile"], out["fitted"]["cluster"]
    lines = [f"profile: torch {p['torch_version']}, {p['threads']} threads, CPU {p['devices']['cpu']}, "
             f"GPU {p['devices']['gpu'] or 'none found'}"]
    for r in p["sizes"]:
        gpu = f"{r['gpu_s']:.5f} s ({r['ratio']:.1f}x)" if r["gpu_s"] else "-"
        lines.append(f"  n={r['n']:<5} cpu {r['cpu_s']:.5f} s {r['cpu_gflops']:7.1f} GFLOP/s   gpu {gpu}")
    measured = "measured" if c["gpu_measured"] else "NOT measured: reference_gpu_speedup from the config"
    lines.append(f"  fitted cpu_gflops {c['cpu_gflops']:.1f}, gpu_max_speedup {c['gpu_max_speedup']:.1f} ({measured}); "
                 f"took {p['elapsed_s']:.1f} s")
    return "\n".join(lines)


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    print(_report(run_stage(profile, cfg)))


if __name__ == "__main__":
    main()
