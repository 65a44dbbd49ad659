#!/usr/bin/env python3
"""Grouped bars of callgrind instruction counts, before and after a change,
from a TSV of `measurement<TAB>before<TAB>after` lines (`#` lines are
comments), as the perf-results reports record them.

Usage: benches/instructions-report.py FIGURES.tsv OUT.png [YLABEL]  (needs matplotlib)
Prints each measurement with its ratio. Bars are the figures divided by
1000; YLABEL names that unit (default: thousand instructions per call).
A table of times in nanoseconds plots in microseconds with YLABEL "us".
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    source, out = sys.argv[1], sys.argv[2]
    ylabel = sys.argv[3] if len(sys.argv) > 3 else "thousand instructions per call (callgrind)"
    rows = []
    with open(source) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, before, after = line.rstrip("\n").split("\t")
            rows.append((name, int(before), int(after)))
    for name, before, after in rows:
        print(f"{name}: {before:,} -> {after:,} ({after / before:.3f})")
    fig, ax = plt.subplots(figsize=(10, 4.5))
    xs = range(len(rows))
    width = 0.4
    ax.bar([x - width / 2 for x in xs], [r[1] / 1000 for r in rows], width, label="before")
    ax.bar([x + width / 2 for x in xs], [r[2] / 1000 for r in rows], width, label="after")
    for x, (_, before, after) in zip(xs, rows):
        ax.annotate(f"{after / before:.2f}x", (x + width / 2, after / 1000), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r[0] for r in rows], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(source.rsplit("/", 1)[-1])
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
