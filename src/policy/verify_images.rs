//! `verifyImages` of a ClusterPolicy or Policy rule, and the rule's
//! `imageExtractors`, compiled.
//!
//! Kyverno runs such a rule in two phases: an image verification phase
//! (signatures and attestations of the `attestors` and `attestations`,
//! and `mutateDigest`, which pins a tag to its digest) and a validation
//! phase (`verifyDigest`, `required`). The second needs no registry and
//! is evaluated; the first needs each image's registry, which gavel does
//! not reach, and answers `unsupported offline` where it would ask it.

use serde::Deserialize;
use serde_json::Value;

/// One entry of `verifyImages`, as Kyverno's `ImageVerification` (its
/// CRD defaults applied: mutateDigest, verifyDigest and required are
/// true unless set).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageVerification {
    /// `imageReferences`, with the deprecated `image` field.
    pub image_references: Vec<String>,
    pub skip_image_references: Vec<String>,
    pub verify_digest: bool,
    pub mutate_digest: bool,
    pub required: bool,
    /// Signature or attestation checks (`attestors`, `attestations`, or
    /// the deprecated `key`, `roots`, `subject`, `issuer`): what only the
    /// image's registry can answer.
    pub registry_checks: bool,
    /// `failureAction` of this entry, overriding the policy's.
    pub failure_action: Option<String>,
}

/// A rule's `verifyImages` and `imageExtractors`.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyImagesRule {
    pub entries: Vec<ImageVerification>,
    /// `imageExtractors`, by kind: where the rule finds images in a
    /// resource of that kind instead of the Pod template's containers.
    pub extractors: Option<Vec<(String, Vec<ImageExtractor>)>>,
    /// A failure is reported, not enforced: the entries' `failureAction`,
    /// else the policy's (set by the policy's compile step).
    pub audit: bool,
}

/// One `imageExtractors.<Kind>[]` entry, read as Kyverno reads it: the
/// path's parts (`*` for every element), the field holding the image
/// (`value`, else the path's last part), the field naming it (`key`), the
/// extractor's name (`name`, default `custom`), and an optional JMESPath
/// applied to the image string.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageExtractor {
    pub name: String,
    pub fields: Vec<String>,
    pub value: String,
    pub key: String,
    pub jmes_path: Option<String>,
}

/// Every field is declared so that an unknown one is refused; those that
/// only a registry check reads are not read offline.
#[allow(dead_code)]
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ImageVerificationDoc {
    #[serde(default)]
    failure_action: Option<String>,
    #[serde(default, rename = "type")]
    verification_type: Option<String>,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    image_references: Vec<String>,
    #[serde(default)]
    skip_image_references: Vec<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    roots: Option<String>,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    issuer: Option<String>,
    #[serde(default)]
    additional_extensions: Option<Value>,
    #[serde(default)]
    attestors: Vec<Value>,
    #[serde(default)]
    attestations: Vec<Value>,
    #[serde(default)]
    annotations: Option<Value>,
    #[serde(default)]
    repository: Option<String>,
    #[serde(default, rename = "cosignOCI11")]
    cosign_oci11: Option<bool>,
    #[serde(default)]
    mutate_digest: Option<bool>,
    #[serde(default)]
    verify_digest: Option<bool>,
    #[serde(default)]
    validate: Option<Value>,
    #[serde(default)]
    required: Option<bool>,
    #[serde(default)]
    image_registry_credentials: Option<Value>,
    #[serde(default)]
    use_cache: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ImageExtractorDoc {
    path: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    jmes_path: String,
}

impl VerifyImagesRule {
    /// Compiles a rule's `verifyImages` entries and its `imageExtractors`.
    pub fn compile(
        entries: &[Value],
        extractors: Option<&Value>,
    ) -> Result<VerifyImagesRule, String> {
        let entries = entries
            .iter()
            .enumerate()
            .map(|(i, raw)| {
                let doc: ImageVerificationDoc = serde_path_to_error::deserialize(raw.clone())
                    .map_err(|e| format!("verifyImages[{i}].{}: {}", e.path(), e.inner()))?;
                if let Some(t) = &doc.verification_type
                    && !matches!(t.as_str(), "Cosign" | "SigstoreBundle" | "Notary")
                {
                    return Err(format!(
                        "verifyImages[{i}].type: Unsupported value: {t:?}: supported values: \
                         \"Cosign\", \"SigstoreBundle\", \"Notary\""
                    ));
                }
                let present = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
                let mut image_references = doc.image_references.clone();
                if let Some(image) = doc.image.as_deref().filter(|s| !s.is_empty()) {
                    image_references.push(image.to_string());
                }
                Ok(ImageVerification {
                    image_references,
                    skip_image_references: doc.skip_image_references.clone(),
                    verify_digest: doc.verify_digest.unwrap_or(true),
                    mutate_digest: doc.mutate_digest.unwrap_or(true),
                    required: doc.required.unwrap_or(true),
                    registry_checks: !doc.attestors.is_empty()
                        || !doc.attestations.is_empty()
                        || present(&doc.key)
                        || present(&doc.roots)
                        || present(&doc.subject)
                        || present(&doc.issuer),
                    failure_action: doc.failure_action.clone(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let extractors = extractors.map(compile_extractors).transpose()?;
        Ok(VerifyImagesRule {
            entries,
            extractors,
            audit: false,
        })
    }

    /// Whether the validation phase runs for the rule: some entry checks
    /// digests or requires verification (Kyverno's `HasVerifyImageChecks`).
    pub fn has_checks(&self) -> bool {
        self.entries.iter().any(|e| e.verify_digest || e.required)
    }

    /// The image references of every entry: an image the rule looks at
    /// matches one of them.
    pub fn references(&self) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .flat_map(|e| e.image_references.iter().map(String::as_str))
    }
}

fn compile_extractors(raw: &Value) -> Result<Vec<(String, Vec<ImageExtractor>)>, String> {
    let Value::Object(kinds) = raw else {
        return Err("imageExtractors: expected a map of kinds to extractors".into());
    };
    kinds
        .iter()
        .map(|(kind, list)| {
            let docs: Vec<ImageExtractorDoc> = serde_path_to_error::deserialize(list.clone())
                .map_err(|e| format!("imageExtractors.{kind}.{}: {}", e.path(), e.inner()))?;
            let extractors = docs
                .into_iter()
                .enumerate()
                .map(|(i, d)| {
                    let mut fields: Vec<String> = d
                        .path
                        .split('/')
                        .map(str::trim)
                        .filter(|f| !f.is_empty())
                        .map(str::to_string)
                        .collect();
                    let value = if d.value.is_empty() {
                        fields.pop().ok_or_else(|| {
                            format!("imageExtractors.{kind}[{i}].path: names no field")
                        })?
                    } else {
                        d.value
                    };
                    Ok(ImageExtractor {
                        name: if d.name.is_empty() {
                            "custom".into()
                        } else {
                            d.name
                        },
                        fields,
                        value,
                        key: d.key,
                        jmes_path: (!d.jmes_path.is_empty()).then_some(d.jmes_path),
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok((kind.clone(), extractors))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_legacy_fields_and_extractors() {
        let rule = VerifyImagesRule::compile(
            &[
                json!({"imageReferences": ["ghcr.io/*"]}),
                json!({"image": "docker.io/*", "key": "-----BEGIN PUBLIC KEY-----",
                       "verifyDigest": false, "required": false, "mutateDigest": false}),
            ],
            Some(&json!({"Task": [{"path": "/spec/steps/*/image"},
                                  {"path": "/spec/sidecars/*", "value": "image", "name": "sidecars", "key": "name"}]})),
        )
        .unwrap();
        let [first, second] = &rule.entries[..] else {
            panic!("{rule:?}")
        };
        assert!(first.verify_digest && first.required && first.mutate_digest);
        assert!(!first.registry_checks);
        assert_eq!(second.image_references, ["docker.io/*"]);
        assert!(second.registry_checks && !second.verify_digest);
        assert!(rule.has_checks());
        let (kind, extractors) = &rule.extractors.as_ref().unwrap()[0];
        assert_eq!(kind, "Task");
        assert_eq!(
            (
                extractors[0].name.as_str(),
                extractors[0].fields.clone(),
                extractors[0].value.as_str()
            ),
            (
                "custom",
                vec!["spec".to_string(), "steps".into(), "*".into()],
                "image"
            )
        );
        assert_eq!(extractors[1].key, "name");
        for bad in [
            json!({"imageReferences": ["*"], "typo": true}),
            json!({"type": "Docker"}),
        ] {
            assert!(
                VerifyImagesRule::compile(std::slice::from_ref(&bad), None).is_err(),
                "{bad}"
            );
        }
    }
}
