#!/usr/bin/env python3
"""Turns the raw figures of a side-by-side run (k6/side-by-side.sh:
rounds.json, environment.json) into kyverno-side-by-side.md with the tables
and ratios, and a PNG plot; prints the ratios as the last line:

    side-by-side: throughput_per_cpu_ratio=R1 p99_ratio=R2 rss_ratio=R3

R1 is gavel's admissions per CPU-second of its process over Kyverno's, R2
Kyverno's p99 webhook latency (as the API server measures the call) over
gavel's, R3 Kyverno's peak RSS over gavel's: above 1, gavel is ahead. Over
all scenarios, rounds of each engine pooled.

Usage: k6/side-by-side-report.py DIR

Percentiles come from the API server's webhook histogram (buckets 5, 25,
100, 500 ms, ...), interpolated as histogram_quantile does: a percentile in
the first bucket is only known to be at most 5 ms (written "≤ 5 ms"), and a
ratio over it is then a lower bound (written "≥"). The means are exact.
"""
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path

here = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("scale_report", here / "scale-report.py")
scale = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scale)

import matplotlib.pyplot as plt  # noqa: E402  (scale-report chose the backend)

ENGINES = ("gavel", "kyverno")
POLICY_SETS = {
    "clusterpolicy": "The same 17 Pod Security ClusterPolicies (Enforce)",
    "validatingpolicy": "The same 16 Pod Security ValidatingPolicies of the Kyverno policy library "
    "(policies.kyverno.io, switched from Audit to Deny)",
}


def figures(round_):
    api = round_["apiserver_metrics"]
    creates = lambda labels: labels.get("operation") == "CREATE"  # noqa: E731
    webhook, webhook_sum = scale.histogram(api, scale.WEBHOOK, creates)
    calls_by_name = defaultdict(float)
    for series, value in api.items():
        name, labels = scale.parse(series)
        if name == scale.WEBHOOK + "_count" and creates(labels):
            calls_by_name[labels.get("name", "?")] += value
    engine = round_["engine"]
    k6 = round_["k6"]
    return {
        "name": round_["name"],
        "engine": engine,
        "shape": (round_["vus"], round_["pods"]),
        "stored": round_["stored_pods"],
        "failed": k6["checks"].get("fails", 0),
        "k6": k6["http_req_duration"],
        "rate": k6["http_reqs"]["rate"],
        "webhook": webhook,
        "webhook_sum": webhook_sum,
        "calls": dict(calls_by_name),
        "cpu": round_["cpu_seconds"].get(engine, 0.0),
        "rss_kib": round_["peak_rss_kib"].get(engine, 0),
        "apiserver_cpu": round_["cpu_seconds"].get("kube-apiserver", 0.0),
        "etcd_cpu": round_["cpu_seconds"].get("etcd", 0.0),
        "wall": round_["wall_seconds"],
    }


def pool(rounds):
    """One engine's rounds of one scenario (or of all) taken together."""
    buckets = defaultdict(float)
    for r in rounds:
        for le, count in r["webhook"]:
            buckets[le] += count
    webhook = sorted(buckets.items())
    calls = webhook[-1][1] if webhook else 0
    admitted = sum(r["stored"] for r in rounds)
    cpu = sum(r["cpu"] for r in rounds)
    return {
        "rounds": len(rounds),
        "admitted": admitted,
        "failed": sum(r["failed"] for r in rounds),
        "calls": calls,
        "cpu": cpu,
        "per_cpu": admitted / cpu if cpu else None,
        "percentiles": scale.percentiles(webhook),
        "mean": sum(r["webhook_sum"] for r in rounds) / calls if calls else None,
        "rss_mib": max((r["rss_kib"] for r in rounds), default=0) / 1024,
        "k6_avg": sum(r["k6"]["avg"] for r in rounds) / len(rounds) if rounds else None,
        "k6_p95": max((r["k6"]["p(95)"] for r in rounds), default=None),
        "apiserver_cpu": sum(r["apiserver_cpu"] for r in rounds),
        "names": sorted({n for r in rounds for n in r["calls"]}),
    }


def ratio(numerator, denominator):
    """numerator / denominator, or None; "≥" when the denominator is only
    a bound (a percentile in the first bucket)."""
    if numerator is None or not denominator:
        return None, ""
    bound = "≥" if isinstance(denominator, scale.Bound) else ""
    return float(numerator) / float(denominator), bound


def fmt_ratio(value):
    r, bound = value
    return "n/a" if r is None else f"{bound}{r:.1f}×"


def ms(value):
    if value is None:
        return "n/a"
    prefix = "≤ " if isinstance(value, scale.Bound) else ""
    return f"{prefix}{value * 1000:.1f} ms"


def ratios(g, k):
    return {
        "throughput_per_cpu": ratio(g["per_cpu"], k["per_cpu"]),
        "p99": ratio(k["percentiles"]["p99"], g["percentiles"]["p99"]),
        "mean": ratio(k["mean"], g["mean"]),
        "rss": ratio(k["rss_mib"], g["rss_mib"]),
    }


def table(lines, by_engine, baseline):
    lines.append("| | no webhook | gavel | Kyverno | Kyverno ÷ gavel |")
    lines.append("|---|---:|---:|---:|---:|")
    g, k = by_engine.get("gavel"), by_engine.get("kyverno")
    if not g or not k:
        lines.append("| (an engine has no round) | | | | |")
        return
    r = ratios(g, k)
    rows = [
        ("rounds", lambda e: str(e["rounds"]), ""),
        ("Pods admitted (failed creates)", lambda e: f"{e['admitted']} ({e['failed']})", ""),
        ("webhook calls (CREATE)", lambda e: f"{e['calls']:.0f}", ""),
        ("engine CPU-seconds", lambda e: f"{e['cpu']:.1f}", ""),
        ("**admissions per CPU-second**", lambda e: f"{e['per_cpu']:.0f}" if e["per_cpu"] else "n/a",
         f"gavel {fmt_ratio(r['throughput_per_cpu'])} Kyverno"),
        ("webhook p50", lambda e: ms(e["percentiles"]["p50"]), ""),
        ("webhook p95", lambda e: ms(e["percentiles"]["p95"]), ""),
        ("**webhook p99**", lambda e: ms(e["percentiles"]["p99"]), fmt_ratio(r["p99"])),
        ("webhook mean", lambda e: ms(e["mean"]), fmt_ratio(r["mean"])),
        ("**engine peak RSS**", lambda e: f"{e['rss_mib']:.0f} MiB", fmt_ratio(r["rss"])),
        ("k6 create latency, mean", lambda e: f"{e['k6_avg']:.0f} ms", ""),
        ("k6 create latency, p95 (worst round)", lambda e: f"{e['k6_p95']:.0f} ms", ""),
        ("kube-apiserver CPU-seconds", lambda e: f"{e['apiserver_cpu']:.1f}", ""),
    ]
    for title, cell, last in rows:
        base = ""
        if baseline and title.startswith("k6"):
            base = cell(baseline)
        if baseline and title.startswith(("kube-apiserver", "Pods admitted", "rounds")):
            base = cell(baseline)
        lines.append(f"| {title} | {base} | {cell(g)} | {cell(k)} | {last} |")
    lines.append(f"| webhooks called | | {', '.join(g['names'])} | {', '.join(k['names'])} | |")


def main():
    out = Path(sys.argv[1])
    env = json.loads((out / "environment.json").read_text())
    rounds = [figures(r) for r in json.loads((out / "rounds.json").read_text())]
    shapes = sorted({r["shape"] for r in rounds})
    lines = [
        f"# gavel {env['gavel']} and Kyverno {env['kyverno']} side by side",
        "",
        f"One machine ({env['cpus']} cores, {env['cpu_model']}, {env['memory_mib']} MiB), "
        f"commit {env['commit']}: kube-apiserver and etcd {env['kubernetes']}/{env['etcd']} built "
        f"from Go modules, kwok {env['kwok']} with {env['nodes']} fake nodes, {env['k6']}. "
        + POLICY_SETS[env.get("policies", "clusterpolicy")]
        + " for both engines, each run as its "
        "chart configures it with default values (one replica, out of cluster, its webhooks "
        "named by 127.0.0.1 and its own port, so the API server calls both alike over one "
        "HTTP/2 connection). k6 creates compliant Pods through the API server; per scenario a "
        "round with no webhook, then gavel and Kyverno in alternating rounds, each engine "
        "running only for its own rounds. Made by `k6/side-by-side.sh`; raw figures in "
        "`rounds.json` and `k6-*.json`.",
        "",
        "Admissions per CPU-second: Pods admitted in the engine's rounds over the CPU time "
        "(user + system) of its process in them. Webhook latency: the API server's "
        "`apiserver_admission_webhook_admission_duration_seconds` for the Pod creates "
        "(bucket-interpolated; ≤ marks a value in the first bucket). Peak RSS: VmHWM of the "
        "engine's process, reset at each round's start.",
        "",
    ]
    pooled = {}
    for shape in shapes:
        of_shape = [r for r in rounds if r["shape"] == shape]
        by_engine = {e: pool([r for r in of_shape if r["engine"] == e]) for e in ENGINES}
        by_engine = {e: p for e, p in by_engine.items() if p["rounds"]}
        base = [r for r in of_shape if r["engine"] == "none"]
        baseline = pool(base) if base else None
        pooled[shape] = by_engine
        lines.append(f"## {shape[0]} VUs, {shape[1]} Pods")
        lines.append("")
        table(lines, by_engine, baseline)
        lines.append("")
    overall = {e: pool([r for r in rounds if r["engine"] == e]) for e in ENGINES}
    if all(overall[e]["rounds"] for e in ENGINES):
        r = ratios(overall["gavel"], overall["kyverno"])
        lines += [
            "## Over all scenarios",
            "",
            f"- admissions per CPU-second: gavel {fmt_ratio(r['throughput_per_cpu'])} Kyverno "
            "(goal ≥ 10×)",
            f"- webhook p99: Kyverno's is {fmt_ratio(r['p99'])} gavel's (goal ≥ 10×); mean "
            f"{fmt_ratio(r['mean'])}",
            f"- peak RSS: Kyverno's is {fmt_ratio(r['rss'])} gavel's (goal ≥ 4×)",
            "",
            "![admissions per CPU-second, webhook latency and peak RSS](side-by-side.png)",
            "",
        ]
        plot(out, pooled)
    notes = out / "notes.md"
    if notes.exists():
        lines += ["## Findings", "", notes.read_text().strip(), ""]
    (out / "kyverno-side-by-side.md").write_text("\n".join(lines))
    if all(overall[e]["rounds"] for e in ENGINES):
        r = ratios(overall["gavel"], overall["kyverno"])
        value = lambda key: "n/a" if r[key][0] is None else f"{r[key][0]:.2f}"  # noqa: E731
        print(
            f"side-by-side: throughput_per_cpu_ratio={value('throughput_per_cpu')} "
            f"p99_ratio={value('p99')} rss_ratio={value('rss')}"
        )
    else:
        print("side-by-side: an engine has no round")
        sys.exit(1)


def plot(out, pooled):
    shapes = list(pooled)
    labels = [f"{v} VUs\n{p} Pods" for v, p in shapes]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    width = 0.38
    colours = {"gavel": "tab:green", "kyverno": "tab:orange"}
    series = [
        ("admissions per CPU-second (higher is better)", lambda e: e["per_cpu"] or 0),
        ("webhook p99, ms (lower is better)", lambda e: float(e["percentiles"]["p99"] or 0) * 1000),
        ("peak RSS, MiB (lower is better)", lambda e: e["rss_mib"]),
    ]
    for ax, (title, value) in zip(axes, series):
        for i, engine in enumerate(ENGINES):
            xs = [x + (i - 0.5) * width for x in range(len(shapes))]
            ys = [value(pooled[s][engine]) if engine in pooled[s] else 0 for s in shapes]
            ax.bar(xs, ys, width, label=engine, color=colours[engine])
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(labels)
        ax.set_title(title, fontsize=10)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "side-by-side.png", dpi=110)


if __name__ == "__main__":
    main()
