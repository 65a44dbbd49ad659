#!/usr/bin/env python3
"""Plot of the decoded document against serde_json::Value, from the
criterion medians of one run of

    cargo bench --bench decode -- document
    cargo bench --bench pod_security_flavours -- pss16-patterns

Usage: benches/document-report.py OUT.png  (needs matplotlib)
Prints the medians it plots.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "target", "criterion")


def median(group, bench, case):
    # A `BenchmarkId` is a folder per part; a `bench_function` name with a
    # slash is one folder with an underscore.
    path = os.path.join(ROOT, group, bench, case, "new", "estimates.json")
    if not os.path.exists(path):
        path = os.path.join(ROOT, group, f"{bench}_{case}", "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"]


ROWS = [
    ("decode 3k", ("document", "value", "3k"), ("document", "json_doc", "3k")),
    ("decode 20k", ("document", "value", "20k"), ("document", "json_doc", "20k")),
    ("lookups 3k", ("document", "lookups_value", "3k"), ("document", "lookups_json_doc", "3k")),
    ("lookups 20k", ("document", "lookups_value", "20k"), ("document", "lookups_json_doc", "20k")),
    ("patterns compliant", ("pss16-patterns", "value", "compliant"), ("pss16-patterns", "json_doc", "compliant")),
    ("patterns violating", ("pss16-patterns", "value", "violating"), ("pss16-patterns", "json_doc", "violating")),
]


def main():
    labels, ratios = [], []
    for label, value, doc in ROWS:
        v, d = median(*value), median(*doc)
        print(f"{label}: Value {v:.1f} ns, Doc {d:.1f} ns, {v / d:.2f}x")
        labels.append(label)
        ratios.append(v / d)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh(labels, ratios, color="#4a7ab5")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("serde_json::Value time / json_doc::Doc time (higher: Doc faster)")
    ax.invert_yaxis()
    for i, r in enumerate(ratios):
        ax.text(r, i, f" {r:.2f}x", va="center")
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)


if __name__ == "__main__":
    main()
