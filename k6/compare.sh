#!/usr/bin/env bash
# Paired throughput of two gavel builds (17 PSS policies each, or the
# policies of POLICIES=DIR, such as the CEL forms of the same controls) and
# examples/baseline_server, all three running at once and measured in
# alternating rounds with wrk: on this noisy machine only pairs taken
# seconds apart separate a change of a few percent from the machine's phases.
#
#   k6/compare.sh A_BINARY B_BINARY [seconds per round] [rounds] [connections]
#
# Prints each round's requests/s and ratios, then the medians of B/A and of
# each build against the baseline. Needs wrk (Debian: apt-get install wrk)
# and a release build of the baseline (cargo build --release --example
# baseline_server).
set -euo pipefail
cd "$(dirname "$0")/.."
source k6/wait-until-serving.sh
[ $# -ge 2 ] || { echo "usage: k6/compare.sh A_BINARY B_BINARY [seconds] [rounds] [connections]" >&2; exit 2; }
A_BIN=$1 B_BIN=$2
SECONDS_PER_ROUND=${3:-5}
ROUNDS=${4:-6}
CONNECTIONS=${5:-32}
PORTS=(19451 19452 19453)
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
BASELINE=./target/release/examples/baseline_server
[ -x "$BASELINE" ] || { echo "build the baseline first: cargo build --release --example baseline_server" >&2; exit 1; }
work=$(mktemp -d)
# Wait for the servers to exit before removing their policy folder: gavel
# keeps serving through its shutdown delay, and would log failed rescans.
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
for port in "${PORTS[@]}"; do
  if (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is already in use; stop what listens there" >&2
    exit 1
  fi
done
"$A_BIN" serve --listen "127.0.0.1:${PORTS[0]}" --policies "${POLICIES:-examples/policies/pod-security}" \
  --ca-out "$work/a.pem" --log-level warn &
"$B_BIN" serve --listen "127.0.0.1:${PORTS[1]}" --policies "${POLICIES:-examples/policies/pod-security}" \
  --ca-out "$work/b.pem" --log-level warn &
"$BASELINE" --listen "127.0.0.1:${PORTS[2]}" 2>/dev/null &
wait_until_serving "${PORTS[@]}"
export REVIEWS="${REVIEWS:-$PWD/examples/reviews/pod-compliant.json:$PWD/examples/reviews/pod-violating.json}"
rps() {
  wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_ROUND}s" -s k6/wrk-review.lua "$1" \
    | tee -a "$work/wrk.log" | awk '/Requests\/sec/ {print $2}'
}
for round in $(seq "$ROUNDS"); do
  a=$(rps "https://127.0.0.1:${PORTS[0]}/validate")
  b=$(rps "https://127.0.0.1:${PORTS[1]}/validate")
  z=$(rps "https://127.0.0.1:${PORTS[2]}/validate")
  awk -v r="$round" -v a="$a" -v b="$b" -v z="$z" 'BEGIN {
    printf "round %s: A %.0f, B %.0f, baseline %.0f req/s; B/A %.3f, A/baseline %.3f, B/baseline %.3f\n",
      r, a, b, z, b / a, a / z, b / z }' | tee -a "$work/rounds"
done
! grep -qE "non_200 [1-9]" "$work/wrk.log" || { echo "some responses were not 200:" >&2; grep non_200 "$work/wrk.log" >&2; exit 1; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
col() { awk -v f="$1" '{for (i = 1; i <= NF; i++) if ($i == f) {v = $(i + 1); sub(",", "", v); print v}}' "$work/rounds"; }
echo "median: B/A $(col B/A | median), A/baseline $(col A/baseline | median), B/baseline $(col B/baseline | median)"
