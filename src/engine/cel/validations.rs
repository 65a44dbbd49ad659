//! CEL checks: variables, match conditions, validations with their
//! messages, audit annotations and `validate.cel` rules.

use super::*;
use crate::cel::direct::{self, Val};
use crate::cel::values::cel_to_json;
use crate::cel::{Activation, CelError, Lookups};
use crate::context::Resolver;
use crate::engine::{Request, RuleStatus};
use crate::policy::cel_policy::PolicyScope;
use crate::policy::cel_policy::{CelChecks, CompiledNamed, CompiledValidation};
use kube_cel::cel::Value as CelValue;
use serde_json::Value;
use std::borrow::Cow;

/// The verdict of a set of CEL checks.
#[derive(Debug, Clone, PartialEq)]
pub enum CelVerdict {
    Pass,
    /// Conditions (celPreconditions, matchConditions) were false.
    NotMatched(String),
    Fail(String),
    Error(String),
}

/// Whether PolicyExceptions exempt the request from a CEL policy, as
/// Kyverno checks them before the policy's matchConditions: every
/// exception whose matchConditions all hold (on `object`, `oldObject`,
/// `request`, `namespaceObject`; no variables) exempts it, named in the
/// message; the first one's `reportResult: pass` reports pass, else skip.
/// An exception whose conditions fail to evaluate is the policy's error,
/// unless another already exempted the request.
pub fn exempted(
    scope: &PolicyScope,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Option<(RuleStatus, String)> {
    let mut keys: Vec<&str> = Vec::new();
    let mut pass = false;
    let mut failure = None;
    for e in &scope.exceptions {
        match conditions_hold(&e.match_conditions, vars, lookups) {
            Ok(None) => {
                if keys.is_empty() {
                    pass = e.report_pass;
                }
                keys.push(&e.key);
            }
            Ok(Some(_)) => {}
            Err(err) => {
                failure.get_or_insert(format!("policy exception {}: {err}", e.key));
            }
        }
    }
    if keys.is_empty() {
        return failure.map(|f| (RuleStatus::Error, f));
    }
    let (status, word) = if pass {
        (RuleStatus::Pass, "passed")
    } else {
        (RuleStatus::Skip, "skipped")
    };
    Some((
        status,
        format!(
            "rule is {word} due to policy exception: {}",
            keys.join(", ")
        ),
    ))
}

/// Evaluates `variables` in order into the activation: each sees the ones
/// before it. A variable that fails is left out, so only an expression
/// that reads it fails (the API server evaluates variables lazily).
pub fn bind_variables<'a>(
    base: &'a Activation<'a>,
    variables: &'a [CompiledNamed],
    lookups: &dyn Lookups,
) -> Activation<'a> {
    let mut vars = base.scope();
    vars.start_variables(variables.len());
    for v in variables {
        // A value the interpreter could not hold (a function) is left out
        // like a failure.
        let value = match vars.shared_value(&v.program) {
            Some(value) => Ok(value),
            None => v.program.eval_val(&vars, lookups),
        };
        match value {
            Ok(value) if !matches!(&value, Val::Foreign(v) if matches!(**v, CelValue::Function(..))) => {
                vars.set_variable(&v.name, value)
            }
            Ok(_) => {}
            Err(e) => {
                let text = variable_failure_text(&vars, v.program.source(), e.to_string());
                vars.set_variable_failure(&v.name, text)
            }
        }
    }
    vars
}

/// All conditions true (matchConditions, celPreconditions); the name of
/// the first false one otherwise. An error is the caller's error.
pub fn conditions_hold(
    conditions: &[CompiledNamed],
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<Option<String>, CelError> {
    // As the API server's matcher and Kyverno's CEL engines: a condition
    // that is false decides even after one that failed; an error counts
    // only when none is false.
    let mut failed = None;
    for c in conditions {
        match c.program.eval_bool(vars, lookups) {
            Ok(true) => {}
            Ok(false) => return Ok(Some(c.name.clone())),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    failed.map_or(Ok(None), Err)
}

/// The API server's matcher error for matchConditions that fail to
/// evaluate (and none false): each `expression '<source>' resulted in
/// error: <error>`, aggregated (`[a, b]` when there are several).
pub(super) fn match_condition_errors(
    conditions: &[CompiledNamed],
    vars: &Activation,
    lookups: &dyn Lookups,
) -> String {
    let errors: Vec<String> = conditions
        .iter()
        .filter_map(|c| c.program.eval_bool(vars, lookups).err().map(|e| (c, e)))
        .map(|(c, e)| format!("expression '{}' resulted in error: {e}", c.program.source()))
        .collect();
    match errors.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// What an expression that cannot be evaluated gives.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum EvalErrors {
    /// A denial, as the API server's validator gives one under
    /// failurePolicy Fail (validate.cel, ValidatingAdmissionPolicy):
    /// `expression '<source>' resulted in error: <error>`.
    Deny,
    /// The rule's error, as Kyverno's ValidatingPolicy engine gives it:
    /// `error: <error>`.
    RuleError,
    /// The validator's denial message, reported as the rule's error: how
    /// Kyverno reports a ValidatingAdmissionPolicy's evaluation error (it
    /// checks a decision's evaluation before its action).
    DenialAsError,
}

/// Runs the validations of `checks` with `vars` (variables already bound).
/// The first that fails decides, with its message: Kyverno's validate.cel
/// handler and its ValidatingPolicy engine both stop at the first denying
/// decision.
pub fn run_validations(
    checks: &CelChecks,
    vars: &Activation,
    lookups: &dyn Lookups,
    errors: EvalErrors,
) -> CelVerdict {
    for v in &checks.validations {
        match v.program.eval_bool(vars, lookups) {
            Ok(true) => {}
            Ok(false) => {
                let Some(p) = &v.message_expression else {
                    return CelVerdict::Fail(static_denial(v, errors));
                };
                let message = match (errors, message_of(p, vars, lookups)) {
                    // Kyverno's ValidatingPolicy: the messageExpression's
                    // result as it is, or why it has none.
                    (EvalErrors::RuleError, Ok(Value::String(s))) => s,
                    (EvalErrors::RuleError, Ok(other)) => format!(
                        "failed to convert message expression to string: \
                         type conversion error from '{}' to 'string'",
                        json_type_name(&other)
                    ),
                    (EvalErrors::RuleError, Err(e)) => {
                        format!("failed to evaluate message expression: {e}")
                    }
                    // The API server's validator: the messageExpression's
                    // non-blank result, else as without one.
                    (_, Ok(Value::String(s))) if !s.trim().is_empty() => s,
                    _ => static_denial(v, errors),
                };
                return CelVerdict::Fail(message);
            }
            Err(e) => {
                // Verbatim, trailing blanks included, as the API server
                // quotes it.
                let source = v.program.source();
                let failed = failed_variable(vars, source, &e.to_string());
                let denial = || match &failed {
                    Some((name, error)) => format!(
                        "expression '{source}' resulted in error: composited variable \
                         {name:?} fails to evaluate: {error}"
                    ),
                    None => format!("expression '{source}' resulted in error: {e}"),
                };
                return match (errors, &failed) {
                    (EvalErrors::Deny, _) => CelVerdict::Fail(denial()),
                    (EvalErrors::DenialAsError, _) => CelVerdict::Error(denial()),
                    (EvalErrors::RuleError, Some((_, error))) => {
                        CelVerdict::Error(format!("error: {error}"))
                    }
                    (EvalErrors::RuleError, None) => CelVerdict::Error(format!("error: {e}")),
                };
            }
        }
    }
    CelVerdict::Pass
}

/// The verdict of validations whose answers a policy set's plan found
/// (`crate::engine::plan`): a pass when every one holds, else the first
/// false one's denial, as [`run_validations`] gives them. `None` when one
/// did not give a bool (an error is worded by the checks' own evaluation)
/// or the failing one's message is an expression.
pub(crate) fn planned_verdict(
    checks: &CelChecks,
    answers: &[Result<bool, direct::Fail>],
    errors: EvalErrors,
) -> Option<CelVerdict> {
    for (v, answer) in checks.validations.iter().zip(answers) {
        match answer {
            Ok(true) => {}
            Ok(false) if v.message_expression.is_none() => {
                return Some(CelVerdict::Fail(static_denial(v, errors)));
            }
            _ => return None,
        }
    }
    Some(CelVerdict::Pass)
}

/// The denial of a validation that is false, without its
/// messageExpression: Kyverno's ValidatingPolicy gives the message (or
/// nothing); the API server's validator the message when it is not empty,
/// else the expression.
pub(crate) fn static_denial(v: &CompiledValidation, errors: EvalErrors) -> String {
    match v.message.as_deref().unwrap_or_default() {
        "" if errors != EvalErrors::RuleError => {
            format!("failed expression: {}", v.program.source().trim())
        }
        message => message.to_string(),
    }
}

/// A messageExpression's value, or why it has none.
pub(super) fn message_of(
    p: &crate::cel::Program,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<Value, String> {
    let value = p.eval(vars, lookups).map_err(|e| e.to_string())?;
    cel_to_json(&value)
}

/// A JSON value's CEL type name, for conversion errors.
pub(super) fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null_type",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "double",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// The variable behind an evaluation error, with its own error: variables
/// are evaluated before the expressions here, and one that fails is left
/// out, so reading it fails with "no such key: <name>". The API server
/// evaluates variables lazily and reports the variable's own error.
pub(super) fn failed_variable<'v>(
    vars: &'v Activation,
    source: &str,
    error: &str,
) -> Option<(&'v str, &'v str)> {
    let (name, failure) = variable_error(vars, error)?;
    read_at(source, name)?;
    // The API server evaluates variables when an expression first reads
    // them, left to right, and keeps the left error of `||` and `&&`: of
    // the failed variables the expression reads, the first it reads is
    // the one named (the interpreter may have reported another).
    Some(
        vars.failed_variables()
            .iter()
            .filter_map(|(n, e)| read_at(source, n).map(|at| (at, *n, e.as_str())))
            .min_by_key(|(at, _, _)| *at)
            .map_or((name, failure), |(_, n, e)| (n, e)),
    )
}

/// Where `source` first reads `variables.<name>` (not a longer name).
pub(super) fn read_at(source: &str, name: &str) -> Option<usize> {
    let needle = format!("variables.{name}");
    source.match_indices(&needle).map(|(at, _)| at).find(|at| {
        let before = source[..*at].chars().next_back();
        let after = source[at + needle.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The error a variable's failed evaluation is kept with: when it failed
/// reading another failed variable, the API server's chain (`composited
/// variable "<name>" fails to evaluate: <its error>`).
pub(super) fn variable_failure_text(vars: &Activation, source: &str, error: String) -> String {
    match failed_variable(vars, source, &error) {
        Some((name, failure)) => {
            format!("composited variable {name:?} fails to evaluate: {failure}")
        }
        None => error,
    }
}

/// (name, its own error) of the failed variable an evaluation error of
/// `vars` reports as "no such key: <name>".
pub fn variable_error<'v>(vars: &'v Activation, error: &str) -> Option<(&'v str, &'v str)> {
    vars.variable_failure(error.strip_prefix("no such key: ")?)
}

/// The matchConditions of a CEL policy: `None` when they all hold;
/// otherwise the status and message to answer with: skip when one is
/// false (or cannot be evaluated under failurePolicy Ignore), else error.
pub fn match_conditions_gate(
    scope: &PolicyScope,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Option<(RuleStatus, Cow<'static, str>)> {
    gate_of(
        scope,
        conditions_hold(&scope.match_conditions, vars, lookups),
    )
}

/// [`match_conditions_gate`] of conditions already evaluated.
pub fn gate_of(
    scope: &PolicyScope,
    held: Result<Option<String>, CelError>,
) -> Option<(RuleStatus, Cow<'static, str>)> {
    match held {
        Ok(None) => None,
        // Kyverno's CEL policy engines say only "skip" (no allocation for
        // the common outcome of a policy that does not apply).
        Ok(Some(_)) => Some((RuleStatus::Skip, Cow::Borrowed("skip"))),
        Err(e) if scope.failure_policy_ignore => {
            Some((RuleStatus::Skip, format!("match conditions: {e}").into()))
        }
        Err(e) => Some((
            RuleStatus::Error,
            format!("failed to evaluate match conditions: {e}").into(),
        )),
    }
}

/// Evaluates auditAnnotations: each a string, or null to leave it out.
pub fn audit_annotations(
    annotations: &[CompiledNamed],
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for a in annotations {
        let failed = |e: String| format!("failed to evaluate auditAnnotation {:?}: {e}", a.name);
        match a
            .program
            .eval(vars, lookups)
            .map_err(|e| failed(e.to_string()))?
        {
            CelValue::Null => {}
            CelValue::String(v) if v.is_empty() => {}
            CelValue::String(v) => out.push((a.name.clone(), v.to_string())),
            other => {
                return Err(failed(format!(
                    "valueExpression must give a string or null, got {}",
                    other.type_of()
                )));
            }
        }
    }
    Ok(out)
}

/// `validate.cel` of a rule: celPreconditions, then for each param (once
/// without a paramKind) variables, expressions and auditAnnotations. The
/// first param that fails decides; the annotations of every evaluation
/// are returned.
pub fn validate_rule(
    checks: &CelChecks,
    preconditions: &[CompiledNamed],
    req: &Request,
    input: &CelRequest,
    root: Option<&Activation>,
    resolver: &dyn Resolver,
) -> (CelVerdict, Vec<(String, String)>) {
    let lookups = ResolverLookups(resolver);
    let mut made = None;
    let root = input.root_in(root, &mut made);
    match conditions_hold(preconditions, root, &lookups) {
        Ok(None) => {}
        Ok(Some(_)) => {
            // Kyverno's words: which precondition failed is not said.
            let why = "cel preconditions not met".to_string();
            return (CelVerdict::NotMatched(why), Vec::new());
        }
        // Kyverno hands celPreconditions to the API server's validator as
        // matchConditions: one that cannot be evaluated denies (failure
        // policy Fail) with the matcher's error.
        Err(_) => {
            let why = match_condition_errors(preconditions, root, &lookups);
            return (CelVerdict::Fail(why), Vec::new());
        }
    }
    let (kind, reference) = match &checks.params {
        Some(p) => (Some(&p.kind), p.reference.as_ref()),
        None => (None, None),
    };
    let evaluate = |vars: &Activation| {
        // No variables to bind: the root's (none) serve, with no scope
        // made and dropped for them.
        let scoped;
        let vars = if checks.variables.is_empty() {
            vars
        } else if let Some(verdict) = lazy_variables::validations(checks, vars, EvalErrors::Deny) {
            return (verdict, Vec::new());
        } else {
            scoped = bind_variables(vars, &checks.variables, &lookups);
            &scoped
        };
        let verdict = run_validations(checks, vars, &lookups, EvalErrors::Deny);
        match audit_annotations(&checks.audit_annotations, vars, &lookups) {
            Ok(properties) => (verdict, properties),
            Err(e) => (CelVerdict::Error(e), Vec::new()),
        }
    };
    match params::collect(kind, reference, req, resolver) {
        Err(e) => (CelVerdict::Error(e), Vec::new()),
        Ok(None) => evaluate(root),
        Ok(Some(list)) => {
            let mut properties = Vec::new();
            for param in &list {
                let (verdict, mut found) = match params::bind(root, param) {
                    Ok(vars) => evaluate(&vars),
                    Err(e) => (CelVerdict::Error(e), Vec::new()),
                };
                properties.append(&mut found);
                if verdict != CelVerdict::Pass {
                    return (verdict, properties);
                }
            }
            (CelVerdict::Pass, properties)
        }
    }
}
