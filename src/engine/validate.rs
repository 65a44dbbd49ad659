//! Validate rules (§3): match/exclude, exceptions, context, preconditions,
//! then deny, pattern, anyPattern or foreach. One [`PolicyResponse`] per
//! policy and resource; a rule that does not match gives no response.

use super::cel::CelVerdict;
use super::conditions;
use super::context_loader;
use super::json_context::{JsonContext, Slot};
use super::variables::{OnError, Substituter, VariableError};
use super::{EvalEnv, PolicyResponse, Request, RuleResponse, RuleStatus, RuleType};
use crate::jmespath::Val;
use crate::matching::MatchInput;
use crate::pattern::{self, ErrorKind, IndexText, PatternError};
use crate::policy::compile::{ForEach, Pattern, PolicyScope, ValidateRule};
use crate::policy::types::PodSecurityExclude;
use crate::policy::{
    CompiledException, CompiledPolicy, CompiledRule, Conditions, ExprCache, RuleBody, ValidateCheck,
};
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
    evaluate_policy_observed(policy, req, input, ctx, env, None)
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
            times: Vec::new(),
        }
    }
}

/// [`evaluate_policy_with`], also timing each rule it responds for in
/// `timer` (the server's per-rule metrics).
pub fn evaluate_policy_observed<'p>(
    policy: &'p CompiledPolicy,
    req: &Request,
    input: &MatchInput,
    ctx: &JsonContext,
    env: &EvalEnv,
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
            rules: Vec::new(),
        };
    }
    let candidates = policy
        .rule_kinds
        .candidates(input.kind_hash, policy.rules.len());
    // Sized once: most policies answer a request with one rule.
    let mut rules = Vec::with_capacity(candidates.len());
    for index in candidates {
        // The index already left out rules of other kinds; on a hash
        // collision the match below decides.
        let rule = &policy.rules[index];
        if !rule.match_resources.matches(input)
            || rule.exclude.as_ref().is_some_and(|e| e.excludes(input))
        {
            continue;
        }
        let response = evaluate_rule(policy, rule, req, &mut ctx.child(), env);
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

fn evaluate_rule<'p>(
    policy: &'p CompiledPolicy,
    rule: &'p CompiledRule,
    req: &Request,
    ctx: &mut JsonContext,
    env: &EvalEnv,
) -> Option<RuleResponse<'p>> {
    let name = rule.name.as_str();
    let exprs = &policy.exprs;
    if matches!(rule.body, RuleBody::Mutate(_) | RuleBody::Generate(_)) {
        // Evaluated by their own phases (engine::mutate, engine::generate).
        return None;
    }
    let applicable = applicable_exceptions(policy, name, req, ctx, env);
    let is_pod_security = matches!(&rule.body, RuleBody::Validate(v) if matches!(v.check, ValidateCheck::PodSecurity(_)));
    // Exceptions with podSecurity controls exempt those controls of a
    // podSecurity rule; any other matching exception skips the rule.
    let mut pss_excludes = Vec::new();
    for ex in &applicable {
        if is_pod_security && !ex.pod_security.is_empty() {
            pss_excludes.extend(ex.pod_security.iter().cloned());
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
    let v = match &rule.body {
        RuleBody::Validate(v) => v,
        other => {
            let (kind, rule_type) = match other {
                RuleBody::Mutate(_) => ("mutate", RuleType::Mutation),
                RuleBody::Generate(_) => ("generate", RuleType::Generation),
                _ => ("verifyImages", RuleType::ImageVerify),
            };
            let mut r = RuleResponse::new(
                name,
                RuleStatus::Error,
                format!("unsupported: spec.rules[{name}].{kind}"),
            );
            r.rule_type = rule_type;
            return Some(r);
        }
    };
    if let Some(stop) = prepare_rule(rule, ctx, exprs, env) {
        return Some(stop);
    }
    let mut rv = RuleValidator {
        rule: name,
        pass: &rule.pass_message,
        v,
        exprs,
        nesting: 0,
        numbered_elements: policy.uses_numbered_elements,
        pss_excludes: &pss_excludes,
        resolver: env.resolver,
        cel_preconditions: &rule.cel_preconditions,
    };
    let resp = rv.check(&v.check, req, ctx, None)?;
    Some(resp)
}

/// The PolicyExceptions that cover this rule and match the request.
pub(super) fn applicable_exceptions<'e>(
    policy: &CompiledPolicy,
    rule: &str,
    req: &Request,
    ctx: &JsonContext,
    env: &EvalEnv<'e>,
) -> Vec<&'e CompiledException> {
    env.exceptions
        .iter()
        .filter(|ex| {
            ex.covers(policy.qualified_name(), rule)
                && ex.match_resources.matches(&req.match_input())
                && ex
                    .conditions
                    .as_ref()
                    .is_none_or(|c| matches!(eval_conditions(c, ctx, &ex.exprs), Ok((true, _))))
        })
        .collect()
}

/// The steps a mutate or generate rule takes before its body: a matching
/// PolicyException skips it; then [`prepare_rule`].
pub(super) fn before_body<'p>(
    policy: &CompiledPolicy,
    rule: &'p CompiledRule,
    req: &Request,
    ctx: &mut JsonContext,
    env: &EvalEnv,
) -> Option<RuleResponse<'p>> {
    if let Some(ex) = applicable_exceptions(policy, &rule.name, req, ctx, env).first() {
        return Some(RuleResponse::new(
            &rule.name,
            RuleStatus::Skip,
            format!(
                "rule is skipped due to policy exception {}/{}",
                ex.namespace, ex.name
            ),
        ));
    }
    prepare_rule(rule, ctx, &policy.exprs, env)
}

/// The value of a foreach `list`: the pre-parsed expression, or the text
/// with its `{{ }}` substituted first.
pub(super) fn foreach_list<'c>(
    list: &str,
    parsed: Option<&'c crate::jmespath::Expression>,
    ctx: &'c JsonContext<'c>,
    exprs: &'c ExprCache,
) -> Result<Val<'c>, String> {
    if let Some(e) = parsed {
        return e.resolve_val(ctx.root()).map_err(|e| e.to_string());
    }
    let sub = Substituter {
        ctx,
        exprs,
        on_error: OnError::Fail,
    };
    let source = match sub.string(list).map_err(|e| e.to_string())? {
        Value::String(s) => s,
        other => other.to_string(),
    };
    exprs
        .resolve(&source, ctx.root())
        .map_err(|e| e.to_string())
}

/// What every rule type does before its body: injected rule values,
/// context entries, preconditions. `Some` is the rule's response when it
/// stops there (error, or skip on false preconditions).
pub(super) fn prepare_rule<'p>(
    rule: &'p CompiledRule,
    ctx: &mut JsonContext,
    exprs: &ExprCache,
    env: &EvalEnv,
) -> Option<RuleResponse<'p>> {
    let name = rule.name.as_str();
    if let Some(values) = env.rule_values.for_rule(name) {
        for (k, val) in values {
            ctx.set_path(k, val.clone());
        }
    }
    if let Err(e) = context_loader::load(&rule.context, ctx, exprs, env.resolver) {
        return Some(RuleResponse::new(name, RuleStatus::Error, e));
    }
    match &rule.preconditions {
        Err(e) => Some(RuleResponse::new(
            name,
            RuleStatus::Error,
            format!("invalid preconditions: {e}"),
        )),
        Ok(Some(pre)) => match eval_conditions(pre, ctx, exprs) {
            Ok((true, _)) => None,
            Ok((false, msg)) => Some(RuleResponse::new(
                name,
                RuleStatus::Skip,
                format!("preconditions not met{msg}"),
            )),
            Err(e) => Some(RuleResponse::new(
                name,
                RuleStatus::Error,
                format!("failed to evaluate preconditions: {e}"),
            )),
        },
        Ok(None) => None,
    }
}

/// Appends the start of a failed pattern's message,
/// `validation error: <message>. rule <rule>`; [`FAILED_AT_PATH`] and the
/// path follow it. The server renders its denial heads from the same text.
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

/// What a foreach puts before the message of the element that failed.
pub const FOREACH_FAILURE: &str = "validation failure: ";

/// Evaluates `{any, all}` conditions; returns (result, messages of the deciding conditions).
pub fn eval_conditions(
    c: &Conditions,
    ctx: &JsonContext,
    exprs: &ExprCache,
) -> Result<(bool, String), String> {
    let sub = Substituter {
        ctx,
        exprs,
        on_error: OnError::EmptyString,
    };
    let one = |cond: &crate::policy::Condition| -> Result<bool, String> {
        if let Some(hit) = cond.memo.and_then(|id| ctx.memo_get(id)) {
            return Ok(hit);
        }
        let op = cond.operator.clone()?;
        let key = sub.render(&cond.key).map_err(|e| e.to_string())?;
        let value = sub.render(&cond.value).map_err(|e| e.to_string())?;
        let result = conditions::evaluate_with(op, &key, &value, cond.value_is_plain_list);
        if let Some(id) = cond.memo {
            ctx.memo_put(id, result);
        }
        Ok(result)
    };
    let mut messages = String::new();
    if let Some(any) = &c.any {
        let mut matched = false;
        for cond in any {
            if one(cond)? {
                matched = true;
                break;
            } else if let Some(m) = &cond.message {
                messages.push_str("; ");
                messages.push_str(m);
            }
        }
        if !matched && !any.is_empty() {
            return Ok((false, messages));
        }
    }
    if let Some(all) = &c.all {
        for cond in all {
            if !one(cond)? {
                if let Some(m) = &cond.message {
                    messages.push_str("; ");
                    messages.push_str(m);
                }
                return Ok((false, messages));
            }
        }
    }
    Ok((true, String::new()))
}

/// Validates `resource` against a pattern: the compiled form when it has
/// no variables, else substituted and compiled now.
fn check_pattern<'r>(
    sub: &Substituter,
    p: &Pattern,
    resource: &'r Value,
) -> Result<Result<(), Box<PatternError<'r>>>, VariableError> {
    match &p.compiled {
        Some(c) => Ok(c.validate(resource)),
        None => Ok(pattern::validate(resource, &sub.value(&p.value)?)),
    }
}

struct RuleValidator<'a, 'p> {
    /// The rule's name and pass message, which responses borrow.
    rule: &'p str,
    pass: &'p str,
    v: &'a ValidateRule,
    exprs: &'a ExprCache,
    nesting: usize,
    /// Whether the policy reads `element<N>` / `elementIndex<N>`.
    numbered_elements: bool,
    /// Pod Security controls exempted by matching PolicyExceptions.
    pss_excludes: &'a [PodSecurityExclude],
    /// Source of external data for foreach context entries.
    resolver: &'a dyn crate::context::Resolver,
    /// `celPreconditions` of the rule (for `validate.cel`).
    cel_preconditions: &'a [crate::policy::cel_policy::CompiledNamed],
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
        let sub = Substituter {
            ctx,
            exprs: self.exprs,
            on_error: OnError::Fail,
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

    fn error_message(&self, ctx: &JsonContext, detail: &str, path: &str) -> String {
        let msg = match self.message(ctx) {
            Ok(Some(m)) => m,
            Ok(None) => Cow::Borrowed(""),
            Err(e) => return e,
        };
        // Built in one buffer: this runs for every failing rule.
        let mut out = String::with_capacity(msg.len() + self.rule.len() + path.len() + 64);
        push_failure_start(&mut out, &msg, self.rule);
        if path.is_empty() {
            out.push_str(" execution error: ");
            out.push_str(detail);
        } else {
            out.push_str(FAILED_AT_PATH);
            out.push_str(path);
        }
        out
    }

    /// Evaluates one check; `element` is the foreach element in scope, if any.
    fn check(
        &mut self,
        check: &ValidateCheck,
        req: &Request,
        ctx: &mut JsonContext,
        element: Option<&Value>,
    ) -> Option<RuleResponse<'p>> {
        match check {
            ValidateCheck::Deny(conds) => Some(match eval_conditions(conds, ctx, self.exprs) {
                Err(e) => self.respond(
                    RuleStatus::Error,
                    format!("failed to evaluate deny conditions: {e}"),
                ),
                Ok((false, _)) => self.respond(RuleStatus::Pass, self.pass),
                Ok((true, _)) => {
                    let msg = match self.message(ctx) {
                        Ok(Some(m)) if !m.is_empty() => m.into_owned(),
                        Ok(_) => ["validation error: rule ", self.rule, " failed"].concat(),
                        Err(e) => e,
                    };
                    self.respond(RuleStatus::Fail, msg)
                }
            }),
            ValidateCheck::Pattern(_) | ValidateCheck::AnyPattern(_) => {
                if ctx.is_delete() && element.is_none() {
                    return None;
                }
                let resource = element.unwrap_or(&req.object);
                let resp = self.patterns(check, resource, ctx);
                if element.is_none()
                    && req.operation == "UPDATE"
                    && self.v.allow_existing_violations
                    && resp.status == RuleStatus::Fail
                    && !req.old_object.is_null()
                {
                    let prior = self.patterns(check, &req.old_object, ctx);
                    if prior.status == resp.status {
                        return Some(
                            self.respond(RuleStatus::Skip, "validation results have not changed"),
                        );
                    }
                }
                Some(resp)
            }
            ValidateCheck::Foreach(list) => self.foreach(list, req, ctx),
            ValidateCheck::PodSecurity(ps) => {
                if ctx.is_delete() {
                    return None;
                }
                let violations = super::pod_security::evaluate(
                    element.unwrap_or(&req.object),
                    ps,
                    self.pss_excludes,
                );
                Some(if violations.is_empty() {
                    self.respond(RuleStatus::Pass, self.pass)
                } else {
                    let details: Vec<String> = violations
                        .iter()
                        .map(|v| format!("{} ({}={})", v.control, v.field, v.value))
                        .collect();
                    self.respond(
                        RuleStatus::Fail,
                        format!(
                            "Validation rule '{}' failed. It violates PodSecurity \"{}:{}\": {}",
                            self.rule,
                            ps.level,
                            ps.version.as_deref().unwrap_or("latest"),
                            details.join("; ")
                        ),
                    )
                })
            }
            ValidateCheck::Cel(checks) => {
                let built;
                let input = match ctx.cel_request() {
                    Some(input) => input,
                    None => {
                        built = super::cel::CelRequest::of(req);
                        &built
                    }
                };
                let (verdict, properties) = super::cel::validate_rule(
                    checks,
                    self.cel_preconditions,
                    req,
                    input,
                    self.resolver,
                );
                let rule = match verdict {
                    CelVerdict::Pass => self.respond(RuleStatus::Pass, self.pass),
                    CelVerdict::NotMatched(why) => self.respond(RuleStatus::Skip, why),
                    CelVerdict::Fail(message) => self.respond(RuleStatus::Fail, message),
                    CelVerdict::Error(e) => self.respond(RuleStatus::Error, e),
                };
                Some(rule.with_properties(properties))
            }
            ValidateCheck::Unsupported(field) => {
                Some(self.respond(RuleStatus::Error, format!("unsupported: {field}")))
            }
        }
    }

    fn patterns(
        &self,
        check: &ValidateCheck,
        resource: &Value,
        ctx: &JsonContext,
    ) -> RuleResponse<'p> {
        let sub = Substituter {
            ctx,
            exprs: self.exprs,
            on_error: OnError::Fail,
        };
        match check {
            ValidateCheck::Pattern(p) => {
                let result = match check_pattern(&sub, p, resource) {
                    Ok(r) => r,
                    Err(e) => {
                        return self.respond(
                            RuleStatus::Error,
                            format!("variable substitution failed: {e}"),
                        );
                    }
                };
                match result {
                    Ok(()) => self.respond(RuleStatus::Pass, self.pass),
                    Err(e) if e.kind == ErrorKind::Skip => {
                        self.respond(RuleStatus::Skip, e.into_message())
                    }
                    Err(e) if e.path.is_empty() => {
                        self.respond(RuleStatus::Error, self.error_message(ctx, &e.message(), ""))
                    }
                    Err(e) => self.respond(RuleStatus::Fail, self.error_message(ctx, "", &e.path)),
                }
            }
            ValidateCheck::AnyPattern(pats) => {
                // Each alternative's note goes straight into the message,
                // separated by spaces: no string per alternative.
                let mut failed = String::new();
                let mut skipped = String::new();
                for (i, p) in pats.iter().enumerate() {
                    let result = match check_pattern(&sub, p, resource) {
                        Ok(r) => r,
                        Err(e) => {
                            return self.respond(
                                RuleStatus::Error,
                                format!("variable substitution failed: {e}"),
                            );
                        }
                    };
                    let index = IndexText::new(i);
                    let e = match result {
                        Ok(()) => {
                            return self.respond(
                                RuleStatus::Pass,
                                [
                                    "validation rule '",
                                    self.rule,
                                    "' anyPattern[",
                                    index.as_str(),
                                    "] passed.",
                                ]
                                .concat(),
                            );
                        }
                        Err(e) => e,
                    };
                    let (list, what, detail) = if e.kind == ErrorKind::Skip {
                        (&mut skipped, "] skipped: ", e.message())
                    } else if e.path.is_empty() {
                        (&mut failed, "] failed: ", e.message())
                    } else {
                        (
                            &mut failed,
                            "] failed at path ",
                            Cow::Borrowed(e.path.as_str()),
                        )
                    };
                    let parts = ["rule ", self.rule, "[", index.as_str(), what, &detail];
                    if list.is_empty() {
                        // Room for every alternative's note, so it grows once at most.
                        let one: usize = parts.iter().map(|p| p.len()).sum();
                        list.reserve((one + 1) * (pats.len() - i));
                    } else {
                        list.push(' ');
                    }
                    for part in parts {
                        list.push_str(part);
                    }
                }
                if failed.is_empty() && !skipped.is_empty() {
                    return self.respond(RuleStatus::Skip, skipped);
                }
                let msg = match self.message(ctx) {
                    Ok(Some(m)) if !m.is_empty() => {
                        let stop = if m.ends_with('.') { " " } else { ". " };
                        ["validation error: ", &m, stop, &failed].concat()
                    }
                    _ => ["validation error: ", &failed].concat(),
                };
                self.respond(RuleStatus::Fail, msg)
            }
            _ => self.respond(RuleStatus::Error, "internal: not a pattern check"),
        }
    }

    fn foreach(
        &mut self,
        list: &[ForEach],
        req: &Request,
        ctx: &JsonContext,
    ) -> Option<RuleResponse<'p>> {
        let mut applied = 0;
        for fe in list {
            let items = foreach_list(&fe.list, fe.list_expr.as_ref(), ctx, self.exprs);
            // kyverno-compat: a list that fails to evaluate skips this foreach entry.
            let Ok(items) = items else {
                continue;
            };
            let items = if items.is_null() {
                Vec::new()
            } else if items.is_array() {
                items.into_elements().unwrap_or_default()
            } else {
                vec![items]
            };
            let (resp, count) = self.elements(fe, items, req, ctx);
            if resp.status != RuleStatus::Pass {
                return Some(resp);
            }
            applied += count;
        }
        Some(if applied == 0 {
            self.respond(RuleStatus::Skip, "rule skipped")
        } else {
            self.respond(RuleStatus::Pass, "rule passed")
        })
    }

    /// Runs the foreach body once per element, each in its own scope that
    /// borrows the element.
    fn elements<'c>(
        &mut self,
        fe: &ForEach,
        items: Vec<Val<'c>>,
        req: &Request,
        ctx: &'c JsonContext<'c>,
    ) -> (RuleResponse<'p>, usize) {
        let mut applied = 0;
        let count = items.len();
        for (index, item) in items.into_iter().enumerate() {
            if item.is_null() {
                continue;
            }
            let mut scope = ctx.child();
            let item = match item {
                Val::Ref(v) => Slot::Ref(v),
                other => Slot::Own(other.into_owned()),
            };
            let is_object = item.get().is_object();
            if self.numbered_elements {
                scope.set(format!("element{}", self.nesting), item.get().clone());
                scope.set(format!("elementIndex{}", self.nesting), Value::from(index));
            }
            match item {
                Slot::Ref(v) => scope.set_ref("element", v),
                Slot::Own(v) => scope.set("element", v),
            }
            scope.set("elementIndex", Value::from(index));
            let scoped = match fe.element_scope {
                Some(true) if !is_object => {
                    return (
                        self.respond(
                            RuleStatus::Error,
                            "failed to process foreach: elementScope requires a map element",
                        ),
                        applied,
                    );
                }
                Some(false) => false,
                _ => is_object,
            };
            let result = self.element(fe, scoped, req, &mut scope);
            match result {
                None => continue,
                Some(r) if r.status == RuleStatus::Skip => continue,
                Some(r) if r.status == RuleStatus::Error => {
                    if index < count - 1 {
                        continue;
                    }
                    return (
                        self.respond(RuleStatus::Error, [FOREACH_FAILURE, &r.message].concat()),
                        applied,
                    );
                }
                Some(r) if r.status != RuleStatus::Pass => {
                    return (
                        self.respond(RuleStatus::Fail, [FOREACH_FAILURE, &r.message].concat()),
                        applied,
                    );
                }
                Some(_) => applied += 1,
            }
        }
        (self.respond(RuleStatus::Pass, ""), applied)
    }

    fn element(
        &mut self,
        fe: &ForEach,
        scoped: bool,
        req: &Request,
        ctx: &mut JsonContext,
    ) -> Option<RuleResponse<'p>> {
        if let Err(e) = context_loader::load(&fe.context, ctx, self.exprs, self.resolver) {
            return Some(self.respond(RuleStatus::Error, e));
        }
        if let Some(pre) = &fe.preconditions {
            match eval_conditions(pre, ctx, self.exprs) {
                Ok((true, _)) => {}
                Ok((false, msg)) => {
                    return Some(
                        self.respond(RuleStatus::Skip, format!("preconditions not met{msg}")),
                    );
                }
                Err(e) => {
                    return Some(self.respond(
                        RuleStatus::Error,
                        format!("failed to evaluate preconditions: {e}"),
                    ));
                }
            }
        }
        self.nesting += 1;
        let r = match &fe.check {
            ValidateCheck::Foreach(inner) => self.foreach(inner, req, ctx),
            c @ (ValidateCheck::Pattern(_) | ValidateCheck::AnyPattern(_)) => {
                let ctx = &*ctx;
                let item = ctx.get("element").unwrap_or(&crate::jmespath::NULL);
                let resource = if scoped { item } else { &req.object };
                Some(self.patterns(c, resource, ctx))
            }
            ValidateCheck::Deny(_) => self.check(&fe.check, req, ctx, None),
            other => {
                let item = ctx.get("element").cloned().unwrap_or(Value::Null);
                self.check(other, req, ctx, Some(&item))
            }
        };
        self.nesting -= 1;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_only_conditions_are_memoised_per_request() {
        let not_delete = Conditions::parse(&json!({"all": [{
            "key": "{{ request.operation || 'BACKGROUND' }}",
            "operator": "NotEquals",
            "value": "DELETE"
        }]}))
        .unwrap();
        let per_element = Conditions::parse(&json!({"all": [{
            "key": "{{ element }}",
            "operator": "Equals",
            "value": 1
        }]}))
        .unwrap();
        let memo = |c: &Conditions| c.all.as_ref().unwrap()[0].memo;
        assert!(memo(&not_delete).is_some());
        assert_eq!(memo(&per_element), None);
        // The same text anywhere shares the id.
        let again = Conditions::parse(&json!([{
            "key": "{{ request.operation || 'BACKGROUND' }}",
            "operator": "NotEquals",
            "value": "DELETE"
        }]))
        .unwrap();
        assert_eq!(memo(&again), memo(&not_delete));

        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let req = Request::offline(&pod, "CREATE", Default::default(), None);
        let exprs = ExprCache::default();
        let root = req.json_context(false);
        let holds = |c: &Conditions, ctx: &JsonContext| eval_conditions(c, ctx, &exprs).unwrap().0;
        assert!(holds(&not_delete, &root));
        assert_eq!(root.memo_get(memo(&not_delete).unwrap()), Some(true));
        // A scope that replaced the request evaluates afresh.
        let mut replaced = root.child();
        replaced.set_path("request.operation", json!("DELETE"));
        assert!(!holds(&not_delete, &replaced));
        assert!(holds(&again, &root.child()));
    }
}
