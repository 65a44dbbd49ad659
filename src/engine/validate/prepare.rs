//! What every rule type does before its body, and the conditions it and
//! validate's deny evaluate: the PolicyExceptions that skip a rule, the
//! injected rule values, context entries and preconditions, and `{any,
//! all}` condition blocks (with per-request memos). Mutate and generate
//! take these steps too.

use crate::engine::context_loader;
use crate::engine::json_context::JsonContext;
use crate::engine::variables::Substituter;
use crate::engine::{EvalEnv, Request, RuleResponse, RuleStatus, conditions};
use crate::policy::conditions::Condition;
use crate::policy::{CompiledException, CompiledPolicy, CompiledRule, Conditions, ExprCache};

/// The PolicyExceptions that cover this rule and match the request.
pub(in crate::engine) fn applicable_exceptions<'e>(
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
pub(in crate::engine) fn before_body<'p>(
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

/// What every rule type does before its body: injected rule values,
/// context entries, preconditions. `Some` is the rule's response when it
/// stops there (error, or skip on false preconditions).
pub(in crate::engine) fn prepare_rule<'p>(
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
/// Evaluates `{any, all}` conditions; returns (result, messages of the deciding conditions).
pub fn eval_conditions(
    c: &Conditions,
    ctx: &JsonContext,
    exprs: &ExprCache,
) -> Result<(bool, String), String> {
    let sub = Substituter { ctx, exprs };
    let one = |cond: &Condition| -> Result<bool, String> {
        if let Some(hit) = cond.memo.and_then(|id| ctx.memo_get(id)) {
            return Ok(hit);
        }
        let op = cond.operator.clone()?;
        let key = sub
            .render(&cond.key)
            .map_err(|e| format!("failed to substitute variables in condition key: {e}"))?;
        let value = sub
            .render(&cond.value)
            .map_err(|e| format!("failed to substitute variables in condition value: {e}"))?;
        let result = conditions::evaluate_vals(op, &key, &value, cond.value_is_plain_list);
        if let Some(id) = cond.memo {
            ctx.memo_put(id, result);
        }
        Ok(result)
    };
    let mut messages = String::new();
    let holds = combine(c, one, |cond| {
        if let Some(m) = &cond.message {
            messages.push_str("; ");
            messages.push_str(m);
        }
    })?;
    if holds {
        return Ok((true, String::new()));
    }
    Ok((false, messages))
}

/// `{any, all}` conditions combined as Kyverno combines them: `any` holds
/// when one of its conditions holds (or it has none), and every `all`
/// condition must hold. `unmet` is told of each condition found false on
/// the way. kyverno-compat: `all` is evaluated even when `any` already
/// failed, so an error there is still the rule's error.
pub(in crate::engine) fn combine<E>(
    c: &Conditions,
    mut holds: impl FnMut(&Condition) -> Result<bool, E>,
    mut unmet: impl FnMut(&Condition),
) -> Result<bool, E> {
    let mut any_failed = false;
    if let Some(any) = &c.any {
        let mut matched = false;
        for cond in any {
            if holds(cond)? {
                matched = true;
                break;
            }
            unmet(cond);
        }
        any_failed = !matched && !any.is_empty();
    }
    if let Some(all) = &c.all {
        for cond in all {
            if !holds(cond)? {
                unmet(cond);
                return Ok(false);
            }
        }
    }
    Ok(!any_failed)
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
