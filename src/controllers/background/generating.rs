//! GeneratingPolicy work (policies.kyverno.io, Kyverno's `cel-generate`
//! UpdateRequests): the policy evaluated on its trigger, read back from
//! the API server, and what `generator.Apply` asked for written with
//! Kyverno's labels (policy name and trigger; no rule, a GeneratingPolicy
//! has none).
//!
//! As Kyverno's generator does: an object that exists and carries the
//! labels of this policy and trigger is brought in line; one that exists
//! without them is someone else's and is left alone. Under `synchronize`
//! an UPDATE also deletes what the trigger no longer generates, a trigger
//! that stops matching takes its downstream along, and the downstream is
//! watched ([`Downstream`]): a hand edit or a deletion is undone from the
//! trigger. A deleted policy takes its synchronized downstream unless
//! `orphanDownstreamOnPolicyDelete`.
//!
//! Kyverno keeps its downstream watches in memory and rebuilds them at
//! start by evaluating the policy on every trigger. gavel finds the
//! downstream kinds instead by one labelled list per discovered kind when
//! it takes the lead, which also finds downstream made by a previous
//! deployment.

mod downstream;
mod policy_changes;
pub(super) use downstream::*;
pub(super) use policy_changes::*;

use super::{Shared, WorkError, background_request, objects, read_trigger};
use crate::admission::update_requests::{CEL_GENERATE, labels};
use crate::context::ClusterView;
use crate::engine::RuleStatus;
use crate::engine::cel::{CelRequest, constraints_select, evaluate_generating_policy};
use crate::policy::cel_policy::CompiledGeneratingPolicy;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Works off one `cel-generate` UpdateRequest.
pub(super) async fn work(shared: &Arc<Shared>, spec: &Value) -> Result<(), WorkError> {
    let key = spec["policy"].as_str().unwrap_or_default();
    let snapshot = shared.snapshot.load_full();
    let Some(index) = snapshot.generating.iter().position(|p| p.key == key) else {
        // Deleted since: the policy follower deals with its downstream.
        return Ok(());
    };
    let mut errors = Vec::new();
    for context in spec["ruleContext"].as_array().into_iter().flatten() {
        let policy = &snapshot.generating[index];
        let trigger = &context["trigger"];
        let result = if context["deleteDownstream"] == true {
            delete_downstream(shared, policy, trigger, &BTreeSet::new()).await
        } else {
            generate(shared, &snapshot, index, context, spec).await
        };
        if let Err(e) = result {
            errors.push(e);
        }
    }
    WorkError::all(errors)
}

/// What the policy generates for one trigger, written; with
/// `synchronize` on the context, what it no longer generates deleted.
async fn generate(
    shared: &Arc<Shared>,
    snapshot: &Arc<crate::admission::policies::Snapshot>,
    index: usize,
    context: &Value,
    spec: &Value,
) -> Result<(), WorkError> {
    let policy = &snapshot.generating[index];
    let trigger = &context["trigger"];
    let admission = &spec["context"]["admissionRequestInfo"]["admissionRequest"];
    let Some(object) = read_trigger(shared, trigger, admission).await? else {
        return Ok(());
    };
    let request = background_request(admission, object)?;
    let operation = request.operation.clone();
    let resolver = objects::background_resolver(&shared.view, &shared.client);
    let snapshot = snapshot.clone();
    // Evaluation may wait on the API server (resource.Get): a blocking
    // thread.
    let evaluated = tokio::task::spawn_blocking(move || {
        let policy = &snapshot.generating[index];
        let mut request = request;
        let namespace = request.namespace().to_string();
        if !namespace.is_empty() {
            request.namespace_labels = resolver.namespace_labels(&namespace);
        }
        let mut input = CelRequest::of(&request);
        if !namespace.is_empty()
            && let Ok(Some(ns)) =
                crate::context::Resolver::resource(&resolver, "v1", "Namespace", "", &namespace)
        {
            input = input.with_namespace_object(&ns);
        }
        let response = evaluate_generating_policy(policy, &request, &input, &resolver);
        match response.rules.into_iter().next() {
            None => Evaluated::NotSelected {
                by_constraints: constraints_select(
                    &policy.scope,
                    &request,
                    request.resource().json(),
                    Some(&request.operation),
                ),
            },
            Some(r) if r.status == RuleStatus::Pass => Evaluated::Generated(r.into_resources()),
            Some(r) if r.status == RuleStatus::Skip => Evaluated::Skipped,
            Some(r) => Evaluated::Failed(r.message.to_string()),
        }
    })
    .await
    .map_err(|e| WorkError::Panicked(e.to_string()))?;
    let synchronize = context["synchronize"] == true;
    let desired = match evaluated {
        Evaluated::Generated(resources) => resources,
        Evaluated::Skipped => return Ok(()),
        Evaluated::Failed(message) => {
            return Err(WorkError::Evaluation(message).within(format!("policy {}", policy.key)));
        }
        // Under synchronize, a trigger its constraints still select for
        // this operation no longer meets the conditions: its downstream
        // goes (an operation the policy does not list changes nothing).
        Evaluated::NotSelected { by_constraints } => {
            if synchronize && by_constraints && operation == "UPDATE" {
                return delete_downstream(shared, policy, trigger, &BTreeSet::new()).await;
            }
            return Ok(());
        }
    };
    let owner = Owner::of(policy, trigger);
    let mut kept = BTreeSet::new();
    for object in desired {
        let object = prepare(object, &owner, policy, shared.view.as_ref())?;
        let kind = kind_key(&object);
        shared
            .downstream
            .record(&policy.scope.name, &kind, policy.settings.synchronize);
        kept.insert(identity(&object));
        write(
            shared,
            &object,
            &owner,
            policy.settings.use_server_side_apply,
        )
        .await?;
    }
    if synchronize {
        delete_downstream(shared, policy, trigger, &kept).await?;
    }
    Ok(())
}

/// What evaluating a GeneratingPolicy on a trigger came to.
enum Evaluated {
    /// The objects `generator.Apply` asked for.
    Generated(Vec<serde_json::Value>),
    /// An exception skipped it.
    Skipped,
    Failed(String),
    /// It does not apply; `by_constraints`: its matchConstraints select
    /// the trigger (its matchConditions do not hold).
    NotSelected {
        by_constraints: bool,
    },
}

/// Whose a downstream object is: the labels that say so.
struct Owner {
    labels: Map<String, Value>,
    policy: String,
    trigger_uid: String,
}

impl Owner {
    fn of(policy: &CompiledGeneratingPolicy, trigger: &Value) -> Owner {
        let text = |k: &str| trigger[k].as_str().unwrap_or_default().to_string();
        let api_version = text("apiVersion");
        let (group, version) = crate::kinds::split_api_version(&api_version);
        let mut labels = Map::new();
        for (k, v) in [
            (labels::MANAGED_BY, "kyverno".to_string()),
            (labels::POLICY_NAME, policy.scope.name.clone()),
            (labels::TRIGGER_NAME, text("name")),
            (labels::TRIGGER_NAMESPACE, text("namespace")),
            (labels::TRIGGER_UID, text("uid")),
            (labels::TRIGGER_KIND, text("kind")),
            (labels::TRIGGER_GROUP, group.to_string()),
            (labels::TRIGGER_VERSION, version.to_string()),
        ] {
            labels.insert(k.into(), Value::String(v));
        }
        Owner {
            labels,
            policy: policy.scope.name.clone(),
            trigger_uid: text("uid"),
        }
    }

    /// Whether `existing` is this policy's downstream for this trigger.
    fn owns(&self, existing: &Value) -> bool {
        let label = |k: &str| {
            existing
                .pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        label(labels::MANAGED_BY) == "kyverno"
            && label(labels::POLICY_NAME) == self.policy
            && label(labels::TRIGGER_UID) == self.trigger_uid
    }
}

/// Source-uid label of a clone (Kyverno's `generate.kyverno.io/source-uid`).
const SOURCE_UID: &str = "generate.kyverno.io/source-uid";

/// A generated object as it is written (Kyverno's generator): the labels,
/// the source's uid when it was read from the cluster (a clone), server
/// fields dropped, owner references dropped when it changes namespace,
/// and no namespace on a cluster-scoped kind (refused from a
/// NamespacedGeneratingPolicy).
fn prepare(
    mut object: Value,
    owner: &Owner,
    policy: &CompiledGeneratingPolicy,
    view: &dyn ClusterView,
) -> Result<Value, WorkError> {
    let (api_version, kind) = kind_key(&object);
    let source_namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let source_uid = object
        .pointer("/metadata/resourceVersion")
        .and_then(|_| object.pointer("/metadata/uid"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let Some(root) = object.as_object_mut() else {
        return Err(WorkError::Invalid(
            "a generated object is not an object".into(),
        ));
    };
    root.remove("status");
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return Err(WorkError::Invalid(format!(
            "{kind}: metadata is not an object"
        )));
    };
    for field in [
        "uid",
        "selfLink",
        "creationTimestamp",
        "managedFields",
        "resourceVersion",
        "generation",
    ] {
        meta.remove(field);
    }
    let namespace = if crate::context::Resolver::is_namespaced(view, &api_version, &kind) {
        source_namespace.clone()
    } else {
        if policy.scope.namespace.is_some() {
            return Err(WorkError::Invalid(format!(
                "cross-scope generation denied: a policy scoped to namespace {:?} cannot generate cluster-scoped resource {api_version}/{kind}",
                policy.scope.namespace.as_deref().unwrap_or_default()
            )));
        }
        String::new()
    };
    if namespace.is_empty() {
        meta.remove("namespace");
    } else {
        meta.insert("namespace".into(), Value::String(namespace));
    }
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(labels) = labels {
        labels.extend(owner.labels.clone());
        if let Some(uid) = source_uid {
            labels.insert(SOURCE_UID.into(), Value::String(uid));
        }
    }
    Ok(object)
}

fn kind_key(object: &Value) -> KindKey {
    let text = |k: &str| object[k].as_str().unwrap_or_default().to_string();
    (text("apiVersion"), text("kind"))
}

/// apiVersion, kind, namespace and name.
fn identity(object: &Value) -> (String, String, String, String) {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (
        text("/apiVersion"),
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
    )
}

/// Creates `desired`, or brings the existing object in line when it is
/// this policy's downstream for this trigger; someone else's object of
/// the same name is left alone. With `useServerSideApply`, one apply
/// patch (field manager `kyverno-generate`) does either.
async fn write(
    shared: &Arc<Shared>,
    desired: &Value,
    owner: &Owner,
    server_side_apply: bool,
) -> Result<(), WorkError> {
    let (api_version, kind, namespace, name) = identity(desired);
    let what = format!("downstream {api_version}/{kind} {namespace}/{name}");
    if name.is_empty() || kind.is_empty() || api_version.is_empty() {
        return Err(WorkError::Invalid(format!(
            "{what}: no apiVersion, kind or name"
        )));
    }
    let api = objects::api_for(&shared.client, &api_version, &kind, &namespace);
    let fail = |e: kube::Error| WorkError::api(&what, &e);
    let invalid = |e: serde_json::Error| WorkError::Invalid(format!("{what}: {e}"));
    let object: DynamicObject = serde_json::from_value(desired.clone()).map_err(invalid)?;
    if server_side_apply {
        if let Some(existing) = api.get_opt(&name).await.map_err(fail)?
            && !owner.owns(&serde_json::to_value(&existing).unwrap_or_default())
        {
            return Ok(());
        }
        let params = PatchParams::apply("kyverno-generate").force();
        let written = api
            .patch(&name, &params, &Patch::Apply(&object))
            .await
            .map_err(fail)?;
        shared.downstream.own_write(&written);
        shared.metrics.count("applied");
        return Ok(());
    }
    // Create first: for a new trigger that is the one call needed.
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => {
            shared.downstream.own_write(&created);
            shared.metrics.count("created");
            return Ok(());
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(fail(e)),
    }
    let Some(existing) = api.get_opt(&name).await.map_err(fail)? else {
        return Err(WorkError::TriggerGone(format!(
            "{what}: deleted while being written; tried again"
        )));
    };
    let existing = serde_json::to_value(existing).unwrap_or_default();
    if !owner.owns(&existing) {
        tracing::info!(
            policy = owner.policy,
            object = what,
            "an object of that name exists and is not this policy's downstream; left alone"
        );
        return Ok(());
    }
    let merged = objects::in_line(&existing, desired);
    if merged == existing {
        return Ok(());
    }
    let object: DynamicObject = serde_json::from_value(merged).map_err(invalid)?;
    // Carries the resourceVersion read: a change meanwhile is a 409 and
    // the request is tried again.
    let written = api
        .replace(&name, &PostParams::default(), &object)
        .await
        .map_err(fail)?;
    shared.downstream.own_write(&written);
    shared.metrics.count("updated");
    Ok(())
}

/// Writes a `cel-generate` UpdateRequest for policy-driven work (no
/// admission request).
async fn request(
    shared: &Arc<Shared>,
    policy: &CompiledGeneratingPolicy,
    trigger: Value,
    synchronize: bool,
) {
    let context = json!({
        "rule": policy.scope.name,
        "deleteDownstream": false,
        "synchronize": synchronize,
        "cacheRestore": false,
        "trigger": trigger,
    });
    let spec = json!({
        "requestType": CEL_GENERATE,
        "policy": policy.key,
        "rule": "",
        "deleteDownstream": false,
        "synchronize": synchronize,
        "resource": trigger,
        "ruleContext": [context],
        "context": {"userInfo": {}, "admissionRequestInfo": {}},
    });
    super::policies::submit(shared, spec).await;
}

/// The policy a downstream object's labels name: a NamespacedGeneratingPolicy
/// of its namespace first, else the GeneratingPolicy of that name.
fn policy_of<'s>(
    snapshot: &'s crate::admission::policies::Snapshot,
    name: &str,
    namespace: &str,
) -> Option<&'s CompiledGeneratingPolicy> {
    let named = |p: &&CompiledGeneratingPolicy| p.scope.name == name;
    snapshot
        .generating
        .iter()
        .filter(named)
        .find(|p| p.scope.namespace.as_deref() == Some(namespace))
        .or_else(|| {
            snapshot
                .generating
                .iter()
                .filter(named)
                .find(|p| p.scope.namespace.is_none())
        })
}
