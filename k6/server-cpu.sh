#!/usr/bin/env bash
# CPU time a server spends per request under load: the user and system
# time the kernel counts for the server process over a window
# (/proc/PID/stat), divided by the requests wrk got answered in it. Where k6/throughput.sh gives requests/s (which the load
# generator sharing the cores bends), this gives the server's own cost per
# request, caches as they are in a server (TLS, hyper and the kernel run
# between two requests), for any number of gavel binaries side by side:
#
#   k6/server-cpu.sh [rounds] [gavel binary ...]
#
# Each round measures examples/baseline_server (the same TLS + hyper stack
# answering a fixed allowed: true), then each binary with no policies and
# with the 17 Pod Security policies (POLICIES=DIR for another set). wrk's
# own CPU per request is counted over the same window: it shares the
# cores, so what a server's answers cost the client (a denial is
# kilobytes to decrypt and parse) moves requests/s too.
# Default binary: target/release/gavel. Needs wrk (Debian: apt-get
# install wrk) and a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
source k6/wait-until-serving.sh
ROUNDS=${1:-2}
shift || true
BINARIES=("$@")
[ ${#BINARIES[@]} -gt 0 ] || BINARIES=(target/release/gavel)
PORT=${PORT:-19446}
WINDOW=${WINDOW:-8}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
TICKS_PER_SECOND=$(getconf CLK_TCK)
# The CPU time (user and system, in clock ticks) process $1 has used so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
cargo build --release --quiet --bin gavel --example baseline_server
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/none"
export REVIEWS="${REVIEWS:-$PWD/examples/reviews/pod-compliant.json:$PWD/examples/reviews/pod-violating.json}"

# measure NAME COMMAND...: starts the server on $PORT, loads it for
# WINDOW + 4 seconds, and counts its CPU over WINDOW seconds in the middle.
measure() {
  local name=$1
  shift
  "$@" >/dev/null 2>&1 &
  local pid=$!
  wait_until_serving "$PORT"
  kill -0 "$pid" 2>/dev/null || { echo "$name exited at start" >&2; exit 1; }
  wrk -t1 -c32 -d$((WINDOW + 4))s -s k6/wrk-review.lua "https://127.0.0.1:$PORT/validate" >"$work/wrk.txt" &
  local load=$!
  sleep 2
  local before after client_before client_after
  before=$(cpu_ticks "$pid")
  client_before=$(cpu_ticks "$load")
  sleep "$WINDOW"
  after=$(cpu_ticks "$pid")
  client_after=$(cpu_ticks "$load")
  wait "$load"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  ! grep -qE "non_200 [1-9]" "$work/wrk.txt" || { echo "$name: some responses were not 200" >&2; exit 1; }
  local ms client_ms rps
  ms=$(((after - before) * 1000 / TICKS_PER_SECOND))
  client_ms=$(((client_after - client_before) * 1000 / TICKS_PER_SECOND))
  rps=$(awk '/Requests\/sec/ {print $2}' "$work/wrk.txt")
  awk -v n="$name" -v ms="$ms" -v cms="$client_ms" -v r="$rps" -v w="$WINDOW" \
    'BEGIN {printf "%-40s %8.0f req/s  %.2f cores  %6.1f us CPU per request  (wrk %.2f cores, %5.1f us)\n", n, r, ms / (1000 * w), ms * 1000 / (r * w), cms / (1000 * w), cms * 1000 / (r * w)}'
}

for round in $(seq "$ROUNDS"); do
  echo "round $round"
  measure baseline_server ./target/release/examples/baseline_server --listen "127.0.0.1:$PORT"
  for bin in "${BINARIES[@]}"; do
    measure "$bin, no policies" "$bin" serve --listen "127.0.0.1:$PORT" --policies "$work/none" \
      --ca-out "$work/ca.pem" --log-level warn
    measure "$bin, ${POLICIES:-pod-security}" "$bin" serve --listen "127.0.0.1:$PORT" \
      --policies "${POLICIES:-examples/policies/pod-security}" --ca-out "$work/ca.pem" --log-level warn
  done
done
