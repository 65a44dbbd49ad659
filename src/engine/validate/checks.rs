//! One validate check of a rule or of a foreach element: deny conditions,
//! pattern and anyPattern (with allowExistingViolations on UPDATE),
//! foreach, podSecurity, CEL expressions; and the pattern and anyPattern
//! messages Kyverno gives.

use super::{PatternFailure, RuleValidator, eval_conditions};
use crate::engine::cel::{CelVerdict, EvalErrors};
use crate::engine::json_context::JsonContext;
use crate::engine::variables::{Substituter, VariableError};
use crate::engine::{Request, RuleResponse, RuleStatus};
use crate::json_doc::JsonRef;
use crate::pattern::{self, ErrorKind, IndexText, PatternError};
use crate::policy::ValidateCheck;
use crate::policy::cel_policy::CelChecks;
use crate::policy::compile::Pattern;
use std::borrow::Cow;

impl<'p> RuleValidator<'_, 'p> {
    /// Evaluates one check; `element` is the foreach element in scope, if any.
    pub(super) fn check(
        &mut self,
        check: &ValidateCheck,
        req: &Request,
        ctx: &JsonContext,
        element: Option<JsonRef>,
    ) -> Option<RuleResponse<'p>> {
        match check {
            ValidateCheck::Deny(conds) => Some(match eval_conditions(conds, ctx, self.exprs) {
                Err(e) => self.respond(
                    RuleStatus::Error,
                    format!("failed to check deny conditions: {e}"),
                ),
                Ok((false, _)) => self.respond(RuleStatus::Pass, self.pass),
                Ok((true, _)) => self.respond(RuleStatus::Fail, self.denial(ctx)),
            }),
            ValidateCheck::Pattern(_) | ValidateCheck::AnyPattern(_) => {
                if ctx.is_delete() && element.is_none() {
                    return None;
                }
                if element.is_none()
                    && let Some(pass) = self.planned(check, req, ctx)
                {
                    return Some(pass);
                }
                let resource = element.unwrap_or(req.object.json());
                let resp = self.patterns(check, resource, ctx);
                if element.is_none()
                    && req.operation == "UPDATE"
                    && self.v.allow_existing_violations
                    && resp.status == RuleStatus::Fail
                    && !req.old_object.is_null()
                {
                    let prior = self.patterns(check, req.old_object.json(), ctx);
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
                let pod = element.unwrap_or(req.object.json()).to_cow();
                let pod = &*pod;
                let mut violations = crate::engine::pod_security::evaluate(pod, ps, &[]);
                // kyverno-compat: exceptions apply only to a Pod that fails,
                // and a Pod they clear is skipped, naming them.
                let exceptions = self.pss_exceptions;
                if !violations.is_empty() && !exceptions.excludes.is_empty() {
                    violations =
                        crate::engine::pod_security::evaluate(pod, ps, exceptions.excludes);
                    if violations.is_empty() {
                        return Some(self.respond(
                            RuleStatus::Skip,
                            format!(
                                "rule is skipped due to policy exceptions {}",
                                exceptions.keys.join(", ")
                            ),
                        ));
                    }
                }
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
                if element.is_none()
                    && let Some(planned) = self.planned_cel(checks, req, ctx)
                {
                    return Some(planned);
                }
                let built;
                // The caller's root belongs to the context's variables;
                // variables made here get a root of their own.
                let (input, root) = match ctx.cel_request() {
                    Some(input) => (input, self.cel_root),
                    None => {
                        built = crate::engine::cel::CelRequest::of(req);
                        (&built, None)
                    }
                };
                let (verdict, properties) = crate::engine::cel::validate_rule(
                    checks,
                    self.cel_preconditions,
                    req,
                    input,
                    root,
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
            // Evaluated by its own handler before any check (`manifests`);
            // never nested in a foreach.
            ValidateCheck::Manifests(_) => Some(self.respond(
                RuleStatus::Error,
                "validate.manifests is verified by its own handler",
            )),
            ValidateCheck::Unsupported(field) => {
                Some(self.respond(RuleStatus::Error, format!("unsupported: {field}")))
            }
        }
    }

    /// The response of a `validate.cel` rule as the policy set's plan
    /// evaluated its validations with the set's others
    /// ([`crate::engine::cel::planned_verdict`]). `None` when the plan does
    /// not evaluate them or does not decide.
    fn planned_cel(
        &self,
        checks: &CelChecks,
        req: &Request,
        ctx: &JsonContext,
    ) -> Option<RuleResponse<'p>> {
        if !self.cel_preconditions.is_empty() {
            return None;
        }
        let answers = ctx
            .plan()?
            .cel_answers(checks, &req.object, &req.old_object)?;
        match crate::engine::cel::planned_verdict(checks, answers, EvalErrors::Deny)? {
            CelVerdict::Pass => Some(self.respond(RuleStatus::Pass, self.pass)),
            CelVerdict::Fail(message) => Some(self.respond(RuleStatus::Fail, message)),
            // A plan's answers only pass or fail.
            CelVerdict::NotMatched(_) | CelVerdict::Error(_) => None,
        }
    }

    /// The response of a rule's pattern, or of its anyPattern, as the
    /// policy set's plan (`crate::engine::plan`) decided it for the
    /// request's object: a pass, or a pattern's failure at the path the
    /// plan found. `None` when the plan does not decide: the check is then
    /// evaluated on its own.
    fn planned(
        &self,
        check: &ValidateCheck,
        req: &Request,
        ctx: &JsonContext,
    ) -> Option<RuleResponse<'p>> {
        let plan = ctx.plan()?;
        match check {
            ValidateCheck::Pattern(p) => {
                if plan.passes(p, &req.object)? {
                    return Some(self.respond(RuleStatus::Pass, self.pass));
                }
                // allowExistingViolations evaluates the old object too.
                if req.operation == "UPDATE" && self.v.allow_existing_violations {
                    return None;
                }
                let path = plan.failure(p, &req.object)?;
                Some(self.respond(
                    RuleStatus::Fail,
                    self.error_message(ctx, PatternFailure::Planned(path)),
                ))
            }
            // The first alternative that passes answers, as in `patterns`;
            // when none does, the message lists each one's failure, worded
            // as `patterns` words it. One the plan does not decide leaves
            // it all to `patterns`.
            ValidateCheck::AnyPattern(alternatives) => {
                for (i, p) in alternatives.iter().enumerate() {
                    if plan.passes(p, &req.object)? {
                        return Some(self.any_pattern_passed(i));
                    }
                }
                if req.operation == "UPDATE" && self.v.allow_existing_violations {
                    return None;
                }
                let mut failures = Vec::with_capacity(alternatives.len());
                for p in alternatives {
                    failures.push(plan.failure(p, &req.object)?);
                }
                let notes: usize = failures
                    .iter()
                    .map(|path| self.rule.len() + path.len() + 24)
                    .sum();
                let message = self.any_pattern_failure(ctx, notes, |out| {
                    for (i, path) in failures.iter().enumerate() {
                        if i > 0 {
                            out.push(' ');
                        }
                        push_alternative_note(out, self.rule, i, ALTERNATIVE_FAILED_AT_PATH);
                        path.write_to(out);
                    }
                });
                Some(self.respond(RuleStatus::Fail, message))
            }
            _ => None,
        }
    }

    /// Every index of the rule's anyPatterns was worded when it compiled
    /// (`CompiledRule::any_pattern_pass_messages`); any other is worded here.
    fn any_pattern_passed(&self, index: usize) -> RuleResponse<'p> {
        if let Some(message) = self.any_pattern_pass.get(index) {
            return self.respond(RuleStatus::Pass, message.as_str());
        }
        let index = IndexText::new(index);
        self.respond(
            RuleStatus::Pass,
            [
                "validation rule '",
                self.rule,
                "' anyPattern[",
                index.as_str(),
                "] passed.",
            ]
            .concat(),
        )
    }

    /// The message of an anyPattern none of whose alternatives passed:
    /// the rule's message, then the alternatives' notes, which `notes`
    /// (about `notes_len` bytes) writes.
    fn any_pattern_failure(
        &self,
        ctx: &JsonContext,
        notes_len: usize,
        notes: impl FnOnce(&mut String),
    ) -> String {
        let message = self.message(ctx);
        let head = match &message {
            Ok(Some(m)) => m,
            _ => "",
        };
        let mut out = String::with_capacity(20 + head.len() + notes_len);
        out.push_str("validation error: ");
        if !head.is_empty() {
            out.push_str(head);
            out.push_str(if head.ends_with('.') { " " } else { ". " });
        }
        notes(&mut out);
        out
    }

    pub(super) fn patterns(
        &self,
        check: &ValidateCheck,
        resource: JsonRef,
        ctx: &JsonContext,
    ) -> RuleResponse<'p> {
        let sub = Substituter {
            ctx,
            exprs: self.exprs,
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
                    Err(e) if e.path.is_empty() => self.respond(
                        RuleStatus::Error,
                        self.error_message(ctx, PatternFailure::Execution(&e.message())),
                    ),
                    Err(e) => self.respond(
                        RuleStatus::Fail,
                        self.error_message(ctx, PatternFailure::At(&e.path)),
                    ),
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
                    let e = match result {
                        Ok(()) => return self.any_pattern_passed(i),
                        Err(e) => e,
                    };
                    let (list, what, detail) = if e.kind == ErrorKind::Skip {
                        (&mut skipped, "] skipped: ", e.message())
                    } else if e.path.is_empty() {
                        (&mut failed, "] failed: ", e.message())
                    } else {
                        (
                            &mut failed,
                            ALTERNATIVE_FAILED_AT_PATH,
                            Cow::Borrowed(e.path.as_str()),
                        )
                    };
                    if list.is_empty() {
                        // Room for every alternative's note, so it grows once at most.
                        let one = self.rule.len() + what.len() + detail.len() + 12;
                        list.reserve((one + 1) * (pats.len() - i));
                    } else {
                        list.push(' ');
                    }
                    push_alternative_note(list, self.rule, i, what);
                    list.push_str(&detail);
                }
                if failed.is_empty() && !skipped.is_empty() {
                    return self.respond(RuleStatus::Skip, skipped);
                }
                let msg = self.any_pattern_failure(ctx, failed.len(), |out| out.push_str(&failed));
                self.respond(RuleStatus::Fail, msg)
            }
            _ => self.respond(RuleStatus::Error, "internal: not a pattern check"),
        }
    }
}

/// Validates `resource` against a pattern: the compiled form when it has
/// no variables, else substituted and compiled now.
fn check_pattern<'r>(
    sub: &Substituter,
    p: &Pattern,
    resource: JsonRef<'r>,
) -> Result<Result<(), Box<PatternError<'r>>>, VariableError> {
    // The representation is chosen once here: the pattern code is
    // generic, so each walk reads its own without a branch per lookup.
    match (&p.compiled, resource) {
        (Some(c), JsonRef::Value(v)) => Ok(c.validate(v)),
        (Some(c), JsonRef::Doc(j)) => Ok(c.validate(j)),
        (None, JsonRef::Value(v)) => Ok(pattern::validate(v, &sub.value(&p.value)?)),
        (None, JsonRef::Doc(j)) => Ok(pattern::validate(j, &sub.value(&p.value)?)),
    }
}

/// What an alternative of an anyPattern that failed at a path says before the path.
const ALTERNATIVE_FAILED_AT_PATH: &str = "] failed at path ";

/// `rule <rule>[<index>` and `what` (`] failed at path `): the start of an
/// anyPattern alternative's note, which its detail follows.
fn push_alternative_note(out: &mut String, rule: &str, index: usize, what: &str) {
    out.push_str("rule ");
    out.push_str(rule);
    out.push('[');
    out.push_str(IndexText::new(index).as_str());
    out.push_str(what);
}
