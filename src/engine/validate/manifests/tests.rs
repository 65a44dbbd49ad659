//! validate.manifests on manifests signed here as k8s-manifest-sigstore
//! signs them (a gzipped tar of YAML or the YAML itself, gzipped and in
//! base64, signed with ECDSA P-256): Kyverno's messages for a pass, a
//! difference, a missing message or signature and a foreign key; the
//! comparison's rules (ignored fields, list order, empty strings, images);
//! and input that must give an error, not a panic or a pass.

use super::diff::{Leaf, diff, to_json};
use super::message::{FetchError, candidates, manifests_in_message};
use crate::engine::json_context::Builtins;
use crate::engine::validate::evaluate_policy;
use crate::engine::{EvalEnv, PolicyResponse, Request, RuleStatus};
use crate::matching::UserInfo;
use crate::policy::CompiledPolicy;
use crate::policy::load::{LoadedDocument, load_policy_text};
use crate::policy::manifests::FieldPattern;
use base64::Engine as _;
use rcgen::{KeyPair, SigningKey as _};
use serde_json::{Value, json};
use std::io::Write;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, name, *data).unwrap();
    }
    gzip(&builder.into_inner().unwrap())
}

/// The resource with `manifest` signed into its annotations by `keys`.
fn signed(manifest: &Value, resource: &Value, keys: &[&KeyPair], tar: bool) -> Value {
    let yaml = serde_json::to_string_pretty(manifest).unwrap();
    let message = if tar {
        tar_gz(&[("manifest/resource.yaml", yaml.as_bytes())])
    } else {
        yaml.into_bytes()
    };
    let mut out = resource.clone();
    let annotations = out["metadata"]
        .as_object_mut()
        .unwrap()
        .entry("annotations")
        .or_insert(json!({}));
    annotations["cosign.sigstore.dev/message"] = json!(b64(&gzip(&message)));
    for (i, key) in keys.iter().enumerate() {
        let name = match i {
            0 => "cosign.sigstore.dev/signature".to_string(),
            i => format!("cosign.sigstore.dev/signature_{i}"),
        };
        annotations[name] = json!(b64(&key.sign(&message).unwrap()));
    }
    out
}

/// A ConfigMap signed at level info by `key`, then changed to debug.
fn tampered(key: &KeyPair) -> Value {
    signed(
        &configmap("cm", "info"),
        &configmap("cm", "debug"),
        &[key],
        true,
    )
}

fn configmap(name: &str, level: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "apps"},
           "data": {"level": level}})
}

fn indent(text: &str, spaces: usize) -> String {
    text.trim()
        .lines()
        .map(|l| format!("{}{l}", " ".repeat(spaces)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn policy(manifests: &str) -> CompiledPolicy {
    let yaml = format!(
        "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: signed}}
spec:
  rules:
  - name: verify
    match: {{any: [{{resources: {{kinds: [ConfigMap, Deployment]}}}}]}}
    validate:
      failureAction: Enforce
      manifests:
{}
",
        indent(manifests, 8)
    );
    let docs = load_policy_text("test.yaml", &yaml).unwrap();
    match docs.into_iter().next().unwrap() {
        LoadedDocument::Policy(p) => CompiledPolicy::compile(&p).unwrap(),
        _ => panic!("not a policy"),
    }
}

/// One entry per key, all required unless `count` says otherwise.
fn keys_policy(keys: &[&KeyPair], count: Option<usize>) -> CompiledPolicy {
    let entries: Vec<String> = keys
        .iter()
        .map(|k| {
            format!(
                "  - keys:\n      publicKeys: |-\n{}",
                indent(&k.public_key_pem(), 8)
            )
        })
        .collect();
    let count = count.map_or(String::new(), |c| format!("count: {c}\n  "));
    policy(&format!(
        "attestors:\n- {count}entries:\n{}",
        entries.join("\n")
    ))
}

/// One entry with `key`, after the manifests options `options`.
fn key_policy_with(options: &str, key: &KeyPair) -> CompiledPolicy {
    policy(&format!(
        "{options}attestors:\n- entries:\n  - keys:\n      publicKeys: |-\n{}",
        indent(&key.public_key_pem(), 8)
    ))
}

fn run_as(p: &CompiledPolicy, req: &Request) -> Vec<(RuleStatus, String)> {
    let ctx = req.json_context(Builtins::default());
    let env = EvalEnv {
        resolver: &crate::context::NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let r: PolicyResponse = evaluate_policy(p, req, &ctx, &env);
    r.rules
        .iter()
        .map(|r| (r.status, r.message.to_string()))
        .collect()
}

fn run(p: &CompiledPolicy, resource: &Value) -> Vec<(RuleStatus, String)> {
    run_as(
        p,
        &Request::offline(resource, "CREATE", UserInfo::default(), None),
    )
}

fn one(p: &CompiledPolicy, resource: &Value) -> (RuleStatus, String) {
    let mut all = run(p, resource);
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

const PASSED_ONE: &str = "verified manifest signatures; manifest verification succeeded; \
                          verifiedCount 1; requiredCount 1; message singed by a valid signer: ";

#[test]
fn a_resource_signed_as_it_is_passes_in_both_message_forms() {
    let key = KeyPair::generate().unwrap();
    let p = keys_policy(&[&key], None);
    let cm = configmap("cm", "info");
    for tar in [true, false] {
        assert_eq!(
            one(&p, &signed(&cm, &cm, &[&key], tar)),
            (RuleStatus::Pass, PASSED_ONE.into()),
            "tar: {tar}"
        );
    }
}

#[test]
fn a_change_after_signing_fails_with_the_difference() {
    let key = KeyPair::generate().unwrap();
    let p = keys_policy(&[&key], None);
    let tampered = tampered(&key);
    assert_eq!(
        one(&p, &tampered),
        (
            RuleStatus::Fail,
            "manifest verification failed; verifiedCount 0; requiredCount 1; message \
             .attestors[0].entries[0].keys: failed to verify signature. diff found; \
             {\"items\":[{\"key\":\"data.level\",\"values\":{\"after\":\"debug\",\"before\":\"info\"}}]}"
                .into()
        )
    );
}

#[test]
fn no_message_or_no_signature_fails_and_a_foreign_key_is_an_error() {
    let key = KeyPair::generate().unwrap();
    let other = KeyPair::generate().unwrap();
    let p = keys_policy(&[&key], None);
    let cm = configmap("cm", "info");
    assert_eq!(
        one(&p, &cm),
        (
            RuleStatus::Fail,
            "manifest verification failed; verifiedCount 0; requiredCount 1; message \
             .attestors[0].entries[0].keys: YAML manifest not found for this resource: message \
             not found"
                .into()
        )
    );
    let unsigned = signed(&cm, &cm, &[], true);
    assert_eq!(
        one(&p, &unsigned),
        (
            RuleStatus::Fail,
            "manifest verification failed; verifiedCount 0; requiredCount 1; message \
             .attestors[0].entries[0].keys: failed to verify signature: signature not found"
                .into()
        )
    );
    assert_eq!(
        one(&p, &signed(&cm, &cm, &[&other], true)),
        (
            RuleStatus::Error,
            "error occurred during manifest verification: .attestors[0].entries[0].keys: failed \
             to verify signature: verification failed for 1 signature. all trials: [\"[publickey \
             1/1] [signature 1/1] error: cosign.VerifyBlobCmd.Exec() returned an error: invalid \
             signature when validating ASN.1 encoded signature\"]"
                .into()
        )
    );
    // A manifest of another kind is no manifest of this resource.
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "cm"}, "spec": {}});
    assert_eq!(
        one(&p, &signed(&deployment, &cm, &[&key], true)).1,
        "manifest verification failed; verifiedCount 0; requiredCount 1; message \
         .attestors[0].entries[0].keys: YAML manifest not found for this resource: failed to \
         find a YAML manifest in the gzipped message"
    );
}

#[test]
fn counts_decide_how_many_entries_must_verify() {
    let a = KeyPair::generate().unwrap();
    let b = KeyPair::generate().unwrap();
    let cm = configmap("cm", "info");
    let by_b = signed(&cm, &cm, &[&b], true);
    // One of two: the first entry's error does not count once the second
    // verifies.
    assert_eq!(
        one(&keys_policy(&[&a, &b], Some(1)), &by_b).0,
        RuleStatus::Pass
    );
    // Both: an entry's error is the rule's error.
    let (status, message) = one(&keys_policy(&[&a, &b], None), &by_b);
    assert_eq!(status, RuleStatus::Error);
    assert!(message.starts_with("error occurred during manifest verification: .attestors[0].entries[0].keys: failed to verify signature"), "{message}");
    // Signed by both: every signature set is tried with each key.
    let by_both = signed(&cm, &cm, &[&a, &b], true);
    assert_eq!(
        one(&keys_policy(&[&a, &b], None), &by_both),
        (
            RuleStatus::Pass,
            "verified manifest signatures; manifest verification succeeded; verifiedCount 2; \
             requiredCount 2; message singed by a valid signer: ,singed by a valid signer: "
                .into()
        )
    );
}

#[test]
fn dry_runs_and_deletes_are_not_verified_and_the_api_server_dry_run_is_unsupported() {
    let key = KeyPair::generate().unwrap();
    let p = keys_policy(&[&key], None);
    let tampered = tampered(&key);
    let mut req = Request::offline(&tampered, "CREATE", UserInfo::default(), None);
    req.dry_run = true;
    assert_eq!(
        run_as(&p, &req),
        [(
            RuleStatus::Pass,
            "allowed because of DryRun request".to_string()
        )]
    );
    let delete = Request::offline(&tampered, "DELETE", UserInfo::default(), None);
    assert!(run_as(&p, &delete).is_empty());
    // dryRun.enable: offline, as Kyverno's CLI, the direct comparison
    // decides; at admission the dry-run create it would need is refused.
    let with_dry_run = key_policy_with("dryRun: {enable: true}\n", &key);
    assert_eq!(one(&with_dry_run, &tampered).0, RuleStatus::Fail);
    let mut admission = Request::offline(&tampered, "CREATE", UserInfo::default(), None);
    admission.from_review = true;
    assert_error_naming(
        run_as(&with_dry_run, &admission).remove(0),
        "unsupported: validate.manifests.dryRun",
    );
}

fn assert_error_naming((status, message): (RuleStatus, String), words: &str) {
    assert_eq!(status, RuleStatus::Error, "{message}");
    assert!(message.contains(words), "{message}");
}

#[test]
fn attestors_that_need_a_registry_or_transparency_log_are_errors_not_passes() {
    let key = KeyPair::generate().unwrap();
    let cm = configmap("cm", "info");
    let signed_cm = signed(&cm, &cm, &[&key], true);
    for (attestor, wanted) in [
        (
            "keyless: {subject: 'x@example.com', issuer: 'https://accounts.example.com'}",
            ".attestors[0].entries[0].keyless: unsupported offline: keyless attestors",
        ),
        (
            "certificates: {cert: 'x'}",
            ".attestors[0].entries[0].certificates: unsupported offline",
        ),
        (
            "keys: {publicKeys: 'k8s://kyverno/signing-key'}",
            "unsupported offline: the key reference \"k8s://kyverno/signing-key\"",
        ),
    ] {
        let p = policy(&format!("attestors:\n- entries:\n  - {attestor}"));
        assert_error_naming(one(&p, &signed_cm), wanted);
    }
    let p = key_policy_with("repository: ghcr.io/acme/manifests:1\n", &key);
    assert_error_naming(
        one(&p, &signed_cm),
        "unsupported offline: the signed manifest is in the OCI image \"ghcr.io/acme/manifests:1\"",
    );
}

#[test]
fn fields_the_cluster_sets_and_canonical_images_are_no_difference() {
    let key = KeyPair::generate().unwrap();
    let p = keys_policy(&[&key], None);
    let manifest = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {"replicas": 2, "template": {"spec": {
            "containers": [{"name": "a", "image": "nginx:1.27"}, {"name": "b", "image": "busybox"}]}}}});
    let mut applied = manifest.clone();
    applied["metadata"]["uid"] = json!("u-1");
    applied["metadata"]["generation"] = json!(3);
    applied["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "2"});
    applied["status"] = json!({"replicas": 2});
    applied["spec"]["progressDeadlineSeconds"] = json!(600);
    // dnsPolicy under the template: Kyverno's `spec.dnsPolicy` matches it
    // anywhere in the key.
    applied["spec"]["template"]["spec"]["dnsPolicy"] = json!("ClusterFirst");
    // The images in their canonical form.
    applied["spec"]["template"]["spec"]["containers"] = json!([
        {"name": "a", "image": "docker.io/nginx:1.27"}, {"name": "b", "image": "busybox:latest"}]);
    let resource = signed(&manifest, &applied, &[&key], true);
    let (status, message) = one(&p, &resource);
    assert_eq!(status, RuleStatus::Pass, "{message}");
    // A replica count the cluster did not set is a difference.
    let mut scaled = resource.clone();
    scaled["spec"]["replicas"] = json!(5);
    let (status, message) = one(&p, &scaled);
    assert_eq!(status, RuleStatus::Fail);
    assert!(
        message.ends_with(
            "diff found; {\"items\":[{\"key\":\"spec.replicas\",\"values\":{\"after\":5,\"before\":2}}]}"
        ),
        "{message}"
    );
}

#[test]
fn an_attestors_annotations_must_be_the_resources() {
    let key = KeyPair::generate().unwrap();
    let p = policy(&format!(
        "attestors:\n- entries:\n  - annotations: {{team: payments}}\n    keys:\n      publicKeys: |-\n{}",
        indent(&key.public_key_pem(), 8)
    ));
    let mut cm = configmap("cm", "info");
    cm["metadata"]["annotations"] = json!({"team": "search"});
    assert_eq!(
        one(&p, &signed(&cm, &cm, &[&key], true)),
        (
            RuleStatus::Error,
            "error occurred during manifest verification: annotations mismatch: search does not \
             match expected value payments for key team"
                .into()
        )
    );
}

#[test]
fn the_diff_reads_values_as_the_library_does() {
    // A field only at another index of a list is no difference; elements
    // in another order are.
    assert!(diff(&json!({"l": [{"a": 1}, {}]}), &json!({"l": [{}, {"a": 1}]})).is_empty());
    assert_eq!(
        diff(
            &json!({"l": [{"a": 1}, {"a": 2}]}),
            &json!({"l": [{"a": 2}, {"a": 1}]})
        )
        .len(),
        2
    );
    let items = diff(
        &json!({"a": "", "b": 0, "c": "1", "d": [{"x": 1}], "e": true}),
        &json!({"b": null, "c": 1, "d": [], "e": false, "f": {}}),
    );
    // "" and a missing key are the same; 0 and a missing key are not; a
    // string and a number are a type difference.
    let keys: Vec<(&str, Option<Leaf>, Option<Leaf>)> = items
        .iter()
        .map(|d| (d.key.as_str(), d.before.clone(), d.after.clone()))
        .collect();
    assert_eq!(
        keys,
        [
            ("b", Some(Leaf::Num(0.0)), None),
            (
                "c",
                Some(Leaf::Str("(type: string) 1".into())),
                Some(Leaf::Str("(type: float64) %!s(float64=1)".into()))
            ),
            ("d.0.x", Some(Leaf::Num(1.0)), None),
            ("e", Some(Leaf::Bool(true)), Some(Leaf::Bool(false))),
        ]
    );
    assert_eq!(
        to_json(&items[..1]),
        r#"{"items":[{"key":"b","values":{"after":null,"before":0}}]}"#
    );
}

#[test]
fn candidates_are_found_by_name_then_by_values() {
    let manifests = vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}, "data": {"k": "1"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "apps"}, "data": {"k": "2"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"k": "3", "long": "a distinctive value"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}}),
    ];
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "a", "namespace": "apps"}, "data": {"k": "9"}});
    let ignored: Vec<FieldPattern> = vec![];
    let refs: Vec<&FieldPattern> = ignored.iter().collect();
    assert_eq!(
        candidates(&manifests, &object, &refs).unwrap(),
        [&manifests[1]]
    );
    // No name in common: the manifest sharing the most values.
    let renamed = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "z"}, "data": {"k": "3", "long": "a distinctive value"}});
    assert_eq!(
        candidates(&manifests, &renamed, &refs).unwrap(),
        [&manifests[2]]
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}});
    assert!(matches!(
        candidates(&manifests, &pod, &refs),
        Err(FetchError::NotFound(_))
    ));
}

#[test]
fn broken_or_oversized_messages_are_errors() {
    // Not base64.
    assert_eq!(
        manifests_in_message("not base64!"),
        Err(FetchError::Failed(
            "failed to decode base64 message in the annotation: illegal base64 data at input byte 3"
                .into()
        ))
    );
    // Neither YAML nor a gzipped tar.
    let Err(FetchError::Failed(e)) = manifests_in_message(&b64(&gzip(&[0xff, 0xfe, 0x00]))) else {
        panic!("binary junk was read");
    };
    assert!(e.contains("gzip.NewReader() failed"), "{e}");
    // A symlink in the tar is refused as the library refuses it.
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_size(0);
    builder
        .append_link(&mut header, "manifest/link.yaml", "/etc/passwd")
        .unwrap();
    let Err(FetchError::Failed(e)) =
        manifests_in_message(&b64(&gzip(&gzip(&builder.into_inner().unwrap()))))
    else {
        panic!("a symlink was read");
    };
    assert!(
        e.contains("faced uknown type 2 in manifest/link.yaml"),
        "{e}"
    );
    // Files that are not YAML, or not Kubernetes objects, or outside the
    // archive, are left out.
    let tarred = tar_gz(&[
        ("m/readme.txt", b"apiVersion: v1\nkind: ConfigMap\n"),
        ("m/list.yaml", b"- 1\n- 2\n"),
        (
            "m/cm.yml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
        ),
    ]);
    let found = manifests_in_message(&b64(&gzip(&tarred))).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["metadata"]["name"], "a");
    // A compression bomb stops at the limit with an error.
    let zeros = vec![0u8; 17 << 20];
    let Err(FetchError::Failed(e)) = manifests_in_message(&b64(&gzip(&zeros))) else {
        panic!("a bomb was read");
    };
    assert!(e.contains("decompresses to more than 16 MiB"), "{e}");
}
