#!/usr/bin/env bash
# The background scan at scale on the real control plane (a benchmark, not
# a CI test): one gavel replica with its chart's defaults, N ConfigMaps
# (10,000), an Audit policy they all fail; the first scan writes one
# PolicyReport each, the next finds nothing to write.
#
#   k6/reports-scan.sh           the full run (about 6 minutes on 2 cores)
#   k6/reports-scan.sh --quick   1,000 ConfigMaps
#
# Writes perf-results/<version>/reports-scan/: scan.json (raw), README.md and
# a PNG plot, by k6/reports-report.py (matplotlib from PyPI into the bench
# virtualenv, as k6/cluster.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/versions.env
if [ "${1:-}" = "--quick" ]; then
  export GAVEL_REPORTS_RESOURCES=${GAVEL_REPORTS_RESOURCES:-1000}
  quick=1
fi
source k6/bench-env.sh
bench_venv
cargo build --release --quiet --bin gavel
version=$(./target/release/gavel --version | awk '{print $2}')
out=${GAVEL_REPORTS_OUT:-perf-results/$version/reports-scan}
[ -z "${quick:-}" ] || out=${GAVEL_REPORTS_OUT:-target/reports-scan-quick}
mkdir -p "$out"
out=$(cd "$out" && pwd)
write_environment "$out/environment.json" 1
GAVEL_REPORTS_OUT="$out" cargo test --release --test integration -- --ignored --nocapture reports_scale::reports_scan_at_scale
"$venv/bin/python" k6/reports-report.py "$out"
echo "report: $out/README.md"
