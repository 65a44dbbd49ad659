//! Mutate rules (docs/kyverno-semantics.md#mutate-rules):
//! `patchStrategicMerge` with Kyverno's anchors, `patchesJson6902`, and
//! `foreach`. Rules run in order, each on the output of the previous one; a
//! rule that changes nothing is `skip`.
//! Mutate existing (`targets`) patches the targets the resolver finds,
//! not the trigger; applying them in a cluster is the background
//! controller's job.

use super::context_loader;
use super::json_context::JsonContext;
use super::validate::{before_body, eval_conditions, foreach_list};
use super::variables::Substituter;
use super::{EvalEnv, PolicyResponse, Request, RuleResponse, RuleStatus, RuleType};
use crate::context::Resolver;
use crate::matching::selector_matches;
use crate::patch::{json_patch, strategic};
use crate::pattern::overlay;
use crate::policy::compile::PolicyScope;
use crate::policy::mutation::{ForEachMutate, MutatePatch, Target, parse_operations};
use crate::policy::{CompiledPolicy, ExprCache, RuleBody};
use crate::wildcard;
use serde_json::Value;

/// A policy's mutate rules applied to one resource.
#[derive(Debug)]
pub struct MutateOutcome<'p> {
    pub response: PolicyResponse<'p>,
    /// The resource after the policy's rules; `None` when none changed it.
    pub patched: Option<Value>,
}

impl MutateOutcome<'_> {
    /// The resource after the policy's rules.
    pub fn resource<'a>(&'a self, input: &'a Value) -> &'a Value {
        self.patched.as_ref().unwrap_or(input)
    }
}

/// Applies the mutate rules of `policy` to `req.object`, in order. `ctx`
/// is the request's context; each rule sees `request.object` as patched by
/// the rules before it.
pub fn mutate_policy<'p>(
    policy: &'p CompiledPolicy,
    req: &Request,
    ctx: &JsonContext,
    env: &EvalEnv,
) -> MutateOutcome<'p> {
    let mut rules = Vec::new();
    let mut patched: Option<Value> = None;
    let in_scope = policy.scope != PolicyScope::Namespaced
        || policy.namespace.as_deref() == Some(req.namespace());
    // The request as the next rule sees it, once a rule changed the object
    // (built only when another rule comes).
    let mut current: Option<Request> = None;
    let mut stale = false;
    for rule in policy.rules.iter().filter(|_| in_scope) {
        let RuleBody::Mutate(m) = &rule.body else {
            continue;
        };
        // Mutation does not change the kind: filter before building anything.
        if rule
            .kinds
            .as_ref()
            .is_some_and(|k| !k.contains(&req.gvk.kind))
        {
            continue;
        }
        if stale && let Some(p) = &patched {
            let mut next = req.clone();
            next.object = p.clone().into();
            current = Some(next);
            stale = false;
        }
        let req_now = current.as_ref().unwrap_or(req);
        let input = req_now.match_input();
        if !rule.match_resources.matches(&input)
            || rule.exclude.as_ref().is_some_and(|e| e.excludes(&input))
        {
            continue;
        }
        let name = rule.name.as_str();
        let mut rctx = ctx.child();
        if let (Some(_), Some(p)) = (&current, &patched) {
            rctx.set_path("request.object", p.clone());
        }
        let respond = |status, message: String| {
            RuleResponse::new(name, status, message).of_type(RuleType::Mutation)
        };
        if let Some(stop) = before_body(policy, rule, req_now, &mut rctx, env) {
            rules.push(stop.of_type(RuleType::Mutation));
            continue;
        }
        let mut mutator = Mutator {
            exprs: &policy.exprs,
            resolver: env.resolver,
            numbered_elements: policy.uses_numbered_elements,
        };
        if !m.targets.is_empty() {
            // Mutate existing: the trigger stays as it is.
            let response = match mutator.targets(&m.targets, &m.patch, &rctx) {
                Err(e) => respond(RuleStatus::Error, e),
                Ok(patched) if patched.is_empty() => {
                    respond(RuleStatus::Skip, "no targets patched".into())
                }
                Ok(patched) => respond(
                    RuleStatus::Pass,
                    format!("mutated {} target(s)", patched.len()),
                )
                .with_resources(patched),
            };
            rules.push(response);
            continue;
        }
        let resource = patched.as_ref().unwrap_or(req.object.value());
        let response = match mutator.apply(&m.patch, resource, &rctx, 0) {
            Err(e) => respond(RuleStatus::Error, e),
            Ok((out, applied)) => {
                let foreach = matches!(m.patch, MutatePatch::Foreach(_));
                if out == *resource {
                    let message = if foreach {
                        format!("{applied} elements processed")
                    } else {
                        "no patches applied".to_string()
                    };
                    respond(RuleStatus::Skip, message)
                } else {
                    // Kyverno's success message names the patched resource.
                    let message = mutated_message(&out);
                    patched = Some(out);
                    stale = true;
                    respond(RuleStatus::Pass, message)
                }
            }
        };
        let applied = response.status != RuleStatus::Skip;
        rules.push(response);
        if policy.apply_one && applied {
            break;
        }
    }
    MutateOutcome {
        response: PolicyResponse {
            policy: policy.qualified_name(),
            rules: rules.into(),
        },
        patched,
    }
}

struct Mutator<'a> {
    exprs: &'a ExprCache,
    resolver: &'a dyn Resolver,
    /// Whether the policy reads `element<N>` / `elementIndex<N>`.
    numbered_elements: bool,
}

impl Mutator<'_> {
    /// Mutate existing (docs/kyverno-semantics.md#mutate-existing): the
    /// targets the specs select, read through the resolver, each patched with
    /// `target` set to it. Returns the targets the patch changed, as patched.
    fn targets(
        &mut self,
        targets: &[Target],
        patch: &MutatePatch,
        ctx: &JsonContext,
    ) -> Result<Vec<Value>, String> {
        let sub = Substituter {
            ctx,
            exprs: self.exprs,
        };
        let text = |s: &Option<String>| -> Result<String, String> {
            match s.as_deref().map(|s| sub.string(s)) {
                None => Ok(String::new()),
                Some(Ok(Value::String(v))) => Ok(v),
                Some(Ok(other)) => Ok(other.to_string()),
                Some(Err(e)) => Err(format!("failed to substitute variables in target: {e}")),
            }
        };
        let mut out = Vec::new();
        for t in targets {
            let spec = &t.spec;
            let name = text(&spec.name)?;
            let namespace = text(&spec.namespace)?;
            // One object when the name and namespace are exact; else a
            // list (every namespace when none or a pattern is named, as
            // Kyverno's client lists), filtered below.
            let wild = |s: &str| s.contains(['*', '?']);
            let found =
                if !name.is_empty() && !wild(&name) && !namespace.is_empty() && !wild(&namespace) {
                    self.resolver
                        .resource(&spec.api_version, &spec.kind, &namespace, &name)
                        .map_err(|e| format!("failed to get target: {e}"))?
                        .into_iter()
                        .collect()
                } else {
                    let listed = if wild(&namespace) {
                        ""
                    } else {
                        namespace.as_str()
                    };
                    self.resolver
                        .resources(&spec.api_version, &spec.kind, listed)
                        .map_err(|e| format!("failed to list targets: {e}"))?
                };
            for target in found {
                let field = |p: &str| {
                    target
                        .pointer(p)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                };
                if !name.is_empty() && !wildcard::matches(&name, field("/metadata/name")) {
                    continue;
                }
                if wild(&namespace) && !wildcard::matches(&namespace, field("/metadata/namespace"))
                {
                    continue;
                }
                if spec
                    .uid
                    .as_deref()
                    .is_some_and(|u| u != field("/metadata/uid"))
                {
                    continue;
                }
                let labels = target
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object);
                if spec
                    .selector
                    .as_ref()
                    .is_some_and(|s| !selector_matches(s, labels))
                {
                    continue;
                }
                let mut scope = ctx.child();
                scope.set_ref("target", &target);
                context_loader::load(&spec.context, &mut scope, self.exprs, self.resolver)?;
                if let Some(pre) = &t.preconditions {
                    match eval_conditions(pre, &scope, self.exprs) {
                        Ok((true, _)) => {}
                        Ok((false, _)) => continue,
                        Err(e) => return Err(format!("failed to evaluate preconditions: {e}")),
                    }
                }
                let (patched, _) = self.apply(patch, &target, &scope, 0)?;
                if patched != target {
                    out.push(patched);
                }
            }
        }
        Ok(out)
    }

    /// Applies one patch to `resource`: the result, and how many foreach
    /// entries changed it (1 for a plain patch that changed it).
    fn apply(
        &mut self,
        patch: &MutatePatch,
        resource: &Value,
        ctx: &JsonContext,
        nesting: usize,
    ) -> Result<(Value, usize), String> {
        let sub = Substituter {
            ctx,
            exprs: self.exprs,
        };
        let out = match patch {
            MutatePatch::Strategic {
                prepared: Some(overlay),
                ..
            } => {
                // The one check of the preprocessing that reads the
                // resource when the overlay has no anchors.
                if let Err(found) = overlay::lists_of_maps_meet_lists(overlay, resource) {
                    return Err(not_a_list(found));
                }
                strategic::merge_owned(resource.clone(), overlay)
                    .map_err(|e| format!("failed to patch resource: {e}"))?
            }
            MutatePatch::Strategic {
                overlay,
                has_variables,
                prepared: None,
            } => {
                let mut overlay = if *has_variables {
                    sub.value_under(overlay, patch_path(nesting, true))
                        .map_err(|e| format!("variable substitution failed: {e}"))?
                } else {
                    overlay.clone()
                };
                match overlay::preprocess(&mut overlay, resource) {
                    Ok(()) => {}
                    Err(overlay::AnchorError::Condition(_) | overlay::AnchorError::Global(_)) => {
                        return Ok((resource.clone(), 0));
                    }
                    Err(overlay::AnchorError::NotAList(found)) => return Err(not_a_list(found)),
                    Err(overlay::AnchorError::Other(e)) => {
                        return Err(format!(
                            "failed to patch resource: failed to preProcess rule: {e}"
                        ));
                    }
                }
                strategic::merge_owned(resource.clone(), &overlay)
                    .map_err(|e| format!("failed to patch resource: {e}"))?
            }
            MutatePatch::Json6902 { text, ops } => {
                let parsed;
                let ops = match ops {
                    Some(ops) => ops,
                    None => {
                        let text = match sub
                            .string_at(text, patch_path(nesting, false))
                            .map_err(|e| format!("variable substitution failed: {e}"))?
                        {
                            Value::String(s) => s,
                            other => other.to_string(),
                        };
                        parsed = parse_operations(&text)?;
                        &parsed
                    }
                };
                let mut out = resource.clone();
                json_patch::apply_with(&mut out, ops, json_patch::Options::KYVERNO)
                    .map_err(|e| format!("failed to patch resource: {e}"))?;
                out
            }
            MutatePatch::Foreach(list) => return self.foreach(list, resource, ctx, nesting),
        };
        let changed = usize::from(out != *resource);
        Ok((out, changed))
    }

    fn foreach(
        &mut self,
        list: &[ForEachMutate],
        resource: &Value,
        ctx: &JsonContext,
        nesting: usize,
    ) -> Result<(Value, usize), String> {
        let mut current = resource.clone();
        let mut applied = 0;
        let outer = ctx;
        for fe in list {
            // An entry sees the object as the entries before it left it
            // (Kyverno puts each changed result into the context's
            // request.object); its elements see it as it was at the entry's
            // start.
            let mut entry_ctx = outer.child();
            if applied > 0 {
                entry_ctx.set_path("request.object", current.clone());
            }
            let ctx = &entry_ctx;
            // The object before this entry's first change.
            let mut entry_start: Option<Value> = None;
            let items = foreach_list(&fe.list, fe.list_expr.as_ref(), ctx, self.exprs)
                .map_err(|e| format!("failed to evaluate list {}: {e}", fe.list))?;
            let items: Vec<Value> = match items.into_owned() {
                Value::Null => Vec::new(),
                Value::Array(a) => a,
                other => vec![other],
            };
            let mut order: Vec<usize> = (0..items.len()).collect();
            if fe.descending {
                order.reverse();
            }
            for index in order {
                let item = &items[index];
                // Kyverno skips null elements.
                if item.is_null() {
                    continue;
                }
                let mut scope = ctx.child();
                if self.numbered_elements {
                    scope.set(format!("element{nesting}"), item.clone());
                    scope.set(format!("elementIndex{nesting}"), Value::from(index));
                }
                scope.set_ref("element", item);
                scope.set("elementIndex", Value::from(index));
                // Kyverno's words for an element that fails, each wrapped
                // in "failed to mutate elements" as its mutateForEach does.
                let failed = |e: String| format!("failed to mutate elements: {e}");
                crate::engine::context_loader::load(
                    &fe.context,
                    &mut scope,
                    self.exprs,
                    self.resolver,
                )
                .map_err(|e| {
                    failed(format!(
                        "failed to load to mutate.foreach[{index}].context: {e}"
                    ))
                })?;
                if let Some(pre) = &fe.preconditions {
                    match eval_conditions(pre, &scope, self.exprs) {
                        Ok((true, _)) => {}
                        Ok((false, _)) => continue,
                        Err(e) => {
                            return Err(failed(format!(
                                "failed to evaluate mutate.foreach[{index}].preconditions: {e}"
                            )));
                        }
                    }
                }
                let (out, n) = self
                    .apply(&fe.patch, &current, &scope, nesting + 1)
                    .map_err(failed)?;
                if n > 0 && out != current {
                    let before = std::mem::replace(&mut current, out);
                    entry_start.get_or_insert(before);
                }
            }
            // Kyverno counts the entries whose elements changed the
            // object, judged at the entry's end (an element may undo
            // another's change, a merge's reordering for one).
            if entry_start.is_some_and(|start| start != current) {
                applied += 1;
            }
        }
        Ok((current, applied))
    }
}

/// "mutated Kind/name in namespace ns", as Kyverno's buildSuccessMessage.
fn mutated_message(resource: &Value) -> String {
    let field = |p: &str| {
        resource
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (kind, name, namespace) = (
        field("/kind"),
        field("/metadata/name"),
        field("/metadata/namespace"),
    );
    if namespace.is_empty() {
        format!("mutated {kind}/{name}")
    } else {
        format!("mutated {kind}/{name} in namespace {namespace}")
    }
}

/// Where Kyverno's substitution errors place a patch (a strategic merge
/// or a JSON 6902 one): in the rule (`/mutate/...`), or in a foreach entry.
/// The preprocessing's error where the patch has a list of maps and the
/// resource something else: kyaml's wording, as Kyverno reads the resource
/// there as a list.
fn not_a_list(found: Value) -> String {
    let e = strategic::MergeError::Kind {
        expected: "SequenceNode",
        found,
    };
    format!("failed to patch resource: failed to preProcess rule: {e}")
}

fn patch_path(nesting: usize, strategic: bool) -> &'static str {
    match (nesting, strategic) {
        (0, true) => "/mutate/patchStrategicMerge",
        (0, false) => "/mutate/patchesJson6902",
        (_, true) => "/patchStrategicMerge",
        (_, false) => "/patchesJson6902",
    }
}

#[cfg(test)]
mod tests;
