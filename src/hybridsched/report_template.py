"""An HTML template for `dvc plots diff` that renders offline.

DVC's default page loads Vega, Vega-Lite and Vega-Embed from a CDN, so it is blank
without a network. This builds a template with the three libraries inlined, taken from
their pinned npm packages (the same versions DVC's renderer targets). It has no
``{scripts}`` placeholder, so DVC adds no CDN tags.

Build it with ``python -m hybridsched.report_template OUT`` (``make`` does), which runs
``npm pack`` in a temp folder; or pass ``--from DIR`` holding the three .tgz files.
"""

from __future__ import annotations

import argparse
import subprocess
import tarfile
import tempfile
from pathlib import Path

from hybridsched.errors import HybridschedError
from hybridsched.io import write_text

PACKAGES = {"vega": "5.20.2", "vega-lite": "5.2.0", "vega-embed": "6.18.2"}

PAGE = """<!DOCTYPE html>
<html>
<head>
    {{refresh_tag}}
    <meta charset="utf-8">
    <title>DVC plots (offline)</title>
{scripts}
    <style>
        body {{ font-family: sans-serif; }}
        table {{ border-spacing: 15px; }}
    </style>
</head>
<body>
    {{plot_divs}}
</body>
</html>
"""


def _js_from_tarball(tgz: Path, name: str) -> str:
    member = f"package/build/{name}.min.js"
    with tarfile.open(tgz) as tf:
        try:
            data = tf.extractfile(member)
        except KeyError:
            raise HybridschedError(f"{tgz}: has no {member}") from None
        assert data is not None
        return data.read().decode("utf-8")


def _script_tag(name: str, js: str) -> str:
    # "</script" inside inlined code would end the tag early
    js = js.replace("</script", "<\\/script")
    return f'    <script type="text/javascript">/* {name}@{PACKAGES[name]} */\n{js}\n    </script>'


def fetch_tarballs(dest: Path) -> dict[str, Path]:
    """``npm pack`` the pinned packages into ``dest``; name -> tarball path."""
    specs = [f"{n}@{v}" for n, v in PACKAGES.items()]
    try:
        subprocess.run(["npm", "pack", "--silent", *specs], cwd=dest, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise HybridschedError(f"npm pack {' '.join(specs)} failed: {getattr(e, 'stderr', '') or e}".strip()) from None
    return {n: dest / f"{n}-{v}.tgz" for n, v in PACKAGES.items()}


def build_template(out: Path, tarball_dir: Path | None = None) -> Path:
    """Write the offline template to ``out`` (atomically)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tarball_dir) if tarball_dir else Path(tmp)
        tarballs = {n: src / f"{n}-{v}.tgz" for n, v in PACKAGES.items()}
        if not all(p.exists() for p in tarballs.values()):
            tarballs = fetch_tarballs(src)
        # "</script" inside inlined code would end the tag early; the minified builds have none, but be safe
        scripts = "\n".join(_script_tag(n, _js_from_tarball(p, n)) for n, p in tarballs.items())
        write_text(out, PAGE.format(scripts=scripts))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--from", dest="tarball_dir", type=Path, default=None)
    args = ap.parse_args()
    path = build_template(args.out, args.tarball_dir)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, vega {PACKAGES['vega']} inlined)")


if __name__ == "__main__":
    main()
