#!/usr/bin/env python3
"""Differential testing: `kyverno apply` and `gavel apply` on generated
variations of the conformance corpus's resources.

    e2e/differential.py [--pairs N] [--seed S] [--out DIR] [--gavel BIN] [--kyverno BIN]
    e2e/differential.py --sample        the fixed CI sample (a few hundred pairs)

For each kyverno-test.yaml of ../shared/conformance/kyverno-policies whose
inputs are only policies and resources (no values file, context or user
info: those are keyed by resource name, which the variations change), the
script

1. reads what the policies look at: the keys of their patterns (anchors
   stripped), the `request.object...` paths of their JMESPath, the
   `object...` paths of their CEL;
2. derives variations of the test's resources: drop, add or change one of
   those fields (re-rooted into a Pod controller's template), change an
   image, labels, annotations, the namespace, the containers, volumes or
   ports; each variation is one resource with its own name;
3. runs both CLIs once per test directory over its variations (`-p` for the
   report, `-o DIR` for the mutated and generated resources);
4. compares per (policy, rule, resource): the result, the message; and per
   resource: the mutated object.

A disagreement is explained when its key matches a row of the table
"Differential testing: known differences" in docs/compatibility.md (first
column: a glob over `test-dir :: policy/rule :: variation :: aspect`; second:
the cause). Writes DIR/differential.md and DIR/disagreements.json (default
DIR: target/differential, or perf-results/<version>/differential for a full
run with --out) and prints one last line

    differential: pairs=N compared=C agree=A explained=E unexplained=U

and exits 1 when U > 0 or nothing was compared. Kyverno's CLI comes from
`e2e/cluster.sh build kyverno`; gavel's is target/release/gavel.
"""
import argparse
import copy
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "conformance" / "kyverno-policies"
KNOWN = REPO / "docs" / "compatibility.md"
KNOWN_HEADING = "## Differential testing: known differences"

# Inputs keyed by resource name or needing a cluster: variations rename
# resources, so these tests are left out.
UNUSABLE_INPUTS = ("values.", "test.context", "test.userinfo")

# Where a Pod controller keeps its Pod template, for re-rooting Pod paths
# (what Kyverno's autogen does to the rules).
TEMPLATE_ROOT = {
    "Deployment": ["spec", "template"],
    "StatefulSet": ["spec", "template"],
    "DaemonSet": ["spec", "template"],
    "ReplicaSet": ["spec", "template"],
    "ReplicationController": ["spec", "template"],
    "Job": ["spec", "template"],
    "CronJob": ["spec", "jobTemplate", "spec", "template"],
}

# Values a field is changed to, by the type of the value it had.
STRINGS = ["", "latest", "Always", "privileged", "RuntimeDefault", "Unconfined", "Localhost",
           "default", "kube-system", "true", "ALL", "NET_RAW", "0", "*", "/var/run/docker.sock",
           "example.com", "nginx:latest", "ghcr.io/acme/app@sha256:" + "a" * 64]
NUMBERS = [0, 1, -1, 1000, 65535, 80, 10001]
LISTS = [[], ["ALL"], ["NET_RAW"], ["SYS_ADMIN", "NET_BIND_SERVICE"]]

ANCHOR = re.compile(r"^(?:=|X|\^|\+|<)?\((.*)\)$")
JMES_PATH = re.compile(r"request\.object\.((?:[A-Za-z_][A-Za-z0-9_]*|\[[^\]]*\])(?:\.[A-Za-z_][A-Za-z0-9_]*|\[[^\]]*\]|\.\"[^\"]+\")*)")
CEL_PATH = re.compile(r"\bobject\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\"[^\"]+\"\]|\['[^']+'\])*)")
CEL_VAR_PATH = re.compile(r"\b([a-z][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")


COUNTS = re.compile(r"^pass: \d+, fail: \d+")
REPORT_START = re.compile(r"apiVersion: (?:openreports\.io|wgpolicyk8s\.io)/")


def cache():
    return Path(os.environ.get("GAVEL_E2E_CACHE", Path.home() / ".cache" / "gavel-e2e"))


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]


# ---- the tests the corpus offers -------------------------------------------

def usable_tests():
    """(test file, policy files, resource docs) of every usable test, in
    INDEX.tsv's order."""
    tests = []
    for line in (CORPUS / "INDEX.tsv").read_text().splitlines()[1:]:
        cols = line.split("\t")
        path, needs_values, inputs = cols[0], cols[5], cols[7]
        if needs_values == "yes" or any(u in inputs for u in UNUSABLE_INPUTS):
            continue
        test_file = CORPUS / path
        test = yaml.safe_load(test_file.read_text())
        if any(test.get(k) for k in ("variables", "values", "userinfo", "context", "exceptions")):
            continue
        base = test_file.parent
        policies = [base / p for p in test.get("policies", [])]
        resources = []
        for r in test.get("resources", []):
            resources.extend(load_docs(base / r))
        if policies and resources and all(p.exists() for p in policies):
            tests.append((test_file, policies, resources))
    return tests


# ---- what a policy looks at -------------------------------------------------

def pattern_paths(node, prefix, out):
    """Every key path of a pattern or strategic-merge overlay, with its
    leaf, anchors stripped; `*` for a list's elements."""
    if isinstance(node, dict):
        for key, value in node.items():
            m = ANCHOR.match(str(key))
            name = m.group(1) if m else str(key)
            path = prefix + [name]
            out.append((path, value if not isinstance(value, (dict, list)) else None))
            pattern_paths(value, path, out)
    elif isinstance(node, list):
        for item in node:
            pattern_paths(item, prefix + ["*"], out)


def split_dotted(text):
    path = []
    for part in re.findall(r"\"([^\"]+)\"|\[\"([^\"]+)\"\]|\['([^']+)'\]|(\[[^\]]*\])|([A-Za-z0-9_-]+)", text):
        quoted, br1, br2, index, plain = part
        if index:
            path.append("*")
        else:
            path.append(quoted or br1 or br2 or plain)
    return path


def policy_paths(policy):
    """The object paths a policy reads, as lists of keys (`*` = each list
    element), each with a leaf value from a pattern when there is one."""
    out = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("pattern", "patchStrategicMerge"):
                    pattern_paths(value, [], out)
                elif key == "anyPattern" and isinstance(value, list):
                    for p in value:
                        pattern_paths(p, [], out)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, str):
            for m in JMES_PATH.finditer(node):
                out.append((split_dotted(m.group(1)), None))
            for m in CEL_PATH.finditer(node):
                out.append((split_dotted(m.group(1)), None))
            # Fields read through a comprehension variable or a CEL variable
            # (`c.securityContext.privileged`): container-level paths.
            for m in CEL_VAR_PATH.finditer(node):
                if m.group(1) in ("object", "request", "variables", "oldObject", "params",
                                  "namespaceObject", "element", "self"):
                    continue
                first = m.group(2).split(".")[0]
                if first in CONTAINER_FIELDS:
                    out.append((["spec", "containers", "*"] + m.group(2).split("."), None))

    walk(policy.get("spec", {}))
    seen, unique = set(), []
    for path, leaf in out:
        key = tuple(path)
        if path and key not in seen:
            seen.add(key)
            unique.append((path, leaf))
    return unique


CONTAINER_FIELDS = {"securityContext", "image", "imagePullPolicy", "ports", "resources", "env",
                    "volumeMounts", "livenessProbe", "readinessProbe", "startupProbe", "name",
                    "command", "args", "envFrom", "lifecycle"}


# ---- variations -------------------------------------------------------------

def rooted(resource, path):
    """`path` as it lies in `resource`: a Pod path re-rooted under a
    controller's template, or as it is."""
    root = TEMPLATE_ROOT.get(resource.get("kind"))
    if root and path and path[0] in ("spec", "metadata") and path[:2] != ["spec", "template"] \
            and path[:2] != ["spec", "jobTemplate"]:
        return root + path
    return path


def lookup(node, path):
    """The (parent, key) pairs where `path` ends in `node`."""
    if not path:
        return []
    head, rest = path[0], path[1:]
    if head == "*":
        if not isinstance(node, list):
            return []
        keys = range(len(node))
    else:
        if not isinstance(node, dict) or head not in node:
            return []
        keys = [head]
    found = []
    for k in keys:
        if rest:
            found.extend(lookup(node[k], rest))
        else:
            found.append((node, k))
    return found


def ensure(node, path, value):
    """Sets `path` to `value`, creating maps (and the first list element)
    on the way. False when an existing non-container value is in the way."""
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        if key == "*":
            if not isinstance(node, list):
                return False
            if not node:
                node.append({} if nxt != "*" else [])
            node = node[0]
            continue
        if not isinstance(node, dict):
            return False
        if key not in node or node[key] is None:
            node[key] = [] if nxt == "*" else {}
        node = node[key]
    last = path[-1]
    if last == "*":
        if not isinstance(node, list):
            return False
        node.append(value)
        return True
    if not isinstance(node, dict):
        return False
    node[last] = value
    return True


def changed(value, rng, leaf=None):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return rng.choice([n for n in NUMBERS if n != value])
    if isinstance(value, str):
        choices = [s for s in STRINGS if s != value] + [value + "-x"]
        return rng.choice(choices)
    if isinstance(value, list):
        return rng.choice(LISTS)
    if isinstance(value, dict):
        return {}
    return leaf_value(leaf, rng)


def leaf_value(leaf, rng):
    """A value for a field the resource lacks: the pattern's own when it is
    a plain literal, else one of the usual suspects."""
    if isinstance(leaf, bool) or isinstance(leaf, (int, float)):
        return leaf
    if isinstance(leaf, str) and leaf and not re.search(r"[*?!<>|&{}]", leaf):
        return leaf
    return rng.choice([True, False, 0, 1000, "privileged", "RuntimeDefault", ["ALL"], "latest"])


def image_variants(image):
    name = image.split("@")[0]
    repo = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    return [repo + ":latest", repo, repo + "@sha256:" + "b" * 64, "docker.io/" + repo + ":1.0",
            "ghcr.io/acme/" + repo.rsplit("/", 1)[-1] + ":2.0"]


def pod_specs(resource):
    root = TEMPLATE_ROOT.get(resource.get("kind"))
    if resource.get("kind") == "Pod":
        spec = resource.get("spec")
        return [spec] if isinstance(spec, dict) else []
    if root:
        node = resource
        for k in root + ["spec"]:
            node = node.get(k) if isinstance(node, dict) else None
        return [node] if isinstance(node, dict) else []
    return []


def variations(resource, paths, rng):
    """(label, resource) for every variation of `resource`; labels name
    what changed, for the report and the known-differences table."""
    out = []

    def variant(label, fn):
        r = copy.deepcopy(resource)
        try:
            kept = fn(r) is not False
        except (TypeError, AttributeError, KeyError, IndexError):
            # The resource is not shaped for this variation (a null where
            # a map would be): no such variation.
            kept = False
        if kept:
            out.append((label, r))

    for path, leaf in paths:
        where = rooted(resource, path)
        dotted = ".".join(path)
        if lookup(resource, where):
            def drop(r, where=where):
                for parent, key in lookup(r, where):
                    if isinstance(parent, dict):
                        parent.pop(key, None)
            variant(f"drop {dotted}", drop)

            def change(r, where=where, leaf=leaf):
                hits = lookup(r, where)
                parent, key = hits[rng.randrange(len(hits))]
                parent[key] = changed(parent[key], rng, leaf)
            variant(f"change {dotted}", change)
        else:
            value = leaf_value(leaf, rng)
            variant(f"add {dotted}", lambda r, where=where, value=value: ensure(r, where, value))

    meta = resource.get("metadata", {})
    variant("namespace kube-system", lambda r: r["metadata"].__setitem__("namespace", "kube-system"))
    variant("namespace dropped", lambda r: r["metadata"].pop("namespace", None) and None)
    variant("labels dropped", lambda r: r["metadata"].pop("labels", None) and None)
    variant("label added", lambda r: r["metadata"].setdefault("labels", {}).__setitem__(
        "app.kubernetes.io/name", "diff"))
    variant("annotations dropped", lambda r: r["metadata"].pop("annotations", None) and None)
    if meta.get("labels"):
        key = rng.choice(sorted(meta["labels"]))
        variant("label value changed", lambda r, key=key: r["metadata"]["labels"].__setitem__(
            key, str(r["metadata"]["labels"][key]) + "-x"))

    for spec_index, _ in enumerate(pod_specs(resource)):
        def spec_of(r):
            return pod_specs(r)[spec_index]

        containers = spec_of(resource).get("containers") or []
        for ci, c in enumerate(containers[:2]):
            if isinstance(c, dict) and isinstance(c.get("image"), str):
                for im in image_variants(c["image"]):
                    variant(f"image {im}", lambda r, ci=ci, im=im:
                            spec_of(r)["containers"][ci].__setitem__("image", im))
        if containers and isinstance(containers[0], dict):
            def dup(r):
                c = copy.deepcopy(spec_of(r)["containers"][0])
                c["name"] = str(c.get("name", "c")) + "-copy"
                spec_of(r)["containers"].append(c)
            variant("container duplicated", dup)

            def to_init(r):
                c = copy.deepcopy(spec_of(r)["containers"][0])
                c["name"] = str(c.get("name", "c")) + "-init"
                spec_of(r).setdefault("initContainers", []).append(c)
            variant("container as initContainer", to_init)

            def to_ephemeral(r):
                c = copy.deepcopy(spec_of(r)["containers"][0])
                c["name"] = str(c.get("name", "c")) + "-debug"
                spec_of(r).setdefault("ephemeralContainers", []).append(c)
            variant("container as ephemeralContainer", to_ephemeral)

            def privileged(r):
                spec_of(r)["containers"][0].setdefault("securityContext", {})["privileged"] = True
            variant("container privileged", privileged)

            def host_port(r):
                spec_of(r)["containers"][0].setdefault("ports", []).append(
                    {"containerPort": 8080, "hostPort": 80})
            variant("hostPort added", host_port)

            def no_security(r):
                for c in spec_of(r).get("containers", []):
                    if isinstance(c, dict):
                        c.pop("securityContext", None)
                spec_of(r).pop("securityContext", None)
            variant("securityContext dropped", no_security)
        variant("hostPath volume added", lambda r: spec_of(r).setdefault("volumes", []).append(
            {"name": "host", "hostPath": {"path": "/var/run/docker.sock"}}))
        variant("hostNetwork true", lambda r: spec_of(r).__setitem__("hostNetwork", True))
        variant("containers emptied", lambda r: spec_of(r).__setitem__("containers", []))
    return out


def test_variants(test_file, policies, resources, seed):
    """The variations of the test's resources in an order of their own
    seed, each renamed `<name>-d<k>`: a run takes the first ones."""
    rng = random_for(f"{seed}:{test_file.relative_to(CORPUS)}")
    paths = []
    for p in policies:
        for doc in load_docs(p):
            for path in policy_paths(doc):
                if path not in paths:
                    paths.append(path)
    candidates = []
    for resource in resources:
        if not isinstance(resource.get("metadata"), dict) or "name" not in resource["metadata"]:
            continue
        name = resource["metadata"]["name"]
        candidates.extend((label, r, name) for label, r in variations(resource, paths, rng))
    rng.shuffle(candidates)
    chosen = []
    for k, (label, r, original) in enumerate(candidates):
        # A variation that dropped the name or the metadata keeps a name:
        # both CLIs need one to report on.
        if not isinstance(r.get("metadata"), dict):
            r["metadata"] = {}
        r["metadata"]["name"] = f"{original}-d{k}"
        chosen.append((f"{original}: {label}", r))
    return chosen


def random_for(text):
    import random
    return random.Random(zlib.crc32(text.encode()))


# ---- running both CLIs ------------------------------------------------------

def run_cli(binary, policies, resource_file, out_dir):
    cmd = [binary, "apply", *map(str, policies), "--resource", str(resource_file), "-p",
           "-o", str(out_dir)]
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - started, "timeout"
    return done, time.monotonic() - started, None


def report_results(stdout):
    """(policy, rule, kind, namespace, name) -> (result, message) from the
    policy report a CLI printed with -p."""
    results = {}
    start = REPORT_START.search(stdout)
    text = stdout[start.start():] if start else ""
    # The one-line count both print after the report.
    text = "\n".join(line for line in text.splitlines() if not COUNTS.match(line))
    try:
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError:
        return None
    for doc in docs:
        for r in doc.get("results") or []:
            for res in r.get("resources") or [{}]:
                key = (str(r.get("policy")), str(r.get("rule")), str(res.get("kind")),
                       str(res.get("namespace")), str(res.get("name")))
                results[key] = (r.get("result"), (r.get("message") or "").strip())
    return results


def written_resources(out_dir):
    """(kind, namespace, name) -> object of what a CLI wrote with -o."""
    found = {}
    for f in sorted(Path(out_dir).rglob("*")):
        if not f.is_file():
            continue
        try:
            docs = load_docs(f)
        except yaml.YAMLError:
            continue
        for d in docs:
            meta = d.get("metadata") or {}
            found[(str(d.get("kind")), str(meta.get("namespace")), str(meta.get("name")))] = d
    return found


def comparable(obj):
    """An object as both CLIs should agree on it: fields a CLI adds on its
    own (an empty creationTimestamp) left out."""
    obj = copy.deepcopy(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for k in ("creationTimestamp", "resourceVersion", "uid", "generation", "managedFields"):
            if not meta.get(k):
                meta.pop(k, None)
    obj.pop("status", None) if obj.get("status") in ({}, None) else None
    return obj


def without_trigger_name(obj):
    obj = copy.deepcopy(obj)
    labels = (obj.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop("generate.kyverno.io/trigger-name", None)
    return obj


def unchanged(written, resource):
    """Whether a written resource is the input as it was (the namespace
    both CLIs default aside)."""
    a, b = comparable(written), comparable(resource)
    for obj in (a, b):
        if isinstance(obj.get("metadata"), dict):
            obj["metadata"].pop("namespace", None)
    return a == b


KYAML_ITEM_KIND = "wrong node kind: expected MappingNode but got "

# Lists merged by a key, and the key.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
              "env": "name", "volumes": "name", "imagePullSecrets": "name",
              "volumeMounts": "mountPath", "ports": "containerPort"}


def has_keyless_items(node):
    """Whether a resource has an item without its merge key (or with an
    empty one) in a list merged by key."""
    if isinstance(node, dict):
        for k, v in node.items():
            key = MERGE_KEYS.get(k)
            if key and isinstance(v, list) and any(
                    isinstance(e, dict) and e.get(key) in (None, "") for e in v):
                return True
            if has_keyless_items(v):
                return True
    elif isinstance(node, list):
        return any(has_keyless_items(e) for e in node)
    return False


def mutate_rules(case, rule_type="mutate"):
    """`policy/rule` of every classic rule of a type (mutate, generate) of
    a case's policies, with the names of the rules autogen makes from
    them."""
    rules = set()
    for path in case["policies"]:
        for doc in load_docs(CORPUS / path):
            if doc.get("kind") not in ("ClusterPolicy", "Policy"):
                continue
            meta = doc.get("metadata") or {}
            policy = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") \
                else str(meta.get("name"))
            for rule in (doc.get("spec") or {}).get("rules") or []:
                if rule_type in rule:
                    for prefix in ("", "autogen-", "autogen-cronjob-"):
                        rules.add(f"{policy}/{prefix}{rule.get('name')}")
    return rules


def compare(case, gavel, kyverno):
    """Every disagreement between the two runs, as dicts with a key for the
    known-differences table."""
    (g_done, g_results, g_written, _), (k_done, k_results, k_written, _) = gavel, kyverno
    test_name = case["test"]
    variant_of = {(str(v["resource"].get("kind")), v["resource"]["metadata"]["name"]): v
                  for v in case["variants"]}
    differences = []

    def add(policy_rule, resource, aspect, gavel_said, kyverno_said):
        v = variant_of.get(resource)
        # The resource as `apiVersion Kind name: variation`.
        label = (f"{v['resource'].get('apiVersion')} {resource[0]} {v['label']}" if v
                 else f"{resource[0]} {resource[1]}")
        key = f"{test_name} :: {policy_rule} :: {label} :: {aspect}"
        differences.append({"key": key, "test": test_name, "policy_rule": policy_rule,
                            "resource": f"{resource[0]}/{resource[1]}", "variation": label,
                            "aspect": aspect, "gavel": gavel_said, "kyverno": kyverno_said})

    if g_results is None or k_results is None:
        add("*", ("", "*"), "report", g_done, k_done)
        return differences
    # Resources on which a Kyverno mutate rule failed: its CLI goes on with
    # the empty object its error response carries, so the rules and
    # policies after it find nothing to match and it writes nothing.
    mutating = mutate_rules(case)
    generating = mutate_rules(case, "generate")

    def keyless(resource):
        v = variant_of.get(resource)
        return v is not None and has_keyless_items(v["resource"])

    lost = {(kind, name) for (policy, rule, kind, _ns, name), (result, _) in k_results.items()
            if result == "error" and f"{policy}/{rule}" in mutating}
    for key in sorted(set(g_results) | set(k_results)):
        policy, rule, kind, _ns, name = key
        g, k = g_results.get(key), k_results.get(key)
        if k is None and (kind, name) in lost:
            add(f"{policy}/{rule}", (kind, name), "result: none from kyverno after its mutate error",
                g and g[0], None)
        elif g is not None and k is not None and g[0] != k[0] and k[0] == "error" \
                and KYAML_ITEM_KIND in k[1]:
            # kyaml reads every item of a list merged by key as a map, in
            # the resource too, and fails on any other.
            add(f"{policy}/{rule}", (kind, name), "result: kyaml refuses a list item that is not a map",
                g[0], k[0])
        elif g is not None and k is not None and (g[0], k[0]) == ("error", "pass") \
                and f"{policy}/{rule}" in generating and "variable substitution failed" in g[1]:
            # Kyverno's CLI only logs the generate controller's error
            # (handleGeneratePolicy) and keeps the rule's pass.
            add(f"{policy}/{rule}", (kind, name), "result: generate data that does not substitute",
                g[0], k[0])
        elif g is not None and k is not None and g[0] != k[0] and "error" not in (g[0], k[0]) \
                and keyless((kind, name)):
            add(f"{policy}/{rule}", (kind, name), "result: list items without their merge key",
                g[0], k[0])
        elif g is None or k is None or g[0] != k[0]:
            add(f"{policy}/{rule}", (kind, name), "result", g and g[0], k and k[0])
        elif g[1] != k[1]:
            add(f"{policy}/{rule}", (kind, name), "message", g[1], k[1])
    if g_done != k_done:
        # The exit status follows the results: when every result that
        # differs has a named cause, the exit status has it too.
        results = [d for d in differences if d["aspect"].startswith("result")]
        named = results and all(d["aspect"] != "result" for d in results)
        add("*", ("", "*"), "exit: follows the results' named causes" if named else "exit",
            g_done, k_done)
    for key in sorted(set(g_written) | set(k_written)):
        kind, _ns, name = key
        g, k = g_written.get(key), k_written.get(key)
        if g is not None and k is not None and comparable(g) == comparable(k):
            continue
        v = variant_of.get((kind, name))
        if g is None and not k:
            aspect = "output: kyverno wrote an empty object"
        elif k is None and (kind, name) in lost:
            aspect = "output: none from kyverno after its mutate error"
        elif k is None and v is not None and unchanged(g, v["resource"]):
            aspect = "output: gavel wrote it unchanged, kyverno did not"
        elif g is not None and k is not None and comparable(without_trigger_name(g)) == comparable(k):
            aspect = "output: gavel's generate.kyverno.io/trigger-name label"
        elif g is not None and k is not None and keyless((kind, name)):
            aspect = "output: list items without their merge key"
        elif g is None or k is None:
            aspect = "output: written by one only"
        else:
            aspect = "output: differs"
        add("*", (kind, name), aspect, g, k)
    return differences


def known_patterns():
    """(key glob, Kyverno's answer glob, cause) rows of the
    known-differences table."""
    rows, inside = [], False
    for line in KNOWN.read_text().splitlines() if KNOWN.exists() else []:
        if line.startswith("## "):
            inside = line.strip() == KNOWN_HEADING
            continue
        if inside and line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            said = cells[1].strip("`").replace("\\|", "|") or "*"
            rows.append((cells[0].strip("`"), said, cells[2]))
    return rows


def explanation(difference, known):
    """The cause of a difference from the known-differences table, if
    a row matches its key and what Kyverno said."""
    for key_glob, said_glob, cause in known:
        if fnmatch.fnmatchcase(difference["key"], key_glob) and \
                fnmatch.fnmatchcase(str(difference["kyverno"]), said_glob):
            return cause
    return None


def generated_cases(args):
    """The cases of a run: per usable test, its policies (relative to the
    corpus) and its variations."""
    tests = usable_tests()
    if args.only:
        tests = [t for t in tests if args.only in str(t[0])]
    if args.sample:
        tests = tests[::8]
    candidates = [test_variants(t, p, r, args.seed) for t, p, r in tests]
    if args.sample:
        per_test = 8
    else:
        # The smallest count per test that makes the pairs asked for (a
        # test with fewer variations gives all it has).
        def pairs_with(k):
            return sum(min(k, len(c)) * len(t[1]) for c, t in zip(candidates, tests))
        per_test = 1
        while pairs_with(per_test) < args.pairs and per_test < max(map(len, candidates)):
            per_test += 1
    cases = []
    for (test_file, policies, _), all_variants in zip(tests, candidates):
        variants = all_variants[:per_test]
        if variants:
            cases.append({
                "test": str(test_file.parent.relative_to(CORPUS)).replace("/.kyverno-test", ""),
                "policies": [str(p.relative_to(CORPUS)) for p in policies],
                "variants": [{"label": label, "resource": r} for label, r in variants],
            })
    return cases


def run_engine(binary, case, work, engine):
    """(what the CLI said when it failed, its report results, what it wrote)."""
    resource_file = work / "resources.yaml"
    resource_file.write_text(yaml.safe_dump_all([v["resource"] for v in case["variants"]],
                                                sort_keys=False))
    written = work / f"{engine}-out"
    written.mkdir(exist_ok=True)
    policies = [CORPUS / p for p in case["policies"]]
    done, seconds, failure = run_cli(binary, policies, resource_file, written)
    results = report_results(done.stdout) if done else None
    said = failure or (f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}"
                       if results is None else f"exit {done.returncode}")
    return said, results, written_resources(written), seconds


def recorded(run):
    """A run as JSON (tuples as lists)."""
    said, results, written, _ = run
    return {"said": said,
            "results": None if results is None else [list(k) + list(v) for k, v in results.items()],
            "written": [list(k) + [v] for k, v in written.items()]}


def from_record(record):
    results = record["results"]
    return (record["said"],
            None if results is None else {tuple(r[:5]): (r[5], r[6]) for r in results},
            {tuple(w[:3]): w[3] for w in record["written"]}, 0.0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sample", action="store_true",
                        help="the fixed CI sample: every 8th test, 8 variations each")
    parser.add_argument("--record", help="write the cases with Kyverno's answers to this file")
    parser.add_argument("--replay", help="take the cases and Kyverno's answers from this file "
                        "(written by --record); only gavel runs")
    parser.add_argument("--out")
    parser.add_argument("--gavel", default=str(REPO / "target/release/gavel"))
    parser.add_argument("--kyverno", default=str(cache() / "bin/kubectl-kyverno"))
    parser.add_argument("--only", help="a substring of the test paths to run")
    parser.add_argument("--keep", help="keep the inputs and outputs in this directory")
    args = parser.parse_args()

    if args.replay:
        replay = json.loads(Path(args.replay).read_text())
        cases = replay["cases"]
    else:
        cases = generated_cases(args)
    out = Path(args.out or REPO / "target" / "differential")
    out.mkdir(parents=True, exist_ok=True)
    known = known_patterns()

    pairs = 0
    disagreements, explained = [], []
    wall = {"gavel": 0.0, "kyverno": 0.0}
    with tempfile.TemporaryDirectory(prefix="gavel-differential-") as tmp:
        if args.keep:
            tmp = args.keep
            Path(tmp).mkdir(parents=True, exist_ok=True)
        for i, case in enumerate(cases):
            work = Path(tmp) / str(i)
            work.mkdir(exist_ok=True)
            pairs += len(case["variants"]) * len(case["policies"])
            gavel = run_engine(args.gavel, case, work, "gavel")
            if args.replay:
                kyverno = from_record(case["kyverno"])
            else:
                kyverno = run_engine(args.kyverno, case, work, "kyverno")
                case["kyverno"] = recorded(kyverno)
            wall["gavel"] += gavel[3]
            wall["kyverno"] += kyverno[3]
            found = compare(case, gavel, kyverno)
            for d in found:
                cause = explanation(d, known)
                if cause:
                    d["cause"] = cause
                    explained.append(d)
                else:
                    disagreements.append(d)
            print(f"[{i + 1}/{len(cases)}] {case['test']}: {len(case['variants'])} variations, "
                  f"{len(found)} differences", file=sys.stderr)

    if args.record:
        Path(args.record).write_text(json.dumps(
            {"seed": args.seed, "kyverno": kyverno_version(args.kyverno), "cases": cases},
            separators=(",", ":"), sort_keys=True) + "\n")
    (out / "disagreements.json").write_text(json.dumps(
        {"unexplained": disagreements, "explained": explained}, indent=1))
    differing = {(d["test"], d["resource"]) for d in disagreements + explained}
    by_cause = {}
    for d in explained:
        by_cause[d["cause"]] = by_cause.get(d["cause"], 0) + 1
    lines = [
        "# `gavel apply` and `kyverno apply` on variations of the corpus's resources",
        "",
        f"- tests: {len(cases)}; (policy, resource) pairs: {pairs}; seed {args.seed}"
        + ("; the CI sample" if args.sample else "")
        + (f"; replayed from {args.replay}" if args.replay else ""),
        f"- wall time of the CLIs: gavel {wall['gavel']:.1f} s, kyverno {wall['kyverno']:.1f} s",
        f"- resources with a difference: {len(differing)}; differences: {len(explained)} "
        f"explained (docs/compatibility.md), {len(disagreements)} unexplained",
        "",
    ]
    if by_cause:
        lines += ["## Explained, by cause", "", "| differences | cause |", "|---|---|"]
        for cause, n in sorted(by_cause.items(), key=lambda kv: -kv[1]):
            lines.append(f"| {n} | {cause} |")
        lines.append("")
    if disagreements:
        lines += ["## Unexplained", "", "| key | gavel | kyverno |", "|---|---|---|"]
        for d in disagreements[:500]:
            lines.append(f"| `{d['key']}` | {cell(d['gavel'])} | {cell(d['kyverno'])} |")
    (out / "differential.md").write_text("\n".join(lines) + "\n")
    for d in disagreements[:40]:
        print(f"unexplained: {d['key']}\n  gavel:   {d['gavel']}\n  kyverno: {d['kyverno']}",
              file=sys.stderr)
    print(f"differential: pairs={pairs} resources_differing={len(differing)} "
          f"explained={len(explained)} unexplained={len(disagreements)}")
    return 1 if disagreements or not pairs else 0


def kyverno_version(binary):
    try:
        done = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=60)
        return done.stdout.strip().splitlines()[0] if done.stdout.strip() else None
    except OSError:
        return None


def cell(value):
    return str(value).replace("|", "\\|").replace("\n", " ")[:300]


if __name__ == "__main__":
    sys.exit(main())
