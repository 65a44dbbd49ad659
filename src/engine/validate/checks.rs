//! One validate check of a rule or of a foreach element: deny conditions,
//! pattern and anyPattern (with allowExistingViolations on UPDATE),
//! foreach, podSecurity, CEL expressions; and the pattern and anyPattern
//! messages Kyverno gives.

use super::{RuleValidator, eval_conditions};
use crate::engine::cel::CelVerdict;
use crate::engine::json_context::JsonContext;
use crate::engine::variables::{Substituter, VariableError};
use crate::engine::{Request, RuleResponse, RuleStatus};
use crate::json_doc::JsonRef;
use crate::pattern::{self, ErrorKind, IndexText, PatternError};
use crate::policy::ValidateCheck;
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
                let built;
                let input = match ctx.cel_request() {
                    Some(input) => input,
                    None => {
                        built = crate::engine::cel::CelRequest::of(req);
                        &built
                    }
                };
                let (verdict, properties) = crate::engine::cel::validate_rule(
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
                let path = plan.failure_path(p, &req.object)?;
                Some(self.respond(RuleStatus::Fail, self.error_message(ctx, "", &path)))
            }
            // The first alternative that passes answers, as in `patterns`;
            // one the plan does not decide, or none passing (whose message
            // lists each failure), leaves it to `patterns`.
            ValidateCheck::AnyPattern(alternatives) => {
                for (i, p) in alternatives.iter().enumerate() {
                    if plan.passes(p, &req.object)? {
                        return Some(self.any_pattern_passed(i));
                    }
                }
                None
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
