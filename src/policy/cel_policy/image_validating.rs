//! ImageValidatingPolicy and NamespacedImageValidatingPolicy
//! (policies.kyverno.io): the documents and their compilation.
//!
//! Such a policy names the images it checks (`matchImageReferences`,
//! globs or CEL on `ref`), finds them in the resource (`images`
//! extractors, with defaults for Pods and Pod controllers) and runs CEL
//! validations over them with the `imageverify` library. The checks that
//! need the image's registry (signatures, attestations, image data) fail
//! as `unsupported offline` when evaluated: gavel reaches no registry.

use super::scope::{Autogen, MatchConstraints, PolicyScope};
use super::{
    AuditAnnotation, CelChecks, CelCompileError, CompiledNamed, EvaluationMode, NamedExpression,
    ValidationExpression, check_libraries, checked_programs, compile_named,
};
use crate::cel::Program;
use crate::cel::authz::Library;
use crate::cel::values::json_to_cel;
use crate::glob::Glob;
use serde::Deserialize;
use serde_json::Value;

/// `matchImageReferences[]`: a glob or a CEL expression on `ref`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatchImageReference {
    #[serde(default)]
    pub glob: String,
    #[serde(default)]
    pub expression: String,
}

/// `validationConfigurations`: each defaults to true.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidationConfigurations {
    #[serde(default)]
    pub mutate_digest: Option<bool>,
    #[serde(default)]
    pub verify_digest: Option<bool>,
    #[serde(default)]
    pub required: Option<bool>,
}

/// `attestors[]`: a name and a Cosign or Notary configuration, kept as
/// written (it is what `attestors.<name>` reads as).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attestor {
    pub name: String,
    #[serde(default)]
    pub cosign: Option<Value>,
    #[serde(default)]
    pub notary: Option<Value>,
}

/// `attestations[]`: an in-toto or OCI referrer attestation by name.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attestation {
    pub name: String,
    #[serde(default)]
    pub intoto: Option<Value>,
    #[serde(default)]
    pub referrer: Option<Value>,
}

/// The spec of an ImageValidatingPolicy / NamespacedImageValidatingPolicy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageValidatingPolicySpec {
    #[serde(default)]
    pub match_constraints: Option<MatchConstraints>,
    #[serde(default)]
    pub failure_policy: Option<String>,
    #[serde(default)]
    pub audit_annotations: Vec<AuditAnnotation>,
    #[serde(default)]
    pub validation_actions: Vec<String>,
    #[serde(default)]
    pub match_conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default)]
    pub validation_configurations: ValidationConfigurations,
    #[serde(default)]
    pub match_image_references: Vec<MatchImageReference>,
    /// Registry credentials: nothing offline reads them.
    #[serde(default)]
    pub credentials: Option<Value>,
    #[serde(default)]
    pub images: Vec<NamedExpression>,
    /// Required by the CRD (`attestors: []` is enough), as `validations`.
    pub attestors: Vec<Attestor>,
    #[serde(default)]
    pub attestations: Vec<Attestation>,
    pub validations: Vec<ValidationExpression>,
    #[serde(default)]
    pub webhook_configuration: Option<Value>,
    #[serde(default)]
    pub evaluation: Option<Value>,
    #[serde(default)]
    pub autogen: Option<Autogen>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageValidatingPolicyDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: crate::policy::types::ObjectMeta,
    pub spec: ImageValidatingPolicySpec,
    #[serde(default)]
    pub status: Option<Value>,
}

/// One compiled `matchImageReferences` entry.
#[derive(Debug, Clone)]
pub enum ImageReferenceMatch {
    Glob(Glob),
    /// A CEL expression on `ref` (the image) that gives a bool.
    Expression(Program),
}

/// An attestor whose fields may be CEL expressions, each evaluated into
/// the field beside it (`key.expression` into `key.data`, a
/// `{value, expression}` into `value`) when the policy is evaluated.
#[derive(Debug, Clone)]
pub struct CompiledAttestor {
    pub name: String,
    /// The attestor as written, without its name.
    pub value: Value,
    /// (JSON pointer of the field the result goes to, the expression).
    pub expressions: Vec<(String, Program)>,
}

/// The attestor fields Kyverno evaluates: (where the expression is, the
/// field its result is written to).
const ATTESTOR_EXPRESSIONS: &[(&str, &str)] = &[
    ("/cosign/key/expression", "/cosign/key/data"),
    (
        "/cosign/certificate/cert/expression",
        "/cosign/certificate/cert/value",
    ),
    (
        "/cosign/certificate/certChain/expression",
        "/cosign/certificate/certChain/value",
    ),
    (
        "/cosign/trustedRoot/expression",
        "/cosign/trustedRoot/value",
    ),
    ("/notary/certs/expression", "/notary/certs/value"),
    ("/notary/tsaCerts/expression", "/notary/tsaCerts/value"),
];

/// A compiled ImageValidatingPolicy (cluster or namespaced).
#[derive(Debug, Clone)]
pub struct CompiledImageValidatingPolicy {
    pub scope: PolicyScope,
    /// variables, validations and auditAnnotations.
    pub checks: CelChecks,
    /// No entries: every image is checked.
    pub image_references: Vec<ImageReferenceMatch>,
    /// `images`: extractors of the policy's own, after the defaults of
    /// the request's resource (one of the same name replaces a default).
    pub extractors: Vec<CompiledNamed>,
    pub attestors: Vec<CompiledAttestor>,
    /// The names of `attestations`.
    pub attestations: Vec<String>,
    /// The `attestations` variable (each name to itself), made once here.
    pub attestations_value: kube_cel::cel::Value,
    /// The `attestors` variable when no attestor has an expression (it is
    /// then the same on every request), made once here.
    pub static_attestors: Option<kube_cel::cel::Value>,
    /// `validationConfigurations.verifyDigest`: a matched image without a
    /// digest fails the policy.
    pub verify_digest: bool,
    /// `validationConfigurations.required`: a matched image that no
    /// signature or attestation check verified fails the policy.
    pub required: bool,
    /// `validationConfigurations.mutateDigest`: the mutating webhook pins
    /// matched images to their digest (which needs the registry).
    pub mutate_digest: bool,
    /// `validationActions` contains Deny (the default).
    pub deny: bool,
    /// `validationActions` contains Warn.
    pub warn: bool,
    pub admission: bool,
    pub background: bool,
    /// `name`, or `namespace/name` for a namespaced one.
    pub key: String,
    pub report: crate::policy::ReportMeta,
    /// Kubernetes or JSON.
    pub mode: EvaluationMode,
}

impl CompiledImageValidatingPolicy {
    pub fn compile(
        doc: &ImageValidatingPolicyDoc,
    ) -> Result<CompiledImageValidatingPolicy, CelCompileError> {
        let spec = &doc.spec;
        let evaluation = |path: &str| spec.evaluation.as_ref().and_then(|e| e.pointer(path));
        let enabled = |path: &str| evaluation(path).and_then(Value::as_bool).unwrap_or(true);
        let mode = match evaluation("/mode") {
            None => EvaluationMode::Kubernetes,
            Some(Value::String(m)) if m == "Kubernetes" => EvaluationMode::Kubernetes,
            Some(Value::String(m)) if m == "JSON" => EvaluationMode::Json,
            Some(other) => {
                return Err(CelCompileError::Invalid(format!(
                    "spec.evaluation.mode: Unsupported value: {other}: supported values: \
                     \"Kubernetes\", \"JSON\""
                )));
            }
        };
        let key = match &doc.metadata.namespace {
            Some(ns) if doc.kind.starts_with("Namespaced") => format!("{ns}/{}", doc.metadata.name),
            _ => doc.metadata.name.clone(),
        };
        let no_constraints = Default::default();
        let match_constraints = spec
            .match_constraints
            .as_ref()
            .or((mode != EvaluationMode::Kubernetes).then_some(&no_constraints));
        let scope = PolicyScope::compile(
            &doc.kind,
            &doc.metadata,
            match_constraints,
            &spec.match_conditions,
            spec.autogen.as_ref(),
            spec.failure_policy.as_deref(),
        )?;
        let checks =
            CelChecks::compile_parts(&spec.variables, &spec.validations, &spec.audit_annotations)?;
        let image_references = spec
            .match_image_references
            .iter()
            .enumerate()
            .map(|(i, m)| compile_reference(m, i))
            .collect::<Result<Vec<_>, _>>()?;
        let extractors = compile_named(&spec.images, "spec.images")?;
        let attestors = spec
            .attestors
            .iter()
            .enumerate()
            .map(|(i, a)| compile_attestor(a, i))
            .collect::<Result<Vec<_>, _>>()?;
        let mut programs = checked_programs(&scope.match_conditions, &checks);
        let indexed = |field: &str, i: usize| format!("spec.{field}[{i}].expression");
        for (i, e) in extractors.iter().enumerate() {
            programs.push((indexed("images", i), &e.program));
        }
        for (i, a) in attestors.iter().enumerate() {
            for (_, p) in &a.expressions {
                programs.push((format!("spec.attestors[{i}]"), p));
            }
        }
        check_libraries(
            |library| library == Library::ImageVerify,
            "an ImageValidatingPolicy",
            &programs,
        )?;
        let actions = &spec.validation_actions;
        let config = &spec.validation_configurations;
        Ok(CompiledImageValidatingPolicy {
            mode,
            admission: enabled("/admission/enabled"),
            background: enabled("/background/enabled"),
            key,
            report: crate::policy::ReportMeta::of(&doc.metadata),
            scope,
            checks,
            image_references,
            extractors,
            attestations_value: json_to_cel(&Value::Object(
                spec.attestations
                    .iter()
                    .map(|a| (a.name.clone(), Value::String(a.name.clone())))
                    .collect(),
            )),
            static_attestors: attestors.iter().all(|a| a.expressions.is_empty()).then(|| {
                json_to_cel(&Value::Object(
                    attestors
                        .iter()
                        .map(|a| (a.name.clone(), a.named_value()))
                        .collect(),
                ))
            }),
            attestors,
            attestations: spec.attestations.iter().map(|a| a.name.clone()).collect(),
            verify_digest: config.verify_digest.unwrap_or(true),
            required: config.required.unwrap_or(true),
            mutate_digest: config.mutate_digest.unwrap_or(true),
            deny: actions.is_empty() || actions.iter().any(|a| a == "Deny"),
            warn: actions.iter().any(|a| a == "Warn"),
        })
    }

    pub fn name(&self) -> &str {
        &self.scope.name
    }
}

impl CompiledAttestor {
    /// The attestor as `attestors.<name>` reads it (its expressions not
    /// yet evaluated): as written, with its name.
    pub fn named_value(&self) -> Value {
        let mut value = self.value.clone();
        value["name"] = Value::String(self.name.clone());
        value
    }
}

fn compile_reference(
    m: &MatchImageReference,
    i: usize,
) -> Result<ImageReferenceMatch, CelCompileError> {
    let field = format!("spec.matchImageReferences[{i}]");
    if !m.glob.is_empty() {
        return Glob::compile(&m.glob)
            .map(ImageReferenceMatch::Glob)
            .map_err(|e| CelCompileError::Invalid(format!("{field}.glob: {e}")));
    }
    if !m.expression.is_empty() {
        return Program::compile(&m.expression)
            .map(ImageReferenceMatch::Expression)
            .map_err(|e| CelCompileError::Invalid(format!("{field}.expression: {e}")));
    }
    Err(CelCompileError::Invalid(format!(
        "{field}: Invalid value: either glob or expression must be set"
    )))
}

fn compile_attestor(a: &Attestor, i: usize) -> Result<CompiledAttestor, CelCompileError> {
    if a.cosign.is_some() == a.notary.is_some() {
        return Err(CelCompileError::Invalid(format!(
            "spec.attestors[{i}]: exactly one of cosign and notary must be set"
        )));
    }
    let mut value = serde_json::Map::new();
    if let Some(c) = &a.cosign {
        value.insert("cosign".into(), c.clone());
    }
    if let Some(n) = &a.notary {
        value.insert("notary".into(), n.clone());
    }
    let value = Value::Object(value);
    let mut expressions = Vec::new();
    for (source, target) in ATTESTOR_EXPRESSIONS {
        let Some(text) = value.pointer(source).and_then(Value::as_str) else {
            continue;
        };
        if text.is_empty() {
            continue;
        }
        let program = Program::compile(text).map_err(|e| {
            CelCompileError::Invalid(format!(
                "spec.attestors[{i}]{}: {e}",
                source.replace('/', ".")
            ))
        })?;
        expressions.push((target.to_string(), program));
    }
    Ok(CompiledAttestor {
        name: a.name.clone(),
        value,
        expressions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(spec: &str) -> Result<CompiledImageValidatingPolicy, CelCompileError> {
        // The fields the CRD requires, when the case does not set them.
        let mut spec = spec.to_string();
        if !spec.contains("attestors:") {
            spec.push_str("  attestors: []\n");
        }
        if !spec.contains("validations:") {
            spec.push_str("  validations: [{expression: 'true'}]\n");
        }
        let doc: ImageValidatingPolicyDoc = serde_saphyr::from_str(&format!(
            "apiVersion: policies.kyverno.io/v1beta1
kind: ImageValidatingPolicy
metadata: {{name: p}}
spec:
  matchConstraints:
    resourceRules:
    - {{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}}
{spec}"
        ))
        .unwrap();
        CompiledImageValidatingPolicy::compile(&doc)
    }

    #[test]
    fn defaults_and_refusals() {
        let p = compile("").unwrap();
        assert!(p.verify_digest && p.required && p.mutate_digest && p.deny);
        // Pod policies are extended to Pod controllers.
        assert!(!p.scope.controllers.is_empty());
        // The CRD requires attestors and validations.
        let missing: Result<ImageValidatingPolicyDoc, _> = serde_saphyr::from_str(
            "apiVersion: policies.kyverno.io/v1\nkind: ImageValidatingPolicy\nmetadata: {name: p}\nspec: {validations: []}\n",
        );
        assert!(missing.unwrap_err().to_string().contains("attestors"));
        let cases = [
            (
                "  matchImageReferences: [{}]\n",
                "either glob or expression",
            ),
            ("  matchImageReferences: [{glob: 'a[b'}]\n", "unclosed"),
            (
                "  attestors: [{name: a}]\n",
                "exactly one of cosign and notary",
            ),
            (
                "  attestors: [{name: a, notary: {certs: {expression: '1 +'}}}]\n",
                "spec.attestors[0].notary.certs.expression",
            ),
            (
                "  validations: [{expression: \"http.Denied('x') != null\"}]\n",
                "undeclared reference to 'http.Denied'",
            ),
            ("  evaluation: {mode: HTTP}\n", "Unsupported value"),
        ];
        for (spec, want) in cases {
            let e = compile(spec).unwrap_err().to_string();
            assert!(e.contains(want), "{spec}: {e}");
        }
    }
}
