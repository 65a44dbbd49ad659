//! DeletingPolicy: whether a scheduled run deletes a resource. Its
//! `matchConstraints` (for any operation), then its `conditions`, all
//! true, with `object`, `namespaceObject` and `variables` bound as
//! Kyverno binds them.

use super::{CelRequest, ResolverLookups, bind_variables, conditions_hold, scope_view};
use crate::context::Resolver;
use crate::engine::Request;
use crate::policy::cel_policy::{CompiledNamed, PolicyScope};
use serde_json::Value;

/// `None` when the matchConstraints do not select the resource; else
/// whether the conditions hold.
pub fn deleting_policy_selects(
    scope: &PolicyScope,
    variables: &[CompiledNamed],
    req: &Request,
    namespace: Option<&Value>,
    resolver: &dyn Resolver,
) -> Result<Option<bool>, String> {
    let mut input = CelRequest::of(req);
    if let Some(ns) = namespace {
        input = input.with_namespace_object(ns);
    }
    if scope_view(scope, req, &input).is_none() {
        return Ok(None);
    }
    let lookups = ResolverLookups(resolver);
    let root = input.activation();
    let vars = bind_variables(&root, variables, &lookups);
    match conditions_hold(&scope.match_conditions, &vars, &lookups) {
        Ok(None) => Ok(Some(true)),
        Ok(Some(_)) => Ok(Some(false)),
        Err(e) => Err(format!("failed to evaluate conditions: {e}")),
    }
}
