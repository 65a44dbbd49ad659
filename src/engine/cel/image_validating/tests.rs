//! ImageValidatingPolicy evaluation, on the examples of Kyverno's
//! documentation (image matching, digests, `required`, exceptions, Pod
//! controllers, custom extractors) and on what only a registry can answer.

use super::*;
use crate::context::NoResolver;
use crate::policy::cel_policy::{
    CelExceptionDoc, CompiledCelException, ImageValidatingPolicyDoc, attach_exceptions,
};
use std::sync::Arc;

const DIGEST: &str = "sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2";

fn policy(spec: &str) -> CompiledImageValidatingPolicy {
    let doc: ImageValidatingPolicyDoc = serde_saphyr::from_str(&format!(
        "apiVersion: policies.kyverno.io/v1beta1
kind: ImageValidatingPolicy
metadata: {{name: check-images}}
spec:
  matchConstraints:
    resourceRules:
    - {{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}}
  matchImageReferences:
  - glob: ghcr.io/*
  attestors:
  - name: notary
    notary: {{certs: {{value: cert}}}}
  attestations:
  - name: sbom
    referrer: {{type: sbom/cyclone-dx}}
{spec}"
    ))
    .unwrap();
    CompiledImageValidatingPolicy::compile(&doc).unwrap()
}

fn pod(name: &str, images: &[&str]) -> Value {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "labels": {"prod": "true"}},
           "spec": {"containers": containers}})
}

/// (rule name, status, message), or `None` when the policy gives no rule.
fn run(p: &CompiledImageValidatingPolicy, resource: Value) -> Option<(String, RuleStatus, String)> {
    let req = Request::offline(&resource, "CREATE", Default::default(), None);
    let response = evaluate_image_validating_policy(p, &req, &CelRequest::of(&req), &NoResolver);
    assert!(response.rules.len() <= 1);
    response
        .rules
        .first()
        .map(|r| (r.name.to_string(), r.status, r.message.to_string()))
}

fn status(p: &CompiledImageValidatingPolicy, resource: Value) -> Option<(RuleStatus, String)> {
    run(p, resource).map(|(_, s, m)| (s, m))
}

#[test]
fn default_extractors_compile_for_every_category() {
    for extractors in DEFAULT_EXTRACTORS.iter() {
        let names: Vec<&str> = extractors.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, CATEGORIES);
    }
}

#[test]
fn matched_images_need_a_digest_unless_verify_digest_is_off() {
    let p = policy(
        "  validationConfigurations: {required: false}\n  validations: [{expression: 'true'}]\n",
    );
    let tagged = "ghcr.io/kyverno/test-verify-image:signed";
    assert_eq!(
        status(&p, pod("a", &["nginx:1.25", tagged])),
        Some((
            RuleStatus::Fail,
            format!("image {tagged} does not have a digest")
        ))
    );
    // Images the policy does not match are not its concern.
    assert_eq!(
        status(&p, pod("a", &["nginx:1.25"])),
        Some((RuleStatus::Pass, "success".into()))
    );
    let pinned = format!("ghcr.io/kyverno/app@{DIGEST}");
    assert_eq!(
        status(&p, pod("a", &[&pinned])).unwrap().0,
        RuleStatus::Pass
    );
    let lax = policy(
        "  validationConfigurations: {required: false, verifyDigest: false}\n  validations: [{expression: 'true'}]\n",
    );
    assert_eq!(
        status(&lax, pod("a", &[tagged])).unwrap().0,
        RuleStatus::Pass
    );
}

#[test]
fn the_images_variable_holds_only_matched_images_by_extractor() {
    let p = policy(
        "  validationConfigurations: {required: false, verifyDigest: false}
  validations:
  - expression: \"images.containers == ['ghcr.io/a/b:1'] && images.initContainers == [] && images.ephemeralContainers == []\"
    message: unexpected images
  - expression: \"images.containers.all(i, image(i).registry() == 'ghcr.io')\"
",
    );
    assert_eq!(
        status(&p, pod("a", &["nginx", "ghcr.io/a/b:1"])),
        Some((RuleStatus::Pass, "success".into()))
    );
    assert_eq!(
        status(&p, pod("a", &["ghcr.io/a/b:2"])),
        Some((RuleStatus::Fail, "unexpected images".into()))
    );
}

#[test]
fn required_fails_images_no_check_verified() {
    let p = policy(
        "  validationConfigurations: {verifyDigest: false}\n  validations: [{expression: 'true'}]\n",
    );
    let image = "ghcr.io/kyverno/app:1";
    assert_eq!(
        status(&p, pod("a", &[image])),
        Some((
            RuleStatus::Fail,
            format!(
                "image {image} is not verified: no policy performed a signature or attestation check on it"
            )
        ))
    );
    // Nothing matched: nothing to verify.
    assert_eq!(
        status(&p, pod("a", &["nginx"])).unwrap().0,
        RuleStatus::Pass
    );
}

#[test]
fn registry_checks_fail_as_unsupported_offline_on_matched_images_only() {
    let p = policy(
        "  validationConfigurations: {verifyDigest: false}
  validations:
  - expression: \"images.containers.map(i, verifyImageSignatures(i, [attestors.notary])).all(n, n > 0)\"
    message: failed to verify image with notary cert
",
    );
    let (name, verdict, message) = run(&p, pod("a", &["ghcr.io/kyverno/app:1"])).unwrap();
    assert_eq!((name.as_str(), verdict), ("evaluation", RuleStatus::Error));
    assert!(
        message.starts_with("failed to evaluate policy: "),
        "{message}"
    );
    assert!(
        message.contains("unsupported offline: verifyImageSignatures(\"ghcr.io/kyverno/app:1\")"),
        "{message}"
    );
    // No matched image: the map is empty and the validation holds.
    let none = policy(
        "  validationConfigurations: {verifyDigest: false}
  validations:
  - expression: \"verifyImageSignatures('docker.io/nginx', [attestors.notary]) == 0\"
  - expression: \"images.containers.map(i, verifyImageSignatures(i, [attestors.notary])).all(n, n > 0)\"
",
    );
    assert_eq!(
        status(&none, pod("a", &["nginx"])),
        Some((RuleStatus::Pass, "success".into()))
    );
    for (expression, want) in [
        (
            "verifyAttestationSignatures('ghcr.io/app:1', 'nope', [attestors.notary]) > 0",
            "attestation not found in policy: nope",
        ),
        (
            "extractPayload('ghcr.io/app:1', attestations.sbom).bomFormat == 'CycloneDX'",
            "unsupported offline: extractPayload",
        ),
        (
            "getImageData('nginx') != null",
            "unsupported offline: getImageData",
        ),
    ] {
        let p = policy(&format!(
            "  validationConfigurations: {{verifyDigest: false}}\n  validations: [{{expression: \"{expression}\"}}]\n"
        ));
        let (_, verdict, message) = run(&p, pod("a", &["nginx"])).unwrap();
        assert_eq!(verdict, RuleStatus::Error, "{expression}");
        assert!(message.contains(want), "{expression}: {message}");
    }
}

#[test]
fn match_conditions_then_exceptions() {
    let mut p = policy(
        "  matchConditions:
  - name: prod
    expression: \"object.metadata.?labels.?prod.orValue('') == 'true'\"
  validations: [{expression: 'true'}]
",
    );
    let mut unlabelled = pod("a", &["ghcr.io/app:1"]);
    unlabelled["metadata"]["labels"] = json!({});
    assert_eq!(run(&p, unlabelled), None);
    let doc: CelExceptionDoc = serde_saphyr::from_str(
        "apiVersion: policies.kyverno.io/v1beta1
kind: PolicyException
metadata: {name: check-name, namespace: ops}
spec:
  policyRefs: [{name: check-images, kind: ImageValidatingPolicy}]
  matchConditions:
  - {name: check-name, expression: \"object.metadata.name == 'skipped-pod'\"}
",
    )
    .unwrap();
    let exception = Arc::new(CompiledCelException::compile(&doc).unwrap());
    p.scope.exceptions = attach_exceptions(&[exception], "ImageValidatingPolicy", "check-images");
    assert_eq!(
        run(&p, pod("skipped-pod", &["ghcr.io/app:1"])),
        Some((
            "exception".into(),
            RuleStatus::Skip,
            "rule is skipped due to policy exception: ops/check-name".into()
        ))
    );
    assert_eq!(
        status(&p, pod("other", &["ghcr.io/app:1"])).unwrap().1,
        "image ghcr.io/app:1 does not have a digest"
    );
}

#[test]
fn pod_controllers_are_checked_through_their_template() {
    let p = policy("  validations: [{expression: 'true'}]\n");
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {"template": {"metadata": {}, "spec": {
            "initContainers": [{"name": "i", "image": "ghcr.io/init:1"}],
            "containers": [{"name": "c", "image": "nginx"}]}}}});
    assert_eq!(
        status(&p, deployment),
        Some((
            RuleStatus::Fail,
            "image ghcr.io/init:1 does not have a digest".into()
        ))
    );
    let cronjob = json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "j", "namespace": "default"},
        "spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "c", "image": "ghcr.io/job:1"}]}}}}}});
    assert_eq!(status(&p, cronjob).unwrap().0, RuleStatus::Fail);
}

#[test]
fn custom_extractors_replace_or_add_to_the_defaults() {
    let doc: ImageValidatingPolicyDoc = serde_saphyr::from_str(
        "apiVersion: policies.kyverno.io/v1beta1
kind: ImageValidatingPolicy
metadata: {name: tasks}
spec:
  validationConfigurations: {verifyDigest: false, required: false}
  attestors: []
  matchConstraints:
    resourceRules:
    - {apiGroups: [tekton.dev], apiVersions: [v1], operations: [CREATE], resources: [tasks]}
  images:
  - name: steps
    expression: object.spec.steps.map(s, s.image)
  validations:
  - expression: \"images.steps.all(i, i.startsWith('ghcr.io/'))\"
    messageExpression: \"'untrusted step images: ' + images.steps.filter(i, !i.startsWith('ghcr.io/')).join(', ')\"
",
    )
    .unwrap();
    let p = CompiledImageValidatingPolicy::compile(&doc).unwrap();
    let task = |image: &str| {
        json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
               "metadata": {"name": "t", "namespace": "ci"},
               "spec": {"steps": [{"name": "s", "image": image}]}})
    };
    assert_eq!(
        status(&p, task("ghcr.io/tool:1")).unwrap().0,
        RuleStatus::Pass
    );
    assert_eq!(
        status(&p, task("docker.io/tool:1")),
        Some((
            RuleStatus::Fail,
            "untrusted step images: docker.io/tool:1".into()
        ))
    );
}

#[test]
fn json_payloads_read_images_from_the_policy_extractors() {
    let doc: ImageValidatingPolicyDoc = serde_saphyr::from_str(
        "apiVersion: policies.kyverno.io/v1beta1
kind: ImageValidatingPolicy
metadata: {name: json}
spec:
  evaluation: {mode: JSON}
  validationConfigurations: {required: false}
  attestors: []
  matchImageReferences:
  - expression: \"ref.startsWith('ghcr.io/')\"
  images:
  - {name: all, expression: 'object.images'}
  validations: [{expression: 'true'}]
",
    )
    .unwrap();
    let p = CompiledImageValidatingPolicy::compile(&doc).unwrap();
    let rule = |payload: Value| {
        evaluate_image_validating_policy_on_json(&p, &payload, &NoResolver)
            .rules
            .first()
            .map(|r| (r.status, r.message.to_string()))
    };
    assert_eq!(
        rule(json!({"images": ["nginx", "ghcr.io/app:1"]})),
        Some((
            RuleStatus::Fail,
            "image ghcr.io/app:1 does not have a digest".into()
        ))
    );
    assert_eq!(
        rule(json!({"images": ["nginx"]})),
        Some((RuleStatus::Pass, "success".into()))
    );
    let (status, message) = rule(json!({"images": "nginx"})).unwrap();
    assert_eq!(status, RuleStatus::Error);
    assert!(message.contains("to '[]string'"), "{message}");
}
