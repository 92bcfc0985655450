"""The docs site's generated reference pages, written at every ``mkdocs build`` by the
mkdocs-gen-files plugin (mkdocs.yml, ``plugins: gen-files: scripts:``), so they cannot go stale:

- ``reference/settings.md``: every rule of ``settings_schema.SCHEMA`` with its range, its
  default in the composed ``conf/`` of each kind, and the comment that explains it;
- ``reference/policies.md``: every ``conf/policies/<kind>/*.yaml``: class, its declaration
  (dispatch mode, role, trained_by), the class's one-line description, its parameters;
- ``reference/stages.md``: the DVC stages of ``dvc.yaml``;
- ``reference/http-api.md``: the live service's endpoints, from its OpenAPI schema;
- ``reference/python-api.md``: the library's main modules, rendered by mkdocstrings.

Nothing here reads data/, models/ or metrics/: a fresh clone builds the docs. Every list is
sorted or in source order, so two builds write the same pages.  ``python
scripts/gen_reference.py OUT_DIR`` writes the pages into a folder instead (to read them).
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
SCHEMA_FILE = ROOT / "src" / "hybridsched" / "settings_schema.py"
KINDS = ("machine", "cluster", "serving")
# the workload each kind's defaults are read from (conf/workload/<name>.yaml)
KIND_WORKLOAD = {"machine": "default", "cluster": "alibaba_gpu_2023", "serving": "serving"}
THIS = "scripts/gen_reference.py"


def generated(source: str) -> str:
    """The note at the top of every generated page."""
    return f"*Generated at every docs build by `{THIS}` from {source}; edit those, not this page.*"


def cell(text: str) -> str:
    """Text safe inside a markdown table cell: ``|`` escaped outside code spans (inside one, the
    table extension leaves it alone)."""
    parts = re.split(r"(`+[^`]*?`+)", text.replace("\n", " "))
    return "".join(p if p.startswith("`") else p.replace("|", "\\|") for p in parts)


def value_text(v: Any, limit: int = 90) -> str:
    """A config value as it reads in YAML (``null``, ``true``, ``[1, 2]``, ``{a: 1}``), shortened."""
    def fmt(x: Any) -> str:
        if x is None:
            return "null"
        if isinstance(x, bool):
            return "true" if x else "false"
        if isinstance(x, float):
            return repr(x)
        if isinstance(x, list | tuple):
            return "[" + ", ".join(fmt(y) for y in x) + "]"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{k}: {fmt(y)}" for k, y in x.items()) + "}"
        return str(x)

    text = fmt(v)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def code(text: str) -> str:
    """``text`` as an inline code span (backticks inside get a longer fence)."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def first_sentence(doc: str | None, limit: int = 220) -> str:
    """The first sentence of a docstring's first paragraph, as markdown (reST roles dropped)."""
    para = " ".join((doc or "").strip().split("\n\n")[0].split())
    para = re.sub(r":(?:class|func|mod|meth|data|attr):`~?([^`]+)`", r"`\1`", para).replace("``", "`")
    m = re.search(r"(?<=[.!?])\s+(?=[A-Z(`])", para)
    text = para[: m.start()] if m else para
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---- the composed config --------------------------------------------------------------------

@functools.cache
def composed(workload: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """conf/ composed with ``workload=<workload>`` as the stages see it: (resolved, as written).
    ``$HYBRIDSCHED_TRACES`` is ignored, so the pages do not depend on this machine."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    saved = os.environ.pop("HYBRIDSCHED_TRACES", None)
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            cfg = compose(config_name="config", overrides=[f"workload={workload}"])
        resolved = OmegaConf.to_container(cfg, resolve=True)
        raw = OmegaConf.to_container(cfg, resolve=False)
    finally:
        if saved is not None:
            os.environ["HYBRIDSCHED_TRACES"] = saved
    resolved.pop("hydra", None)
    raw.pop("hydra", None)
    return resolved, raw


def workloads() -> list[str]:
    """Every conf/workload option, the kinds' own first."""
    rest = sorted(p.stem for p in (CONF / "workload").glob("*.yaml") if p.stem not in KIND_WORKLOAD.values())
    return [*KIND_WORKLOAD.values(), *rest]


def lookup(tree: Any, key: str) -> tuple[bool, Any]:
    node = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def shown(key: str, workload: str) -> str:
    """A setting's value in a composition, as written where it is an interpolation (``${...}``)."""
    resolved, raw = composed(workload)
    found, value = lookup(raw, key)
    if found and isinstance(value, str) and "${" in value:
        return value
    return value_text(lookup(resolved, key)[1])


# ---- comments: what a setting means ---------------------------------------------------------

def yaml_comments(text: str, prefix: str) -> dict[str, str]:
    """Dotted key -> its comment in a conf YAML: the inline one, else the comment lines right
    above it (the file's opening comment describes the file, not its first key).  An inline
    comment that starts with extra spaces continues the one of the key above."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    above: list[str] = []
    seen_key = False
    last = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            above = []
            continue
        if stripped.startswith("#"):
            if not stripped.startswith("# @package"):
                above.append(stripped.lstrip("#").strip())
            continue
        m = re.match(r"^(\s*)([A-Za-z_][\w-]*):(.*)$", line)
        if not m:
            above = []
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        dotted = ".".join(k for _, k in stack)
        dotted = f"{prefix}.{dotted}" if prefix else dotted
        inline = re.search(r"\s#(\s*)(.*)$", rest) if "'" not in rest and '"' not in rest else None
        if inline and len(inline.group(1)) > 1 and last is not None:
            out[last] = f"{out.get(last, '')} {inline.group(2).strip()}".strip()
        elif inline:
            out[dotted] = inline.group(2).strip()
        elif above and seen_key:
            out[dotted] = " ".join(above)
        above = []
        seen_key = True
        last = dotted if inline and len(inline.group(1)) <= 1 else last
    return out


@functools.cache
def conf_comments() -> dict[str, str]:
    """The comments of conf/ (config.yaml, each group's files, the kinds' files) by dotted key;
    the first file that explains a key wins."""
    files = [CONF / "config.yaml"]
    for group in sorted(p for p in CONF.iterdir() if p.is_dir() and p.name not in ("policies", "hydra", "experiment",
                                                                                     "hparams_search")):
        opts = sorted(group.glob("*.yaml"), key=lambda p: (p.stem not in ("default", *KIND_WORKLOAD.values()), p.stem))
        files += opts
    out: dict[str, str] = {}
    for f in files:
        text = f.read_text()
        glob_pkg = "# @package _global_" in text or f.parent == CONF
        for k, v in yaml_comments(text, "" if glob_pkg else f.parent.name).items():
            out.setdefault(k, v)
    return out


def schema_comments() -> tuple[dict[str, str], dict[str, str]]:
    """From settings_schema.py's source: (pattern -> its inline comment or the comment right
    above it, group -> the notes above its entries).  A comment block that starts with the
    group's name (``# sim``, ``# cem: the search ...``) or ``top level`` is about the group."""
    lines = SCHEMA_FILE.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("SCHEMA: dict"))
    meaning: dict[str, str] = {}
    notes: dict[str, list[str]] = {}
    block: list[str] = []
    for ln in lines[start + 1:]:
        if ln.startswith("}"):
            break
        s = ln.strip()
        if s.startswith("#"):
            block.append(s.lstrip("#").strip())
            continue
        m = re.match(r'^\s*"([^"]+)":', ln)
        if not m:
            continue
        pattern = m.group(1)
        group = pattern.split(".")[0] if "." in pattern else "top level"
        inline = re.search(r"\)\s*,?\s*#\s*(.*)$|,\s*#\s*(.*)$", ln)
        if block:
            text = " ".join(block)
            first = re.split(r"[\s:(]", text, maxsplit=1)[0]
            if first == group or text.startswith("top level"):
                if not text.startswith("top level"):
                    notes.setdefault(group, []).append(text)
            else:
                meaning[pattern] = text
            block = []
        if inline:
            meaning[pattern] = (inline.group(1) or inline.group(2)).strip()
    return meaning, {g: " ".join(v) for g, v in notes.items()}


# ---- reference/settings.md ------------------------------------------------------------------

def settings_page() -> str:
    from hybridsched.settings_schema import SCHEMA, _match, as_workload_key, describe, leaves

    meaning, notes = schema_comments()
    comments = conf_comments()
    ws = workloads()
    keys: dict[str, list[str]] = {}  # composed key -> the workloads that have it, in order
    for w in ws:
        for key, _ in leaves(composed(w)[0]):
            keys.setdefault(key, []).append(w)

    # each composed setting under the rule that checks it (the first pattern that matches, as
    # rule_for does); scenarios.workloads.<name>.X and workload.test.X are checked as workload.X
    owned: dict[str, list[str]] = {}
    for key in keys:
        if key.startswith(("scenarios.workloads.", "workload.test.")):
            continue
        pattern = next((p for p in SCHEMA if _match(key, p)), None)
        if pattern is not None:
            owned.setdefault(pattern, []).append(key)

    def default(pattern: str) -> str:
        found = owned.get(pattern, [])
        if not found:
            mapped = [k for k in keys if k.startswith(("scenarios.workloads.", "workload.test."))
                      and _match(as_workload_key(k).replace("workload.test.", "workload.", 1), pattern)]
            return ("not set in conf/ (the code's default)" if not mapped else
                    f"only in overrides, e.g. {code(mapped[0])} = {code(shown(mapped[0], keys[mapped[0]][0]))}")
        if "*" in pattern:
            segs = pattern.split(".")
            wild = [i for i, seg in enumerate(segs) if "*" in seg or "?" in seg]

            def short(k: str) -> str:
                parts = k.split(".")
                return ".".join(parts[i] for i in wild)

            values = [shown(k, keys[k][0]) for k in found]
            if len(found) > 2 and len(set(values)) == 1:
                return f"{code(values[0])} (all {len(found)}: " + ", ".join(short(k) for k in found[:6]) + \
                    (", …)" if len(found) > 6 else ")")
            listed = ", ".join(f"{short(k)}: {code(v)}" for k, v in zip(found[:6], values[:6]))
            return listed + (f", … ({len(found)} settings)" if len(found) > 6 else "")
        key = found[0]
        per_kind = {kind: shown(key, w) for kind, w in KIND_WORKLOAD.items() if w in keys[key]}
        if len(per_kind) == len(KIND_WORKLOAD) and len(set(per_kind.values())) == 1:
            return code(next(iter(per_kind.values())))
        if per_kind:
            return "; ".join(f"{kind}: {code(v)}" for kind, v in per_kind.items())
        w = keys[key][0]
        return f"{code(shown(key, w))} (`workload={w}`)"

    def explain(pattern: str) -> str:
        if pattern in meaning:
            return meaning[pattern]
        found = owned.get(pattern, [])
        return comments.get(found[0], "") if len(found) == 1 else ""

    cfg = composed(KIND_WORKLOAD["machine"])[0]
    groups: dict[str, list[str]] = {}
    for pattern in SCHEMA:
        groups.setdefault(pattern.split(".")[0] if "." in pattern else "top level", []).append(pattern)
    out = ["# Settings", "", generated("`src/hybridsched/settings_schema.py` (`SCHEMA`: each setting's rule) "
                                       "and the composed `conf/` (defaults)"), "",
           "Every setting a stage reads, as the `check` stage checks it: a setting no rule covers is refused "
           "(`+workload.rte=5` is a typo, not a new setting), and so is a value outside its range, with one "
           "line that names the setting ([bad-input.md](../bad-input.md)). `*` in a setting matches one key "
           "of any name. **Default** is the value in `conf/` as composed for each kind (machine: "
           "`workload=default`, cluster: `workload=alibaba_gpu_2023`, serving: `workload=serving`); "
           "`${...}` is an interpolation of another setting. Change one with a Hydra override "
           "([configuration.md](../configuration.md)).", "",
           "Groups: " + ", ".join(f"[{g}](#{g.replace(' ', '-').replace('_', '_')})" for g in groups) + ".", ""]
    for group, patterns in groups.items():
        out += [f"## {group}", ""]
        note = notes.get(group, "")[len(group):].rstrip()
        if note:  # "cem: the search, ..." or "dqn (machine kind) and ..."
            out += [f"`{group}`{note}" + ("" if note.endswith(".") else "."), ""]
        out += ["| setting | type and range | default | meaning |", "|---|---|---|---|"]
        for p in patterns:
            out.append(f"| {code(p)} | {cell(describe(SCHEMA[p], cfg))} | {cell(default(p))} | {cell(explain(p))} |")
        out.append("")
    return "\n".join(out)


# ---- reference/policies.md ------------------------------------------------------------------

def yaml_header(text: str) -> str:
    """The first sentence of a policy YAML's opening comment ('' if it has none)."""
    lines = []
    for ln in text.splitlines():
        if not ln.startswith("#"):
            break
        lines.append(ln.lstrip("#").strip())
    return first_sentence(" ".join(lines))


def policies_page() -> str:
    from hybridsched.kinds.base import declaration, target_class

    resolved, raw = composed(KIND_WORKLOAD["machine"])
    out = ["# Policies", "", generated("`conf/policies/<kind>/*.yaml` (each policy's configuration) and the "
                                       "classes their `_target_` names (declaration, description)"), "",
           "Every policy of every kind. **Dispatch** is the mode the simulator runs it in, as its class declares "
           "(`dispatch`; `arrival` unless it says otherwise): `arrival` places each task when it arrives, "
           "`ordered` keeps each device's queue in an order, `late` picks from a central pool when a device "
           "frees, the cluster's `queue` reorders one central queue at every event. **Role** (`role`): "
           "`baseline`, `heuristic`, `learned` (reads the model its **trained by** stage writes, `model_dir`) or "
           "`clairvoyant`; `tuned` reads the weights the "
           "`tune_heuristics` stage searched. A policy runs with `policy=NAME`, or among `sim.policies.<kind>`; "
           "a new one is one class and one YAML ([adding-a-policy.md](../adding-a-policy.md)).", ""]
    for kind in KINDS:
        files = sorted((CONF / "policies" / kind).glob("*.yaml"))
        out += [f"## {kind}", "",
                f"{len(files)} policies (`conf/policies/{kind}/`).", "",
                "| policy | class | dispatch | role | trained by | what it does | parameters |",
                "|---|---|---|---|---|---|---|"]
        for f in files:
            name = f.stem
            node = (resolved.get("policies") or {}).get(kind, {}).get(name)
            raw_node = (raw.get("policies") or {}).get(kind, {}).get(name)
            if node is None:  # not in the kind's defaults list: read the file itself
                node = raw_node = {k: v for k, v in (yaml.safe_load(f.read_text()) or {}).items() if k != "defaults"}
            cls = target_class(node)
            d = declaration(node)  # the class attributes kinds.base reads: what simulate and scenarios use
            what = first_sentence(inspect.getdoc(cls))
            header = yaml_header(f.read_text())
            if header and header != what:
                what += f"<br>*This configuration:* {header}"
            params = ", ".join(f"{code(k)}: {code(value_text(v, 60))}" for k, v in raw_node.items() if k != "_target_")
            out.append(f"| {code(name)} | {code(cls.__name__)} | {d.dispatch} | {d.role} | {code(d.trained_by) if d.trained_by else '—'} "
                       f"| {cell(what)} | {cell(params) or '—'} |")
        out.append("")
    return "\n".join(out)


# ---- reference/stages.md --------------------------------------------------------------------

def stage_comments(text: str) -> dict[str, str]:
    """Stage name -> the comment right above it in dvc.yaml."""
    out: dict[str, str] = {}
    block: list[str] = []
    for ln in text.splitlines():
        if re.match(r"^  #", ln):
            block.append(ln.strip().lstrip("#").strip())
            continue
        m = re.match(r"^  ([A-Za-z_][\w-]*):\s*$", ln)
        if m and block:
            out[m.group(1)] = " ".join(block)
        block = []
    return out


def entries(items: list[Any] | None) -> Iterator[str]:
    """The paths (or params) of a dvc.yaml list as markdown, with their options (``cache: false``)."""
    for item in items or []:
        if isinstance(item, dict):
            for path, opts in item.items():
                if isinstance(opts, list):  # params from another file: {file: [keys]}
                    yield f"{code(str(path))}: " + ", ".join(code(str(o)) for o in opts)
                elif isinstance(opts, dict) and opts:
                    yield f"{code(str(path))} ({', '.join(f'{k}: {value_text(v)}' for k, v in opts.items())})"
                else:
                    yield code(str(path))
        else:
            yield code(str(item))


def stages_page() -> str:
    text = (ROOT / "dvc.yaml").read_text()
    dvc = yaml.safe_load(text)
    notes = stage_comments(text)
    hydra = next((v["hydra"] for v in dvc.get("vars", []) if isinstance(v, dict) and "hydra" in v), "")
    names = list(dvc["stages"])
    out = ["# DVC stages", "", generated("`dvc.yaml`"), "",
           f"The pipeline `dvc repro` runs, in `dvc.yaml`'s order: {', '.join(f'[{n}](#{n})' for n in names)}. "
           "Every stage is `python -m stages.<name>` for every kind: the script looks the kind up by "
           "`workload.kind` ([architecture.md](../architecture.md)). A stage reruns when one of its **deps** "
           "or **params** changed; **outs**, **metrics** and **plots** are what it writes (`cache: false`: "
           "committed to git with `dvc.lock` rather than kept in the DVC cache).", "",
           f"`${{hydra}}` in each command is `{hydra}`: the stage reads the composed `params.yaml` and "
           "writes nothing under `outputs/`.", ""]
    for name in names:
        stage = dvc["stages"][name]
        out += [f"## {name}", ""]
        if name in notes:
            out += [notes[name], ""]
        out += [f"- **cmd**: `{stage['cmd']}`"]
        for field in ("deps", "params", "outs", "metrics", "plots"):
            items = list(entries(stage.get(field)))
            if items:
                out.append(f"- **{field}**: " + ", ".join(items))
        out.append("")
    plots = dvc.get("plots") or []
    if plots:
        out += ["## Plot definitions", "", "What `dvc plots show` and `dvc plots diff` draw (`plots:` in `dvc.yaml`).",
                "", "| plot | title | data (file: column) | x | template |", "|---|---|---|---|---|"]
        for p in plots:
            if isinstance(p, str):
                out.append(f"| {code(p)} | (an image) | | | |")
                continue
            (pname, spec), = p.items()
            ys = spec.get("y") or {}
            data = ", ".join(f"{code(f)}: {code(str(c))}" for f, c in ys.items()) if isinstance(ys, dict) else code(str(ys))
            out.append(f"| {code(pname)} | {cell(str(spec.get('title', '')))} | {cell(data)} | "
                       f"{code(str(spec.get('x', '')))} | {spec.get('template', '')} |")
        out.append("")
    return "\n".join(out)


# ---- reference/http-api.md ------------------------------------------------------------------

def openapi_spec() -> dict[str, Any]:
    """The live service's OpenAPI schema, from an app on a throwaway SQLite file."""
    import tempfile

    from hybridsched.service.app import create_app
    from hybridsched.service.settings import load_settings

    saved = os.environ.pop("HYBRIDSCHED_TRACES", None)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = load_settings([], database_url=f"sqlite:///{tmp}/openapi.db", token="unused")
            app = create_app(settings)
            spec = app.openapi()
            app.state.svc.store.dispose()
    finally:
        if saved is not None:
            os.environ["HYBRIDSCHED_TRACES"] = saved
    return spec


def http_api_page() -> str:
    from hybridsched.service.openapi_doc import render

    lines = render(openapi_spec()).split("\n")
    # render()'s title and "Generated ... by `hybridsched openapi`" line, as this site says them
    body = lines[3:] if len(lines) > 2 and lines[2].startswith("Generated") else lines[1:]
    return "\n".join(["# HTTP API", "", generated("the live service's OpenAPI schema (`create_app(settings).openapi()`, "
                                                  "`src/hybridsched/service/`)"),
                      "", "How to run the service: [service.md](../service.md). On a running server: `/docs` "
                      "(the endpoints) and `/openapi.json`.", "", *body])


# ---- reference/python-api.md ----------------------------------------------------------------

# the library's main modules, in reading order: the kind interface and registry, the check
# table, then the shared cores every kind uses
PYTHON_MODULES = [
    ("hybridsched.kinds", "the kind registry"),
    ("hybridsched.kinds.base", "the interface every kind implements: stages, `Run`, `instantiate`"),
    ("hybridsched.settings_schema", "every setting's rule: the `check` stage"),
    ("hybridsched.evaluation", "one comparison table for every kind"),
    ("hybridsched.errors", "the one-line errors"),
    ("hybridsched.io", "atomic writers"),
    ("hybridsched.devices", "the CPU + GPUs cost and power model"),
    ("hybridsched.estimators", "run-time model estimators"),
    ("hybridsched.heap", "the compiled loops' min-heap"),
    ("hybridsched.sketch", "a mergeable quantile sketch"),
    ("hybridsched.parallel", "work in other processes"),
    ("hybridsched.rl.dqn", "the DQN core"),
    ("hybridsched.rl.replay", "the replay buffer"),
    ("hybridsched.rl.cem", "the cross-entropy method"),
    ("hybridsched.validation", "the Great Expectations runner"),
]


def python_api_page() -> str:
    out = ["# Python API", "", generated("the docstrings of `src/hybridsched/` (mkdocstrings)"), "",
           "The library's main modules; the rest are listed with one line each in "
           "[architecture.md](../architecture.md#layout).", ""]
    out += [f"- [`{m}`](#{m}): {what}" for m, what in PYTHON_MODULES]
    out.append("")
    for m, _ in PYTHON_MODULES:
        out += [f"::: {m}", ""]
    return "\n".join(out)


PAGES: dict[str, Callable[[], str]] = {
    "reference/settings.md": settings_page,
    "reference/policies.md": policies_page,
    "reference/stages.md": stages_page,
    "reference/http-api.md": http_api_page,
    "reference/python-api.md": python_api_page,
}


def main_gen_files() -> None:
    import mkdocs_gen_files

    for path, page in PAGES.items():
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(page())
        mkdocs_gen_files.set_edit_path(path, THIS)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("reference-pages")
    for path, page in PAGES.items():
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page())
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
elif __name__ == "<run_path>":  # mkdocs-gen-files
    main_gen_files()
