#!/usr/bin/env python3
"""Checks charts/gavel with the real Helm CLI and the Kubernetes schemas:

- `helm lint --strict` passes with every values file: the defaults,
  values-large-cluster.yaml and each file of charts/gavel/ci/;
- `helm template` renders with each of them, and every rendered manifest
  validates, strictly, against Kubernetes 1.33 (kubernetes-validate); a kind
  of a CRD (the optional ServiceMonitor) validates against the
  openAPIV3Schema of its CRD, from CRD_DIR;
- every `--flag` the Deployment passes is one `gavel serve --help` lists;
- the optional pieces render only when asked for, and the Grafana dashboard
  is JSON with queries (tests/e2e.rs runs .ci/check-dashboards.py on the
  metrics of a running gavel).

Usage: .ci/check-chart.py GAVEL HELM CRD_DIR   (from the repo root)
"""
import glob
import json
import os
import re
import subprocess
import sys

import jsonschema
import kubernetes_validate
import yaml

CHART = "charts/gavel"
KUBE = "1.33.0"
# Present in every rendering; the rest only when their values turn them on.
ALWAYS = {"Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
          "RoleBinding", "PodDisruptionBudget"}
OPTIONAL = {"NetworkPolicy", "ServiceMonitor", "ConfigMap"}


def helm(helm_bin, *args):
    out = subprocess.run([helm_bin, *args], capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


def crd_schemas(crd_dir):
    """(apiVersion, kind) -> openAPIV3Schema of every CRD version in crd_dir."""
    schemas = {}
    for path in glob.glob(os.path.join(crd_dir, "*.yaml")):
        for crd in yaml.safe_load_all(open(path)):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schemas[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return schemas


def dashboard_metrics(dashboard):
    """Metric names the dashboard's queries read."""
    exprs = []

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k == "expr" and isinstance(v, str):
                    exprs.append(v)
                else:
                    walk(v)
        elif isinstance(o, list):
            for x in o:
                walk(x)

    walk(dashboard)
    names = set()
    for e in exprs:
        names.update(re.findall(r"\b((?:gavel|kyverno)_[a-z_]+)", e))
    return exprs, names


def main():
    gavel, helm_bin, crd_dir = sys.argv[1:4]
    failures = []
    help_text = subprocess.run([gavel, "serve", "--help"], capture_output=True, text=True,
                               check=True).stdout
    known = set(re.findall(r"--([a-z0-9-]+)", help_text))
    schemas = crd_schemas(crd_dir)
    values_files = [None, f"{CHART}/values-large-cluster.yaml"] + sorted(glob.glob(f"{CHART}/ci/*.yaml"))
    for values in values_files:
        label = "defaults" if values is None else os.path.basename(values)
        extra = [] if values is None else ["-f", values]
        code, text = helm(helm_bin, "lint", "--strict", "--kube-version", "v" + KUBE, CHART, *extra)
        if code != 0:
            failures.append(f"{label}: helm lint: {text}")
        code, text = helm(helm_bin, "template", "gavel", CHART, "--namespace", "gavel",
                          "--kube-version", "v" + KUBE, *extra)
        if code != 0:
            failures.append(f"{label}: helm template: {text}")
            continue
        kinds = []
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            kind, api = doc["kind"], doc["apiVersion"]
            kinds.append(kind)
            schema = schemas.get((api, kind))
            try:
                if schema is not None:
                    jsonschema.validate(doc, schema)
                else:
                    kubernetes_validate.validate(doc, KUBE, strict=True)
            except Exception as e:  # both libraries raise their own error types
                failures.append(f"{label}: {kind} {doc['metadata']['name']}: {e}")
            if kind == "Deployment":
                args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
                for a in args[1:]:
                    flag = a[2:].split("=", 1)[0]
                    if flag not in known:
                        failures.append(f"{label}: unknown gavel flag --{flag}")
            if kind == "ConfigMap" and "gavel.json" in doc.get("data", {}):
                check_dashboard(label, doc["data"]["gavel.json"], failures)
        print(f"{label}: rendered {', '.join(sorted(kinds))}")
        missing = ALWAYS - set(kinds)
        if missing:
            failures.append(f"{label}: not rendered: {sorted(missing)}")
        if values is None and OPTIONAL & set(kinds):
            failures.append(f"defaults: optional pieces rendered: {sorted(OPTIONAL & set(kinds))}")
        if label == "all-features-values.yaml" and OPTIONAL - set(kinds):
            failures.append(f"{label}: optional pieces not rendered: {sorted(OPTIONAL - set(kinds))}")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"chart: lint clean, manifests valid for Kubernetes {KUBE} with {len(values_files)} "
          "values files, flags known to gavel")


def check_dashboard(label, text, failures):
    try:
        dashboard = json.loads(text)
    except ValueError as e:
        failures.append(f"{label}: the Grafana dashboard is not JSON: {e}")
        return
    exprs, names = dashboard_metrics(dashboard)
    if not exprs or not names:
        failures.append(f"{label}: the Grafana dashboard has no queries of gavel's metrics")
    print(f"{label}: dashboard: {len(exprs)} queries over {len(names)} metrics")


main()
