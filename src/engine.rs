//! The engine: compiled policies and one request in, rule responses out.
//!
//! It knows nothing of HTTP or Kubernetes clients: external objects come
//! through a [`Resolver`], so `gavel test` and the server share it.

pub mod cel;
pub mod cleanup;
pub mod conditions;
pub mod context_loader;
pub mod generate;
pub mod images;
pub mod json_context;
pub mod mutate;
pub mod plan;
pub mod pod_security;
pub mod validate;
pub mod variables;

use crate::context::Resolver;
use crate::json_doc::{Doc, Document, JsonRef, View};
use crate::kinds::{Gvk, Gvr};
use crate::matching::{MatchInput, UserInfo};
use crate::policy::CompiledException;
use json_context::{Builtins, JsonContext};
use serde_json::{Map, Value};
use std::borrow::Cow;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleStatus {
    Pass,
    Fail,
    Warn,
    Error,
    Skip,
}

impl RuleStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleStatus::Pass => "pass",
            RuleStatus::Fail => "fail",
            RuleStatus::Warn => "warn",
            RuleStatus::Error => "error",
            RuleStatus::Skip => "skip",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleType {
    Validation,
    Mutation,
    Generation,
    ImageVerify,
}

/// One rule's result. Borrows from the compiled policy (`'p`), so that a
/// passing rule costs no allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleResponse<'p> {
    pub name: &'p str,
    pub rule_type: RuleType,
    pub status: RuleStatus,
    pub message: Cow<'p, str>,
    /// What the rule produced besides a verdict; boxed, because most rules
    /// produce nothing and every response is moved a few times on the hot path.
    outputs: Option<Box<RuleOutputs>>,
}

/// What a rule produced besides a verdict.
#[derive(Debug, Clone, Default, PartialEq)]
struct RuleOutputs {
    /// A generate rule's downstream resources, a mutate-existing rule's
    /// patched targets.
    resources: Vec<Value>,
    /// Report properties: a CEL policy's auditAnnotations (key, value).
    properties: Vec<(String, String)>,
}

impl<'p> RuleResponse<'p> {
    pub fn new(
        name: &'p str,
        status: RuleStatus,
        message: impl Into<Cow<'p, str>>,
    ) -> RuleResponse<'p> {
        RuleResponse {
            name,
            rule_type: RuleType::Validation,
            status,
            message: message.into(),
            outputs: None,
        }
    }

    /// A generate rule's downstream resources, a mutate-existing rule's
    /// patched targets.
    pub fn resources(&self) -> &[Value] {
        self.outputs.as_ref().map_or(&[], |o| &o.resources)
    }

    /// Report properties: a CEL policy's auditAnnotations (key, value).
    pub fn properties(&self) -> &[(String, String)] {
        self.outputs.as_ref().map_or(&[], |o| &o.properties)
    }

    /// The downstream resources or patched targets, taken out.
    pub fn into_resources(self) -> Vec<Value> {
        self.outputs.map(|o| o.resources).unwrap_or_default()
    }

    /// This response with `resources` as its downstream resources or
    /// patched targets.
    pub fn with_resources(self, resources: Vec<Value>) -> RuleResponse<'p> {
        self.with_outputs(|o| o.resources = resources)
    }

    /// This response with `properties` as its report properties. Inlined:
    /// most callers have none, and then the response is not moved at all
    /// (moved, its copy stalled on the stores that had just built it).
    #[inline(always)]
    pub fn with_properties(self, properties: Vec<(String, String)>) -> RuleResponse<'p> {
        // Most rules have none, and most responses no outputs to keep.
        if properties.is_empty() && self.outputs.is_none() {
            return self;
        }
        self.with_outputs(|o| o.properties = properties)
    }

    /// Applies `set` to the outputs. No outputs stay `None` (no box), so
    /// that equal responses compare equal.
    fn with_outputs(mut self, set: impl FnOnce(&mut RuleOutputs)) -> RuleResponse<'p> {
        let mut outputs = self
            .outputs
            .take()
            .map_or_else(RuleOutputs::default, |b| *b);
        set(&mut outputs);
        let empty = outputs.resources.is_empty() && outputs.properties.is_empty();
        self.outputs = (!empty).then(|| Box::new(outputs));
        self
    }

    /// A response of the given rule type.
    pub fn of_type(mut self, rule_type: RuleType) -> RuleResponse<'p> {
        self.rule_type = rule_type;
        self
    }
}

/// The responses of one policy for one resource.
#[derive(Debug, Clone)]
pub struct PolicyResponse<'p> {
    pub policy: &'p str,
    pub rules: RuleResponses<'p>,
}

impl<'p> PolicyResponse<'p> {
    /// The response of a policy that does not apply: no rules.
    pub fn empty(policy: &'p str) -> PolicyResponse<'p> {
        PolicyResponse {
            policy,
            rules: RuleResponses::new(),
        }
    }
}

/// A policy's rule responses, read as a slice. Most policies answer a
/// request with one rule, which is then held inline: a request's
/// responses cost no allocation per policy (the webhook evaluates every
/// policy of its route). Not a `SmallVec`: that is invariant in its item
/// type, and responses borrow from policies under lifetimes that shorten.
#[derive(Clone, Default)]
pub struct RuleResponses<'p>(Held<'p>);

/// By the list held, however it is held.
impl PartialEq for RuleResponses<'_> {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

/// As the list it holds.
impl std::fmt::Debug for RuleResponses<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[derive(Debug, Clone)]
enum Held<'p> {
    /// None or one, as pushed.
    Inline(Option<RuleResponse<'p>>),
    /// Any number: from the second push on, or as made from a `Vec`.
    Heap(Vec<RuleResponse<'p>>),
}

impl Default for Held<'_> {
    fn default() -> Self {
        Held::Inline(None)
    }
}

impl<'p> RuleResponses<'p> {
    pub fn new() -> Self {
        RuleResponses(Held::Inline(None))
    }

    pub fn one(response: RuleResponse<'p>) -> Self {
        RuleResponses(Held::Inline(Some(response)))
    }

    pub fn push(&mut self, response: RuleResponse<'p>) {
        match &mut self.0 {
            Held::Heap(all) => all.push(response),
            Held::Inline(slot) => match slot.take() {
                None => *slot = Some(response),
                Some(first) => {
                    let mut all = Vec::with_capacity(4);
                    all.push(first);
                    all.push(response);
                    self.0 = Held::Heap(all);
                }
            },
        }
    }
}

impl<'p> std::ops::Deref for RuleResponses<'p> {
    type Target = [RuleResponse<'p>];
    fn deref(&self) -> &Self::Target {
        match &self.0 {
            Held::Inline(one) => one.as_slice(),
            Held::Heap(all) => all,
        }
    }
}

impl std::ops::DerefMut for RuleResponses<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match &mut self.0 {
            Held::Inline(one) => one.as_mut_slice(),
            Held::Heap(all) => all,
        }
    }
}

impl<'p> From<Vec<RuleResponse<'p>>> for RuleResponses<'p> {
    fn from(all: Vec<RuleResponse<'p>>) -> Self {
        RuleResponses(Held::Heap(all))
    }
}

impl<'p> Extend<RuleResponse<'p>> for RuleResponses<'p> {
    fn extend<I: IntoIterator<Item = RuleResponse<'p>>>(&mut self, responses: I) {
        for r in responses {
            self.push(r);
        }
    }
}

impl<'p> FromIterator<RuleResponse<'p>> for RuleResponses<'p> {
    fn from_iter<I: IntoIterator<Item = RuleResponse<'p>>>(responses: I) -> Self {
        let mut out = RuleResponses::new();
        out.extend(responses);
        out
    }
}

impl<'p> IntoIterator for RuleResponses<'p> {
    type Item = RuleResponse<'p>;
    type IntoIter = std::iter::Chain<
        std::option::IntoIter<RuleResponse<'p>>,
        std::vec::IntoIter<RuleResponse<'p>>,
    >;
    fn into_iter(self) -> Self::IntoIter {
        match self.0 {
            Held::Inline(one) => one.into_iter().chain(Vec::new()),
            Held::Heap(all) => None.into_iter().chain(all),
        }
    }
}

impl<'a, 'p> IntoIterator for &'a RuleResponses<'p> {
    type Item = &'a RuleResponse<'p>;
    type IntoIter = std::slice::Iter<'a, RuleResponse<'p>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// One admission request (or its offline equivalent) as the engine sees it.
#[derive(Debug, Clone)]
pub struct Request {
    pub operation: String,
    /// The kind rules match on: the kind of the resource the request acts
    /// on, with [`Request::subresource`] (a Deployment for its `scale`, a
    /// Pod for its `eviction`), as Kyverno takes it from discovery.
    pub gvk: Gvk,
    /// The resource as the API server names it (`apps/v1 deployments`).
    pub gvr: Gvr,
    pub subresource: String,
    /// The kind of the object sent, which differs from `gvk` on some
    /// subresources (`autoscaling/v1 Scale`, `policy/v1 Eviction`).
    pub object_kind: Gvk,
    /// `requestKind`, `requestResource` and `requestSubResource`: the
    /// request as the client made it, before the API server converted it
    /// to a version the webhook accepts (matchPolicy Equivalent).
    pub request_kind: Gvk,
    pub request_resource: Gvr,
    pub request_sub_resource: String,
    /// The request came in an AdmissionReview. Kyverno's webhook puts the
    /// whole AdmissionRequest into the JMESPath `request`; its CLI builds
    /// `request` from the object and has no resource fields.
    pub from_review: bool,
    /// The review's `dryRun`: the API server will not persist the change.
    pub dry_run: bool,
    /// The new object; null on DELETE. Held as a [`crate::json_doc::Doc`]
    /// decoded from the review, or made from an offline run's `Value`.
    pub object: Document,
    /// The previous object; null on CREATE.
    pub old_object: Document,
    pub user: UserInfo,
    /// Labels of the resource's namespace, when known.
    pub namespace_labels: Option<Map<String, Value>>,
}

impl Request {
    /// The request an offline run makes for `resource`: CREATE has only the
    /// object, UPDATE has it as object and oldObject, DELETE only as oldObject.
    pub fn offline(
        resource: &Value,
        operation: &str,
        user: UserInfo,
        namespace_labels: Option<Map<String, Value>>,
    ) -> Request {
        // Held as documents, as a review's objects are: every evaluator
        // reads them in place, as in the webhook, and the CEL forms read a
        // document much faster than a `Value`'s maps (validate.cel 2.46x to
        // 1.80x the pattern form per Pod on this path,
        // perf-results/2026-12-02-cli-documents.md). A `Value` is made
        // from one only for the code that still needs it. UPDATE's two are
        // one conversion and a copy of its buffers.
        let (object, old_object) = match operation {
            "DELETE" => (Document::default(), Doc::from_value(resource).into()),
            "UPDATE" => {
                let doc = Doc::from_value(resource);
                (doc.clone().into(), doc.into())
            }
            _ => (Doc::from_value(resource).into(), Document::default()),
        };
        let gvk = Gvk::of(resource);
        let gvr = gvk.resource();
        Request {
            operation: operation.to_string(),
            gvr: gvr.clone(),
            subresource: String::new(),
            object_kind: gvk.clone(),
            request_kind: gvk.clone(),
            request_resource: gvr,
            request_sub_resource: String::new(),
            from_review: false,
            dry_run: false,
            gvk,
            object,
            old_object,
            user,
            namespace_labels,
        }
    }

    /// The object the request is about: the new one, or the old one on DELETE.
    pub fn resource(&self) -> &Document {
        if self.object.is_null() {
            &self.old_object
        } else {
            &self.object
        }
    }

    fn metadata(&self, field: &str) -> Option<JsonRef<'_>> {
        self.resource().json().get("metadata")?.get(field)
    }

    fn metadata_str(&self, field: &str) -> &str {
        self.metadata(field)
            .and_then(View::as_str)
            .unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.metadata_str("namespace")
    }

    pub fn name(&self) -> &str {
        self.metadata_str("name")
    }

    /// The object's uid (none before it is created).
    pub fn uid(&self) -> &str {
        self.metadata_str("uid")
    }

    pub fn match_input(&self) -> MatchInput<'_> {
        // The metadata is found once for its five fields.
        let metadata = self.resource().json().get("metadata");
        let namespace = metadata.and_then(|m| m.get("namespace"));
        MatchInput {
            group: &self.gvk.group,
            version: &self.gvk.version,
            kind: &self.gvk.kind,
            kind_hash: crate::kinds::kind_hash(&self.gvk.kind),
            subresource: &self.subresource,
            operation: &self.operation,
            name: "",
            generate_name: "",
            namespace: namespace.and_then(View::as_str).unwrap_or_default(),
            labels: None,
            annotations: None,
            namespace_labels: self.namespace_labels.as_ref(),
            user: &self.user,
        }
        .with_object_metadata(metadata)
    }

    /// The JSON context of this request (see [`JsonContext::for_request`]).
    pub fn json_context(&self, builtins: Builtins) -> JsonContext<'_> {
        JsonContext::for_request(self, builtins)
    }
}

use crate::policy::CompiledPolicy;

/// The plan of policy set `policies` ([`plan::Plan::build`]), with the
/// conditions that the request's operation alone decides decided once per
/// operation ([`crate::policy::Condition::by_operation`]): what a server's
/// snapshot, and anything evaluating as the server does, builds once per
/// set.
pub fn plan_set(policies: &mut [CompiledPolicy]) -> plan::Plan {
    plan_policies(policies, &mut [])
}

/// [`plan_set`] for a set that has ValidatingPolicies too: their
/// validations are planned with the classic policies' CEL checks.
pub fn plan_policies(
    policies: &mut [CompiledPolicy],
    validating: &mut [crate::policy::cel_policy::CompiledValidatingPolicy],
) -> plan::Plan {
    let plan = plan::Plan::build(policies, validating);
    for policy in policies.iter_mut() {
        validate::decide_by_operation(policy);
    }
    plan
}

/// Evaluates every policy of a set against one request, sharing one JSON context.
pub fn evaluate<'p>(
    policies: &'p [CompiledPolicy],
    req: &Request,
    env: &EvalEnv,
) -> Vec<PolicyResponse<'p>> {
    evaluate_planned(None, policies, req, env)
}

/// [`evaluate`] with the set's [`plan::Plan`], built once for `policies`.
pub fn evaluate_planned<'p>(
    plan: Option<&plan::Plan>,
    policies: &'p [CompiledPolicy],
    req: &Request,
    env: &EvalEnv,
) -> Vec<PolicyResponse<'p>> {
    let mut ctx = req.json_context(Builtins::of(policies));
    if let Some(plan) = plan {
        ctx.attach_plan(plan, req);
    }
    let input = req.match_input();
    // A set with CEL rules binds the request's CEL variables once for all
    // of them. A set without keeps the call it had: passing the absent
    // root through every policy's call cost the pattern set about 120
    // instructions per request (callgrind, `evaluate/pss17`).
    match ctx.cel_request().map(cel::CelRequest::activation) {
        None => policies
            .iter()
            .map(|p| validate::evaluate_policy_with(p, req, &input, &ctx, env))
            .collect(),
        Some(root) => policies
            .iter()
            .map(|p| {
                validate::evaluate_policy_observed(p, req, &input, &ctx, env, Some(&root), None)
            })
            .collect(),
    }
}

/// Values injected per rule (the CLI's values file `policies[].rules[].values`).
pub trait RuleValues {
    fn for_rule(&self, rule: &str) -> Option<&Map<String, Value>>;
}

impl RuleValues for () {
    fn for_rule(&self, _: &str) -> Option<&Map<String, Value>> {
        None
    }
}

/// What evaluation needs besides the policy and the request.
pub struct EvalEnv<'a> {
    pub resolver: &'a dyn Resolver,
    pub exceptions: &'a [CompiledException],
    pub rule_values: &'a dyn RuleValues,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rule_outputs_are_kept_and_cleared() {
        let plain = RuleResponse::new("r", RuleStatus::Pass, "ok");
        let with = plain
            .clone()
            .with_resources(vec![json!({"kind": "ConfigMap"})]);
        assert_eq!(with.resources(), &[json!({"kind": "ConfigMap"})]);
        assert!(with.properties().is_empty());
        let both = with.with_properties(vec![("k".into(), "v".into())]);
        assert_eq!(both.properties(), &[("k".to_string(), "v".to_string())]);
        assert_eq!(both.resources().len(), 1);
        // Emptied again, it equals a response that never had outputs.
        let emptied = both.with_resources(Vec::new()).with_properties(Vec::new());
        assert_eq!(emptied, plain);
        assert!(plain.clone().with_properties(Vec::new()).outputs.is_none());
        assert_eq!(
            plain.with_resources(vec![json!(1)]).into_resources(),
            vec![json!(1)]
        );
    }

    /// Held inline or on the heap, the responses read as one list in the
    /// order they were pushed, however they were made.
    #[test]
    fn rule_responses_read_as_the_list_pushed() {
        let names = ["a", "b", "c", "d", "e"];
        let response = |n: &'static str| RuleResponse::new(n, RuleStatus::Pass, n);
        for len in 0..=names.len() {
            let mut pushed = RuleResponses::new();
            for n in &names[..len] {
                pushed.push(response(n));
            }
            let want: Vec<RuleResponse> = names[..len].iter().map(|n| response(n)).collect();
            assert_eq!(&pushed[..], &want[..], "{len} pushed");
            assert_eq!(pushed.len(), len);
            assert_eq!(format!("{pushed:?}"), format!("{want:?}"));
            let collected: RuleResponses = want.iter().cloned().collect();
            assert_eq!(collected, pushed);
            let from_vec = RuleResponses::from(want.clone());
            assert_eq!(&from_vec[..], &want[..]);
            let mut extended = RuleResponses::new();
            extended.extend(from_vec);
            assert_eq!(&extended[..], &want[..]);
            assert_eq!(pushed.clone().into_iter().collect::<Vec<_>>(), want);
            assert_eq!((&pushed).into_iter().count(), len);
            // Written through the slice.
            for r in pushed.iter_mut() {
                r.status = RuleStatus::Fail;
            }
            assert!(pushed.iter().all(|r| r.status == RuleStatus::Fail));
        }
        // Equal by content, held inline or not.
        assert_eq!(
            RuleResponses::one(response("a")),
            RuleResponses::from(vec![response("a")])
        );
    }
}
