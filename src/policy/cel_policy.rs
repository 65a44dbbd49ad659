//! CEL in policies: `validate.cel` of ClusterPolicy/Policy rules and the
//! CEL policy kinds (policies.kyverno.io ValidatingPolicy, MutatingPolicy,
//! GeneratingPolicy; admissionregistration.k8s.io ValidatingAdmissionPolicy
//! and MutatingAdmissionPolicy). Every expression is compiled here, once.
//!
//! This file holds what the kinds share (expressions, params, the compiled
//! checks of `validate.cel` and the validating kinds); `scope` the
//! requests a policy applies to (match constraints, autogen, bindings);
//! `validating`, `mutating` and `generating` each kind's documents and
//! compilation.

mod exception;
mod generating;
mod image_validating;
mod mutating;
mod scope;
mod validating;

pub use exception::{
    CelExceptionDoc, CompiledCelException, attach as attach_exceptions,
    attach_to as attach_exceptions_to,
};
pub use generating::{
    CompiledGeneratingPolicy, CompiledGeneration, GenerateExpression, GeneratingPolicyDoc,
    GeneratingPolicySpec, GenerationSettings, GenerationTemplate, Segment, TemplateNode,
};
pub use image_validating::{
    CompiledAttestor, CompiledImageValidatingPolicy, ImageReferenceMatch, ImageValidatingPolicyDoc,
    ImageValidatingPolicySpec,
};
pub use mutating::{
    CompiledMutatingPolicy, CompiledMutation, MutateExisting, MutatingPolicyDoc,
    MutatingPolicySpec, Mutation, MutationExpression, TargetMatchConstraints, TargetSelection,
};
pub use scope::{
    Autogen, BindingDoc, BindingSpec, Bindings, CompiledBinding, ControllerView, MatchConstraints,
    PodControllers, PodTemplate, PolicyScope, ResourceRule,
};
pub use validating::{
    CompiledValidatingPolicy, EvaluationMode, ValidatingPolicyDoc, ValidatingPolicySpec,
};

use crate::cel::Program;
use crate::cel::authz::{Library, library_of};
use crate::cel::rule_plan::RulePlan;
use crate::policy::plan_slot::PlanSlot;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// Why a CEL policy or rule did not compile.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CelCompileError {
    /// A field gavel does not evaluate yet: the rule or policy reports it
    /// as `unsupported: <field>` rather than being rejected as invalid.
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("{0}")]
    Invalid(String),
}

impl From<String> for CelCompileError {
    fn from(message: String) -> CelCompileError {
        CelCompileError::Invalid(message)
    }
}

/// A call to a function of a library the policy's CEL environment does
/// not include (`environment`, e.g. "evaluation mode Http") is a compile
/// error, as cel-go's `undeclared reference`; `declared` says which
/// libraries it includes.
fn check_libraries(
    declared: impl Fn(Library) -> bool,
    environment: &str,
    programs: &[(String, &Program)],
) -> Result<(), CelCompileError> {
    for (field, program) in programs {
        for function in program.called_functions() {
            if library_of(&function).is_some_and(|library| !declared(library)) {
                return Err(CelCompileError::Invalid(format!(
                    "{field}: compilation failed: undeclared reference to '{function}' \
                     (not in the CEL environment of {environment})"
                )));
            }
        }
    }
    Ok(())
}

/// Every program a CEL policy's checks run, with its field, for
/// [`check_libraries`]: its matchConditions, variables, validations (and
/// their messageExpressions) and auditAnnotations.
fn checked_programs<'a>(
    match_conditions: &'a [CompiledNamed],
    checks: &'a CelChecks,
) -> Vec<(String, &'a Program)> {
    let mut programs: Vec<(String, &Program)> = Vec::new();
    let indexed = |field: &str, i: usize| format!("spec.{field}[{i}].expression");
    for (i, c) in match_conditions.iter().enumerate() {
        programs.push((indexed("matchConditions", i), &c.program));
    }
    for (i, v) in checks.variables.iter().enumerate() {
        programs.push((indexed("variables", i), &v.program));
    }
    for (i, v) in checks.validations.iter().enumerate() {
        programs.push((indexed("validations", i), &v.program));
        if let Some(m) = &v.message_expression {
            programs.push((format!("spec.validations[{i}].messageExpression"), m));
        }
    }
    for (i, a) in checks.audit_annotations.iter().enumerate() {
        programs.push((
            format!("spec.auditAnnotations[{i}].valueExpression"),
            &a.program,
        ));
    }
    programs
}

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

/// `paramKind`: the kind of the objects a policy is parameterised with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParamKind {
    pub api_version: String,
    pub kind: String,
}

/// `paramRef`: which objects of the paramKind one binding (or one
/// `validate.cel` rule) evaluates with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParamRef {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub selector: Option<crate::policy::types::LabelSelector>,
    #[serde(default)]
    pub parameter_not_found_action: Option<String>,
}

impl ParamRef {
    /// As the API server validates a paramRef: a name or a selector, and
    /// an action of Allow or Deny.
    fn check(&self, field: &str) -> Result<(), String> {
        let named = self.name.as_deref().is_some_and(|n| !n.is_empty());
        if named == self.selector.is_some() {
            return Err(format!(
                "{field}: exactly one of name and selector must be set"
            ));
        }
        match self.parameter_not_found_action.as_deref() {
            None | Some("Allow" | "Deny") => Ok(()),
            Some(other) => Err(format!(
                "{field}.parameterNotFoundAction: {other:?} is not Allow or Deny"
            )),
        }
    }

    /// Whether finding no params denies (`parameterNotFoundAction: Deny`)
    /// rather than leaving the request alone.
    pub fn deny_when_missing(&self) -> bool {
        self.parameter_not_found_action.as_deref() == Some("Deny")
    }
}

/// Where a policy's `params` come from: the paramKind and, from the
/// binding (or the `validate.cel` rule), the paramRef. A paramKind without
/// a paramRef is an evaluation error, as in the API server.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub kind: ParamKind,
    pub reference: Option<ParamRef>,
}

/// `validate.cel` of a ClusterPolicy rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CelValidation {
    #[serde(default)]
    pub expressions: Vec<ValidationExpression>,
    #[serde(default)]
    pub param_kind: Option<ParamKind>,
    #[serde(default)]
    pub param_ref: Option<ParamRef>,
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
    /// `validate.cel` with paramKind: evaluated once per param object.
    pub params: Option<Params>,
    /// The validations compiled with the variables read in place, for a
    /// rule with variables ([`CelChecks::with_plan`]).
    pub plan: Arc<RulePlan>,
    /// Where the plan of the policy set this rule was last planned in
    /// (`crate::engine::plan`) evaluates its validations with the set's
    /// others, if it does: the first's number there (the others follow).
    pub plan_slot: Option<PlanSlot>,
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
    /// Compiles `validate.cel` (at `field`). A paramRef without a
    /// paramKind has nothing to select and is ignored, as Kyverno does.
    pub fn compile_rule(raw: &Value, field: &str) -> Result<CelChecks, CelCompileError> {
        let v: CelValidation = serde_path_to_error::deserialize(raw.clone())
            .map_err(|e| format!("{field}.{}: {}", e.path(), e.inner()))?;
        if let Some(r) = &v.param_ref {
            r.check(&format!("{field}.paramRef"))?;
        }
        Ok(CelChecks {
            params: v.param_kind.map(|kind| Params {
                kind,
                reference: v.param_ref,
            }),
            variables: compile_named(&v.variables, &format!("{field}.variables"))?,
            validations: compile_validations(&v.expressions, &format!("{field}.expressions"))?,
            audit_annotations: compile_annotations(
                &v.audit_annotations,
                &format!("{field}.auditAnnotations"),
            )?,
            plan: Arc::default(),
            plan_slot: None,
        }
        .with_plan())
    }

    /// These checks with [`CelChecks::plan`] built from their variables
    /// and validations (none without variables: nothing is read in place).
    pub fn with_plan(mut self) -> CelChecks {
        if !self.variables.is_empty() {
            let variables: Vec<(&str, &Program)> = self
                .variables
                .iter()
                .map(|v| (v.name.as_str(), &v.program))
                .collect();
            let validations: Vec<&Program> = self.validations.iter().map(|v| &v.program).collect();
            self.plan = Arc::new(RulePlan::build(&variables, &validations));
        }
        self
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
            params: None,
            plan: Arc::default(),
            plan_slot: None,
        }
        .with_plan())
    }
}

/// Admission policies and bindings as loaded, compiled together once every
/// file is read (a binding may come before or after its policy).
#[derive(Debug, Clone, Default)]
pub struct AdmissionDocs {
    pub validating: Vec<ValidatingPolicyDoc>,
    pub mutating: Vec<MutatingPolicyDoc>,
    pub bindings: Vec<BindingDoc>,
}
