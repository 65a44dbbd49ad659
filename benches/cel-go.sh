#!/usr/bin/env bash
# The cel-go peer of `cargo bench --bench pod_security_flavours`: the same
# 16 Pod Security ValidatingPolicies on the same Pods, with cel-go at the
# version Kyverno pins. Builds once into a cache outside the repository
# (rebuilt when go.sum changes) and prints `cel-go <pod> <ns per Pod>`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cache="${GAVEL_BENCH_CACHE:-$HOME/.cache/gavel-bench}"
mkdir -p "$cache"
stamp="$(sha256sum "$here/cel-go/go.sum" "$here/cel-go/main.go" | sha256sum | cut -c1-16)"
bin="$cache/cel-go-pss-$stamp"
if [ ! -x "$bin" ]; then
  (cd "$here/cel-go" && go build -o "$bin" .)
fi
"$bin" "$root/../shared/conformance/kyverno-policies" "$root/benches/data"
