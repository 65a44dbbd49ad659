//! The CEL phases of an offline evaluation: MutatingAdmissionPolicies and
//! MutatingPolicies, ValidatingPolicies with GeneratingPolicies,
//! ImageValidatingPolicies, and `gavel test`'s MutatingPolicy targets and
//! DeletingPolicies.

use super::mutating::{self, Chaining, MutatingPhase, Visit};
use super::{Mode, Offline};
use crate::admission::policies::Snapshot;
use crate::context::Resolver;
use crate::engine::cel::{
    CelRequest, TargetOutcome, deleting_policy_selects, evaluate_authorization_policy,
    evaluate_generating_policy, evaluate_image_validating_policy,
    evaluate_image_validating_policy_on_json, evaluate_validating_policy,
    evaluate_validating_policy_on_json, expression_targets, mutate_target, object_selected,
};
use crate::engine::{PolicyResponse, Request, RuleResponse, RuleResponses, RuleStatus, RuleType};
use crate::policy::cel_policy::{CompiledMutatingPolicy, EvaluationMode, TargetSelection};
use crate::policy::cleanup::{CompiledCleanupPolicy, Selection};
use serde_json::Value;

/// A phase's responses: each evaluated policy's index and response.
type Indexed<'s> = Vec<(usize, PolicyResponse<'s>)>;

impl<'s> Offline<'s, '_> {
    /// The CEL variables of `req`, with the caller's Namespace object.
    fn cel_request<'r>(&self, req: &'r Request) -> CelRequest<'r>
    where
        's: 'r,
    {
        self.with_namespace(req, CelRequest::of(req).with_plan(&self.set.plan))
    }

    /// `input` with the caller's Namespace object of `req`'s namespace.
    fn with_namespace<'r>(&self, req: &Request, input: CelRequest<'r>) -> CelRequest<'r> {
        match self.inputs.namespace_object(req.namespace()) {
            Some(ns) => input.with_namespace_object(ns),
            None => input,
        }
    }

    /// Runs a mutating phase of `policies` over `current`, recording each
    /// evaluated policy's response; returns the phase's result.
    pub(super) fn mutate_cel(
        &self,
        policies: &'s [CompiledMutatingPolicy],
        chaining: Chaining,
        out: &mut Indexed<'s>,
        current: Value,
    ) -> Value {
        if policies.is_empty() {
            return current;
        }
        let phase = MutatingPhase {
            policies,
            chaining,
            resolver: self.inputs.resolver(),
        };
        let result = mutating::mutating_policies(
            phase,
            &self.request(&current),
            |_, object| self.request(&object),
            |req| self.with_namespace(req, CelRequest::owned(req)),
            |_, _| Visit::Evaluate,
            |m| out.push((m.index, m.response)),
        );
        match result {
            Some(req) => req.object.into_value(),
            None => current,
        }
    }

    /// The ValidatingPolicies `mode` evaluates on `resource`, and (when it
    /// generates) the GeneratingPolicies.
    pub(super) fn validate_cel(&self, mode: Mode, resource: &Value) -> (Indexed<'s>, Indexed<'s>) {
        let set = self.set;
        let mut validating = set
            .validating
            .iter()
            .enumerate()
            .filter(|(_, p)| mode.validates_with(p.background, p.mode))
            .peekable();
        let generates = mode.generates() && !set.generating.is_empty();
        if validating.peek().is_none() && !generates {
            return (Vec::new(), Vec::new());
        }
        let req = self.request(resource);
        let input = self.cel_request(&req);
        let resolver = self.inputs.resolver();
        let validated = validating
            .map(|(i, p)| (i, evaluate_validating_policy(p, &req, &input, resolver)))
            .collect();
        let generated = set
            .generating
            .iter()
            .enumerate()
            .filter(|_| generates)
            .map(|(i, p)| (i, evaluate_generating_policy(p, &req, &input, resolver)))
            .collect();
        (validated, generated)
    }

    /// The ImageValidatingPolicies `mode` evaluates on `resource`.
    pub(super) fn verify_images_cel(&self, mode: Mode, resource: &Value) -> Indexed<'s> {
        let mut selected = self
            .set
            .image_validating
            .iter()
            .enumerate()
            .filter(|(_, p)| mode.verifies_images_with(p.background, p.mode))
            .peekable();
        if selected.peek().is_none() {
            return Vec::new();
        }
        let req = self.request(resource);
        let input = self.cel_request(&req);
        let resolver = self.inputs.resolver();
        selected
            .map(|(i, p)| {
                (
                    i,
                    evaluate_image_validating_policy(p, &req, &input, resolver),
                )
            })
            .collect()
    }

    /// Mutate existing of every MutatingPolicy with targets, on the
    /// caller's target objects, `trigger` being the mutated resource.
    pub(super) fn mutate_targets(&self, trigger: &Value) -> Vec<PolicyResponse<'s>> {
        if self.inputs.targets().is_empty() {
            return Vec::new();
        }
        let req = self.request(trigger);
        let input = self.cel_request(&req);
        self.set
            .mutating
            .iter()
            .filter_map(|p| self.policy_targets(p, &input))
            .collect()
    }

    /// Mutate existing of a MutatingPolicy in `kyverno test`: the targets
    /// its targetMatchConstraints select (by expression on the trigger,
    /// or by constraints with any operation), each mutated; one rule per
    /// target, a passing one carrying the patched target.
    // kyverno-compat: as Kyverno's CLI does, the trigger is not matched
    // against the policy's constraints here.
    fn policy_targets(
        &self,
        policy: &'s CompiledMutatingPolicy,
        trigger: &CelRequest,
    ) -> Option<PolicyResponse<'s>> {
        let existing = policy.existing.as_ref()?;
        let resolver = self.inputs.resolver();
        let name = policy.name();
        let respond = |status, message: String| {
            RuleResponse::new(name, status, message).of_type(RuleType::Mutation)
        };
        let key = |o: &Value| {
            let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
            (
                text("/metadata/namespace").to_string(),
                text("/metadata/name").to_string(),
            )
        };
        let named: Option<Vec<(String, String)>> =
            match expression_targets(policy, existing, trigger, resolver) {
                None => None,
                Some(Ok(list)) => Some(list.iter().map(key).collect()),
                Some(Err(e)) => {
                    return Some(PolicyResponse {
                        policy: name,
                        rules: RuleResponses::one(respond(RuleStatus::Error, e)),
                    });
                }
            };
        let mut rules = Vec::new();
        for target in self.inputs.targets() {
            let selected = match (&named, &existing.targets) {
                (Some(named), _) => named.contains(&key(target)),
                (None, TargetSelection::Constraints(m)) => {
                    let (api_version, kind) = (
                        target["apiVersion"].as_str().unwrap_or_default(),
                        target["kind"].as_str().unwrap_or_default(),
                    );
                    let namespace = key(target).0;
                    let labels = self.inputs.namespace_labels(&namespace);
                    policy
                        .scope
                        .namespace
                        .as_ref()
                        .is_none_or(|ns| *ns == namespace)
                        && object_selected(
                            m,
                            target,
                            &crate::kinds::plural(api_version, kind),
                            labels.as_ref(),
                        )
                }
                (None, TargetSelection::Expression(_)) => false,
            };
            if !selected {
                continue;
            }
            rules.push(
                match mutate_target(policy, existing, trigger, target, resolver) {
                    TargetOutcome::Patched(p) => {
                        respond(RuleStatus::Pass, "success".into()).with_resources(vec![p])
                    }
                    TargetOutcome::Unchanged => respond(RuleStatus::Pass, "success".into())
                        .with_resources(vec![target.clone()]),
                    // The target, unpatched, goes with a skip or an error
                    // too, so that an entry naming it gets a row (Kyverno's
                    // would read "Not found").
                    TargetOutcome::NotSelected(condition) => respond(
                        RuleStatus::Skip,
                        format!("target match condition {condition:?} not met"),
                    )
                    .with_resources(vec![target.clone()]),
                    TargetOutcome::Failed(e) => {
                        respond(RuleStatus::Error, e).with_resources(vec![target.clone()])
                    }
                },
            );
        }
        (!rules.is_empty()).then_some(PolicyResponse {
            policy: name,
            rules: rules.into(),
        })
    }

    /// The DeletingPolicies whose matchConstraints select `resource`.
    pub(super) fn deleting(&self, resource: &Value) -> Vec<PolicyResponse<'s>> {
        self.set
            .deleting
            .iter()
            .filter_map(|p| self.deleting_one(p, resource))
            .collect()
    }

    /// A DeletingPolicy in `kyverno test`: pass ("resource matched") when
    /// a run would delete the resource, fail when its conditions keep it,
    /// and no row when its matchConstraints do not select it.
    fn deleting_one(
        &self,
        policy: &'s CompiledCleanupPolicy,
        resource: &Value,
    ) -> Option<PolicyResponse<'s>> {
        let Selection::Cel { scope, variables } = &policy.selection else {
            return None;
        };
        let text = |p: &str| {
            resource
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        // Not admission-driven: no operation.
        let mut req = self.request_as(resource, "");
        req.gvr.resource = crate::kinds::plural(text("/apiVersion"), text("/kind")).into_owned();
        req.request_resource = req.gvr.clone();
        let namespace_object = self.inputs.namespace_object(text("/metadata/namespace"));
        let name = scope.name.as_str();
        let resolver = self.inputs.resolver();
        let rule = match deleting_policy_selects(scope, variables, &req, namespace_object, resolver)
        {
            Ok(None) => return None,
            Ok(Some(true)) => RuleResponse::new(name, RuleStatus::Pass, "resource matched"),
            Ok(Some(false)) => RuleResponse::new(name, RuleStatus::Fail, "resource did not match"),
            Err(e) => RuleResponse::new(name, RuleStatus::Error, e),
        };
        Some(PolicyResponse {
            policy: name,
            rules: RuleResponses::one(rule),
        })
    }
}

/// See [`super::evaluate_payload`].
pub(super) fn payload<'s>(
    set: &'s Snapshot,
    document: &Value,
    mode: EvaluationMode,
    resolver: &dyn Resolver,
) -> Vec<PolicyResponse<'s>> {
    let mut out: Vec<PolicyResponse> = set
        .validating
        .iter()
        .filter(|p| p.mode == mode)
        .map(|p| match mode {
            EvaluationMode::Json => evaluate_validating_policy_on_json(p, document, resolver),
            _ => evaluate_authorization_policy(p, document, resolver),
        })
        .collect();
    if mode == EvaluationMode::Json {
        out.extend(
            set.image_validating
                .iter()
                .map(|p| evaluate_image_validating_policy_on_json(p, document, resolver))
                .filter(|r| !r.rules.is_empty()),
        );
    }
    out
}
