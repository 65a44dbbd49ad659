//! What every rule type does before its body, and the conditions it and
//! validate's deny evaluate: the PolicyExceptions that skip a rule, the
//! injected rule values, context entries and preconditions, and `{any,
//! all}` condition blocks (with per-request memos). Mutate and generate
//! take these steps too.

use crate::engine::context_loader;
use crate::engine::json_context::JsonContext;
use crate::engine::variables::Substituter;
use crate::engine::{EvalEnv, Request, RuleResponse, RuleStatus, conditions};
use crate::jmespath::{Streamed, Val};
use crate::matching::ADMISSION_OPERATIONS;
use crate::policy::compile::ValidateRule;
use crate::policy::conditions::{Condition, WalkSide};
use crate::policy::template::{Template, holds_variables};
use crate::policy::{
    CompiledException, CompiledPolicy, CompiledRule, Conditions, ExprCache, RuleBody, ValidateCheck,
};
use serde_json::json;

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
    if let Some(stop) = load_rule_context(rule, ctx, exprs, env) {
        return Some(stop);
    }
    if let Some(stop) = check_preconditions(rule, ctx, exprs) {
        return Some(stop);
    }
    // These rules' messages are part of their bodies.
    let d = &rule.deferred;
    load_step(rule, &d.before_body, ctx, exprs, env)
        .or_else(|| load_step(rule, &d.before_message, ctx, exprs, env))
}

/// Whether [`load_rule_context`] sets anything: the rule has context
/// entries or injected values. A rule that sets nothing is evaluated in
/// the request's context itself, with no scope of its own.
pub(in crate::engine) fn sets_context(rule: &CompiledRule, env: &EvalEnv) -> bool {
    !rule.context.is_empty() || env.rule_values.for_rule(&rule.name).is_some()
}

/// The first steps of [`prepare_rule`]: the injected rule values and the
/// context entries the preconditions read, set in the rule's scope `ctx`.
pub(in crate::engine) fn load_rule_context<'p>(
    rule: &'p CompiledRule,
    ctx: &mut JsonContext,
    exprs: &ExprCache,
    env: &EvalEnv,
) -> Option<RuleResponse<'p>> {
    if let Some(values) = env.rule_values.for_rule(&rule.name) {
        for (k, val) in values {
            ctx.set_path(k, val.clone());
        }
    }
    load_step(rule, &rule.deferred.before_preconditions, ctx, exprs, env)
}

/// Loads the context entries of `rule` that one step reaches
/// ([`crate::policy::deferred_context`]); `Some` is the rule's error when
/// one fails.
pub(in crate::engine) fn load_step<'p>(
    rule: &'p CompiledRule,
    order: &[usize],
    ctx: &mut JsonContext,
    exprs: &ExprCache,
    env: &EvalEnv,
) -> Option<RuleResponse<'p>> {
    if order.is_empty() {
        return None;
    }
    context_loader::load_deferred(&rule.context, order, ctx, exprs, env.resolver)
        .err()
        .map(|e| RuleResponse::new(&rule.name, RuleStatus::Error, e.to_string()))
}

/// The last step of [`prepare_rule`]: the rule's preconditions.
pub(in crate::engine) fn check_preconditions<'p>(
    rule: &'p CompiledRule,
    ctx: &JsonContext,
    exprs: &ExprCache,
) -> Option<RuleResponse<'p>> {
    let name = rule.name.as_str();
    match &rule.preconditions {
        Err(e) => Some(RuleResponse::new(
            name,
            RuleStatus::Error,
            format!("invalid preconditions: {e}"),
        )),
        // Met by their tables by operation (`{{ request.operation }}` not
        // DELETE on a CREATE): nothing to combine or word.
        Ok(Some(pre)) if met_by_operation(pre, ctx) => None,
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

/// Fills the table by operation ([`crate::policy::Condition::by_operation`]) of each
/// condition of `policy`'s preconditions and deny checks that the
/// request's operation alone decides: evaluated here once per operation,
/// in a context that holds only that operation, rather than in every
/// request.
pub(in crate::engine) fn decide_by_operation(policy: &mut CompiledPolicy) {
    let exprs = &policy.exprs;
    for rule in &mut policy.rules {
        let deny = match &mut rule.body {
            RuleBody::Validate(ValidateRule {
                check: ValidateCheck::Deny(c),
                ..
            }) => Some(c),
            _ => None,
        };
        let pre = rule.preconditions.as_mut().ok().and_then(Option::as_mut);
        for conds in pre.into_iter().chain(deny) {
            let Conditions { any, all } = conds;
            for cond in any.iter_mut().chain(all.iter_mut()).flatten() {
                if cond.operator.is_err()
                    || !cond.key.decided_by_operation()
                    || !cond.value.decided_by_operation()
                {
                    continue;
                }
                cond.by_operation = Some(ADMISSION_OPERATIONS.map(|op| {
                    let ctx = JsonContext::from_value(json!({"request": {"operation": op}}));
                    eval_condition(cond, &ctx, exprs).ok()
                }));
            }
        }
    }
}

/// Whether `c` is a list of `all` conditions that the request's operation
/// alone decides ([`Condition::by_operation`]), every one met for the
/// operation of the request `ctx` still holds: [`eval_conditions`] would
/// then hold, with no message.
fn met_by_operation(c: &Conditions, ctx: &JsonContext) -> bool {
    let (None, Some(all)) = (&c.any, &c.all) else {
        return false;
    };
    let Some(op) = all.first().and_then(|_| ctx.request_operation()) else {
        return false;
    };
    all.iter()
        .all(|cond| cond.by_operation.is_some_and(|t| t[op] == Some(true)))
}

/// Evaluates `{any, all}` conditions; returns (result, messages of the deciding conditions).
pub fn eval_conditions(
    c: &Conditions,
    ctx: &JsonContext,
    exprs: &ExprCache,
) -> Result<(bool, String), String> {
    let one = |cond: &Condition| eval_condition(cond, ctx, exprs);
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

/// One condition's result in `ctx`: from its table by operation when the
/// context still holds its request's own operation, else from its memo,
/// else evaluated (and memoised when it reads only `request`).
fn eval_condition(cond: &Condition, ctx: &JsonContext, exprs: &ExprCache) -> Result<bool, String> {
    if let Some(table) = &cond.by_operation
        && let Some(decided) = ctx.request_operation().and_then(|op| table[op])
    {
        return Ok(decided);
    }
    if let Some(hit) = cond.memo.and_then(|id| ctx.memo_get(id)) {
        return Ok(hit);
    }
    let op = cond.operator.clone()?;
    let delete = ctx.is_delete();
    let streamed = decide_streamed(cond, |t, each| {
        ctx.stream_strings(t.expression(delete)?, each)
    });
    let result = match streamed {
        Some(result) => result,
        None => {
            let sub = Substituter { ctx, exprs };
            let key = sub
                .render(&cond.key)
                .map_err(|e| format!("failed to substitute variables in condition key: {e}"))?;
            let value = sub
                .render(&cond.value)
                .map_err(|e| format!("failed to substitute variables in condition value: {e}"))?;
            conditions::evaluate_vals(op, &key, &value, cond.value_is_plain_list)
        }
    };
    if let Some(id) = cond.memo {
        ctx.memo_put(id, result);
    }
    Ok(result)
}

/// A set operator between a compiled walk and a literal
/// ([`Condition::streamed`]) decided as the walk gives its strings:
/// `stream` runs the walk of the template given. The verdict is the one
/// the condition's rendered key and value give; `None` when they must be
/// rendered (see [`conditions::set_op_streamed`]), and for any other
/// condition.
pub(in crate::engine) fn decide_streamed<'a>(
    cond: &'a Condition,
    stream: impl FnOnce(&'a Template, &mut dyn FnMut(&str)) -> Option<Streamed<'a>>,
) -> Option<bool> {
    let side = cond.streamed?;
    let op = *cond.operator.as_ref().ok()?;
    let (walk, literal) = match side {
        WalkSide::Key => (&cond.key, &cond.value),
        WalkSide::Value => (&cond.value, &cond.key),
    };
    let Template::Literal(literal) = literal else {
        return None;
    };
    let walk_is_key = side == WalkSide::Key;
    conditions::set_op_streamed(op, walk_is_key, literal, cond.value_is_plain_list, |each| {
        match stream(walk, each)? {
            // Rendering would substitute a literal that holds variables.
            Streamed::Otherwise(l) if holds_variables(&Val::Ref(l)) => None,
            ended => Some(ended),
        }
    })
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
    use crate::engine::json_context::Builtins;
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
        let root = req.json_context(Builtins::default());
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

#[cfg(test)]
mod streamed_tests {
    use super::*;
    use crate::engine::json_context::Builtins;
    use crate::jmespath::Slot;
    use crate::json_doc::{Doc, Document, JsonRef};
    use crate::policy::conditions::Operator;
    use crate::test_random::Gen;
    use serde_json::json;

    /// Every condition of a set operator between each walk and each
    /// literal, either way round, rooted at `root`.
    fn conditions(root: &str) -> Vec<Condition> {
        let walks = [
            "a[]",
            "a[].b || `[]`",
            "[a, b][].c[] || ''",
            "a[].keys(@)[] || 's'",
            "a.b[*] || `[\"s\", 1]`",
            "b[].keys(@)",
        ];
        let literals = [
            json!(["s", ""]),
            json!(["a", "b", "c"]),
            json!("s"),
            json!(["s*"]),
            json!(["?"]),
            json!([]),
            json!(["s", 1]),
            json!("1-3"),
        ];
        let mut out = Vec::new();
        for walk in walks {
            let walk = json!(format!("{{{{ {root}.{walk} }}}}"));
            for literal in &literals {
                for op in ["AnyIn", "AllIn", "AnyNotIn", "AllNotIn"] {
                    for (key, value) in [(&walk, literal), (literal, &walk)] {
                        let c = json!([{"key": key, "operator": op, "value": value}]);
                        let parsed = Conditions::parse(&c).unwrap().all.unwrap().remove(0);
                        assert!(parsed.streamed.is_some(), "{c}");
                        out.push(parsed);
                    }
                }
            }
        }
        out
    }

    /// The verdict of `c` with its key and value rendered in `ctx`, when
    /// they render.
    fn rendered(c: &Condition, ctx: &JsonContext) -> Option<bool> {
        let exprs = ExprCache::default();
        let sub = Substituter { ctx, exprs: &exprs };
        let key = sub.render(&c.key).ok()?;
        let value = sub.render(&c.value).ok()?;
        let op = c.operator.clone().unwrap();
        Some(conditions::evaluate_vals(
            op,
            &key,
            &value,
            c.value_is_plain_list,
        ))
    }

    /// A set operator between a compiled walk and a literal, decided as
    /// the walk gives its strings, has the verdict of its rendered key and
    /// value: on random objects held as values and as documents, read
    /// from `request.object` in a request's scope and bound to a foreach's
    /// `element`.
    #[test]
    fn streamed_set_conditions_decide_as_rendered() {
        let on_request = conditions("request.object");
        let on_element = conditions("element");
        let mut g = Gen(5);
        let (mut decided, mut fallen_back, mut any_in) = (0, 0, [0, 0]);
        for _ in 0..400 {
            let object = json!({"kind": "Pod", "a": g.nested(3), "b": g.nested(3)});
            let text = object.to_string();
            let as_value = Request::offline(&object, "CREATE", Default::default(), None);
            let as_doc = Request {
                object: Document::from_doc(Doc::parse(&text).unwrap()),
                ..as_value.clone()
            };
            for req in [&as_value, &as_doc] {
                let ctx = req.json_context(Builtins::default());
                let mut scope = ctx.child();
                let element = req.object.json();
                scope.set_slot(
                    "element",
                    match element {
                        JsonRef::Value(v) => Slot::Ref(v),
                        JsonRef::Doc(j) => Slot::Doc(j),
                    },
                );
                for (c, e) in on_request.iter().zip(&on_element) {
                    let in_scope = decide_streamed(c, |t, each| {
                        t.expression(false)?.stream_strings(ctx.root(), each)
                    });
                    let bound = decide_streamed(e, |t, each| {
                        t.expression(false)?
                            .stream_strings_under(&["element"], element, each)
                    });
                    let under = decide_streamed(c, |t, each| {
                        let expr = t.expression(false)?;
                        let (path, object) = ctx.request_start(expr)?;
                        expr.stream_strings_under(&path, object, each)
                    });
                    // The same walk on the same object, reached three ways.
                    assert_eq!(in_scope, bound, "{:?} on {text}", c.key);
                    assert_eq!(in_scope, under, "from the object: {:?} on {text}", c.key);
                    let Some(verdict) = in_scope else {
                        fallen_back += 1;
                        continue;
                    };
                    let text = format!("{:?} {:?} {:?} on {text}", c.key, c.operator, c.value);
                    assert_eq!(Some(verdict), rendered(c, &ctx), "{text}");
                    assert_eq!(Some(verdict), rendered(e, &scope), "element: {text}");
                    decided += 1;
                    if c.operator == Ok(Operator::AnyIn) {
                        any_in[usize::from(verdict)] += 1;
                    }
                }
            }
        }
        eprintln!("{decided} decided ({any_in:?} AnyIn false/true), {fallen_back} rendered");
        // Both verdicts, and the cases left to rendering, are exercised
        // (the floors are the counts of the run that added the test).
        assert!(
            decided >= 126_144 && any_in[0] > 5_000 && any_in[1] > 5_000 && fallen_back >= 181_056,
            "{decided} decided, {any_in:?}, {fallen_back} rendered"
        );
    }

    #[test]
    fn conditions_of_other_shapes_are_not_streamed() {
        for c in [
            json!({"key": "{{ request.object.a[] }}", "operator": "Equals", "value": ["s"]}),
            json!({"key": "{{ request.object.a }}", "operator": "AnyIn", "value": ["s"]}),
            json!({"key": "{{ request.object.a[] }}", "operator": "AnyIn", "value": "{{ request.object.b[] }}"}),
            json!({"key": "x-{{ request.object.a[] }}", "operator": "AnyIn", "value": ["s"]}),
        ] {
            let parsed = Conditions::parse(&json!([c]))
                .unwrap()
                .all
                .unwrap()
                .remove(0);
            assert_eq!(parsed.streamed, None, "{c}");
        }
    }
}
