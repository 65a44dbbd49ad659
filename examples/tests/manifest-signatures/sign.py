#!/usr/bin/env python3
"""Writes this suite's signed resources and the policies holding their keys.

The signatures are made as sigstore's k8s-manifest-sigstore (`kubectl
sigstore sign`) makes them: the manifest is the message, either a gzipped
tar of YAML files (the default) or the YAML itself, and the annotation
`cosign.sigstore.dev/message` is base64 of its gzip; each signature
(`cosign.sigstore.dev/signature`, `..._1`, ...) is base64 of the key's
signature, with SHA-256, of the message (the gzip undone once).

Not run by the tests: the files it writes are committed. Run it again
(python3 with `cryptography`) only to change the suite; the ECDSA and
Ed25519 keys are derived from fixed numbers, the RSA key is new each time.
"""

import base64
import gzip
import io
import json
import os
import tarfile

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

HERE = os.path.dirname(os.path.abspath(__file__))

KEYS = {
    "p256-a": ec.derive_private_key(0x5EED_0001, ec.SECP256R1()),
    "p256-b": ec.derive_private_key(0x5EED_0002, ec.SECP256R1()),
    "p384": ec.derive_private_key(0x5EED_0003, ec.SECP384R1()),
    "ed25519": ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32))),
    "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
}


def public_pem(name):
    return (
        KEYS[name]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
        .strip()
    )


def sign(name, message):
    key = KEYS[name]
    if isinstance(key, ec.EllipticCurvePrivateKey):
        sig = key.sign(message, ec.ECDSA(hashes.SHA256()))
    elif isinstance(key, rsa.RSAPrivateKey):
        sig = key.sign(message, padding.PKCS1v15(), hashes.SHA256())
    else:
        sig = key.sign(message)
    return base64.b64encode(sig).decode()


def yaml_of(obj):
    # JSON is YAML; the library reads the manifest with a YAML decoder.
    return json.dumps(obj, indent=2) + "\n"


def tarball(manifest_yaml):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        data = manifest_yaml.encode()
        info = tarfile.TarInfo("manifest/resource.yaml")
        info.size = len(data)
        info.mtime = 0
        tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def signed(manifest, resource, keys, tar=True, domain="cosign.sigstore.dev"):
    """The resource with annotations signing `manifest` by each of `keys`."""
    message = tarball(yaml_of(manifest)) if tar else yaml_of(manifest).encode()
    annotations = {f"{domain}/message": base64.b64encode(gzip.compress(message, mtime=0)).decode()}
    for i, key in enumerate(keys):
        suffix = "" if i == 0 else f"_{i}"
        annotations[f"{domain}/signature{suffix}"] = sign(key, message)
    resource = json.loads(json.dumps(resource))
    resource["metadata"].setdefault("annotations", {}).update(annotations)
    return resource


def configmap(name, data, **meta):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "apps", **meta},
        "data": data,
    }


def resources():
    out = []
    # Signed as it is, in the default tarball form and as plain YAML.
    cm = configmap("cm-signed", {"level": "info"})
    out.append(signed(cm, cm, ["p256-a"]))
    cm = configmap("cm-plain-message", {"level": "info"})
    out.append(signed(cm, cm, ["p256-a"], tar=False))
    # Changed after signing: the difference is reported.
    cm = configmap("cm-tampered", {"level": "info"})
    out.append(signed(cm, configmap("cm-tampered", {"level": "debug"}), ["p256-a"]))
    # Not signed at all.
    out.append(configmap("cm-unsigned", {"level": "info"}))
    # Signed by a key no attestor holds.
    cm = configmap("cm-other-key", {"level": "info"})
    out.append(signed(cm, cm, ["p256-b"]))
    # What the API server and controllers add is ignored, as are the
    # fields a rule's ignoreFields names.
    cm = configmap("cm-stamped", {"level": "info"})
    stamped = configmap(
        "cm-stamped",
        {"level": "info", "stamp": "2026-11-28T02:00:00Z"},
        uid="0b1c7a52-3f4e-4d0a-9d7c-1d2e3f4a5b6c",
        resourceVersion="4711",
        creationTimestamp="2026-11-28T02:00:00Z",
    )
    out.append(signed(cm, stamped, ["p256-a"]))
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc-defaulted", "namespace": "apps"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    defaulted = json.loads(json.dumps(svc))
    defaulted["spec"].update(
        {
            "clusterIP": "10.96.4.2",
            "clusterIPs": ["10.96.4.2"],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
        }
    )
    out.append(signed(svc, defaulted, ["p256-a"]))
    # An image named in its canonical form is the same image.
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }
    canonical = json.loads(json.dumps(deploy))
    canonical["spec"]["template"]["spec"]["containers"][0]["image"] = "docker.io/nginx:1.27"
    out.append(signed(deploy, canonical, ["p256-a"]))
    # Other key types.
    cm = configmap("cm-rsa", {"level": "info"})
    out.append(signed(cm, cm, ["rsa"]))
    cm = configmap("cm-p384", {"level": "info"})
    out.append(signed(cm, cm, ["p384"]))
    cm = configmap("cm-ed25519", {"level": "info"})
    out.append(signed(cm, cm, ["ed25519"]))
    # Two signatures, for an attestor set that needs both keys.
    cm = configmap("cm-two-signatures", {"level": "info"})
    out.append(signed(cm, cm, ["rsa", "p256-a"]))
    # The team annotation an attestor requires, present and not.
    cm = configmap("cm-team-payments", {"level": "info"}, annotations={"team": "payments"})
    out.append(signed(cm, cm, ["p256-a"]))
    cm = configmap("cm-team-other", {"level": "info"}, annotations={"team": "search"})
    out.append(signed(cm, cm, ["p256-a"]))
    # Signatures under a domain of the rule's own.
    cm = configmap("cm-own-domain", {"level": "info"})
    out.append(signed(cm, cm, ["p256-a"], domain="sign.example.com"))
    # Excepted by a PolicyException.
    cm = configmap("cm-legacy", {"level": "info"})
    out.append(cm)
    return out


POLICIES = """\
# Every rule verifies the manifests signed into a ConfigMap's, Service's or
# Deployment's annotations; the rules differ in their keys and options.
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: signed-manifests
spec:
  background: false
  rules:
  - name: p256
    match:
      any:
      - resources:
          kinds: [ConfigMap, Service, Deployment]
          namespaces: [apps]
          names: [cm-signed, cm-plain-message, cm-tampered, cm-unsigned, cm-other-key, cm-stamped, svc-defaulted, web, cm-legacy]
    validate:
      failureAction: Enforce
      manifests:
        ignoreFields:
        - objects:
          - kind: ConfigMap
          fields:
          - data.stamp
        attestors:
        - entries:
          - keys:
              publicKeys: |-
{p256_a}
  - name: any-of-three-keys
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          names: [cm-rsa, cm-p384, cm-ed25519]
    validate:
      failureAction: Enforce
      manifests:
        attestors:
        - count: 1
          entries:
          - keys:
              publicKeys: |-
{rsa}
          - keys:
              publicKeys: |-
{p384}
          - keys:
              publicKeys: |-
{ed25519}
  - name: both-keys
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          names: [cm-two-signatures, cm-signed]
    validate:
      failureAction: Enforce
      manifests:
        attestors:
        - entries:
          - keys:
              publicKeys: |-
{p256_a}
          - attestor:
              entries:
              - keys:
                  publicKeys: |-
{rsa_nested}
  - name: payments-team
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          names: [cm-team-*]
    validate:
      failureAction: Enforce
      manifests:
        attestors:
        - entries:
          - annotations:
              team: payments
            keys:
              publicKeys: |-
{p256_a}
  # Two PEM keys in one entry are two entries, each to verify (count unset).
  - name: two-keys-in-one-entry
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          names: [cm-signed]
    validate:
      failureAction: Enforce
      manifests:
        attestors:
        - entries:
          - keys:
              publicKeys: |-
{p256_a}
{p256_b}
  - name: own-domain
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          names: [cm-own-domain]
    validate:
      failureAction: Enforce
      manifests:
        annotationDomain: sign.example.com
        attestors:
        - entries:
          - keys:
              publicKeys: |-
{p256_a}
"""


def indent(text, spaces):
    return "\n".join(" " * spaces + line for line in text.splitlines())


def main():
    with open(os.path.join(HERE, "policies.yaml"), "w") as f:
        f.write(
            POLICIES.format(
                p256_a=indent(public_pem("p256-a"), 16),
                rsa=indent(public_pem("rsa"), 16),
                p384=indent(public_pem("p384"), 16),
                ed25519=indent(public_pem("ed25519"), 16),
                rsa_nested=indent(public_pem("rsa"), 20),
                p256_b=indent(public_pem("p256-b"), 16),
            )
        )
    with open(os.path.join(HERE, "resources.yaml"), "w") as f:
        f.write("# Written by sign.py: signed as k8s-manifest-sigstore signs.\n")
        f.write("\n---\n".join(yaml_of(r) for r in resources()))


if __name__ == "__main__":
    main()
