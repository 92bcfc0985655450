"""Adding a policy reruns only the stages that use it.

In a scratch copy of the project with the committed dvc.lock, the arrival example of
docs/adding-a-policy.md (``shortest_queue``: its class under
``src/hybridsched/kinds/machine/policies/`` and its YAML under ``conf/policies/machine/``) is
added and params.yaml composed again.  ``dvc status`` (no stage runs) before and after tells
which stages the two files make stale: a stage whose changed deps or params differ (the
committed dvc.lock is fresh for the code, so nothing of it is stale before).  Outputs and
the deps other stages write are absent in the copy (no data/, models/), so only the changed deps
that exist and the params count; both are the same before and after for a stage the policy does
not touch.  Each stage's code deps in dvc.yaml are what it imports (tests/test_kind_switch.py
checks them against the recorder's imports), so the policy folder is a dep of the stages that
build any policy by name only.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.file_access import compose_params, scratch_copy
from tests.test_adding_a_policy import doc_files

TOY = "shortest_queue"  # the doc's machine arrival example
# the stages that use every policy of the kind: the check builds each once, simulate runs each,
# evaluate ranks each, scenarios runs each heuristic; tune_heuristics and train_late build only the
# policies their settings name (tune.spaces; train_late.base, an expert), whose params and modules
# dvc.yaml lists one by one (tests/test_stage_params.py)
RERUN = {"check", "simulate", "evaluate", "scenarios"}
KEPT = {"generate", "validate", "profile", "tune", "tune_heuristics", "train_late", "train_rf", "train_ppo", "train_dqn",
        "train_cem", "fgd_atc23", "results_cluster", "results_serving"}
CODE = ("src/", "stages/")  # the code deps (dvc.lock's hashes of them are checked by tests/test_dvc_lock.py)


def stale(root: Path) -> dict[str, set[str]]:
    """Stage -> what ``dvc status`` finds changed in its deps (paths that exist) and params."""
    from dvc.repo import Repo

    out: dict[str, set[str]] = {}
    with Repo(str(root)) as repo:  # `dvc status --json`, in this process
        status = repo.status()
    for name, changes in status.items():
        found = out.setdefault(name.rpartition(":")[2], set())  # `dvc.yaml:NAME` outside the root
        for change in changes:
            if not isinstance(change, dict):
                continue
            for path, status in change.get("changed deps", {}).items():
                if isinstance(status, dict):  # a params file: key -> status
                    found.update(f"{path}:{key} {s}" for key, s in status.items())
                elif status != "deleted":  # absent: another stage's output, not made in the copy
                    found.add(f"{path} {status}")
    return out


def test_a_new_policy_reruns_only_the_stages_that_use_it(tmp_path):
    root = scratch_copy(tmp_path / "project")
    before = stale(root)
    # a code dep already stale would hide the new file (tests/test_dvc_lock.py names it too)
    old = sorted(f"{stage}: {c}" for stage, found in before.items() for c in found if c.startswith(CODE))
    assert not old, f"dvc.lock is stale for the code (re-record it with `dvc repro` / `dvc commit`): {old}"
    files = {p: text for p, text in doc_files().items() if Path(p).stem == TOY}
    assert sorted(files) == [f"conf/policies/machine/{TOY}.yaml", f"src/hybridsched/kinds/machine/policies/{TOY}.py"]
    for path, text in files.items():
        (root / path).write_text(text)
    compose_params(root, [])
    after = stale(root)
    names = set(yaml.safe_load((root / "dvc.yaml").read_text())["stages"])
    assert names == RERUN | KEPT, f"a stage this test does not know: {sorted(names - RERUN - KEPT)}"
    reruns = {stage for stage in names if after.get(stage, set()) != before.get(stage, set())}
    why = {stage: sorted(after.get(stage, set()) ^ before.get(stage, set())) for stage in reruns}
    assert reruns == RERUN, f"stages the new policy {TOY} makes stale: {why}"
