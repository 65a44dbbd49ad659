//! validate.manifests compiled: keys of each type, Kyverno's expansion of
//! several PEM keys in one entry, the patterns of ignored fields and of
//! the objects they apply to, and the documents refused.

use super::*;
use rcgen::{KeyPair, SigningKey as _};
use serde_json::json;

/// A 2048-bit RSA public key (rcgen makes no RSA keys with ring).
const RSA_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAruIz8Zt9wNNi0biYyX4i
i2oF1HU+I1O1Q4/3p8qL4eLDEkGor6coZL/K8khsROL7REmx/NM7bhG2FvC62RB2
qC++6OKoniCQ8a5J0rS1vuxPO19Bu4AWoxXgUruRLr0Vbyzj14U+wqZw03xuRZxc
GJxrCsjVKisnXiqJEGCGFN+tFpER1Dn6jquM3/oXOnfyvIwbmYNHWu5LPxVFX8eN
5kaOWbW6J6AtXZwkPUlVF0IfeEmBmAfxjh7b4GAFAojrwQx5CZLtfBmckSg3vtwO
ff4JExHvIqgXxcNNZRRlpuUragvj1yqZ8kVv10ptLw5KS+uyCDAKMWkcB43Z2Fmi
7wIDAQAB
-----END PUBLIC KEY-----";

fn compile(doc: serde_json::Value) -> Result<ManifestsRule, String> {
    ManifestsRule::compile(&doc, "spec.rules[0].validate.manifests")
}

#[test]
fn public_keys_of_each_type_verify_their_signatures() {
    for alg in [&rcgen::PKCS_ECDSA_P256_SHA256, &rcgen::PKCS_ED25519] {
        let pair = KeyPair::generate_for(alg).unwrap();
        let key = PublicKey::from_pem(&pair.public_key_pem()).unwrap();
        let sig = pair.sign(b"message").unwrap();
        assert!(key.verifies(b"message", &sig));
        assert!(!key.verifies(b"massage", &sig));
        assert!(!key.verifies(b"message", b"junk"));
    }
    let rsa = PublicKey::from_pem(RSA_PUBLIC).unwrap();
    assert_eq!(rsa.mismatch, "crypto/rsa: verification error");
    assert!(!rsa.verifies(b"message", &[0u8; 256]));
    assert!(
        PublicKey::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----").is_err()
    );
    assert!(PublicKey::from_pem("no pem").is_err());
}

#[test]
fn several_keys_in_one_entry_become_entries_as_in_kyverno() {
    let a = KeyPair::generate().unwrap().public_key_pem();
    let b = KeyPair::generate().unwrap().public_key_pem();
    let two = format!("{}\n{}", a.trim(), b.trim());
    let m = compile(json!({"attestors": [{"entries": [
        {"keys": {"publicKeys": two}},
        {"keys": {"publicKeys": a.trim()}},
    ]}]}))
    .unwrap();
    let entries = &m.attestor_sets[0].entries;
    assert_eq!(entries.len(), 3);
    assert_eq!(m.attestor_sets[0].required_count(), 3);
    // The second key of the split starts with a line break: Kyverno reads
    // no key in it.
    assert!(matches!(entries[0].verifier, Verifier::Key(_)));
    assert!(matches!(entries[1].verifier, Verifier::UnknownKey));
    assert!(matches!(entries[2].verifier, Verifier::Key(_)));
}

#[test]
fn counts_nested_sets_and_unsupported_attestors_compile() {
    let m = compile(json!({"attestors": [{"count": 1, "entries": [
        {"attestor": {"entries": [{"keys": {"publicKeys": RSA_PUBLIC}}]}},
        {"attestor": {"entries": "not a list"}},
        {"keyless": {"subject": "s"}},
        {"keys": {"publicKeys": "-----BEGIN PGP PUBLIC KEY BLOCK-----\nx"}},
    ]}]}))
    .unwrap();
    let set = &m.attestor_sets[0];
    assert_eq!(set.required_count(), 1);
    assert!(matches!(&set.entries[0].verifier, Verifier::Nested(Ok(s)) if s.entries.len() == 1));
    assert!(matches!(&set.entries[1].verifier, Verifier::Nested(Err(_))));
    assert_eq!(set.entries[2].sub_path(), ".keyless");
    assert!(
        matches!(&set.entries[3].verifier, Verifier::Unsupported { reason, .. } if reason.contains("PGP"))
    );
    // Unknown fields are refused with their path.
    let err =
        compile(json!({"attestors": [{"entries": [{"keys": {"publicKey": "x"}}]}]})).unwrap_err();
    assert!(
        err.starts_with("spec.rules[0].validate.manifests.attestors[0].entries[0].keys"),
        "{err}"
    );
    assert!(compile(json!({"dryRun": {"enabled": true}})).is_err());
}

#[test]
fn ignored_fields_match_as_k8s_manifest_sigstore_matches_them() {
    // The filter appends `*` and matches anywhere in the key, `.` any
    // character: Kyverno's `spec.dnsPolicy` covers a Pod template's too.
    let dns = FieldPattern::new("spec.dnsPolicy");
    assert!(dns.filters("spec.dnsPolicy"));
    assert!(dns.filters("spec.template.spec.dnsPolicy"));
    assert!(!dns.filters("spec.dns"));
    // The value search's mask is exact unless the field holds `*`.
    assert!(dns.masks("spec.dnsPolicy"));
    assert!(!dns.masks("spec.template.spec.dnsPolicy"));
    let managed = FieldPattern::new("metadata.managedFields.*");
    assert!(managed.masks("metadata.managedFields.0"));
    // A field that is no valid pattern matches only itself.
    let broken = FieldPattern::new("data.(");
    assert!(broken.masks("data.("));
    assert!(!broken.filters("data.(x"));

    let m = compile(json!({"ignoreFields": [
        {"objects": [{"kind": "ConfigMap", "name": "app-*"}], "fields": ["data.stamp"]},
    ]}))
    .unwrap();
    let texts = |fields: Vec<&FieldPattern>| -> Vec<String> {
        fields.iter().map(|f| f.text.clone()).collect()
    };
    let for_app = texts(m.ignored_for("v1", "ConfigMap", "app-1", "apps"));
    assert!(for_app.contains(&"data.stamp".to_string()));
    assert!(for_app.contains(&"metadata.annotations.cosign.sigstore.dev/signature*".to_string()));
    assert!(
        !texts(m.ignored_for("v1", "ConfigMap", "db", "apps")).contains(&"data.stamp".to_string())
    );
    // Service defaults apply to Services only; the Route binding needs its group.
    assert!(
        texts(m.ignored_for("v1", "Service", "s", "apps")).contains(&"spec.clusterIP".to_string())
    );
    assert!(
        !texts(m.ignored_for("v1", "Pod", "p", "apps")).contains(&"spec.clusterIP".to_string())
    );
    assert!(
        texts(m.ignored_for("route.openshift.io/v1", "Route", "r", ""))
            .contains(&"spec.host".to_string())
    );
    assert!(!texts(m.ignored_for("v1", "Route", "r", "")).contains(&"spec.host".to_string()));
    // Object patterns: lists, prefixes, `-` for none.
    let p = ObjectPattern {
        kind: "ConfigMap, Secret".into(),
        namespace: "-".into(),
        ..Default::default()
    };
    assert!(p.matches("", "v1", "Secret", "s", ""));
    assert!(!p.matches("", "v1", "Secret", "s", "apps"));
    assert!(!p.matches("", "v1", "Pod", "s", ""));
}

#[test]
fn a_domain_of_the_rules_own_masks_its_annotations() {
    let m = compile(json!({"annotationDomain": "sign.example.com", "attestors": []})).unwrap();
    assert_eq!(m.annotation_domain, "sign.example.com");
    let fields = m.ignored_for("v1", "ConfigMap", "c", "");
    assert!(
        fields
            .iter()
            .any(|f| f.filters("metadata.annotations.sign.example.com/signature_1"))
    );
}
