#!/usr/bin/env python3
"""Prints the objects of a gavel scale run as one YAML stream: fake Nodes
(kwok manages those annotated kwok.x-k8s.io/node=fake), Namespaces, and
Deployments whose Pods land on the fake Nodes. About half of the Pods
violate the restricted Pod Security profile, as in k6/admission.js.

Usage: kwok/cluster-objects.py [--nodes N] [--pods N] [--namespaces N]
(e2e/cluster.sh up runs it with --pods 0 --namespaces 0 for its Nodes.)
"""
import argparse
import sys

import yaml


def nodes(n):
    for i in range(n):
        yield {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"kwok-node-{i}",
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/hostname": f"kwok-node-{i}",
                    "topology.kubernetes.io/zone": f"zone-{i % 3}",
                },
            },
            "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            },
        }


def namespaces(n):
    for i in range(n):
        yield {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"scale-{i}"}}


def deployments(pods, n_namespaces, per_deployment=50):
    # --pods 0 (e2e/cluster.sh up creates only the Nodes) yields none.
    count = -(-pods // per_deployment)
    for i in range(count):
        compliant = i % 2 == 0
        container = {"name": "app", "image": "registry.example.com/app:1.0"}
        if compliant:
            container["securityContext"] = {
                "allowPrivilegeEscalation": False,
                "runAsNonRoot": True,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            }
        else:
            container["securityContext"] = {"privileged": True}
        yield {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"app-{i}", "namespace": f"scale-{i % n_namespaces}"},
            "spec": {
                "replicas": per_deployment,
                "selector": {"matchLabels": {"app": f"app-{i}"}},
                "template": {
                    "metadata": {"labels": {"app": f"app-{i}"}},
                    "spec": {
                        "nodeSelector": {"type": "kwok"},
                        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                        "containers": [container],
                    },
                },
            },
        }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--namespaces", type=int, default=100)
    a = p.parse_args()
    objects = [*namespaces(a.namespaces), *nodes(a.nodes), *deployments(a.pods, a.namespaces)]
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)


main()
