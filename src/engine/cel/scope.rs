//! Which requests a CEL policy selects: match constraints, resource rules,
//! namespace and object selectors, and the view (whole object or Pod template) it sees.

use super::*;
use crate::context::Resolver;
use crate::engine::{PolicyResponse, Request};
use crate::json_doc::{JsonRef, View as _};
use crate::kinds::Gvk;
use crate::matching::selector_matches;
use crate::policy::cel_policy::{
    Bindings, CompiledBinding, EvaluationMode, MatchConstraints, PodTemplate, PolicyScope,
    ResourceRule,
};
use crate::text::same;
use serde_json::Value;

pub(super) fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || same(x, value))
}

/// What admission rules match a request on.
pub(super) struct RuleTarget<'a> {
    pub(super) group: &'a str,
    pub(super) version: &'a str,
    /// The plural resource name.
    pub(super) resource: &'a str,
    pub(super) subresource: &'a str,
    /// Empty: any operation (a trigger's kind and labels, not a request).
    pub(super) operation: &'a str,
    /// The object's name, which `resourceNames` lists.
    pub(super) name: TargetName<'a>,
}

/// The object's name, looked up only for a rule that lists
/// `resourceNames` (few do, and every policy matches every request).
#[derive(Clone, Copy)]
pub(super) enum TargetName<'a> {
    Is(&'a str),
    OfRequest(&'a Request),
}

impl<'a> TargetName<'a> {
    fn get(self) -> &'a str {
        match self {
            TargetName::Is(name) => name,
            TargetName::OfRequest(req) => req.name(),
        }
    }
}

impl RuleTarget<'_> {
    /// Whether an admission rule (`resourceRules[]`) covers the request.
    fn covered_by(&self, rule: &ResourceRule) -> bool {
        let (resource, sub) = (self.resource, self.subresource);
        listed(&rule.api_groups, self.group)
            && listed(&rule.api_versions, self.version)
            && (self.operation.is_empty() || listed(&rule.operations, self.operation))
            && (rule.resource_names.is_empty()
                || rule.resource_names.iter().any(|n| n == self.name.get()))
            && rule.resources.iter().any(|r| match r.split_once('/') {
                None => r == "*" || (sub.is_empty() && same(r, resource)),
                Some((res, s)) => {
                    (same(res, resource) && (same(s, sub) || (s == "*" && !sub.is_empty())))
                        || (res == "*" && same(s, sub))
                }
            })
    }

    /// As the API server matches: no resourceRules (a binding's
    /// matchResources may have none) does not constrain.
    fn covered_by_constraints(&self, m: &MatchConstraints) -> bool {
        (m.resource_rules.is_empty() || m.resource_rules.iter().any(|r| self.covered_by(r)))
            && !m.exclude_resource_rules.iter().any(|r| self.covered_by(r))
    }
}

/// How a CEL policy that applies to a request sees it.
#[derive(Debug, Clone, Copy)]
pub struct View<'s> {
    /// Through a Pod controller's template (autogen), or `None` for the
    /// object itself.
    pub template: Option<PodTemplate>,
    /// The binding that selected the request (admission policies).
    pub binding: Option<&'s CompiledBinding>,
}

impl View<'_> {
    /// The params of this view: `None` without a paramKind (see
    /// [`params::collect`]).
    ///
    /// kyverno-compat: a binding whose paramRef has a selector evaluates
    /// the policy once, with `params` the list of every param it selects
    /// (`{"items": [...]}`), as Kyverno's CLI does (the API server
    /// evaluates once per param instead; gavel reads params only offline).
    pub(super) fn params(
        &self,
        scope: &PolicyScope,
        req: &Request,
        resolver: &dyn Resolver,
    ) -> Result<Option<Vec<Value>>, String> {
        let reference = self.binding.and_then(|b| b.param_ref.as_ref());
        let found = params::collect(scope.param_kind.as_ref(), reference, req, resolver)?;
        Ok(match found {
            Some(list) if !list.is_empty() && reference.is_some_and(|r| r.selector.is_some()) => {
                Some(vec![serde_json::json!({ "items": list })])
            }
            other => other,
        })
    }
}

/// The start of every CEL policy's evaluation on a resource: its empty
/// response (no rules reads as "does not apply") and the view through
/// which its constraints select the request; no view when they do not,
/// or when the policy evaluates payloads of another `mode`.
pub fn begin<'p>(
    scope: &'p PolicyScope,
    mode: EvaluationMode,
    req: &Request,
    input: &CelRequest,
) -> (PolicyResponse<'p>, Option<View<'p>>) {
    let response = PolicyResponse::empty(&scope.name);
    let view = match mode {
        EvaluationMode::Kubernetes => scope_view(scope, req, input),
        _ => None,
    };
    (response, view)
}

/// Whether a CEL policy applies to the request, and how it sees it. A
/// policy selected by its own constraints (no bindings) asks the request,
/// which answers once for all policies with the same constraints.
pub fn scope_view<'s>(
    scope: &'s PolicyScope,
    req: &Request,
    input: &CelRequest,
) -> Option<View<'s>> {
    if !matches!(scope.bindings, Bindings::Own) {
        return select(scope, req, input);
    }
    let template = input.selection(scope, req, || {
        select(scope, req, input).map(|view| view.template)
    })?;
    Some(View {
        template,
        binding: None,
    })
}

/// [`scope_view`], computed.
pub(super) fn select<'s>(
    scope: &'s PolicyScope,
    req: &Request,
    input: &CelRequest,
) -> Option<View<'s>> {
    if scope
        .namespace
        .as_deref()
        .is_some_and(|ns| ns != req.namespace())
    {
        return None;
    }
    let resource = input.resource.as_ref();
    let target = RuleTarget {
        group: &req.gvk.group,
        version: &req.gvk.version,
        resource,
        subresource: &req.subresource,
        operation: &req.operation,
        name: TargetName::OfRequest(req),
    };
    let m = &scope.match_constraints;
    let selected =
        |m: &MatchConstraints| target.covered_by_constraints(m) && selectors_match(m, req);
    let bound = |binding: &'s CompiledBinding| View {
        template: None,
        binding: Some(binding),
    };
    match &scope.bindings {
        Bindings::Own => {}
        Bindings::Validating(bindings) => {
            return bindings
                .iter()
                .find(|b| b.match_resources.as_ref().is_none_or(selected))
                .map(bound);
        }
        Bindings::Mutating(bindings) => {
            if !selected(m) {
                return None;
            }
            return bindings
                .iter()
                .find(|b| b.match_resources.as_ref().is_some_and(selected))
                .map(bound);
        }
    }
    let template = if target.covered_by_constraints(m) {
        None
    } else {
        let pod = RuleTarget {
            group: "",
            version: "v1",
            resource: "pods",
            subresource: "",
            operation: &req.operation,
            name: TargetName::OfRequest(req),
        };
        let controller = scope.controllers.iter().find(|c| {
            same(c.group, target.group)
                && same(c.resource, resource)
                && target.subresource.is_empty()
        })?;
        if !pod.covered_by_constraints(m) {
            return None;
        }
        Some(controller.template)
    };
    selectors_match(m, req).then_some(View {
        template,
        binding: None,
    })
}

/// The namespaceSelector and objectSelector of `m` accept the request.
pub(super) fn selectors_match(m: &MatchConstraints, req: &Request) -> bool {
    selectors_accept(m, req, req.resource().json())
}

/// The namespaceSelector of `m` accepts the request's namespace, and its
/// objectSelector `object`. Only the labels are read (a decoded request is
/// not converted whole).
pub(super) fn selectors_accept(m: &MatchConstraints, req: &Request, object: JsonRef) -> bool {
    if let Some(sel) = &m.namespace_selector
        && !req.namespace().is_empty()
        && !selector_matches(sel, req.namespace_labels.as_ref())
    {
        return false;
    }
    if let Some(sel) = &m.object_selector {
        let labels = object
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .map(JsonRef::to_cow);
        if !selector_matches(sel, labels.as_deref().and_then(Value::as_object)) {
            return false;
        }
    }
    true
}

/// Whether a policy's own matchConstraints (no bindings, no autogen)
/// select `object` as the request's resource, for `operation` (`None`:
/// any). No CEL runs: this is what the answer path checks before it
/// leaves generation work, whose conditions the background evaluates.
pub fn constraints_select(
    scope: &PolicyScope,
    req: &Request,
    object: JsonRef,
    operation: Option<&str>,
) -> bool {
    if scope
        .namespace
        .as_deref()
        .is_some_and(|ns| ns != req.namespace())
    {
        return false;
    }
    let target = RuleTarget {
        group: &req.gvk.group,
        version: &req.gvk.version,
        resource: &req.gvr.resource,
        subresource: &req.subresource,
        operation: operation.unwrap_or_default(),
        name: TargetName::Is(
            object
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(|n| n.as_str())
                .unwrap_or_default(),
        ),
    };
    let m = &scope.match_constraints;
    target.covered_by_constraints(m) && selectors_accept(m, req, object)
}

/// Whether `constraints` select an object that exists (a mutate-existing
/// target): its kind, name and labels, and its namespace's labels; no
/// operation applies. `resource` is the object's plural resource name.
pub fn object_selected(
    constraints: &MatchConstraints,
    object: &Value,
    resource: &str,
    namespace_labels: Option<&serde_json::Map<String, Value>>,
) -> bool {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let gvk = Gvk::new(text("/apiVersion"), text("/kind"));
    let target = RuleTarget {
        group: &gvk.group,
        version: &gvk.version,
        resource,
        subresource: "",
        operation: "",
        name: TargetName::Is(text("/metadata/name")),
    };
    if !target.covered_by_constraints(constraints) {
        return false;
    }
    if let Some(sel) = &constraints.namespace_selector
        && !text("/metadata/namespace").is_empty()
        && !selector_matches(sel, namespace_labels)
    {
        return false;
    }
    constraints.object_selector.as_ref().is_none_or(|sel| {
        selector_matches(
            sel,
            object
                .pointer("/metadata/labels")
                .and_then(Value::as_object),
        )
    })
}
