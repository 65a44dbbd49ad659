#!/usr/bin/env python3
"""Table and plot of `cargo bench --bench pod_security_flavours` beside the
cel-go peer (benches/cel-go.sh), from one run.

Usage: benches/flavours-report.py OUT.md [--before LABEL=CRITERION_DIR]...
       [--cel-go FILE] [--group GROUP] [--png PATH]
Reads the medians criterion wrote under target/criterion/GROUP (pss16 by
default: the engine as the CLI runs it; pss16-planned is the served path,
pss16-fresh that with the Pod decoded per call), and under each --before
directory (a criterion output of an older commit measured in the same
session), appends OUT.md's table and draws OUT.png beside it (or PATH).
"""
import argparse
import json
import os
import sys

FORMS = ["empty", "pattern", "validate-cel", "vpol"]
PODS = ["compliant", "violating"]


def medians(criterion_dir, group):
    out = {}
    for form in FORMS:
        for pod in PODS:
            path = os.path.join(criterion_dir, group, f"{form}_{pod}", "new", "estimates.json")
            if os.path.exists(path):
                with open(path) as f:
                    out[(form, pod)] = json.load(f)["median"]["point_estimate"] / 1000.0
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--after", default="target/criterion")
    ap.add_argument("--before", action="append", default=[])
    ap.add_argument("--cel-go", dest="celgo")
    ap.add_argument("--group", default="pss16")
    ap.add_argument("--png")
    a = ap.parse_args()
    runs = [(label, medians(d, a.group)) for label, d in (b.split("=", 1) for b in a.before)]
    runs.append(("this commit", medians(a.after, a.group)))
    celgo = {}
    if a.celgo:
        with open(a.celgo) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == "cel-go":
                    celgo[parts[1]] = int(parts[2]) / 1000.0
    lines = ["| Run | Pod | empty set | pattern | validate.cel | ValidatingPolicy | cel-go (same vpols) |",
             "|---|---|---|---|---|---|---|"]
    for label, m in runs:
        for pod in PODS:
            pat = m.get(("pattern", pod))
            def cell(form):
                v = m.get((form, pod))
                if v is None:
                    return "-"
                ratio = f" ({v / pat:.2f}x pattern)" if pat and form in ("validate-cel", "vpol") else ""
                return f"{v:.2f} us{ratio}"
            go = celgo.get(pod) if label == "this commit" else None
            vpol = m.get(("vpol", pod))
            go_cell = "-" if go is None or vpol is None else f"{go:.2f} us (vpol {vpol / go:.2f}x of cel-go)"
            lines.append(f"| {label} | {pod} | {cell('empty')} | {cell('pattern')} | "
                         f"{cell('validate-cel')} | {cell('vpol')} | {go_cell} |")
    with open(a.out, "a") as f:
        f.write("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels, values = [], []
    for label, m in runs:
        for form in ("pattern", "validate-cel", "vpol"):
            if (form, "compliant") in m:
                labels.append(f"{form}\n{label}")
                values.append(m[(form, "compliant")])
    if "compliant" in celgo:
        labels.append("cel-go\n(vpol exprs)")
        values.append(celgo["compliant"])
    ax.bar(range(len(values)), values)
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("us per compliant Pod, 16 policies (log)")
    ax.set_title(f"Pod Security in three forms ({a.group}), and cel-go on the same ValidatingPolicies")
    fig.tight_layout()
    fig.savefig(a.png or os.path.splitext(a.out)[0] + ".png", dpi=110)


if __name__ == "__main__":
    main()
