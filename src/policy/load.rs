//! Strict loading: YAML text in, typed Kyverno documents out. Every error
//! names the file, the document index and the field path.

use super::types::{PolicyDoc, PolicyExceptionDoc};
use serde_json::Value;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: {message}")]
    Io { file: String, message: String },
    #[error("{file}: invalid YAML: {message}")]
    Yaml { file: String, message: String },
    #[error("{file}: document {index}: field {path}: {message}")]
    Field {
        file: String,
        index: usize,
        path: String,
        message: String,
    },
    #[error("{file}: document {index}: {message}")]
    Document {
        file: String,
        index: usize,
        message: String,
    },
}

/// One recognised document of a policy file.
#[derive(Debug, Clone)]
pub enum LoadedDocument {
    Policy(Box<PolicyDoc>),
    Exception(Box<PolicyExceptionDoc>),
    /// policies.kyverno.io ValidatingPolicy / NamespacedValidatingPolicy.
    ValidatingPolicy(Box<super::cel_policy::ValidatingPolicyDoc>),
    /// policies.kyverno.io MutatingPolicy / NamespacedMutatingPolicy.
    MutatingPolicy(Box<super::cel_policy::MutatingPolicyDoc>),
    /// admissionregistration.k8s.io ValidatingAdmissionPolicy (its spec is
    /// a subset of a ValidatingPolicy's).
    ValidatingAdmissionPolicy(Box<super::cel_policy::ValidatingPolicyDoc>),
    /// admissionregistration.k8s.io MutatingAdmissionPolicy (its spec is a
    /// subset of a MutatingPolicy's).
    MutatingAdmissionPolicy(Box<super::cel_policy::MutatingPolicyDoc>),
    /// A ValidatingAdmissionPolicyBinding or MutatingAdmissionPolicyBinding.
    AdmissionPolicyBinding(Box<super::cel_policy::BindingDoc>),
    /// policies.kyverno.io GeneratingPolicy / NamespacedGeneratingPolicy.
    GeneratingPolicy(Box<super::cel_policy::GeneratingPolicyDoc>),
    /// policies.kyverno.io ImageValidatingPolicy /
    /// NamespacedImageValidatingPolicy.
    ImageValidatingPolicy(Box<super::cel_policy::ImageValidatingPolicyDoc>),
    /// policies.kyverno.io PolicyException (for the CEL policy kinds).
    CelException(Box<super::cel_policy::CelExceptionDoc>),
    /// A kind gavel does not evaluate yet (CEL policy kinds, VAP, ...), kept
    /// so callers can report it as unsupported rather than drop it.
    Unsupported {
        api_version: String,
        kind: String,
        name: String,
        /// The document as read: what a caller that handles the kind
        /// itself (DeletingPolicy in `gavel test`) compiles.
        document: Box<Value>,
    },
}

impl LoadedDocument {
    /// The document's kind and name, for messages.
    pub fn kind_and_name(&self) -> (&str, &str) {
        match self {
            LoadedDocument::Policy(p) => (&p.kind, &p.metadata.name),
            LoadedDocument::Exception(e) => ("PolicyException", &e.metadata.name),
            LoadedDocument::ValidatingPolicy(p) => (&p.kind, &p.metadata.name),
            LoadedDocument::MutatingPolicy(p) => (&p.kind, &p.metadata.name),
            LoadedDocument::GeneratingPolicy(p) => (&p.kind, &p.metadata.name),
            LoadedDocument::ImageValidatingPolicy(p) => (&p.kind, &p.metadata.name),
            LoadedDocument::ValidatingAdmissionPolicy(p) => (&p.kind, &p.metadata.name),
            LoadedDocument::MutatingAdmissionPolicy(p) => (&p.kind, &p.metadata.name),
            LoadedDocument::AdmissionPolicyBinding(b) => (&b.kind, &b.metadata.name),
            LoadedDocument::CelException(e) => (&e.kind, &e.metadata.name),
            LoadedDocument::Unsupported { kind, name, .. } => (kind, name),
        }
    }
}

/// Parses multi-document YAML into JSON values, skipping empty documents.
pub fn parse_yaml_documents(file: &str, text: &str) -> Result<Vec<Value>, LoadError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| LoadError::Yaml {
        file: file.to_string(),
        message: e.to_string().lines().next().unwrap_or_default().to_string(),
    })?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

pub fn read_file(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|e| LoadError::Io {
        file: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Decodes a JSON value into `T`, reporting the path of the offending field.
pub fn decode_strict<T: serde::de::DeserializeOwned>(
    file: &str,
    index: usize,
    doc: Value,
) -> Result<T, LoadError> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        LoadError::Field {
            file: file.to_string(),
            index,
            path,
            message: e.into_inner().to_string(),
        }
    })
}

/// Classifies and strictly decodes the documents of one policy file.
pub fn load_policy_text(file: &str, text: &str) -> Result<Vec<LoadedDocument>, LoadError> {
    let mut out = Vec::new();
    for (index, doc) in parse_yaml_documents(file, text)?.into_iter().enumerate() {
        out.push(classify(file, index, doc)?);
    }
    Ok(out)
}

pub fn classify(file: &str, index: usize, doc: Value) -> Result<LoadedDocument, LoadError> {
    let str_field = |k: &str| {
        doc.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let api_version = str_field("apiVersion");
    let kind = str_field("kind");
    let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
    match (group, kind.as_str()) {
        ("kyverno.io", "ClusterPolicy" | "Policy") => {
            let policy: PolicyDoc = decode_strict(file, index, doc)?;
            if policy.metadata.name.is_empty() {
                return Err(LoadError::Document {
                    file: file.into(),
                    index,
                    message: "metadata.name is required".into(),
                });
            }
            Ok(LoadedDocument::Policy(Box::new(policy)))
        }
        ("policies.kyverno.io", "ValidatingPolicy" | "NamespacedValidatingPolicy") => Ok(
            LoadedDocument::ValidatingPolicy(Box::new(decode_strict(file, index, doc)?)),
        ),
        ("policies.kyverno.io", "MutatingPolicy" | "NamespacedMutatingPolicy") => Ok(
            LoadedDocument::MutatingPolicy(Box::new(decode_strict(file, index, doc)?)),
        ),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => Ok(
            LoadedDocument::ValidatingAdmissionPolicy(Box::new(decode_strict(file, index, doc)?)),
        ),
        ("admissionregistration.k8s.io", "MutatingAdmissionPolicy") => Ok(
            LoadedDocument::MutatingAdmissionPolicy(Box::new(decode_strict(file, index, doc)?)),
        ),
        (
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicyBinding" | "MutatingAdmissionPolicyBinding",
        ) => Ok(LoadedDocument::AdmissionPolicyBinding(Box::new(
            decode_strict(file, index, doc)?,
        ))),
        ("policies.kyverno.io", "GeneratingPolicy" | "NamespacedGeneratingPolicy") => Ok(
            LoadedDocument::GeneratingPolicy(Box::new(decode_strict(file, index, doc)?)),
        ),
        ("policies.kyverno.io", "ImageValidatingPolicy" | "NamespacedImageValidatingPolicy") => Ok(
            LoadedDocument::ImageValidatingPolicy(Box::new(decode_strict(file, index, doc)?)),
        ),
        ("kyverno.io", "PolicyException") => Ok(LoadedDocument::Exception(Box::new(
            decode_strict(file, index, doc)?,
        ))),
        ("policies.kyverno.io", "PolicyException") => Ok(LoadedDocument::CelException(Box::new(
            decode_strict(file, index, doc)?,
        ))),
        _ if kind.is_empty() => Err(LoadError::Document {
            file: file.into(),
            index,
            message: "missing kind".into(),
        }),
        _ => {
            let name = doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            Ok(LoadedDocument::Unsupported {
                api_version,
                kind,
                name,
                document: Box::new(doc),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_is_reported_with_path() {
        let text = "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - name: r\n    match: {any: [{resources: {kinds: [Pod]}}]}\n    validate: {mesage: typo}\n";
        let err = load_policy_text("p.yaml", text).unwrap_err().to_string();
        assert!(
            err.contains("p.yaml: document 0: field spec.rules[0].validate"),
            "{err}"
        );
        assert!(err.contains("mesage"), "{err}");
    }

    #[test]
    fn malformed_yaml_is_an_error() {
        assert!(load_policy_text("bad.yaml", "a: [1, 2\n").is_err());
    }

    #[test]
    fn multi_document_files_load_each_policy() {
        let text = "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: a}\nspec: {rules: []}\n---\napiVersion: kyverno.io/v1\nkind: Policy\nmetadata: {name: b, namespace: ns}\nspec: {rules: []}\n";
        assert_eq!(load_policy_text("p.yaml", text).unwrap().len(), 2);
    }
}
