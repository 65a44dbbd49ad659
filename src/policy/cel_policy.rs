//! CEL in policies: `validate.cel` of ClusterPolicy/Policy rules and the
//! CEL policy kinds (policies.kyverno.io ValidatingPolicy, MutatingPolicy,
//! GeneratingPolicy; admissionregistration.k8s.io ValidatingAdmissionPolicy
//! and MutatingAdmissionPolicy). Every expression is compiled here, once.

use crate::cel::Program;
use serde::Deserialize;
use serde_json::Value;

/// `{name, expression}`: variables, matchConditions, celPreconditions.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamedExpression {
    pub name: String,
    pub expression: String,
}

/// One validation: `{expression, message, messageExpression, reason}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidationExpression {
    pub expression: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub message_expression: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditAnnotation {
    pub key: String,
    pub value_expression: String,
}

/// `validate.cel` of a ClusterPolicy rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CelValidation {
    #[serde(default)]
    pub expressions: Vec<ValidationExpression>,
    #[serde(default)]
    pub param_kind: Option<Value>,
    #[serde(default)]
    pub param_ref: Option<Value>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default)]
    pub audit_annotations: Vec<AuditAnnotation>,
    #[serde(default)]
    pub generate: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct CompiledNamed {
    pub name: String,
    pub program: Program,
}

#[derive(Debug, Clone)]
pub struct CompiledValidation {
    pub program: Program,
    pub message: Option<String>,
    pub message_expression: Option<Program>,
    pub reason: Option<String>,
}

/// The compiled checks shared by `validate.cel` and the validating kinds.
#[derive(Debug, Clone, Default)]
pub struct CelChecks {
    pub variables: Vec<CompiledNamed>,
    pub validations: Vec<CompiledValidation>,
    pub audit_annotations: Vec<CompiledNamed>,
}

fn compile(source: &str, field: &str) -> Result<Program, String> {
    Program::compile(source).map_err(|e| format!("{field}: {e}"))
}

pub fn compile_named(list: &[NamedExpression], field: &str) -> Result<Vec<CompiledNamed>, String> {
    list.iter()
        .enumerate()
        .map(|(i, n)| {
            Ok(CompiledNamed {
                name: n.name.clone(),
                program: compile(&n.expression, &format!("{field}[{i}].expression"))?,
            })
        })
        .collect()
}

pub fn compile_validations(
    list: &[ValidationExpression],
    field: &str,
) -> Result<Vec<CompiledValidation>, String> {
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            Ok(CompiledValidation {
                program: compile(&v.expression, &format!("{field}[{i}].expression"))?,
                message: v.message.clone(),
                message_expression: v
                    .message_expression
                    .as_deref()
                    .map(|m| compile(m, &format!("{field}[{i}].messageExpression")))
                    .transpose()?,
                reason: v.reason.clone(),
            })
        })
        .collect()
}

fn compile_annotations(
    list: &[AuditAnnotation],
    field: &str,
) -> Result<Vec<CompiledNamed>, String> {
    list.iter()
        .enumerate()
        .map(|(i, a)| {
            Ok(CompiledNamed {
                name: a.key.clone(),
                program: compile(
                    &a.value_expression,
                    &format!("{field}[{i}].valueExpression"),
                )?,
            })
        })
        .collect()
}

impl CelChecks {
    /// Compiles `validate.cel` (at `field`). Params are not supported yet:
    /// they fail loudly.
    pub fn compile_rule(raw: &Value, field: &str) -> Result<CelChecks, String> {
        let v: CelValidation = serde_path_to_error::deserialize(raw.clone())
            .map_err(|e| format!("{field}.{}: {}", e.path(), e.inner()))?;
        if v.param_kind.is_some() || v.param_ref.is_some() {
            return Err(format!("unsupported: {field}.paramKind/paramRef"));
        }
        Ok(CelChecks {
            variables: compile_named(&v.variables, &format!("{field}.variables"))?,
            validations: compile_validations(&v.expressions, &format!("{field}.expressions"))?,
            audit_annotations: compile_annotations(
                &v.audit_annotations,
                &format!("{field}.auditAnnotations"),
            )?,
        })
    }

    pub fn compile_parts(
        variables: &[NamedExpression],
        validations: &[ValidationExpression],
        audit_annotations: &[AuditAnnotation],
    ) -> Result<CelChecks, String> {
        Ok(CelChecks {
            variables: compile_named(variables, "spec.variables")?,
            validations: compile_validations(validations, "spec.validations")?,
            audit_annotations: compile_annotations(audit_annotations, "spec.auditAnnotations")?,
        })
    }
}
