#!/usr/bin/env bash
# Throughput of gavel serve (17 PSS policies) against examples/baseline_server
# (the same TLS + hyper stack answering a fixed allowed: true), same machine,
# same load generator (wrk, HTTP/1.1 over TLS), same run, alternating rounds.
# gavel with an empty policy set runs too: it separates the server's own
# cost (routing, metrics, deadline) from the engine's. So does the bare
# server replaying gavel's own answers (examples/baseline_server --replay):
# a denial is kilobytes for TLS, the kernel and wrk on the same cores, and
# this ceiling separates what the answers cost from what evaluating costs.
#
#   k6/throughput.sh [seconds per round] [rounds] [connections]
#
# POLICIES=DIR serves another policy set in place of the 17 (a subset of
# them shows how the ratio moves with the engine's share of the work).
#
# Prints requests/s per round and the ratio of the medians. Needs wrk
# (Debian: apt-get install wrk) and a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
source k6/wait-until-serving.sh
SECONDS_PER_ROUND=${1:-10}
ROUNDS=${2:-3}
CONNECTIONS=${3:-32}
GAVEL_PORT=${GAVEL_PORT:-19443}
BASE_PORT=${BASE_PORT:-19444}
EMPTY_PORT=${EMPTY_PORT:-19445}
REPLAY_PORT=${REPLAY_PORT:-19447}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
cargo build --release --quiet --bin gavel --example baseline_server
work=$(mktemp -d)
# Wait for the servers to exit before removing their policy folder: gavel
# keeps serving through its shutdown delay, and would log failed rescans.
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
for port in "$GAVEL_PORT" "$BASE_PORT" "$EMPTY_PORT" "$REPLAY_PORT"; do
  if (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is already in use; stop what listens there" >&2
    exit 1
  fi
done
./target/release/gavel serve --listen "127.0.0.1:$GAVEL_PORT" --policies "${POLICIES:-examples/policies/pod-security}" \
  --ca-out "$work/ca.pem" --log-level warn &
pids=($!)
mkdir "$work/no-policies"
./target/release/gavel serve --listen "127.0.0.1:$EMPTY_PORT" --policies "$work/no-policies" \
  --ca-out "$work/ca-empty.pem" --log-level warn &
pids+=($!)
./target/release/examples/baseline_server --listen "127.0.0.1:$BASE_PORT" 2>/dev/null &
pids+=($!)
wait_until_serving "$GAVEL_PORT" "$BASE_PORT" "$EMPTY_PORT"
for pid in "${pids[@]}"; do
  kill -0 "$pid" 2>/dev/null || { echo "a server exited at start" >&2; exit 1; }
done
export REVIEWS="${REVIEWS:-$PWD/examples/reviews/pod-compliant.json:$PWD/examples/reviews/pod-violating.json}"
# gavel's answer to each review, for the bare server to replay.
IFS=: read -ra review_files <<<"$REVIEWS"
for review in "${review_files[@]}"; do
  curl -sk --fail -X POST -H 'Content-Type: application/json' --data-binary "@$review" \
    "https://127.0.0.1:$GAVEL_PORT/validate" >>"$work/answers.jsonl"
  echo >>"$work/answers.jsonl"
done
./target/release/examples/baseline_server --listen "127.0.0.1:$REPLAY_PORT" --replay "$work/answers.jsonl" 2>/dev/null &
pids+=($!)
wait_until_serving "$REPLAY_PORT"
kill -0 "${pids[-1]}" 2>/dev/null || { echo "the replaying server exited at start" >&2; exit 1; }
rps() {
  wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_ROUND}s" -s k6/wrk-review.lua "$1" \
    | tee -a "$work/wrk.log" | awk '/Requests\/sec/ {print $2}'
}
gavel=() base=() empty=() replay=()
for round in $(seq "$ROUNDS"); do
  g=$(rps "https://127.0.0.1:$GAVEL_PORT/validate")
  b=$(rps "https://127.0.0.1:$BASE_PORT/validate")
  e=$(rps "https://127.0.0.1:$EMPTY_PORT/validate")
  r=$(rps "https://127.0.0.1:$REPLAY_PORT/validate")
  echo "round $round: gavel $g req/s, baseline $b req/s, gavel with no policies $e req/s, baseline replaying gavel's answers $r req/s"
  gavel+=("$g"); base+=("$b"); empty+=("$e"); replay+=("$r")
done
! grep -qE "non_200 [1-9]" "$work/wrk.log" || { echo "some responses were not 200:" >&2; grep non_200 "$work/wrk.log" >&2; exit 1; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mg=$(median "${gavel[@]}"); mb=$(median "${base[@]}"); me=$(median "${empty[@]}"); mr=$(median "${replay[@]}")
awk -v g="$mg" -v b="$mb" -v e="$me" -v r="$mr" 'BEGIN {printf "median: gavel %.0f req/s, baseline %.0f req/s, ratio %.2f; no policies %.0f req/s, ratio %.2f; baseline replaying gavel'"'"'s answers %.0f req/s, ratio %.2f (gavel to it %.2f)\n", g, b, g / b, e, e / b, r, r / b, g / r}'
