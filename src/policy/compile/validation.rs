//! The compiled validate rule: its pattern, anyPattern, deny, foreach,
//! podSecurity or `validate.cel` check, compiled in Kyverno's order of
//! precedence, with foreach nested to any depth.

use super::expr_cache::ExprCache;
use super::{FailureAction, RuleBody};
use crate::jmespath::Expression;
use crate::pattern::CompiledPattern;
use crate::policy::cel_policy::{CelChecks, CelCompileError};
use crate::policy::conditions::Conditions;
use crate::policy::manifests::ManifestsRule;
pub use crate::policy::plan_slot::PlanSlot;
use crate::policy::template;
use crate::policy::types::{ContextEntry, Deny, ForEachValidation, PodSecurity, Validation};
use serde_json::Value;

/// A validate pattern: compiled once when it has no variables; otherwise
/// substituted and compiled per evaluation.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub value: Value,
    pub compiled: Option<CompiledPattern>,
    /// Where the plan of the policy set this rule was last planned in
    /// (`crate::engine::plan`) decides the pattern, if it does.
    pub plan_slot: Option<PlanSlot>,
}

impl Pattern {
    fn new(value: Value) -> Pattern {
        let compiled = (!template::has_variables(&value)).then(|| CompiledPattern::compile(&value));
        Pattern {
            value,
            compiled,
            plan_slot: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ForEach {
    pub list: String,
    /// `list` parsed, when it holds no `{{ }}` to substitute first.
    pub list_expr: Option<Expression>,
    pub element_scope: Option<bool>,
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<Conditions>,
    pub check: ValidateCheck,
    /// The check is deny conditions that read only the element (see
    /// [`Conditions::read_only_element`]) and nothing is loaded or checked
    /// before them: each element is decided without a scope, and only one
    /// they deny takes the scoped path, which words the response.
    pub deny_on_element: bool,
}

#[derive(Debug, Clone)]
pub enum ValidateCheck {
    Pattern(Pattern),
    AnyPattern(Vec<Pattern>),
    Deny(Conditions),
    Foreach(Vec<ForEach>),
    PodSecurity(PodSecurity),
    /// `validate.cel`.
    Cel(Box<CelChecks>),
    /// `validate.manifests`: signed manifests in the resource's annotations.
    Manifests(Box<ManifestsRule>),
    /// A validate body gavel cannot evaluate yet; the field path says which.
    Unsupported(String),
}

impl ValidateCheck {
    /// Whether the engine evaluates this check on a request held as a
    /// decoded document without making a `serde_json::Value` of it
    /// (patterns, deny conditions, CEL and foreach over them; podSecurity
    /// and manifests read a `Value`). CEL converts only for autogen's view
    /// of a Pod controller's template.
    pub fn reads_documents(&self) -> bool {
        match self {
            ValidateCheck::Pattern(_)
            | ValidateCheck::AnyPattern(_)
            | ValidateCheck::Deny(_)
            | ValidateCheck::Cel(_)
            | ValidateCheck::Unsupported(_) => true,
            ValidateCheck::Foreach(list) => list.iter().all(|fe| fe.check.reads_documents()),
            ValidateCheck::PodSecurity(_) | ValidateCheck::Manifests(_) => false,
        }
    }

    /// Whether the check evaluates CEL expressions (`validate.cel`, at its
    /// top level or in a foreach), which read the request's CEL variables.
    pub fn evaluates_cel(&self) -> bool {
        match self {
            ValidateCheck::Cel(_) => true,
            ValidateCheck::Foreach(list) => list.iter().any(|fe| fe.check.evaluates_cel()),
            _ => false,
        }
    }
}

/// Appends the start of a failed pattern's message,
/// `validation error: <message>. rule <rule>`; [`FAILED_AT_PATH`] and the
/// path follow it. Rules word it once when they compile
/// ([`super::CompiledRule::failure_start`]); the server renders its denial
/// heads from the same text.
#[inline]
pub fn push_failure_start(out: &mut String, message: &str, rule: &str) {
    out.push_str("validation error: ");
    if !message.is_empty() {
        out.push_str(message);
        if !message.ends_with('.') {
            out.push('.');
        }
        out.push(' ');
    }
    out.push_str("rule ");
    out.push_str(rule);
}

/// What comes between a failed pattern's [`push_failure_start`] and its path.
pub const FAILED_AT_PATH: &str = " failed at path ";

#[derive(Debug, Clone)]
pub struct ValidateRule {
    pub failure_action: FailureAction,
    pub message: Option<String>,
    /// Whether `message` holds `{{ }}` and must be substituted per request.
    pub message_has_variables: bool,
    pub allow_existing_violations: bool,
    pub check: ValidateCheck,
}

pub(super) fn compile_validation(
    v: &Validation,
    field: &str,
    policy_action: FailureAction,
    exprs: &mut ExprCache,
) -> Result<RuleBody, String> {
    // Kyverno's handler order: manifests before every other check; without
    // attestors Kyverno reads no manifests check at all.
    let attested = |raw: &Value| {
        raw.get("attestors")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    };
    exactly_one_check(v, &attested)?;
    let check = match &v.manifests {
        Some(raw) if attested(raw) => Some(ValidateCheck::Manifests(Box::new(
            ManifestsRule::compile(raw, &format!("{field}.manifests"))?,
        ))),
        _ => compile_check(
            v.pattern.as_ref(),
            v.any_pattern.as_ref(),
            v.deny.as_ref(),
            v.foreach.as_deref(),
            field,
            exprs,
        ),
    };
    let check = match check {
        Some(c) => c,
        None if v.pod_security.is_some() => {
            ValidateCheck::PodSecurity(v.pod_security.clone().unwrap_or_default())
        }
        None if v.cel.is_some() => {
            let raw = v.cel.as_ref().unwrap_or(&Value::Null);
            match CelChecks::compile_rule(raw, &format!("{field}.cel")) {
                Ok(mut c) => {
                    // As Kyverno's validate.cel handler: an expression
                    // without a message of its own reports the rule's.
                    if let Some(message) = v.message.as_ref().filter(|m| !m.is_empty()) {
                        for validation in &mut c.validations {
                            if validation.message.as_deref().is_none_or(str::is_empty) {
                                validation.message = Some(message.clone());
                            }
                        }
                    }
                    ValidateCheck::Cel(Box::new(c))
                }
                Err(CelCompileError::Unsupported(field)) => ValidateCheck::Unsupported(field),
                Err(CelCompileError::Invalid(e)) => return Err(e),
            }
        }
        None => ValidateCheck::Unsupported(format!(
            "{field} (no pattern, anyPattern, deny, foreach or podSecurity)"
        )),
    };
    Ok(RuleBody::Validate(ValidateRule {
        failure_action: v
            .failure_action
            .as_deref()
            .map(FailureAction::parse)
            .unwrap_or(policy_action),
        message: v.message.clone(),
        message_has_variables: v.message.as_deref().is_some_and(|m| m.contains("{{")),
        allow_existing_violations: v.allow_existing_violations.unwrap_or(true),
        check,
    }))
}

/// Kyverno's policy validation (`pkg/policy/validate`): a validate rule
/// has exactly one check, and each foreach entry a list and exactly one
/// check. Counted as Kyverno counts them: `assert` is none of them, and
/// `manifests` counts with attestors only.
fn exactly_one_check(v: &Validation, attested: &dyn Fn(&Value) -> bool) -> Result<(), String> {
    // Named from the rule, as the caller names the rule.
    let field = "validate";
    let checks = [
        v.pattern.is_some(),
        v.any_pattern.is_some(),
        v.deny.is_some(),
        v.foreach.is_some(),
        v.pod_security.is_some(),
        v.cel.is_some(),
        v.manifests.as_ref().is_some_and(attested),
    ];
    exactly_one(field, &checks, "pattern, anyPattern, deny, foreach, cel")?;
    for (i, f) in v.foreach.iter().flatten().enumerate() {
        let field = format!("{field}.foreach[{i}]");
        if f.list.is_empty() {
            return Err(format!("{field}: foreach.list is required"));
        }
        let nested = f
            .foreach
            .as_ref()
            .and_then(Value::as_array)
            .is_some_and(|n| !n.is_empty());
        let checks = [
            f.pattern.is_some(),
            f.any_pattern.is_some(),
            f.deny.is_some(),
            nested,
        ];
        exactly_one(
            &field,
            &checks,
            "pattern, anyPattern, deny, or a nested foreach",
        )?;
    }
    Ok(())
}

/// Kyverno's words for none or several of `names`.
fn exactly_one(field: &str, checks: &[bool], names: &str) -> Result<(), String> {
    match checks.iter().filter(|c| **c).count() {
        0 => Err(format!("{field}: one of {names} must be specified")),
        1 => Ok(()),
        _ => Err(format!("{field}: only one of {names} can be specified")),
    }
}

fn compile_check(
    pattern: Option<&Value>,
    any_pattern: Option<&Value>,
    deny: Option<&Deny>,
    foreach: Option<&[ForEachValidation]>,
    field: &str,
    exprs: &mut ExprCache,
) -> Option<ValidateCheck> {
    // Kyverno's order: deny, then pattern/anyPattern, then foreach.
    if let Some(d) = deny {
        return Some(
            match Conditions::parse(d.conditions.as_ref().unwrap_or(&Value::Null)) {
                Ok(c) => ValidateCheck::Deny(c),
                Err(e) => ValidateCheck::Unsupported(format!("{field}.deny.conditions: {e}")),
            },
        );
    }
    if let Some(p) = pattern {
        return Some(ValidateCheck::Pattern(Pattern::new(p.clone())));
    }
    if let Some(p) = any_pattern {
        return Some(match p {
            Value::Array(items) => {
                ValidateCheck::AnyPattern(items.iter().cloned().map(Pattern::new).collect())
            }
            _ => ValidateCheck::Unsupported(format!("{field}.anyPattern (must be a list)")),
        });
    }
    if let Some(list) = foreach {
        let mut out = Vec::new();
        for (i, f) in list.iter().enumerate() {
            let ffield = format!("{field}.foreach[{i}]");
            // A foreach list that does not parse is its rule's error at
            // evaluation, as in Kyverno.
            let _ = exprs.add(&f.list);
            let nested: Option<Vec<ForEachValidation>> = match &f.foreach {
                Some(v) => match serde_json::from_value(v.clone()) {
                    Ok(n) => Some(n),
                    Err(e) => {
                        return Some(ValidateCheck::Unsupported(format!("{ffield}.foreach: {e}")));
                    }
                },
                None => None,
            };
            let check = compile_check(
                f.pattern.as_ref(),
                f.any_pattern.as_ref(),
                f.deny.as_ref(),
                nested.as_deref(),
                &ffield,
                exprs,
            )
            .unwrap_or_else(|| {
                ValidateCheck::Unsupported(format!(
                    "{ffield} (no pattern, anyPattern, deny or foreach)"
                ))
            });
            let preconditions = match f.preconditions.as_ref().map(Conditions::parse).transpose() {
                Ok(p) => p,
                Err(e) => {
                    return Some(ValidateCheck::Unsupported(format!(
                        "{ffield}.preconditions: {e}"
                    )));
                }
            };
            let deny_on_element = preconditions.is_none()
                && f.context.is_empty()
                && matches!(&check, ValidateCheck::Deny(c) if c.read_only_element());
            out.push(ForEach {
                deny_on_element,
                list: f.list.clone(),
                list_expr: (!f.list.contains("{{"))
                    .then(|| Expression::parse(&f.list).ok())
                    .flatten(),
                element_scope: f.element_scope,
                context: f.context.clone(),
                preconditions,
                check,
            });
        }
        return Some(ValidateCheck::Foreach(out));
    }
    None
}
