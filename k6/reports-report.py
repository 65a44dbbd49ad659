#!/usr/bin/env python3
"""Turns a reports-scan run (k6/reports-scan.sh: scan.json,
environment.json) into README.md and scan.png: reports written and gavel's
RSS over the first scan, and the figures of the first and the quiet scan.

Usage: k6/reports-report.py DIR
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def mib(kib):
    return kib / 1024.0


def requests(api):
    return ", ".join(f"{verb} {int(n)}" for verb, n in sorted(api.items())) or "none"


def main(out):
    scan = json.loads((out / "scan.json").read_text())
    env = json.loads((out / "environment.json").read_text())
    first, quiet = scan["first_scan"], scan["quiet_scan"]
    samples = scan["samples"]
    t = [s["seconds"] for s in samples]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(t, [s["written"] for s in samples], label="reports written")
    ax.set_xlabel("seconds after the policy")
    ax.set_ylabel("PolicyReports written")
    ax2 = ax.twinx()
    ax2.plot(t, [mib(s["rss_kib"]) for s in samples], color="tab:red", label="gavel RSS")
    ax2.set_ylabel("RSS (MiB)")
    ax2.set_ylim(bottom=0)
    ax.set_title(f"First background scan over {scan['configmaps']} ConfigMaps")
    fig.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "scan.png", dpi=100)
    rate = first["reports"] / first["seconds"] if first["seconds"] else 0
    lines = [
        f"# Background scan at {scan['configmaps']:,} resources",
        "",
        f"gavel {env.get('gavel')} ({env.get('commit')}), Kubernetes {env.get('kubernetes')}, "
        f"{env.get('cpus')} CPUs ({env.get('cpu_model')}), {env.get('memory_mib')} MiB. "
        "One replica with the chart's defaults (the reports client's rate limit included), "
        f"scan interval {scan['interval_seconds']} s. One Audit ClusterPolicy that every ConfigMap "
        "fails: the first scan writes one PolicyReport per ConfigMap; the next finds the same "
        "results and writes nothing. Produced by `k6/reports-scan.sh`.",
        "",
        "| | first scan | quiet scan |",
        "|---|---|---|",
        f"| reports written | {int(first['reports'])} | {int(quiet['reports'])} |",
        f"| duration | {first['seconds']:.1f} s | (ends {quiet['seconds_after_first']:.1f} s after the first, interval included) |",
        f"| write rate | {rate:.1f} reports/s | - |",
        f"| gavel CPU | {first['cpu_seconds']:.1f} s | {quiet['cpu_seconds']:.1f} s |",
        f"| gavel RSS after | {mib(first['rss_after_kib']):.1f} MiB | {mib(quiet['rss_after_kib']):.1f} MiB |",
        f"| API requests on policyreports (API server's count) | {requests(first['api_requests'])} | {requests(quiet['api_requests'])} |",
        "",
        f"RSS before the policy: {mib(scan['rss_idle_kib']):.1f} MiB; peak (VmHWM) over the run: "
        f"{mib(quiet['peak_rss_kib']):.1f} MiB. {scan['policyreports']:,} PolicyReports at the end.",
        "",
        "![reports written and RSS](scan.png)",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
