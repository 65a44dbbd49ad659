#!/usr/bin/env python3
"""Table and plot of k6/compare.sh runs (two gavel builds and the bare server
in paired rounds).

    k6/compare-report.py OUT.md A_LABEL B_LABEL LOG [LOG ...]

Each LOG is the output of one k6/compare.sh run (its `round N:` lines);
A_LABEL and B_LABEL name its two builds, in the order they were given to
it. Appends to OUT.md a table with a row per run and a row for all rounds
together: the medians of A / bare, B / bare and B / A, and the range of
B / A. Draws OUT.png beside it: each round's A / bare and B / bare, so the
paired gain shows apart from the host's phases.
"""

import os
import re
import statistics
import sys

ROUND = re.compile(r"round \d+: A (\d+), B (\d+), baseline (\d+) req/s")


def rounds(path):
    """(A, B, baseline) requests/s of each round of one run."""
    with open(path) as f:
        found = [tuple(float(v) for v in m.groups()) for m in map(ROUND.search, f) if m]
    if not found:
        sys.exit(f"{path}: no `round N:` lines of k6/compare.sh")
    return found


def row(label, rs):
    a_bare = statistics.median(a / z for a, _, z in rs)
    b_bare = statistics.median(b / z for _, b, z in rs)
    gains = [b / a for a, b, _ in rs]
    return (
        f"| {label} | {len(rs)} | {a_bare:.3f} | {b_bare:.3f} "
        f"| {statistics.median(gains):.3f} | {min(gains):.3f} - {max(gains):.3f} |"
    )


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    out, a_label, b_label, logs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    runs = [(os.path.basename(log), rounds(log)) for log in logs]
    everything = [r for _, rs in runs for r in rs]
    lines = [
        f"| run | rounds | {a_label} / bare | {b_label} / bare | {b_label} / {a_label} "
        f"| {b_label} / {a_label}, per round |",
        "|---|---|---|---|---|---|",
    ]
    lines += [row(label, rs) for label, rs in runs]
    if len(runs) > 1:
        lines.append(row("all", everything))
    with open(out, "a") as f:
        f.write("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    xs = range(1, len(everything) + 1)
    ax.plot(xs, [a / z for a, _, z in everything], "o-", label=f"{a_label} / bare server")
    ax.plot(xs, [b / z for _, b, z in everything], "o-", label=f"{b_label} / bare server")
    ax.set_xlabel("round (runs in the order given)")
    ax.set_ylabel("requests/s ratio to the bare server")
    ax.set_title("k6/compare.sh: two builds and the bare server in paired rounds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.splitext(out)[0] + ".png", dpi=110)


if __name__ == "__main__":
    main()
