//! CEL evaluation: the variables a request gives (`object`, `oldObject`,
//! `request`, `namespaceObject`, `variables`), lookups through the
//! [`Resolver`], the checks of `validate.cel` and of the validating
//! policy kinds, and the mutating and generating policy kinds.

mod authorization;
mod deleting;
mod generating;
mod image_validating;
mod lazy_variables;
mod mutating;
mod params;
mod request;
mod scope;
mod validations;
pub use request::*;
pub use scope::*;
pub use validations::*;

pub use authorization::{envoy_request, evaluate_authorization_policy, http_request};
pub use deleting::deleting_policy_selects;
pub use generating::evaluate_generating_policy;
pub use image_validating::{
    evaluate_image_validating_policy, evaluate_image_validating_policy_on_json, image_matches,
};
pub use mutating::{
    MutatingOutcome, TargetOutcome, evaluate_mutating_policy, expression_targets, mutate_target,
    trigger_conditions_hold,
};

use super::{PolicyResponse, Request, RuleResponse, RuleResponses, RuleStatus};
use crate::cel::{Activation, InterpreterCache, Lookups};
use crate::context::Resolver;
use crate::json_doc::JsonRef;
use crate::policy::cel_policy::{CompiledValidatingPolicy, EvaluationMode};
use serde_json::Value;
use std::borrow::Cow;

/// Evaluates a ValidatingPolicy: one rule response named after the policy,
/// or none when the policy does not match the request.
pub fn evaluate_validating_policy<'p>(
    policy: &'p CompiledValidatingPolicy,
    req: &Request,
    input: &CelRequest,
    resolver: &dyn Resolver,
) -> PolicyResponse<'p> {
    evaluate_validating_policy_over(policy, req, input, None, resolver)
}

/// [`evaluate_validating_policy`] over `root`, the request's CEL variables
/// made once for every policy of a set ([`CelRequest::activation`]), as
/// `validate.cel` rules share theirs: a policy seen as the object itself
/// binds its scopes over it rather than making and dropping its own. A
/// policy seen through a Pod controller's template still makes that view.
pub fn evaluate_validating_policy_over<'p>(
    policy: &'p CompiledValidatingPolicy,
    req: &Request,
    input: &CelRequest,
    root: Option<&Activation>,
    resolver: &dyn Resolver,
) -> PolicyResponse<'p> {
    let scope = &policy.scope;
    let (mut response, Some(view)) = begin(scope, policy.mode, req, input) else {
        return PolicyResponse::empty(&scope.name);
    };
    let mut made = None;
    let vars = match view.template {
        Some(template) => made.insert(input.view(template)),
        None => input.root_in(root, &mut made),
    };
    let lookups = ResolverLookups(resolver);
    let respond =
        |status: RuleStatus, message: String| RuleResponse::new(&scope.name, status, message);
    let evaluate = |vars: &Activation| validating_policy_rule(policy, vars, &lookups, None);
    let rule = match view.params(scope, req, resolver) {
        Err(e) => respond(RuleStatus::Error, e),
        // The plan's answers are on the request's object itself, which
        // `vars` binds when the policy does not see it through a
        // template.
        Ok(None) => {
            let planned = view.template.is_none().then_some(input);
            validating_policy_rule(policy, vars, &lookups, planned)
        }
        // Each param is one evaluation of the policy; the first that does
        // not pass decides.
        Ok(Some(list)) => {
            let mut last = respond(RuleStatus::Pass, params::NONE_FOUND.into());
            for param in &list {
                last = match params::bind(vars, param) {
                    Ok(vars) => evaluate(&vars),
                    Err(e) => respond(RuleStatus::Error, e),
                };
                if last.status != RuleStatus::Pass {
                    break;
                }
            }
            last
        }
    };
    response.rules.push(rule);
    response
}

/// Evaluates a ValidatingPolicy of `evaluation.mode: JSON` on a JSON
/// payload: `object` is the payload (no request, no namespace); then
/// exceptions, matchConditions, variables and validations as for a
/// resource. A Kubernetes-mode policy gives no rule.
pub fn evaluate_validating_policy_on_json<'p>(
    policy: &'p CompiledValidatingPolicy,
    payload: &Value,
    resolver: &dyn Resolver,
) -> PolicyResponse<'p> {
    let scope = &policy.scope;
    let mut response = PolicyResponse {
        policy: &scope.name,
        rules: RuleResponses::new(),
    };
    if policy.mode != EvaluationMode::Json {
        return response;
    }
    let cache = InterpreterCache::default();
    let vars = bind_request(
        &cache,
        JsonRef::Value(payload),
        JsonRef::Value(&NULL),
        &NoRequest,
    );
    let lookups = ResolverLookups(resolver);
    response
        .rules
        .push(validating_policy_rule(policy, &vars, &lookups, None));
    response
}

/// One evaluation of a ValidatingPolicy that applies, with `vars` (the
/// request's, a template view's, or a payload's; params bound when it has
/// them): exceptions, matchConditions, variables, validations and
/// auditAnnotations, as Kyverno's `evaluateWithData` does in every mode.
/// With `planned`, the request whose objects `vars` binds as they are, the
/// validations' answers are read from the plan attached to it when it
/// evaluates them ([`planned_verdict`]).
fn validating_policy_rule<'p>(
    policy: &'p CompiledValidatingPolicy,
    vars: &Activation,
    lookups: &dyn Lookups,
    planned: Option<&CelRequest>,
) -> RuleResponse<'p> {
    let scope = &policy.scope;
    let respond =
        |status: RuleStatus, message: Cow<'p, str>| RuleResponse::new(&scope.name, status, message);
    if let Some((status, message)) = exempted(scope, vars, lookups) {
        // Kyverno names the outcome of an exception `exception`.
        return RuleResponse::new("exception", status, message);
    }
    if let Some((status, message)) = match_conditions_gate(scope, vars, lookups) {
        return respond(status, message);
    }
    // Kyverno reports an admission policy's evaluation error as the rule's
    // error in the validator's words; its ValidatingPolicy in its own.
    let errors = match scope.kind.as_str() {
        "ValidatingAdmissionPolicy" => EvalErrors::DenialAsError,
        _ => EvalErrors::RuleError,
    };
    let answer = |verdict| match verdict {
        // Kyverno's ValidatingPolicy engine says "success".
        CelVerdict::Pass => respond(RuleStatus::Pass, Cow::Borrowed("success")),
        CelVerdict::Fail(m) => respond(RuleStatus::Fail, m.into()),
        CelVerdict::NotMatched(m) => respond(RuleStatus::Skip, m.into()),
        CelVerdict::Error(e) => respond(RuleStatus::Error, e.into()),
    };
    if let Some(verdict) = planned
        .and_then(|input| input.planned_answers(&policy.checks))
        .and_then(|answers| planned_verdict(&policy.checks, answers, errors))
    {
        return answer(verdict);
    }
    if !policy.checks.variables.is_empty()
        && let Some(verdict) = lazy_variables::validations(&policy.checks, vars, errors)
    {
        return answer(verdict);
    }
    let vars = bind_variables(vars, &policy.checks.variables, lookups);
    let rule = answer(run_validations(&policy.checks, &vars, lookups, errors));
    match audit_annotations(&policy.checks.audit_annotations, &vars, lookups) {
        Ok(properties) => rule.with_properties(properties),
        Err(e) => respond(RuleStatus::Error, e.into()),
    }
}

#[cfg(test)]
mod tests;
