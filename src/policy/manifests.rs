//! `validate.manifests` of a ClusterPolicy or Policy rule, compiled: the
//! attestor sets whose keys must have signed the resource's manifest, and
//! the fields its comparison with the signed manifest ignores.
//!
//! The signatures are those of sigstore's k8s-manifest-sigstore (`kubectl
//! sigstore sign`), which Kyverno verifies with that library: the signed
//! manifest travels in the resource's own annotations, so a static key
//! verifies it offline. What needs more than the resource and a key (an
//! OCI resource bundle, keyless or certificate signatures, key references
//! to Secrets or KMS, PGP keys) is kept as the reason it cannot be
//! evaluated, and the rule answers an error naming it when it gets there.

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;
use std::sync::LazyLock;

/// The annotation domain signatures are read from unless the rule names
/// another (`cosign.sigstore.dev/message`, `cosign.sigstore.dev/signature`).
pub const DEFAULT_ANNOTATION_DOMAIN: &str = "cosign.sigstore.dev";

/// A rule's `validate.manifests`.
#[derive(Debug, Clone)]
pub struct ManifestsRule {
    pub attestor_sets: Vec<AttestorSet>,
    /// `annotationDomain`, else [`DEFAULT_ANNOTATION_DOMAIN`].
    pub annotation_domain: String,
    /// The fields the comparison ignores, by the objects they apply to: the
    /// defaults of k8s-manifest-sigstore and of Kyverno, the rule's
    /// `ignoreFields`, then the signature annotations themselves.
    pub ignore_fields: Vec<FieldBinding>,
    /// `dryRun.enable`: compare with the manifest as the API server would
    /// create it when the direct comparison finds differences.
    pub dry_run: bool,
    /// `repository`: the manifest is in an OCI image, not an annotation.
    pub repository: Option<String>,
}

/// One `attestors[]` set: `count` of its entries must verify (all when
/// unset or 0).
#[derive(Debug, Clone)]
pub struct AttestorSet {
    pub count: Option<i64>,
    pub entries: Vec<Attestor>,
}

impl AttestorSet {
    /// Kyverno's `RequiredCount`.
    pub fn required_count(&self) -> usize {
        match self.count {
            None | Some(0) => self.entries.len(),
            Some(n) => usize::try_from(n).unwrap_or(0),
        }
    }
}

/// One entry of an attestor set.
#[derive(Debug, Clone)]
pub struct Attestor {
    /// `annotations` the resource must carry with these values, sorted.
    pub annotations: Vec<(String, String)>,
    /// `repository`: a resource bundle image for this entry.
    pub repository: Option<String>,
    pub verifier: Verifier,
}

impl Attestor {
    /// What Kyverno appends to the entry's path in its messages.
    pub fn sub_path(&self) -> &'static str {
        match &self.verifier {
            Verifier::Key(_) | Verifier::UnknownKey => ".keys",
            Verifier::Unsupported { sub_path, .. } => sub_path,
            Verifier::Nested(_) => "",
        }
    }
}

/// How an entry verifies a signature.
#[derive(Debug, Clone)]
pub enum Verifier {
    /// `keys.publicKeys` holding one PEM public key.
    Key(PublicKey),
    /// `keys.publicKeys` that no signature type reads (Kyverno: "failed to
    /// judge signature type from public key configuration").
    UnknownKey,
    /// What gavel cannot verify, and why.
    Unsupported {
        sub_path: &'static str,
        reason: String,
    },
    /// `attestor`: a nested attestor set, or why it does not parse.
    Nested(Result<Box<AttestorSet>, String>),
}

/// A PEM public key with the algorithm cosign verifies blobs with for it
/// (SHA-256 for every key type, as `LoadVerifier(key, crypto.SHA256)`).
#[derive(Clone)]
pub struct PublicKey {
    algorithm: &'static dyn ring::signature::VerificationAlgorithm,
    key: Vec<u8>,
    /// What a signature that does not verify reports, as the verifier of
    /// sigstore's `signature` package words it for this key type.
    pub mismatch: &'static str,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicKey")
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

impl PublicKey {
    /// Reads a `PUBLIC KEY` (SubjectPublicKeyInfo) or `RSA PUBLIC KEY`
    /// (PKCS #1) PEM block: ECDSA on P-256 or P-384, RSA, Ed25519.
    pub fn from_pem(text: &str) -> Result<PublicKey, String> {
        use x509_parser::prelude::FromDer;
        let (_, pem) = x509_parser::pem::parse_x509_pem(text.as_bytes())
            .map_err(|e| format!("not a PEM block: {e}"))?;
        let ecdsa_mismatch = "invalid signature when validating ASN.1 encoded signature";
        let rsa_mismatch = "crypto/rsa: verification error";
        match pem.label.as_str() {
            "RSA PUBLIC KEY" => Ok(PublicKey {
                algorithm: &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                key: pem.contents,
                mismatch: rsa_mismatch,
            }),
            "PUBLIC KEY" => {
                let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(&pem.contents)
                    .map_err(|e| format!("not a SubjectPublicKeyInfo: {e}"))?;
                let key = spki.subject_public_key.data.to_vec();
                let oid = spki.algorithm.algorithm.to_id_string();
                let (algorithm, mismatch): (
                    &'static dyn ring::signature::VerificationAlgorithm,
                    &'static str,
                ) = match oid.as_str() {
                    // id-ecPublicKey: the curve is the parameter.
                    "1.2.840.10045.2.1" => {
                        let curve = spki
                            .algorithm
                            .parameters
                            .as_ref()
                            .and_then(|p| p.as_oid().ok())
                            .map(|o| o.to_id_string())
                            .unwrap_or_default();
                        match curve.as_str() {
                            "1.2.840.10045.3.1.7" => {
                                (&ring::signature::ECDSA_P256_SHA256_ASN1, ecdsa_mismatch)
                            }
                            "1.3.132.0.34" => {
                                (&ring::signature::ECDSA_P384_SHA256_ASN1, ecdsa_mismatch)
                            }
                            other => return Err(format!("unsupported elliptic curve {other}")),
                        }
                    }
                    "1.2.840.113549.1.1.1" => {
                        (&ring::signature::RSA_PKCS1_2048_8192_SHA256, rsa_mismatch)
                    }
                    "1.3.101.112" => (&ring::signature::ED25519, "failed to verify signature"),
                    other => return Err(format!("unsupported public key algorithm {other}")),
                };
                Ok(PublicKey {
                    algorithm,
                    key,
                    mismatch,
                })
            }
            other => Err(format!("a {other} PEM block is not a public key")),
        }
    }

    /// Whether `signature` is this key's signature of `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        ring::signature::UnparsedPublicKey::new(self.algorithm, &self.key)
            .verify(message, signature)
            .is_ok()
    }
}

/// One `ignoreFields[]` entry: fields, and the objects they apply to.
#[derive(Debug, Clone)]
pub struct FieldBinding {
    pub fields: Vec<FieldPattern>,
    /// Empty: every object.
    pub objects: Vec<ObjectPattern>,
}

/// An ignored field as k8s-manifest-sigstore matches it against the
/// dotted keys of a flattened object (`spec.ports.0.nodePort`): equal, or
/// `*` or empty, or, when it holds `*`, as a regular expression with `*`
/// read as `.*` that may match anywhere in the key (Go's unanchored
/// `regexp.MatchString`, whose `.` also matches any character).
#[derive(Debug, Clone)]
pub struct FieldPattern {
    pub text: String,
    /// The pattern with `*` appended, as the comparison's filter uses it.
    filter: Option<Regex>,
    /// The pattern itself, when it holds `*`.
    mask: Option<Regex>,
}

impl FieldPattern {
    pub fn new(text: &str) -> FieldPattern {
        let regex = |p: &str| Regex::new(&p.replace('*', ".*")).ok();
        FieldPattern {
            text: text.to_string(),
            filter: regex(&format!("{text}*")),
            mask: text.contains('*').then(|| regex(text)).flatten(),
        }
    }

    /// Whether a difference at `key` is filtered out of the comparison.
    pub fn filters(&self, key: &str) -> bool {
        self.text.is_empty() || self.filter.as_ref().is_some_and(|r| r.is_match(key))
    }

    /// Whether the subtree at `key` is masked out of the value search.
    pub fn masks(&self, key: &str) -> bool {
        self.text == key
            || self.text == "*"
            || self.text.is_empty()
            || self.mask.as_ref().is_some_and(|r| r.is_match(key))
    }
}

/// An `objects[]` entry of an ignore-field binding: each field a pattern
/// (empty or `*` for any, a trailing `*` for a prefix, commas for a list).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectPattern {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

impl ObjectPattern {
    /// k8s-manifest-sigstore's `ObjectReference.Match`.
    pub fn matches(&self, group: &str, version: &str, kind: &str, name: &str, ns: &str) -> bool {
        [
            (&self.group, group),
            (&self.version, version),
            (&self.kind, kind),
            (&self.name, name),
            (&self.namespace, ns),
        ]
        .iter()
        .all(|(pattern, value)| object_pattern_matches(pattern, value))
    }
}

/// k8s-manifest-sigstore's `MatchPattern`.
fn object_pattern_matches(pattern: &str, value: &str) -> bool {
    let single = |pattern: &str| {
        let pattern = pattern.trim();
        pattern.is_empty()
            || pattern == "*"
            || (pattern == "-" && value.is_empty())
            || pattern
                .strip_suffix('*')
                .is_some_and(|prefix| value.starts_with(prefix.trim_end_matches('*')))
            || pattern == value
    };
    if single(pattern) {
        return true;
    }
    pattern.contains(',') && pattern.split(',').any(single)
}

impl FieldBinding {
    fn new(fields: &[&str], kinds: &[&str]) -> FieldBinding {
        FieldBinding {
            fields: fields.iter().map(|f| FieldPattern::new(f)).collect(),
            objects: kinds
                .iter()
                .map(|k| ObjectPattern {
                    kind: k.to_string(),
                    ..ObjectPattern::default()
                })
                .collect(),
        }
    }

    pub fn applies(&self, group: &str, version: &str, kind: &str, name: &str, ns: &str) -> bool {
        self.objects.is_empty()
            || self
                .objects
                .iter()
                .any(|o| o.matches(group, version, kind, name, ns))
    }
}

/// The default ignore fields of k8s-manifest-sigstore
/// (`pkg/k8smanifest/resources/default-config.yaml`) then Kyverno's
/// (`pkg/engine/resources/default-config.yaml`), in their order. The Route
/// binding of the first also names its group.
static DEFAULT_IGNORE_FIELDS: LazyLock<Vec<FieldBinding>> = LazyLock::new(|| {
    let mut route = FieldBinding::new(&["spec.host"], &[]);
    route.objects.push(ObjectPattern {
        kind: "Route".into(),
        group: "route.openshift.io".into(),
        ..ObjectPattern::default()
    });
    vec![
        // k8s-manifest-sigstore.
        FieldBinding::new(
            &[
                "metadata.annotations.cosign.sigstore.dev/resourceBundleRef",
                "metadata.annotations.cosign.sigstore.dev/signature",
                "metadata.annotations.cosign.sigstore.dev/message",
                "metadata.annotations.cosign.sigstore.dev/certificate",
                "metadata.annotations.cosign.sigstore.dev/bundle",
            ],
            &["*"],
        ),
        FieldBinding::new(
            &[
                "metadata.managedFields.*",
                "metadata.resourceVersion",
                "metadata.selfLink",
                "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration",
                "metadata.annotations.namespace",
                "metadata.creationTimestamp",
                "metadata.generation",
                "metadata.uid",
                "metadata.finalizers",
                "metadata.labels.app.kubernetes.io/instance",
                "status",
            ],
            &["*"],
        ),
        FieldBinding::new(
            &["secrets.*.name", "imagePullSecrets.*.name"],
            &["ServiceAccount"],
        ),
        FieldBinding::new(
            &[
                "spec.ports.*.nodePort",
                "spec.clusterIP",
                "spec.clusterIPs.0",
            ],
            &["Service"],
        ),
        FieldBinding::new(
            &["metadata.annotations.deployment.kubernetes.io/revision"],
            &["Deployment"],
        ),
        FieldBinding::new(
            &["metadata.annotations.deprecated.daemonset.template.generation"],
            &["DaemonSet"],
        ),
        route,
        // Kyverno.
        FieldBinding::new(
            &[
                "metadata.namespace",
                "spec.containers.*.imagePullPolicy",
                "spec.containers.*.terminationMessagePath",
                "spec.containers.*.terminationMessagePolicy",
                "spec.dnsPolicy",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.terminationGracePeriodSeconds",
                "metadata.labels.app.kubernetes.io/instance",
                "metadata.managedFields.*",
                "metadata.resourceVersion",
                "metadata.selfLink",
                "metadata.annotations.control-plane.alpha.kubernetes.io/leader",
                "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration",
                "metadata.finalizers*",
                "metadata.annotations.namespace",
                "metadata.annotations.deprecated.daemonset.template.generation",
                "metadata.creationTimestamp",
                "metadata.uid",
                "metadata.generation",
                "status",
                "metadata.annotations.deployment.kubernetes.io/revision",
            ],
            &["*"],
        ),
        FieldBinding::new(
            &[
                "spec.volumes.*.name",
                "spec.volumes.*.projected.*",
                "spec.volumes.*.configMap.defaultMode",
                "spec.containers.*.volumeMounts.*",
                "spec.tolerations.*",
                "spec.enableServiceLinks",
                "spec.preemptionPolicy",
                "spec.priority",
                "spec.serviceAccount",
            ],
            &["Pod"],
        ),
        FieldBinding::new(
            &[
                "spec.progressDeadlineSeconds",
                "spec.revisionHistoryLimit",
                "spec.strategy.*",
                "spec.template.metadata.creationTimestamp",
                "spec.containers.*.ports.*.protocol",
                "spec.containers.*.resources",
                "spec.securityContext",
            ],
            &["Deployment"],
        ),
        FieldBinding::new(
            &["spec.conversion.strategy", "spec.names.listKind"],
            &["CustomResourceDefinition"],
        ),
        FieldBinding::new(
            &[
                "spec.ports.*.nodePort",
                "spec.clusterIP",
                "spec.clusterIPs.0",
                "spec.sessionAffinity",
                "spec.type",
                "spec.ipFamilies.*",
                "spec.ipFamilyPolicy",
                "spec.internalTrafficPolicy",
            ],
            &["Service"],
        ),
        FieldBinding::new(
            &[
                "metadata.annotations.pod-policies.kyverno.io/autogen-controllers",
                "spec.failurePolicy",
                "spec.background",
                "spec.validationFailureAction",
            ],
            &["ClusterPolicy", "Policy"],
        ),
        FieldBinding::new(
            &["secrets.*.name", "imagePullSecrets.*.name"],
            &["ServiceAccount"],
        ),
    ]
});

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ManifestsDoc {
    #[serde(default)]
    attestors: Vec<AttestorSetDoc>,
    #[serde(default)]
    annotation_domain: String,
    #[serde(default)]
    ignore_fields: Vec<FieldBindingDoc>,
    #[serde(default)]
    dry_run: DryRunDoc,
    #[serde(default)]
    repository: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DryRunDoc {
    #[serde(default)]
    enable: bool,
    #[serde(default)]
    #[allow(dead_code)]
    namespace: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FieldBindingDoc {
    #[serde(default)]
    fields: Vec<String>,
    #[serde(default)]
    objects: Vec<ObjectPattern>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttestorSetDoc {
    #[serde(default)]
    count: Option<i64>,
    #[serde(default)]
    entries: Vec<AttestorDoc>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AttestorDoc {
    #[serde(default)]
    keys: Option<StaticKeysDoc>,
    #[serde(default)]
    certificates: Option<Value>,
    #[serde(default)]
    keyless: Option<Value>,
    #[serde(default)]
    attestor: Option<Value>,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    repository: String,
    #[serde(default)]
    #[allow(dead_code)]
    signature_algorithm: String,
}

/// `keys`: only `publicKeys` is read by Kyverno's manifest verification;
/// the other fields are declared so that the schema is checked.
#[allow(dead_code)]
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StaticKeysDoc {
    #[serde(default)]
    public_keys: String,
    #[serde(default)]
    signature_algorithm: String,
    #[serde(default)]
    kms: String,
    #[serde(default)]
    secret: Option<Value>,
    #[serde(default)]
    rekor: Option<Value>,
    #[serde(default)]
    ctlog: Option<Value>,
}

const PUBLIC_KEY_START: &str = "-----BEGIN PUBLIC KEY-----";
const PUBLIC_KEY_END: &str = "-----END PUBLIC KEY-----";
const PGP_KEY_START: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";

impl ManifestsRule {
    /// Compiles `validate.manifests`; an error names the field.
    pub fn compile(raw: &Value, field: &str) -> Result<ManifestsRule, String> {
        let doc: ManifestsDoc = serde_path_to_error::deserialize(raw)
            .map_err(|e| format!("{field}.{}: {}", e.path(), e.inner()))?;
        let annotation_domain = if doc.annotation_domain.is_empty() {
            DEFAULT_ANNOTATION_DOMAIN.to_string()
        } else {
            doc.annotation_domain
        };
        let mut ignore_fields = DEFAULT_IGNORE_FIELDS.clone();
        ignore_fields.extend(doc.ignore_fields.iter().map(|b| FieldBinding {
            fields: b.fields.iter().map(|f| FieldPattern::new(f)).collect(),
            objects: b.objects.clone(),
        }));
        // The signature annotations of the rule's domain, with any index
        // suffix (`signature_1`).
        let masks: Vec<String> = ["message", "signature", "certificate", "bundle"]
            .iter()
            .chain(&["resourceBundleRef"])
            .map(|name| format!("metadata.annotations.{annotation_domain}/{name}*"))
            .collect();
        let masks: Vec<&str> = masks.iter().map(String::as_str).collect();
        ignore_fields.push(FieldBinding::new(&masks, &["*"]));
        Ok(ManifestsRule {
            attestor_sets: doc.attestors.iter().map(attestor_set).collect(),
            annotation_domain,
            ignore_fields,
            dry_run: doc.dry_run.enable,
            repository: Some(doc.repository).filter(|r| !r.is_empty()),
        })
    }

    /// The fields ignored for an object of this kind, name and namespace.
    pub fn ignored_for(
        &self,
        api_version: &str,
        kind: &str,
        name: &str,
        namespace: &str,
    ) -> Vec<&FieldPattern> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        self.ignore_fields
            .iter()
            .filter(|b| b.applies(group, version, kind, name, namespace))
            .flat_map(|b| &b.fields)
            .collect()
    }
}

/// An attestor set with Kyverno's `ExpandStaticKeys`: an entry whose
/// `publicKeys` holds several PEM keys becomes one entry per key.
fn attestor_set(doc: &AttestorSetDoc) -> AttestorSet {
    let mut entries = Vec::new();
    for entry in &doc.entries {
        if let Some(keys) = &entry.keys {
            // kyverno-compat: split after each END line; every key but the
            // first then starts with the line break before its BEGIN line,
            // which Kyverno no longer reads as a PEM key (a key reference
            // no signature type loads).
            // (Go's SplitAfter less its last piece, which follows the
            // last END line.)
            let pieces: Vec<&str> = keys
                .public_keys
                .split_inclusive(PUBLIC_KEY_END)
                .filter(|p| p.ends_with(PUBLIC_KEY_END))
                .collect();
            if pieces.len() > 1 {
                for piece in pieces {
                    entries.push(attestor(entry, Some(piece)));
                }
                continue;
            }
        }
        entries.push(attestor(entry, None));
    }
    AttestorSet {
        count: doc.count,
        entries,
    }
}

fn attestor(doc: &AttestorDoc, public_keys: Option<&str>) -> Attestor {
    let verifier = if let Some(keys) = &doc.keys {
        let key = public_keys.unwrap_or(&keys.public_keys);
        if key.starts_with(PUBLIC_KEY_START) {
            match PublicKey::from_pem(key) {
                Ok(k) => Verifier::Key(k),
                Err(_) => Verifier::UnknownKey,
            }
        } else if key.starts_with(PGP_KEY_START) {
            Verifier::Unsupported {
                sub_path: ".keys",
                reason: "unsupported: PGP public keys in validate.manifests".into(),
            }
        } else if key.contains("-----BEGIN") {
            Verifier::UnknownKey
        } else if key.is_empty() {
            Verifier::Unsupported {
                sub_path: ".keys",
                reason: "unsupported offline: keys without publicKeys verify keylessly, \
                         which needs the Rekor transparency log"
                    .into(),
            }
        } else {
            Verifier::Unsupported {
                sub_path: ".keys",
                reason: format!(
                    "unsupported offline: the key reference {key:?} needs the cluster or a KMS"
                ),
            }
        }
    } else if doc.certificates.is_some() {
        Verifier::Unsupported {
            sub_path: ".certificates",
            reason: "unsupported offline: certificate attestors need the Rekor transparency log"
                .into(),
        }
    } else if doc.keyless.is_some() {
        Verifier::Unsupported {
            sub_path: ".keyless",
            reason: "unsupported offline: keyless attestors need Fulcio's roots and the Rekor \
                     transparency log"
                .into(),
        }
    } else if let Some(nested) = &doc.attestor {
        Verifier::Nested(
            serde_json::from_value::<AttestorSetDoc>(nested.clone())
                .map(|d| Box::new(attestor_set(&d)))
                .map_err(|e| e.to_string()),
        )
    } else {
        // Kyverno verifies such an entry keylessly with any signer.
        Verifier::Unsupported {
            sub_path: "",
            reason: "unsupported offline: an attestor without keys verifies keylessly, which \
                     needs the Rekor transparency log"
                .into(),
        }
    };
    Attestor {
        annotations: doc
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        repository: Some(doc.repository.clone()).filter(|r| !r.is_empty()),
        verifier,
    }
}

#[cfg(test)]
mod tests;
