#!/usr/bin/env python3
"""Checks charts/gavel with the real Helm engine (helm-python-sdk) and the
Kubernetes schemas (kubernetes-validate):

- `helm lint --strict` finds nothing above info;
- the chart renders with its default values and with values-large-cluster.yaml;
- every rendered manifest validates, strictly, against Kubernetes 1.33;
- every `--flag` the Deployment passes is one `gavel serve --help` lists.

Usage: .ci/check-chart.py GAVEL_BINARY   (run from the repo root)
"""
import re
import subprocess
import sys

import helm_python
import kubernetes_validate
import yaml

CHART = "charts/gavel"
KUBE = "1.33.0"


def main():
    gavel = sys.argv[1]
    failures = []
    report = helm_python.lint(CHART, strict=True, kube_version="v" + KUBE)
    failures += [f"lint: {e}" for e in report["errors"]]
    failures += [
        f"lint: {m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2
    ]
    help_text = subprocess.run([gavel, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    known = set(re.findall(r"--([a-z0-9-]+)", help_text))
    chart = helm_python.Chart.load(CHART)
    large = yaml.safe_load(open(f"{CHART}/values-large-cluster.yaml"))
    for label, values in [("defaults", None), ("large-cluster", large)]:
        rendered = chart.render(values, name="gavel", namespace="gavel", is_install=True)
        kinds = []
        for path, text in sorted(rendered.items()):
            if not path.endswith(".yaml"):
                continue
            for doc in yaml.safe_load_all(text):
                if not doc:
                    continue
                kinds.append(doc["kind"])
                try:
                    kubernetes_validate.validate(doc, KUBE, strict=True)
                except Exception as e:  # the library raises its own error types
                    failures.append(f"{label}: {path}: {doc['kind']}: {e}")
                if doc["kind"] == "Deployment":
                    args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
                    for a in args[1:]:
                        flag = a[2:].split("=", 1)[0]
                        if flag not in known:
                            failures.append(f"{label}: unknown gavel flag --{flag}")
        print(f"{label}: rendered {', '.join(sorted(kinds))}")
        for want in ["Deployment", "Service", "ClusterRole", "Role", "PodDisruptionBudget"]:
            if want not in kinds:
                failures.append(f"{label}: no {want} rendered")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("chart: lint clean, manifests valid for Kubernetes", KUBE, ", flags known to gavel")


main()
