//! foreach: the list a foreach walks (for validate, mutate and generate),
//! and validate's foreach, which runs its body once per element in a scope
//! holding `element` and `elementIndex` (and `element<N>` when the policy
//! reads them), nesting foreach within foreach.

use super::prepare::{combine, decide_streamed};
use super::{FOREACH_FAILURE, RuleValidator, eval_conditions};
use crate::engine::conditions;
use crate::engine::context_loader;
use crate::engine::json_context::{JsonContext, Slot};
use crate::engine::variables::Substituter;
use crate::engine::{Request, RuleResponse, RuleStatus};
use crate::jmespath::Val;
use crate::json_doc::{JsonRef, View};
use crate::policy::compile::ForEach;
use crate::policy::conditions::{Condition, Conditions};
use crate::policy::template::{Template, holds_variables};
use crate::policy::{ExprCache, ValidateCheck};
use serde_json::Value;

/// The value of a foreach `list`: the pre-parsed expression, or the text
/// with its `{{ }}` substituted first.
pub(in crate::engine) fn foreach_list<'c>(
    list: &str,
    parsed: Option<&'c crate::jmespath::Expression>,
    ctx: &'c JsonContext<'c>,
    exprs: &'c ExprCache,
) -> Result<Val<'c>, String> {
    if let Some(e) = parsed {
        return e.resolve_val(ctx.root()).map_err(|e| e.to_string());
    }
    let sub = Substituter { ctx, exprs };
    let source = match sub.string(list).map_err(|e| e.to_string())? {
        Value::String(s) => s,
        other => other.to_string(),
    };
    exprs
        .resolve(&source, ctx.root())
        .map_err(|e| e.to_string())
}
impl<'p> RuleValidator<'_, 'p> {
    pub(super) fn foreach(
        &mut self,
        list: &[ForEach],
        req: &Request,
        ctx: &JsonContext,
    ) -> Option<RuleResponse<'p>> {
        let mut applied = 0;
        let mut list_error = None;
        for fe in list {
            if let Some((resp, count)) = self.decided_as_streamed(fe, ctx) {
                if resp.status != RuleStatus::Pass {
                    return Some(resp);
                }
                applied += count;
                continue;
            }
            let items = foreach_list(&fe.list, fe.list_expr.as_ref(), ctx, self.exprs);
            // As Kyverno's validateForEach: a list that fails to evaluate
            // skips its entry; an unknown key quietly, any other error is
            // the rule's error if no entry applied at all.
            let items = match items {
                Ok(items) => items,
                Err(e) => {
                    if !e.starts_with("Unknown key") {
                        list_error = Some(e);
                    }
                    continue;
                }
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
        // Nothing applied: no result (Kyverno's rule response is nil), or
        // the list's error.
        if applied == 0 {
            return list_error
                .map(|e| self.respond(RuleStatus::Error, format!("failed to evaluate list: {e}")));
        }
        Some(self.respond(RuleStatus::Pass, "rule passed"))
    }

    /// An entry whose elements the deny conditions decide directly
    /// ([`ForEach::deny_on_element`]), decided as its list's walk gives
    /// the elements, with no list built: the response and the number of
    /// elements applied, as [`Self::elements`] gives them on the built
    /// list. `None` when an element or the list needs that path (an
    /// element the conditions do not decide, a denial whose message reads
    /// variables, a list that is not a walk's list of JSON values).
    fn decided_as_streamed(
        &self,
        fe: &ForEach,
        ctx: &JsonContext,
    ) -> Option<(RuleResponse<'p>, usize)> {
        let ValidateCheck::Deny(conds) = &fe.check else {
            return None;
        };
        if !fe.deny_on_element || ctx.is_delete() {
            return None;
        }
        let (mut cleared, mut denied, mut undecided) = (0, false, false);
        // Elements after the first denial are not decided: the built list
        // stops there too. The walk still runs to its end, since an error
        // further on is the list's error.
        let list = fe.list_expr.as_ref()?;
        let mut decide = |element: JsonRef<'_>| {
            if denied || undecided {
                return;
            }
            if fe.element_scope == Some(true) && !element.is_object() {
                undecided = true;
                return;
            }
            match denies_element(conds, element) {
                Some(false) => cleared += 1,
                Some(true) => denied = true,
                None => undecided = true,
            }
        };
        ctx.stream_list(list, &mut decide)?;
        if undecided || (denied && self.v.message_has_variables) {
            return None;
        }
        Some(if denied {
            let message = [FOREACH_FAILURE, &self.denial(ctx)].concat();
            (self.respond(RuleStatus::Fail, message), cleared)
        } else {
            (self.respond(RuleStatus::Pass, ""), cleared)
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
        let direct = match &fe.check {
            ValidateCheck::Deny(conds) if fe.deny_on_element && !ctx.is_delete() => Some(conds),
            _ => None,
        };
        for (index, item) in items.into_iter().enumerate() {
            if item.is_null() {
                continue;
            }
            // An element the deny conditions decide is answered as the
            // scoped path would answer it (a deny check with no steps
            // before it): cleared, it passes; denied, the rule fails with
            // its message, when that reads no variables. Anything else is
            // left to that path.
            if let Some(conds) = direct
                && let Some(element) = item.as_json_ref()
                && (fe.element_scope != Some(true) || element.is_object())
            {
                match denies_element(conds, element) {
                    Some(false) => {
                        applied += 1;
                        continue;
                    }
                    Some(true) if !self.v.message_has_variables => {
                        let message = [FOREACH_FAILURE, &self.denial(ctx)].concat();
                        return (self.respond(RuleStatus::Fail, message), applied);
                    }
                    _ => {}
                }
            }
            let mut scope = ctx.child();
            let item = match item {
                Val::Ref(v) => Slot::Ref(v),
                Val::Doc(j) => Slot::Doc(j),
                other => Slot::Own(other.into_owned()),
            };
            let is_object = item.get().is_object();
            if self.numbered_elements {
                scope.set(format!("element{}", self.nesting), item.get().to_value());
                scope.set(format!("elementIndex{}", self.nesting), Value::from(index));
            }
            scope.set_slot("element", item);
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
                // Kyverno v1.19's validateElements: an element whose
                // preconditions cannot be evaluated is skipped; any other
                // error ends the rule at that element.
                Some(r)
                    if r.status == RuleStatus::Error
                        && r.message.contains("failed to evaluate preconditions") =>
                {
                    continue;
                }
                Some(r) if r.status == RuleStatus::Error => {
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
            return Some(self.respond(RuleStatus::Error, e.to_string()));
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
                let null = JsonRef::Value(&crate::jmespath::NULL);
                let resource = if scoped {
                    ctx.get("element").unwrap_or(null)
                } else {
                    req.object.json()
                };
                Some(self.patterns(c, resource, ctx))
            }
            ValidateCheck::Deny(_) => self.check(&fe.check, req, ctx, None),
            other => {
                let item = ctx.get("element").map_or(Value::Null, JsonRef::to_value);
                self.check(other, req, ctx, Some(JsonRef::Value(&item)))
            }
        };
        self.nesting -= 1;
        r
    }
}

/// Whether deny `conds` hold for a foreach `element`, evaluated on it
/// directly and [`combine`]d as [`eval_conditions`] combines them in the
/// element's scope; the foreach compiled them as reading only the
/// element ([`Conditions::read_only_element`]). `None` when an operand's
/// value needs the scoped path: null (which may be a missing key's error
/// there) or a string that itself holds variables.
fn denies_element(conds: &Conditions, element: JsonRef) -> Option<bool> {
    let holds = |c: &Condition| -> Option<bool> {
        let streamed = decide_streamed(c, |t, each| {
            t.expression(false)?
                .stream_strings_under(&["element"], element, each)
        });
        if streamed.is_some() {
            return streamed;
        }
        let key = element_operand(&c.key, element)?;
        let value = element_operand(&c.value, element)?;
        let op = *c.operator.as_ref().ok()?;
        Some(conditions::evaluate_vals(
            op,
            &key,
            &value,
            c.value_is_plain_list,
        ))
    };
    combine(conds, |c| holds(c).ok_or(()), |_| {}).ok()
}

/// A condition's key or value for [`denies_element`].
fn element_operand<'a>(t: &'a Template, element: JsonRef<'a>) -> Option<Val<'a>> {
    match t {
        Template::Literal(v) => Some(Val::Ref(v)),
        Template::Whole(exprs, _) => {
            let v = exprs.0.eval_bound("element", element)?;
            (!v.is_null() && !holds_variables(&v)).then_some(v)
        }
        Template::Mixed(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_random::Gen;
    use serde_json::json;

    /// The direct decision agrees with the conditions evaluated in the
    /// element's scope, on random elements held either way.
    #[test]
    fn elements_are_decided_as_their_scope_decides_them() {
        let direct = [
            json!({"all": [{"key": "s", "operator": "AnyNotIn", "value": "{{ element.a[] || `[]` }}"}]}),
            json!({"all": [{"key": "{{ element.a[].b || `[]` }}", "operator": "AnyNotIn", "value": ["s", ""]}]}),
            json!({"any": [
                {"key": "{{ element.a.[b, c][] }}", "operator": "AllIn", "value": ["s", 1]},
                {"key": "{{ element.b[*].c || 'none' }}", "operator": "Equals", "value": "none"}
            ]}),
            json!({
                "all": [{"key": "{{ element.a[] }}", "operator": "AnyIn", "value": ["s"]}],
                "any": [{"key": "{{ element.c[] || `[]` }}", "operator": "AllNotIn", "value": [1]}]
            }),
            json!([{"key": "{{ element[].a || 'x' }}", "operator": "Equals", "value": "{{ element[] }}"}]),
        ];
        let scoped = [
            json!({"all": [{"key": "{{ element.a }}", "operator": "Equals", "value": "s"}]}),
            json!({"all": [{"key": "{{ request.object.a[] }}", "operator": "Equals", "value": "s"}]}),
            json!({"all": [{"key": "x-{{ element.a[] }}", "operator": "Equals", "value": "s"}]}),
            json!({"all": [{"key": "{{ element.a[] }}", "operator": "Sometimes", "value": "s"}]}),
        ];
        let direct: Vec<Conditions> = direct
            .iter()
            .map(|c| Conditions::parse(c).unwrap())
            .collect();
        for (n, c) in direct.iter().enumerate() {
            assert!(
                c.read_only_element(),
                "conditions {n} read only the element"
            );
        }
        for c in &scoped {
            assert!(!Conditions::parse(c).unwrap().read_only_element(), "{c}");
        }
        let root = JsonContext::from_value(json!({"request": {"operation": "CREATE"}}));
        let exprs = ExprCache::default();
        let mut g = Gen(11);
        let (mut decided, mut denied) = (0, 0);
        for _ in 0..3_000 {
            let element = g.nested(4);
            let text = element.to_string();
            let doc = crate::json_doc::Doc::parse(&text).unwrap();
            for (n, conds) in direct.iter().enumerate() {
                for (held, slot) in [
                    (JsonRef::Value(&element), Slot::Ref(&element)),
                    (JsonRef::Doc(doc.root()), Slot::Doc(doc.root())),
                ] {
                    let Some(denies) = denies_element(conds, held) else {
                        continue;
                    };
                    let mut scope = root.child();
                    scope.set_slot("element", slot);
                    let want = eval_conditions(conds, &scope, &exprs).map(|(b, _)| b);
                    assert_eq!(Ok(denies), want, "conditions {n} on {text}");
                    decided += 1;
                    denied += usize::from(denies);
                }
            }
        }
        // Both outcomes are exercised, on most of the elements.
        assert!(
            decided > 15_000 && denied > 3_000 && decided - denied > 3_000,
            "{decided} {denied}"
        );
    }
}
