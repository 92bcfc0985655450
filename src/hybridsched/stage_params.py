"""The policy settings a stage reads, against what dvc.yaml declares for it.

DVC reruns a stage when one of its declared params or deps changes.  The stages that build
only some of a kind's policies (the tuned heuristics, the late trainers' base and expert)
declare just those policies' keys (``policies.machine.eft_late``) and the modules of their
classes, so a new policy file reruns only the stages that use it.  Which policies those are
follows from settings (``tune.spaces``, ``train_late.base``): a kind's optional
``policies_read(cfg)`` names them per stage, and :func:`undeclared` says which of them a
stage's params or code deps in dvc.yaml leave out, so the check stage can warn before DVC
silently skips a rerun.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def targets(node: Any) -> set[str]:
    """Every ``_target_`` in a config node, nested policies' included."""
    if isinstance(node, list):
        return set().union(*map(targets, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    own = {node["_target_"]} if isinstance(node.get("_target_"), str) else set()
    return own.union(*(targets(v) for v in node.values()))


def module_file(target: str) -> str:
    """The source file of the module that defines ``target`` (``a.b.C`` -> ``src/a/b.py``)."""
    return "src/" + target.rpartition(".")[0].replace(".", "/") + ".py"


def _covers(declared: list[str], path: str) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in declared)


def undeclared(dvc_yaml: dict[str, Any], kind: str, reads: dict[str, list[str]],
               policies: dict[str, Any]) -> list[str]:
    """One line per policy a stage reads (``reads``: stage -> names under ``policies.<kind>``)
    whose key is not among the stage's params in ``dvc_yaml``, or whose class module (a
    ``_target_`` of its node) is not among its deps."""
    out = []
    stages = dvc_yaml.get("stages") or {}
    for stage, names in reads.items():
        if stage not in stages:
            continue
        params = [p for p in stages[stage].get("params") or [] if isinstance(p, str)]
        deps = [str(d) for d in stages[stage].get("deps") or []]
        for name in names:
            key = f"policies.{kind}.{name}"
            if not any(key == p or key.startswith(p + ".") for p in params):
                out.append(f"dvc.yaml: stage {stage} reads {key} (its settings name {name!r}) but its params "
                           f"do not list it, so DVC will not rerun {stage} when it changes")
            for f in sorted(module_file(t) for t in targets(policies.get(name))):
                if f.startswith("src/hybridsched/") and not _covers(deps, f):
                    out.append(f"dvc.yaml: stage {stage} builds {key} from {f} but its deps do not list that file, "
                               f"so DVC will not rerun {stage} when it changes")
    return out


def check_dvc_yaml(cfg: dict[str, Any], kind_module: Any, path: Path = Path("dvc.yaml")) -> list[str]:
    """:func:`undeclared` for the kind's ``policies_read`` under ``cfg`` and the dvc.yaml at
    ``path`` (nothing when there is no such file or the kind builds every policy it reads)."""
    import yaml

    reads = getattr(kind_module, "policies_read", None)
    if reads is None or not path.is_file():
        return []
    kind = cfg["workload"]["kind"]
    return undeclared(yaml.safe_load(path.read_text()), kind, reads(cfg), (cfg.get("policies") or {}).get(kind) or {})
