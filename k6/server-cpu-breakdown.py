#!/usr/bin/env python3
"""Where a server's CPU goes per request, by part of the stack.

Reads `perf record` profiles of gavel serve taken under load (see
k6/server-cpu.sh for the load) and groups the samples by what the symbol
belongs to: kernel, TLS, hyper, tokio, decoding, the engine, and so on.
Each group's time is divided by the requests answered in the profile's
window, so two profiles (no policies, a policy set) show which parts a
policy set adds to and by how much.

    k6/server-cpu-breakdown.py OUT_PREFIX NAME=PERF_DATA:SAMPLE_HZ:REQUESTS ...

Writes OUT_PREFIX.tsv (group, then microseconds per request per profile)
and OUT_PREFIX.png (stacked bars), and prints the table. Needs perf; the
plot needs matplotlib.
"""

import collections
import re
import subprocess
import sys

# First match wins: the symbol's crate or module names the part.
GROUPS = [
    ("tls", r"rustls|ring_core"),
    ("hyper", r"hyper"),
    ("tokio", r"tokio"),
    ("decode", r"serde_json|serde_core|admission::review|json_doc"),
    (
        "engine",
        r"pattern::|jmespath|engine::|matching::|conditions|policy::|wildcard|cel::",
    ),
    ("pipeline and metrics", r"admission::pipeline|rule_table|prometheus|metrics"),
    ("verdict", r"verdict|yaml_text"),
    ("allocator", r"jemalloc|_rjem_"),
    ("memcpy/memcmp", r"memmove|memcpy|memcmp|memset"),
    ("clock", r"clock_gettime"),
    ("server", r"gavel::server"),
]


def group_of(kernel, symbol):
    if kernel:
        return "kernel"
    for name, pattern in GROUPS:
        if re.search(pattern, symbol):
            return name
    return "other"


def breakdown(perf_data, hz, requests):
    out = subprocess.run(
        ["perf", "report", "-i", perf_data, "--no-children", "-g", "none",
         "--sort", "sym", "-F", "sample,sym"],
        capture_output=True, text=True, check=True,
    ).stdout
    groups = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+\[(.)\]\s+(.*)", line)
        if m:
            groups[group_of(m.group(2) == "k", m.group(3))] += int(m.group(1))
    # A sample stands for 1/hz seconds of one CPU.
    return {g: n * 1e6 / hz / requests for g, n in groups.items()}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    prefix = sys.argv[1]
    runs = []
    for arg in sys.argv[2:]:
        name, spec = arg.split("=", 1)
        data, hz, requests = spec.rsplit(":", 2)
        runs.append((name, breakdown(data, float(hz), float(requests))))
    names = sorted({g for _, b in runs for g in b},
                   key=lambda g: -max(b.get(g, 0) for _, b in runs))
    with open(prefix + ".tsv", "w") as f:
        f.write("group\t" + "\t".join(n for n, _ in runs) + "\n")
        for g in names + ["total"]:
            values = [sum(b.values()) if g == "total" else b.get(g, 0) for _, b in runs]
            f.write(g + "\t" + "\t".join(f"{v:.2f}" for v in values) + "\n")
    print(open(prefix + ".tsv").read(), end="")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(7, 5))
    bottoms = [0.0] * len(runs)
    for i, g in enumerate(names):
        values = [b.get(g, 0) for _, b in runs]
        ax.bar([n for n, _ in runs], values, bottom=bottoms, label=g, color=plt.cm.tab20(i))
        bottoms = [x + v for x, v in zip(bottoms, values)]
    ax.set_ylabel("server CPU per request (us)")
    ax.set_title("gavel serve under wrk: CPU per request by part")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(prefix + ".png", dpi=110)


if __name__ == "__main__":
    main()
