//! verifyImages offline, on the rules of Kyverno's documentation and CLI
//! tests: digests, `required` and its annotation, the verification phase's
//! registry checks, `skipImageReferences`, and custom `imageExtractors`.

use super::*;
use crate::engine::json_context::Builtins;
use crate::engine::validate::evaluate_policy;
use crate::matching::UserInfo;
use crate::policy::load::{LoadedDocument, load_policy_text};
use serde_json::json;

const DIGEST: &str = "sha256:859ab6768a6f26a79bc42b231664111317d095a4f04e4b6fe79ce37b3d199097";

fn policy(verify_images: &str) -> CompiledPolicy {
    let yaml = format!(
        "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: check-images}}
spec:
  validationFailureAction: Enforce
  rules:
  - name: check
    match: {{any: [{{resources: {{kinds: [Pod, Task]}}}}]}}
{verify_images}"
    );
    let docs = load_policy_text("test.yaml", &yaml).unwrap();
    match docs.into_iter().next().unwrap() {
        LoadedDocument::Policy(p) => CompiledPolicy::compile(&p).unwrap(),
        _ => panic!("not a policy"),
    }
}

fn pod(images: &[&str], annotations: Value) -> Value {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "default", "annotations": annotations},
           "spec": {"containers": containers}})
}

/// (validation phase, verification phase): each (status, message).
type Phases = (Vec<(RuleStatus, String)>, Vec<(RuleStatus, String)>);

fn run(p: &CompiledPolicy, resource: &Value) -> Phases {
    let req = Request::offline(resource, "CREATE", UserInfo::default(), None);
    let ctx = req.json_context(Builtins::default());
    let env = EvalEnv {
        resolver: &crate::context::NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let pairs = |r: PolicyResponse| {
        r.rules
            .iter()
            .map(|r| (r.status, r.message.to_string()))
            .collect::<Vec<_>>()
    };
    (
        pairs(evaluate_policy(p, &req, &ctx, &env)),
        pairs(verify_policy(p, &req, &ctx, &env)),
    )
}

#[test]
fn digests_are_checked_without_a_registry() {
    // Kyverno's test/cli/test/images/digest.
    let p = policy(
        "    verifyImages:
    - imageReferences: ['*']
      mutateDigest: false
      required: false
      verifyDigest: true
",
    );
    assert_eq!(
        run(&p, &pod(&["nginx:latest"], json!({}))),
        (
            vec![(
                RuleStatus::Fail,
                "missing digest for docker.io/nginx:latest".into()
            )],
            vec![]
        )
    );
    let pinned = format!("nginx:latest@{DIGEST}");
    assert_eq!(
        run(&p, &pod(&[&pinned], json!({}))),
        (vec![(RuleStatus::Pass, "image verified".into())], vec![])
    );
}

#[test]
fn required_reads_the_verification_record() {
    let p = policy(
        "    verifyImages:
    - imageReferences: ['ghcr.io/*']
      mutateDigest: false
      verifyDigest: false
",
    );
    let image = "ghcr.io/acme/app:1";
    assert_eq!(
        run(&p, &pod(&[image], json!({}))).0,
        [(
            RuleStatus::Fail,
            "unverified image ghcr.io/acme/app:1".into()
        )]
    );
    let record = |status: &str| {
        json!({"kyverno.io/verify-images-scoped": json!({
            "version": 1,
            "policies": {"/check-images": {"check": {image: status}}}
        }).to_string()})
    };
    assert_eq!(
        run(&p, &pod(&[image], record("pass"))).0,
        [(RuleStatus::Pass, "image verified".into())]
    );
    assert_eq!(
        run(&p, &pod(&[image], record("skip"))).0,
        [(
            RuleStatus::Skip,
            "image skipped, skipped images: ghcr.io/acme/app:1".into()
        )]
    );
    let (statuses, _) = run(
        &p,
        &pod(
            &[image],
            json!({"kyverno.io/verify-images-scoped": "{not json"}),
        ),
    );
    assert!(
        statuses[0]
            .1
            .starts_with("failed to parse scoped image metadata")
    );
    // Images no reference matches give no result at all.
    assert_eq!(run(&p, &pod(&["nginx"], json!({}))), (vec![], vec![]));
}

#[test]
fn the_verification_phase_needs_the_registry() {
    let p = policy(
        "    verifyImages:
    - imageReferences: ['ghcr.io/*']
      skipImageReferences: ['ghcr.io/acme/trusted*']
      verifyDigest: false
      required: false
      attestors:
      - entries:
        - keys:
            publicKeys: |-
              -----BEGIN PUBLIC KEY-----
              MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE8nXRh950IZbRj8Ra/N9sbqOPZrfM
              -----END PUBLIC KEY-----
",
    );
    let (validated, verified) = run(
        &p,
        &pod(&[&format!("ghcr.io/acme/app@{DIGEST}")], json!({})),
    );
    // Neither digests nor required are checked: no validation phase.
    assert!(validated.is_empty());
    assert_eq!(verified.len(), 1);
    assert_eq!(verified[0].0, RuleStatus::Error);
    assert!(
        verified[0]
            .1
            .starts_with("unsupported offline: verifying the signatures")
    );
    // A tagged image also needs its digest from the registry.
    let (_, verified) = run(&p, &pod(&["ghcr.io/acme/app:1"], json!({})));
    assert_eq!(verified.len(), 2);
    assert!(
        verified[0]
            .1
            .starts_with("failed to update digest: unsupported offline")
    );
    let (_, verified) = run(
        &p,
        &pod(&[&format!("ghcr.io/acme/trusted-base@{DIGEST}")], json!({})),
    );
    assert_eq!(
        verified,
        [(
            RuleStatus::Skip,
            "skipping image reference image ghcr.io/acme/trusted-base@sha256:859ab6768a6f26a79bc42b231664111317d095a4f04e4b6fe79ce37b3d199097, policy check-images ruleName check".into()
        )]
    );
}

#[test]
fn custom_extractors_find_images_anywhere() {
    let p = policy(
        "    imageExtractors:
      Task:
      - path: /spec/steps/*/image
      - path: /spec/sidecars/*
        value: ref
        key: id
        name: sidecars
        jmesPath: \"trim_prefix(@, 'oci://')\"
    verifyImages:
    - imageReferences: ['*']
      mutateDigest: false
      required: false
",
    );
    let task = |step: &str, sidecar: &str| {
        json!({"apiVersion": "tekton.dev/v1", "kind": "Task", "metadata": {"name": "t"},
               "spec": {"steps": [{"name": "s", "image": step}],
                        "sidecars": [{"id": "cache", "ref": sidecar}]}})
    };
    let pinned = format!("ghcr.io/acme/tool@{DIGEST}");
    assert_eq!(
        run(&p, &task(&pinned, &format!("oci://{pinned}"))).0,
        [(RuleStatus::Pass, "image verified".into())]
    );
    assert_eq!(
        run(&p, &task(&pinned, "oci://redis:7")).0,
        [(
            RuleStatus::Fail,
            "missing digest for docker.io/redis:7".into()
        )]
    );
    let found = extract_images(
        &task(&pinned, "oci://redis:7"),
        match &p.rules[0].body {
            RuleBody::VerifyImages(v) => v,
            _ => unreachable!(),
        },
    )
    .unwrap();
    assert_eq!(
        found
            .iter()
            .map(|f| f.reference.as_str())
            .collect::<Vec<_>>(),
        [pinned.as_str(), "docker.io/redis:7"]
    );
    // A Pod: no extractor for its kind is given, so the containers.
    assert_eq!(
        run(&p, &pod(&["nginx"], json!({}))).0,
        [(
            RuleStatus::Fail,
            "missing digest for docker.io/nginx:latest".into()
        )]
    );
}
