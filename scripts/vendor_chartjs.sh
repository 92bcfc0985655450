#!/usr/bin/env bash
# Re-fetch the dashboard's chart library from the npm registry (done once; the result is committed):
#   bash scripts/vendor_chartjs.sh [VERSION]
# Writes src/hybridsched/service/static/vendor/chart.umd.min.js (keeps its MIT licence header) and
# chart.js.LICENSE.md. Needs node/npm and access to registry.npmjs.org.
set -euo pipefail
version="${1:-4.6.1}"
dest="$(cd "$(dirname "$0")/.." && pwd)/src/hybridsched/service/static/vendor"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "chart.js@${version}" >/dev/null && tar xzf chart.js-*.tgz)
mkdir -p "$dest"
cp "$tmp/package/dist/chart.umd.min.js" "$dest/chart.umd.min.js"
cp "$tmp/package/LICENSE.md" "$dest/chart.js.LICENSE.md"
head -c 120 "$dest/chart.umd.min.js"; echo
