//! MutatingPolicy mutate existing (policies.kyverno.io, Kyverno's
//! `cel-mutate` UpdateRequests): the targets of a trigger found, each
//! mutated as the policy says, and written back when that changed it.
//!
//! As Kyverno's background controller does:
//! - the targets are what `targetMatchConstraints.expression` names,
//!   evaluated on the trigger read back from the API server; or else the
//!   objects `targetMatchConstraints` (when it has resourceRules, else the
//!   policy's matchConstraints) selects, listed from the API server, in
//!   the policy's namespace for a NamespacedMutatingPolicy;
//! - each target is evaluated with `object` the target and `request` the
//!   trigger's admission request (a target of policy-driven work, which
//!   has none, sees an UPDATE of itself);
//! - a request from admission first checks the trigger's matchConditions,
//!   which the answer path left to the background.
//!
//! Unlike Kyverno, which reads a target again and writes over it at the
//! fresh resourceVersion, the write carries the resourceVersion the
//! mutation was computed from: a target changed meanwhile fails the
//! request, which is tried again on a fresh read, so no change is lost.
//! A target the mutations leave as it is gets no write, so doing the work
//! twice changes nothing the second time.

use super::follow::{Followed, Revision};
use super::objects::{self, BackgroundResolver};
use super::{Shared, WorkError, background_request, read_trigger};
use crate::admission::policies::Snapshot;
use crate::admission::update_requests::{CEL_MUTATE, resource_spec};
use crate::context::{ClusterView, Resolver};
use crate::engine::Request;
use crate::engine::cel::{
    CelRequest, TargetOutcome, expression_targets, mutate_target, object_selected,
    trigger_conditions_hold,
};
use crate::kinds::plural;
use crate::policy::cel_policy::{CompiledMutatingPolicy, TargetSelection};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Works off one `cel-mutate` UpdateRequest.
pub(super) async fn work(shared: &Arc<Shared>, spec: &Value) -> Result<(), WorkError> {
    let key = spec["policy"].as_str().unwrap_or_default();
    let snapshot = shared.snapshot.load_full();
    let Some(index) = snapshot
        .mutating
        .iter()
        .position(|p| p.key == key && p.existing.is_some())
    else {
        // Deleted since, or no longer mutates existing: nothing to apply.
        return Ok(());
    };
    let policy = &snapshot.mutating[index];
    let admission = &spec["context"]["admissionRequestInfo"]["admissionRequest"];
    let by_expression = matches!(
        policy.existing.as_ref().map(|e| &e.targets),
        Some(TargetSelection::Expression(_))
    );
    // The trigger: read back when an expression names the targets from
    // it; else as admission saw it (only `request` is read from it).
    let trigger = if !admission.is_object() {
        None
    } else if by_expression {
        let Some(object) = read_trigger(shared, &spec["resource"], admission).await? else {
            return Ok(());
        };
        Some(background_request(admission, object)?)
    } else {
        let object = match admission["operation"].as_str() {
            Some("DELETE") => admission["oldObject"].clone(),
            _ => admission["object"].clone(),
        };
        Some(background_request(admission, object)?)
    };
    if trigger.is_none() && by_expression {
        return Err(WorkError::Invalid(format!(
            "policy {key}: an expression names the targets, but the request has no trigger"
        )));
    }
    let listed = match &policy.existing.as_ref().map(|e| &e.targets) {
        Some(TargetSelection::Constraints(constraints)) => {
            list_targets(shared, policy, constraints).await?
        }
        _ => Vec::new(),
    };
    let resolver = objects::background_resolver(&shared.view, &shared.client);
    let evaluated =
        tokio::task::spawn_blocking(move || evaluate(&snapshot, index, trigger, listed, &resolver))
            .await
            .map_err(|e| WorkError::Panicked(e.to_string()))??;
    let mut errors = Vec::new();
    for (target, outcome) in evaluated {
        let what = || {
            let text = |p: &str| {
                target
                    .pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            format!(
                "target {} {}/{}",
                text("/kind"),
                text("/metadata/namespace"),
                text("/metadata/name")
            )
        };
        match outcome {
            TargetOutcome::Patched(patched) => {
                if let Err(e) = objects::replace(&shared.client, &patched, &shared.metrics).await {
                    errors.push(e);
                }
            }
            TargetOutcome::Unchanged | TargetOutcome::NotSelected(_) => {}
            TargetOutcome::Failed(e) => errors.push(WorkError::Evaluation(e).within(what())),
        }
    }
    WorkError::all(errors).map_err(|e| e.within(format!("policy {key}")))
}

/// The policy on each target (run on a blocking thread: lookups may wait
/// on the API server). `trigger` is the trigger's request; `listed`, the
/// targets its constraints select.
fn evaluate(
    snapshot: &Snapshot,
    index: usize,
    trigger: Option<Request>,
    listed: Vec<Value>,
    resolver: &BackgroundResolver,
) -> Result<Vec<(Value, TargetOutcome)>, WorkError> {
    let policy = &snapshot.mutating[index];
    let existing = policy
        .existing
        .as_ref()
        .expect("chosen for mutate existing");
    let input = |mut request: Request| {
        let namespace = request.namespace().to_string();
        if !namespace.is_empty() {
            request.namespace_labels = resolver.namespace_labels(&namespace);
        }
        let mut input = CelRequest::owned(&request);
        if !namespace.is_empty()
            && let Ok(Some(ns)) = resolver.resource("v1", "Namespace", "", &namespace)
        {
            input = input.with_namespace_object(&ns);
        }
        input
    };
    let trigger = trigger.map(input);
    if let Some(t) = &trigger
        && !trigger_conditions_hold(policy, t, resolver)
            .map_err(|e| WorkError::Evaluation(e).within(format!("policy {}", policy.key)))?
    {
        return Ok(Vec::new());
    }
    let targets = match trigger
        .as_ref()
        .and_then(|t| expression_targets(policy, existing, t, resolver))
    {
        Some(named) => {
            named.map_err(|e| WorkError::Evaluation(e).within(format!("policy {}", policy.key)))?
        }
        None => listed,
    };
    Ok(targets
        .into_iter()
        .map(|target| {
            // Policy-driven work has no trigger: the target sees an
            // UPDATE of itself.
            // No namespace read: a target's evaluation binds no
            // namespaceObject.
            let own;
            let request = match &trigger {
                Some(t) => t,
                None => {
                    own = CelRequest::owned(&Request::offline(
                        &target,
                        "UPDATE",
                        Default::default(),
                        None,
                    ));
                    &own
                }
            };
            let outcome = mutate_target(policy, existing, request, &target, resolver);
            (target, outcome)
        })
        .collect())
}

/// The objects `constraints` select, listed from the API server: per kind
/// its rules name, in the policy's namespace for a namespaced policy.
async fn list_targets(
    shared: &Arc<Shared>,
    policy: &CompiledMutatingPolicy,
    constraints: &crate::policy::cel_policy::MatchConstraints,
) -> Result<Vec<Value>, WorkError> {
    let namespace = policy.scope.namespace.clone().unwrap_or_default();
    let mut out = Vec::new();
    for (api_version, kind) in objects::kinds_named(
        shared.view.as_ref(),
        &constraints.resource_rules,
        &policy.key,
    ) {
        let found = objects::list(&shared.client, &api_version, &kind, &namespace, "")
            .await
            .map_err(|e| WorkError::api(format!("listing {kind} targets"), &e))?;
        let resource = plural(&api_version, &kind);
        for mut target in found {
            target["apiVersion"] = Value::String(api_version.clone());
            target["kind"] = Value::String(kind.clone());
            let ns = target
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let labels = if ns.is_empty() {
                None
            } else {
                shared.view.namespace_labels(ns)
            };
            if object_selected(constraints, &target, &resource, labels.as_ref()) {
                out.push(target);
            }
        }
    }
    Ok(out)
}

/// The MutatingPolicies with mutate existing, followed by key: when one
/// appears or changes (and when the lead is taken), its existing targets
/// are mutated, as Kyverno's policy controller does: one request for a
/// policy whose targets are listed, one per existing trigger for a policy
/// whose expression names them.
pub(super) struct MutatingPolicies;

impl Followed for MutatingPolicies {
    type Key = String;
    /// The revision, and the policy it is of.
    type State = Revision<CompiledMutatingPolicy>;

    fn states(&self, snapshot: &Snapshot) -> BTreeMap<String, Self::State> {
        snapshot
            .mutating
            .iter()
            .filter(|p| p.existing.is_some())
            .map(|p| (p.key.clone(), Revision(p.revision, p.clone())))
            .collect()
    }

    async fn changed(
        &self,
        shared: &Arc<Shared>,
        _key: &String,
        _before: Option<&Self::State>,
        now: &Self::State,
    ) {
        existing_targets(shared, &now.1).await;
    }
}

/// The requests that mutate a policy's existing targets.
async fn existing_targets(shared: &Arc<Shared>, policy: &CompiledMutatingPolicy) {
    let Some(existing) = &policy.existing else {
        return;
    };
    if !matches!(existing.targets, TargetSelection::Expression(_)) {
        super::policies::submit(shared, spec(policy, Value::Null, json!({}))).await;
        tracing::info!(
            policy = policy.key,
            "request written for the existing targets"
        );
        return;
    }
    // An expression names the targets from a trigger: one request per
    // existing trigger, as an UPDATE of it.
    let triggers = match list_targets(shared, policy, &policy.scope.match_constraints).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(
                policy = policy.key,
                error = %e,
                "listing triggers for mutate existing"
            );
            return;
        }
    };
    let mut written = 0;
    for trigger in triggers {
        let text = |p: &str| {
            trigger
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let gvk = crate::kinds::Gvk::new(text("/apiVersion"), text("/kind"));
        let admission = json!({
            "uid": "",
            "operation": "UPDATE",
            "kind": {"group": gvk.group, "version": gvk.version, "kind": gvk.kind},
            "resource": {"group": gvk.group, "version": gvk.version,
                         "resource": plural(text("/apiVersion"), text("/kind"))},
            "namespace": text("/metadata/namespace"),
            "name": text("/metadata/name"),
            "userInfo": {},
            "object": trigger,
        });
        super::policies::submit(shared, spec(policy, resource_spec(&trigger), admission)).await;
        written += 1;
    }
    tracing::info!(
        policy = policy.key,
        requests = written,
        "requests written for the existing triggers"
    );
}

/// A `cel-mutate` UpdateRequest for policy-driven work.
fn spec(policy: &CompiledMutatingPolicy, resource: Value, admission: Value) -> Value {
    let info = if admission.is_object() && !admission.as_object().is_some_and(|m| m.is_empty()) {
        json!({"admissionRequest": admission, "operation": "UPDATE"})
    } else {
        json!({})
    };
    json!({
        "requestType": CEL_MUTATE,
        "policy": policy.key,
        "rule": "",
        "deleteDownstream": false,
        "synchronize": false,
        "resource": if resource.is_null() { json!({}) } else { resource },
        "context": {"userInfo": {}, "admissionRequestInfo": info},
    })
}
