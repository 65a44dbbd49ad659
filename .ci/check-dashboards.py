#!/usr/bin/env python3
"""Reads the queries of Grafana dashboards against the metrics a running
gavel exports, and says which queries would show data.

For every query (`expr`) of a dashboard it finds the metric names and the
labels the query selects on or groups by (`{a="x"}`, `by (a, b)`,
`without (a)`), and checks each metric has a series in METRICS (the
`/metrics` text of gavel replicas that served reviews) and each label is on
one of that metric's series. Labels Prometheus adds when it scrapes
(namespace, pod, job, instance, ...), `cluster` (set by multi-cluster
Prometheus setups; Kyverno's dashboard matches it with `.*` by default) and
`le` of histograms are not gavel's to export.

Usage: .ci/check-dashboards.py METRICS GAVEL_DASHBOARD [KYVERNO_DASHBOARD]

gavel's dashboard must read only what gavel exports. Kyverno's is expected
to: every metric it reads that gavel lacks must be listed in
KYVERNO_NOT_EXPORTED with the reason, so a new gap fails and a closed one is
noticed (it must then leave the list).
"""
import json
import re
import sys

SCRAPE_LABELS = {"namespace", "pod", "job", "instance", "container", "service", "endpoint", "le",
                 "cluster", "__name__"}
# PromQL words that look like labels or metrics inside by()/matchers.
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}

# Metrics of Kyverno's dashboard that gavel does not export, and why.
# docs/operations.md (Metrics) says the same.
KYVERNO_NOT_EXPORTED = {
    "kyverno_policy_changes_total":
        "policy changes are counted as snapshot generations (gavel_policy_snapshot_generation)",
    "kyverno_generating_policy_results_total":
        "GeneratingPolicy runs in the background controller, which does not count them per policy yet",
    "kyverno_generating_policy_execution_duration_seconds_count":
        "GeneratingPolicy timings are not yet recorded",
    "kyverno_generating_policy_execution_duration_seconds_sum":
        "GeneratingPolicy timings are not yet recorded",
    "kyverno_image_validating_policy_results_total":
        "ImageValidatingPolicy is evaluated offline only (issue 33)",
    "kyverno_image_validating_policy_execution_duration_seconds_count":
        "ImageValidatingPolicy is evaluated offline only (issue 33)",
    "kyverno_image_validating_policy_execution_duration_seconds_sum":
        "ImageValidatingPolicy is evaluated offline only (issue 33)",
}


SAMPLE_SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"],
                   "gauge": [""], "info": ["_info"], "unknown": [""]}


def series(metrics_text):
    """sample name -> set of label names seen on its series. A family with
    no series yet (a counter of failures that never happened) is exported
    all the same: its samples are in, with no labels seen."""
    out = {}
    for line in metrics_text.splitlines():
        declared = re.match(r"# TYPE (\S+) (\S+)", line)
        if declared:
            for suffix in SAMPLE_SUFFIXES.get(declared.group(2), [""]):
                out.setdefault(declared.group(1) + suffix, set())
            continue
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
        if not m:
            continue
        labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
        out.setdefault(m.group(1), set()).update(labels)
    return out


def queries(dashboard):
    found = []

    def walk(o, title):
        if isinstance(o, dict):
            title = o.get("title", title)
            for k, v in o.items():
                if k == "expr" and isinstance(v, str):
                    found.append((title, v))
                else:
                    walk(v, title)
        elif isinstance(o, list):
            for x in o:
                walk(x, title)

    walk(dashboard, "")
    return found


def check(expr, have):
    """The problems of one query: metrics not exported, labels not on them."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # drop label values
    metrics = set(re.findall(r"\b((?:gavel|kyverno)_[a-zA-Z0-9_]+)", text))
    labels = set()
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", text):
        labels.update(x.strip() for x in group.split(",") if x.strip())
    for matchers in re.findall(r"\{([^}]*)\}", text):
        labels.update(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    labels -= SCRAPE_LABELS | PROMQL_WORDS
    missing = sorted(m for m in metrics if m not in have)
    # Labels are checked on the metrics that have series (a family with
    # none yet shows no labels).
    seen = [m for m in metrics if have.get(m)]
    unlabelled = sorted(l for l in labels if seen and not any(l in have[m] for m in seen))
    return metrics, missing, unlabelled


def main():
    metrics_path, gavel_path = sys.argv[1:3]
    kyverno_path = sys.argv[3] if len(sys.argv) > 3 else None
    have = series(open(metrics_path).read())
    failures = []

    gavel = queries(json.load(open(gavel_path)))
    for title, expr in gavel:
        _, missing, unlabelled = check(expr, have)
        if missing or unlabelled:
            failures.append(f"gavel dashboard: {title!r}: not exported {missing}, labels missing {unlabelled}")
    print(f"gavel dashboard: {len(gavel)} queries, {len(gavel) - len(failures)} read exported series")

    if kyverno_path:
        kyverno = queries(json.load(open(kyverno_path)))
        works, lacking = 0, set()
        for title, expr in kyverno:
            metrics, missing, unlabelled = check(expr, have)
            if unlabelled:
                failures.append(f"kyverno dashboard: {title!r}: labels gavel lacks on "
                                f"{sorted(metrics)}: {unlabelled}")
            lacking.update(missing)
            if not missing and not unlabelled:
                works += 1
            else:
                print(f"kyverno dashboard: no data: {title!r}: {', '.join(missing + unlabelled)}")
        for name in sorted(lacking - set(KYVERNO_NOT_EXPORTED)):
            failures.append(f"kyverno dashboard: reads {name}, which gavel does not export "
                            "and KYVERNO_NOT_EXPORTED does not explain")
        for name in sorted(set(KYVERNO_NOT_EXPORTED) - lacking):
            failures.append(f"kyverno dashboard: {name} is exported now: remove it from "
                            "KYVERNO_NOT_EXPORTED and docs/operations.md")
        print(f"kyverno dashboard: {works} of {len(kyverno)} queries read series gavel exports; "
              f"{len(lacking)} metrics not exported (explained)")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("dashboards: every query reads what it should")


main()
