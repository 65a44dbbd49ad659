#!/usr/bin/env python3
"""Tables and a plot of k6/throughput.sh runs.

    k6/throughput-report.py OUT.md LABEL=LOG [LABEL=LOG ...]

Each LOG is the output of one k6/throughput.sh run (its `round N:` lines);
LABEL names the run (the review mix, the build). Appends a table of the
medians to OUT.md: requests/s of gavel, the bare server, gavel with no
policies and the bare server replaying gavel's answers, with gavel's ratio
to the bare server (the issue's figure) and to the replaying server (the
evaluation's own cost). Draws OUT.png beside it: each run's median
requests/s per server, the rounds as points.
"""

import os
import re
import statistics
import sys

ROUND = re.compile(
    r"round \d+: gavel ([\d.]+) req/s, baseline ([\d.]+) req/s, "
    r"gavel with no policies ([\d.]+) req/s"
    r"(?:, baseline replaying gavel's answers ([\d.]+) req/s)?"
)
SERVERS = ["gavel", "bare server", "gavel, no policies", "bare server replaying gavel's answers"]


def rounds(path):
    """The requests/s of each server in each round of one run."""
    found = []
    with open(path) as f:
        for line in f:
            m = ROUND.search(line)
            if m:
                found.append([float(v) if v else None for v in m.groups()])
    if not found:
        sys.exit(f"{path}: no `round N:` lines of k6/throughput.sh")
    return found


def ratio(x, y):
    """x / y to two places, or `-` where a server did not run."""
    return f"{x / y:.2f}" if x and y else "-"


def main():
    if len(sys.argv) < 3 or any("=" not in a for a in sys.argv[2:]):
        sys.exit(__doc__)
    out = sys.argv[1]
    runs = []
    for arg in sys.argv[2:]:
        label, path = arg.split("=", 1)
        runs.append((label, rounds(path)))
    lines = [
        "| Run | rounds | gavel | bare server | gavel / bare | no policies / bare "
        "| replaying / bare | gavel / replaying |",
        "|---|---|---|---|---|---|---|---|",
    ]
    medians = []
    for label, rs in runs:
        med = []
        for i in range(len(SERVERS)):
            values = [round_[i] for round_ in rs if round_[i] is not None]
            med.append(statistics.median(values) if values else None)
        medians.append(med)
        gavel, bare, empty, replaying = med
        lines.append(
            f"| {label} | {len(rs)} | {gavel:,.0f} req/s | {bare:,.0f} req/s "
            f"| {ratio(gavel, bare)} | {ratio(empty, bare)} | {ratio(replaying, bare)} "
            f"| {ratio(gavel, replaying)} |"
        )
    with open(out, "a") as f:
        f.write("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(SERVERS)
    for s, server in enumerate(SERVERS):
        xs = [i + (s - (len(SERVERS) - 1) / 2) * width for i in range(len(runs))]
        heights = [m[s] or 0 for m in medians]
        ax.bar(xs, heights, width, label=server)
        for x, (_, rs) in zip(xs, runs):
            points = [r[s] for r in rs if r[s] is not None]
            ax.plot([x] * len(points), points, "k.", markersize=3)
    ax.set_xticks(range(len(runs)), [label for label, _ in runs])
    ax.set_ylabel("requests/s (median of rounds; dots: rounds)")
    ax.set_title("k6/throughput.sh: wrk over TLS, same machine, alternating rounds")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4)
    fig.tight_layout()
    fig.savefig(os.path.splitext(out)[0] + ".png", dpi=110)


if __name__ == "__main__":
    main()
