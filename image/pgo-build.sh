#!/usr/bin/env bash
# A profile-guided (PGO) release build of gavel, for the image:
#
#   image/pgo-build.sh [--out BINARY]      (default target/pgo/gavel)
#   image/build.sh --binary target/pgo/gavel
#
# 1. builds gavel instrumented (-Cprofile-generate);
# 2. trains it: `gavel serve` on each training policy set, both webhook
#    routes, under wrk with the example reviews (examples/reviews), then
#    stops it with SIGTERM so that it writes its profile;
# 3. merges the profiles with the toolchain's llvm-profdata (rustup
#    component llvm-tools, added when missing);
# 4. builds gavel again with -Cprofile-use.
#
# Training sets: the 17 Pod Security policies and the mutation examples of
# examples/policies, and, where ../shared is beside the repository, the same
# controls as validate.cel rules and as ValidatingPolicies
# (../shared/conformance/kyverno-policies/pod-security-{cel,vpol}).
# perf-results/2026-11-28-evaluation-core-v2-step7.md has the before/after.
#
# Both builds use their own target directories under GAVEL_PGO_CACHE
# (default ~/.cache/gavel-pgo), outside the repository; each is a full
# release build (about 7 minutes on two cores). Needs wrk and curl.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/k6/wait-until-serving.sh"
out="$repo/target/pgo/gavel"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    *) echo "usage: image/pgo-build.sh [--out BINARY]" >&2; exit 2 ;;
  esac
done
log() { echo "image/pgo-build.sh: $*" >&2; }
for tool in wrk curl; do
  command -v "$tool" >/dev/null || { log "$tool is missing"; exit 1; }
done
cache="${GAVEL_PGO_CACHE:-$HOME/.cache/gavel-pgo}"
profiles="$cache/profiles"
mkdir -p "$cache"

sysroot="$(rustc --print sysroot)"
host="$(rustc -vV | sed -n 's/^host: //p')"
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  log "adding the llvm-tools component for llvm-profdata"
  rustup component add llvm-tools
fi

log "instrumented build"
(cd "$repo" && RUSTFLAGS="-Cprofile-generate=$profiles" CARGO_TARGET_DIR="$cache/generate" \
  cargo build --release --bin gavel)
# Only the server's runs are training: the build scripts wrote profiles too.
rm -rf "$profiles"

work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/mutation"
cp "$repo/examples/policies/add-pod-defaults.yaml" "$repo/examples/policies/require-labels.yaml" \
  "$work/mutation/"
sets=("$repo/examples/policies/pod-security" "$work/mutation")
shared="$repo/../shared/conformance/kyverno-policies"
for flavour in pod-security-cel pod-security-vpol; do
  [ -d "$shared/$flavour" ] || continue
  mkdir "$work/$flavour"
  # Each control's policy is <level>/<name>/<name>.yaml beside its tests.
  for dir in "$shared/$flavour"/*/*/; do
    name="$(basename "$dir")"
    [ -f "$dir/$name.yaml" ] && cp "$dir/$name.yaml" "$work/$flavour/"
  done
  sets+=("$work/$flavour")
done
export REVIEWS="$repo/examples/reviews/pod-compliant.json:$repo/examples/reviews/pod-violating.json"
port=${GAVEL_PGO_PORT:-19470}
for set in "${sets[@]}"; do
  "$cache/generate/release/gavel" serve --listen "127.0.0.1:$port" --policies "$set" \
    --ca-out "$work/ca.pem" --log-level warn >/dev/null 2>&1 &
  pid=$!
  wait_until_serving "$port"
  for route in validate mutate; do
    rps=$(wrk -t1 -c16 -d6s -s "$repo/k6/wrk-review.lua" "https://127.0.0.1:$port/$route" \
      | awk '/Requests\/sec/ {print $2}')
    log "trained on $(basename "$set"), /$route: $rps req/s (instrumented)"
  done
  kill -TERM "$pid"
  wait "$pid" || true
done
"$profdata" merge -o "$cache/gavel.profdata" "$profiles"

log "optimised build"
(cd "$repo" && RUSTFLAGS="-Cprofile-use=$cache/gavel.profdata" CARGO_TARGET_DIR="$cache/use" \
  cargo build --release --bin gavel)
mkdir -p "$(dirname "$out")"
cp "$cache/use/release/gavel" "$out"
log "wrote $out"
