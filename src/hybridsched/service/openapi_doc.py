"""Markdown API reference from the app's OpenAPI schema (``hybridsched openapi``)."""

from __future__ import annotations

import json
from typing import Any


def render(spec: dict[str, Any]) -> str:
    """One section per endpoint: method, path, summary, auth, parameters, request body, responses."""
    lines = [f"# {spec['info']['title']} — API reference", "",
             "Generated from the app's OpenAPI schema (`hybridsched openapi --out FILE`); "
             "do not edit by hand. On a running server: `/docs` (the endpoints) and `/openapi.json`.", "",
             "Endpoints marked **auth** need `Authorization: Bearer $HYBRIDSCHED_TOKEN` (401 without a token, "
             "403 with a wrong one; checked before the request body is read) and are rate limited per client "
             "address (`rate_limit`, 429; the address is the connection's peer unless it is one of "
             "`trusted_proxies`). Wrong or "
             "missing tokens are counted too (`auth_fail_limit`): past it the address gets 429 for the rest of "
             "the window, whatever token it sends. Every 429 carries `Retry-After` (seconds).", "",
             "Bad input is 422 with one line naming the field (`detail`), before anything starts: JSON types "
             "are strict (`true` is not a speed, `\"1\"` is not a seed), unknown or repeated policy names and "
             "unknown workloads are 422, every integer is bounded (at most 2^31 - 1). A request body over "
             "`max_body_bytes` (64 KiB) is refused with 413: by its Content-Length before it is read, else "
             "as soon as the bytes received pass the limit. `HEAD` is answered wherever `GET` is.", ""]
    schemas = spec.get("components", {}).get("schemas", {})
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            auth = any("HTTPBearer" in s for s in op.get("security", []))
            lines += [f"## `{method.upper()} {path}`" + (" — **auth**" if auth else ""), ""]
            if op.get("description") or op.get("summary"):
                lines += [(op.get("description") or op.get("summary")).strip(), ""]
            params = op.get("parameters", [])
            if params:
                lines += ["| parameter | in | type | required | constraints | description |",
                          "|---|---|---|---|---|---|"]
                for p in params:
                    sch = p.get("schema", {})
                    typ = sch.get("type") or "/".join(a.get("type", "") for a in sch.get("anyOf", []) if a.get("type"))
                    cons = {k: v for k, v in sch.items() if k in ("minimum", "maximum", "pattern", "default")}
                    # a | would end the table cell
                    cons_text = json.dumps(cons).replace("|", "\\|") if cons else ""
                    desc = (p.get("description") or sch.get("description") or "").replace("|", "\\|")
                    lines.append(f"| `{p['name']}` | {p['in']} | {typ} | {p.get('required', False)} | "
                                 f"{cons_text} | {desc} |")
                lines.append("")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                ref = body.get("$ref") or next((a.get("$ref") for a in body.get("anyOf", []) if a.get("$ref")), None)
                name = ref.rsplit("/", 1)[-1] if ref else None
                if name and name in schemas:
                    lines += [f"Request body `{name}`:", "", "| field | type | description |", "|---|---|---|"]
                    for f, fs in schemas[name].get("properties", {}).items():
                        typ = fs.get("type") or "/".join(a.get("type", "") for a in fs.get("anyOf", []) if a.get("type"))
                        lines.append(f"| `{f}` | {typ} | {fs.get('description', '')} |")
                    lines.append("")
            codes = ", ".join(f"{c} {r.get('description', '')}".strip() for c, r in op.get("responses", {}).items())
            lines += [f"Responses: {codes}", ""]
    lines += ["## `WEBSOCKET /ws`", "",
              "Read-only event stream (no token). JSON messages, at most 10 per second per client:",
              "`hello` (the status on connect), `simulation_update` (tasks decided since the last update, "
              "per-policy summary, utilisation per device, latency CDF, size × intensity heat-map, win/loss "
              "matrix) and `notification` (`events`: retrain, run_started, run_finished, error). A client "
              "whose queue is full misses messages; one that stays full for `stall_drop_s` is disconnected. A browser "
              "page from another origin (its `Origin` is neither this `Host` nor one of `cors_origins`) is "
              "refused (close code 1008, HTTP 403).", ""]
    return "\n".join(lines)


def html_page(spec: dict[str, Any]) -> str:
    """``/docs``: the endpoints of ``spec`` (method, path, auth, summary) and a link to the
    OpenAPI schema, as one self-contained page: no script, no style, nothing from another origin
    (the dashboard's Content-Security-Policy applies)."""
    from html import escape

    rows = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            auth = "yes" if any("HTTPBearer" in s for s in op.get("security", [])) else ""
            rows.append(f"<tr><td>{escape(method.upper())}</td><td><code>{escape(path)}</code></td>"
                        f"<td>{auth}</td><td>{escape(op.get('summary', ''))}</td></tr>")
    title = escape(spec["info"]["title"])
    return "\n".join([
        '<!doctype html>', '<html lang="en">', '<head><meta charset="utf-8">', f"<title>{title} — API</title></head>",
        "<body>", f"<h1>{title} — API</h1>",
        '<p>OpenAPI schema: <a href="/openapi.json">/openapi.json</a> (load it into any OpenAPI viewer or '
        'client generator). Endpoints marked auth need <code>Authorization: Bearer $HYBRIDSCHED_TOKEN</code>. '
        'Dashboard: <a href="/">/</a>.</p>',
        "<table>", "<tr><th>Method</th><th>Path</th><th>Auth</th><th>Summary</th></tr>", *rows, "</table>",
        "</body>", "</html>", ""])
