//! Validate rules (docs/kyverno-semantics.md#validate-rules): match/exclude,
//! exceptions, context, preconditions, then deny, pattern, anyPattern or
//! foreach. One [`PolicyResponse`] per policy and resource; a rule that does
//! not match gives no response.
//!
//! This file holds the policy and rule entry points, the per-rule timer
//! and the validator's message text; `prepare` the steps before a rule's
//! body and condition blocks, `checks` each kind of check, `foreach` the
//! foreach loops, `verify_images` both phases of verifyImages rules.

mod checks;
mod foreach;
mod manifests;
mod prepare;
mod verify_images;

pub(super) use foreach::foreach_list;
pub(super) use prepare::before_body;
pub(in crate::engine) use prepare::decide_by_operation;
pub use prepare::eval_conditions;
pub(in crate::engine) use prepare::{applicable_exceptions, prepare_rule};
use prepare::{check_preconditions, load_rule_context, load_step, sets_context};
// Worded where the rule is compiled; the denial heads write the same text.
pub use crate::policy::compile::{FAILED_AT_PATH, push_failure_start};
pub use verify_images::{FoundImage, extract_images, verify_policy, verify_policy_with};

use super::json_context::JsonContext;
use super::variables::Substituter;
use super::{EvalEnv, PolicyResponse, Request, RuleResponse, RuleResponses, RuleStatus};
use crate::cel::Activation;
use crate::matching::MatchInput;
use crate::pattern::set::FailurePath;
use crate::policy::compile::{Candidate, PolicyScope, ValidateRule};
use crate::policy::types::PodSecurityExclude;
use crate::policy::{CompiledPolicy, CompiledRule, ExprCache, RuleBody, ValidateCheck};
use serde_json::Value;
use std::borrow::Cow;

/// Evaluates the rules of `policy` against `req`. Validate rules are
/// evaluated; other rule types give an `unsupported` error when they match.
pub fn evaluate_policy<'p>(
    policy: &'p CompiledPolicy,
    req: &Request,
    ctx: &JsonContext,
    env: &EvalEnv,
) -> PolicyResponse<'p> {
    evaluate_policy_with(policy, req, &req.match_input(), ctx, env)
}

/// [`evaluate_policy`] with the request's match input computed by the caller,
/// once for a whole policy set.
pub fn evaluate_policy_with<'p>(
    policy: &'p CompiledPolicy,
    req: &Request,
    input: &MatchInput,
    ctx: &JsonContext,
    env: &EvalEnv,
) -> PolicyResponse<'p> {
    evaluate_policy_observed(policy, req, input, ctx, env, None, None)
}

/// Times the rules of a request back to back, for the server's per-rule
/// metrics: one clock read per rule evaluated, a rule's start being the
/// previous rule's end, across policies (the match checks in between count
/// as the next rule's time).
#[derive(Debug, Default)]
pub struct RuleTimer {
    last: Option<std::time::Instant>,
    /// (index in `policy.rules`, time) of each rule the last policy
    /// responded for, in the order of its responses.
    pub times: Vec<(usize, std::time::Duration)>,
}

impl RuleTimer {
    fn start(&mut self) {
        self.times.clear();
    }

    fn lap(&mut self, rule: usize) {
        let now = std::time::Instant::now();
        let elapsed = self.last.map_or(std::time::Duration::ZERO, |l| now - l);
        self.last = Some(now);
        self.times.push((rule, elapsed));
    }

    /// Starts the clock now, before the first policy.
    pub fn started() -> RuleTimer {
        RuleTimer {
            last: Some(std::time::Instant::now()),
            // Room for a policy's rules: most have one or two.
            times: Vec::with_capacity(4),
        }
    }
}

/// [`evaluate_policy_with`], also timing each rule it responds for in
/// `timer` (the server's per-rule metrics). `cel_root` is the root of the
/// request's CEL variables, made once for a policy set from
/// `ctx`'s [`JsonContext::cel_request`] ([`super::cel::CelRequest::activation`]); its
/// `validate.cel` rules bind their scopes over it rather than each making
/// and dropping its own.
pub fn evaluate_policy_observed<'p>(
    policy: &'p CompiledPolicy,
    req: &Request,
    input: &MatchInput,
    ctx: &JsonContext,
    env: &EvalEnv,
    cel_root: Option<&Activation>,
    mut timer: Option<&mut RuleTimer>,
) -> PolicyResponse<'p> {
    if let Some(t) = timer.as_mut() {
        t.start();
    }
    if policy.scope == PolicyScope::Namespaced
        && policy.namespace.as_deref() != Some(req.namespace())
    {
        return PolicyResponse {
            policy: policy.qualified_name(),
            rules: RuleResponses::new(),
        };
    }
    // The plan found the request's kind once for every policy.
    let candidates = match ctx.plan().and_then(|p| p.candidates(policy, input.kind)) {
        Some(c) => c,
        None => policy.rule_kinds.candidates(input, policy.rules.len()),
    };
    let mut rules = RuleResponses::new();
    for Candidate { index, matched } in candidates {
        // The index already left out rules of other kinds, and matched
        // those its kind alone matches; for any other rule the match below
        // decides.
        let rule = &policy.rules[index];
        if !matched
            && (!rule.match_resources.matches(input)
                || rule.exclude.as_ref().is_some_and(|e| e.excludes(input)))
        {
            continue;
        }
        let response = evaluate_rule(policy, rule, req, ctx, env, cel_root);
        if let Some(r) = response {
            if let Some(t) = timer.as_mut() {
                t.lap(index);
            }
            let applied = r.status != RuleStatus::Skip;
            rules.push(r);
            if policy.apply_one && applied {
                break;
            }
        }
    }
    PolicyResponse {
        policy: policy.qualified_name(),
        rules,
    }
}

/// One rule's response in the request's context `ctx`; a rule that sets
/// variables (context entries, injected values) sets them in a scope of
/// its own.
fn evaluate_rule<'p>(
    policy: &'p CompiledPolicy,
    rule: &'p CompiledRule,
    req: &Request,
    ctx: &JsonContext,
    env: &EvalEnv,
    cel_root: Option<&Activation>,
) -> Option<RuleResponse<'p>> {
    let name = rule.name.as_str();
    let exprs = &policy.exprs;
    match &rule.body {
        // Evaluated by their own phases (engine::mutate, engine::generate).
        RuleBody::Mutate(_) | RuleBody::Generate(_) => return None,
        // Kyverno's validation phase of verifyImages: digests and
        // `required` (its verification phase is `verify_policy`'s).
        RuleBody::VerifyImages(v) => {
            return verify_images::validate_images(policy, rule, v, req, &mut ctx.child(), env);
        }
        RuleBody::Validate(ValidateRule {
            check: ValidateCheck::Manifests(manifests),
            ..
        }) => {
            return manifests::verify_rule(policy, rule, manifests, req, &mut ctx.child(), env);
        }
        RuleBody::Validate(_) => {}
    }
    // Most sets hold no PolicyExceptions: no call for them.
    let applicable = if env.exceptions.is_empty() {
        Vec::new()
    } else {
        applicable_exceptions(policy, name, req, ctx, env)
    };
    let is_pod_security = matches!(&rule.body, RuleBody::Validate(v) if matches!(v.check, ValidateCheck::PodSecurity(_)));
    // Exceptions with podSecurity controls exempt those controls of a
    // podSecurity rule; any other matching exception skips the rule.
    let mut pss_excludes = Vec::new();
    let mut pss_exceptions = Vec::new();
    for ex in &applicable {
        if is_pod_security && !ex.pod_security.is_empty() {
            pss_excludes.extend(ex.pod_security.iter().cloned());
            // Kyverno's MetaNamespaceKeyFunc.
            pss_exceptions.push(match ex.namespace.as_str() {
                "" => ex.name.clone(),
                ns => format!("{ns}/{}", ex.name),
            });
        } else {
            return Some(RuleResponse::new(
                name,
                RuleStatus::Skip,
                format!(
                    "rule is skipped due to policy exception {}/{}",
                    ex.namespace, ex.name
                ),
            ));
        }
    }
    let RuleBody::Validate(v) = &rule.body else {
        return None;
    };
    let mut scope = None;
    let ctx = if sets_context(rule, env) {
        let scope = scope.insert(ctx.child());
        if let Some(stop) = load_rule_context(rule, scope, exprs, env) {
            return Some(stop);
        }
        if let Some(stop) = check_preconditions(rule, scope, exprs) {
            return Some(stop);
        }
        if let Some(stop) = load_step(rule, &rule.deferred.before_body, scope, exprs, env) {
            return Some(stop);
        }
        &*scope
    } else {
        if let Some(stop) = check_preconditions(rule, ctx, exprs) {
            return Some(stop);
        }
        ctx
    };
    let mut rv = RuleValidator {
        rule: name,
        pass: &rule.pass_message,
        any_pattern_pass: &rule.any_pattern_pass_messages,
        failure_start: &rule.failure_start,
        v,
        exprs,
        nesting: 0,
        numbered_elements: policy.uses_numbered_elements,
        pss_exceptions: PssExceptions {
            excludes: &pss_excludes,
            keys: &pss_exceptions,
        },
        resolver: env.resolver,
        cel_preconditions: &rule.cel_preconditions,
        cel_root,
        context: &rule.context,
        message_entries: &rule.deferred.before_message,
    };
    let resp = rv.check(&v.check, req, ctx, None)?;
    Some(resp)
}

/// Why a pattern failed, for [`RuleValidator::error_message`].
enum PatternFailure<'a> {
    /// At a path its own walk found.
    At(&'a str),
    /// At a path the policy set's plan found, not yet worded.
    Planned(FailurePath<'a>),
    /// It could not be evaluated.
    Execution(&'a str),
}

/// What a foreach puts before the message of the element that failed.
pub const FOREACH_FAILURE: &str = "validation failure: ";

/// The PolicyExceptions with `podSecurity` controls that match a request:
/// what they exempt, and their keys for the skip message.
#[derive(Clone, Copy)]
struct PssExceptions<'a> {
    excludes: &'a [PodSecurityExclude],
    keys: &'a [String],
}

/// One validate rule under evaluation: what its checks read, and how deep
/// in nested foreach loops it is.
struct RuleValidator<'a, 'p> {
    /// The rule's name and pass message, which responses borrow.
    rule: &'p str,
    pass: &'p str,
    /// The message of each anyPattern alternative that passes, by index.
    any_pattern_pass: &'p [String],
    /// The start of a failed pattern's message, when worded at compile
    /// time (empty when the message reads variables).
    failure_start: &'p str,
    v: &'a ValidateRule,
    exprs: &'a ExprCache,
    nesting: usize,
    /// Whether the policy reads `element<N>` / `elementIndex<N>`.
    numbered_elements: bool,
    /// Pod Security controls exempted by matching PolicyExceptions.
    pss_exceptions: PssExceptions<'a>,
    /// Source of external data for foreach context entries.
    resolver: &'a dyn crate::context::Resolver,
    /// `celPreconditions` of the rule (for `validate.cel`).
    cel_preconditions: &'a [crate::policy::cel_policy::CompiledNamed],
    /// The root of the request's CEL variables, when the caller made it
    /// ([`evaluate_policy_observed`]).
    cel_root: Option<&'a Activation<'a>>,
    /// The rule's context entries, and those only its message reads:
    /// loaded when a failure is worded, as Kyverno loads them.
    context: &'p [crate::policy::types::ContextEntry],
    message_entries: &'p [usize],
}

impl<'p> RuleValidator<'_, 'p> {
    fn respond(&self, status: RuleStatus, message: impl Into<Cow<'p, str>>) -> RuleResponse<'p> {
        RuleResponse::new(self.rule, status, message)
    }

    fn message(&self, ctx: &JsonContext) -> Result<Option<Cow<'_, str>>, String> {
        let Some(m) = &self.v.message else {
            return Ok(None);
        };
        if !self.v.message_has_variables {
            return Ok(Some(Cow::Borrowed(m)));
        }
        let mut scope;
        let ctx = if self.message_entries.is_empty() {
            ctx
        } else {
            scope = ctx.child();
            crate::engine::context_loader::load_deferred(
                self.context,
                self.message_entries,
                &mut scope,
                self.exprs,
                self.resolver,
            )
            .map_err(|e| format!("failed to substitute variables in message: {e}"))?;
            &scope
        };
        let sub = Substituter {
            ctx,
            exprs: self.exprs,
        };
        match sub.string(m) {
            Ok(Value::String(s)) => Ok(Some(Cow::Owned(s))),
            Ok(_) => Ok(Some(
                "the produced message didn't resolve to a string, check your policy definition."
                    .into(),
            )),
            Err(e) => Err(format!("failed to substitute variables in message: {e}")),
        }
    }

    /// The message of a rule whose deny conditions hold.
    fn denial(&self, ctx: &JsonContext) -> String {
        match self.message(ctx) {
            Ok(Some(m)) if !m.is_empty() => m.into_owned(),
            Ok(_) => ["validation error: rule ", self.rule, " failed"].concat(),
            Err(e) => e,
        }
    }

    /// The message of a failed pattern: where it failed, or why it could
    /// not be evaluated. Built in one buffer: this runs for every failing rule.
    fn error_message(&self, ctx: &JsonContext, failure: PatternFailure) -> String {
        const PLANNED_PATH_ROOM: usize = 96;
        let detail_len = match &failure {
            PatternFailure::At(path) => path.len(),
            // Room for most paths without measuring this one: summing its
            // steps' lengths cost more than the rare second allocation of
            // a longer one (callgrind, `evaluate/pss17/violating`).
            PatternFailure::Planned(_) => PLANNED_PATH_ROOM,
            PatternFailure::Execution(detail) => detail.len(),
        };
        let mut out;
        if self.failure_start.is_empty() {
            let msg = match self.message(ctx) {
                Ok(Some(m)) => m,
                Ok(None) => Cow::Borrowed(""),
                Err(e) => return e,
            };
            out = String::with_capacity(msg.len() + self.rule.len() + detail_len + 64);
            push_failure_start(&mut out, &msg, self.rule);
        } else {
            out = String::with_capacity(self.failure_start.len() + detail_len + 24);
            out.push_str(self.failure_start);
        }
        match failure {
            PatternFailure::At(path) => {
                out.push_str(FAILED_AT_PATH);
                out.push_str(path);
            }
            PatternFailure::Planned(path) => {
                out.push_str(FAILED_AT_PATH);
                path.write_to(&mut out);
            }
            PatternFailure::Execution(detail) => {
                out.push_str(" execution error: ");
                out.push_str(detail);
            }
        }
        out
    }
}
