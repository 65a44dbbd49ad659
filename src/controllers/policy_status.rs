//! The leader's policy status duty: each ClusterPolicy, Policy and
//! PolicyException (not the policies.kyverno.io kinds) gets a `Ready` condition saying whether its latest
//! version is in force (`True`, reason `Succeeded`) or was rejected
//! (`False`, reason `Failed`, with why). Written through the status
//! subresource, only when it differs from what the object has, so running
//! it twice changes nothing.

use crate::cluster::policy_sync::Statuses;
use crate::cluster::stores::{cluster_policy_resource, exception_resource, policy_resource};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

fn condition(status: &Result<(), String>) -> (&'static str, &'static str, String) {
    match status {
        Ok(()) => ("True", "Succeeded", "Ready".to_string()),
        Err(reason) => ("False", "Failed", reason.clone()),
    }
}

/// Writes one object's condition if it differs; Ok(true) when it wrote.
async fn reconcile_one(
    client: &Client,
    (kind, namespace, name): &(String, String, String),
    status: &Result<(), String>,
) -> Result<bool, kube::Error> {
    // The CEL kinds' status has its own schema (conditionStatus); their
    // rejections are logged and counted, not written back.
    let resource = match kind.as_str() {
        "ClusterPolicy" => cluster_policy_resource(),
        "Policy" => policy_resource(),
        "PolicyException" => exception_resource(),
        _ => return Ok(false),
    };
    let api: Api<DynamicObject> = if namespace.is_empty() {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), namespace, &resource)
    };
    let Some(object) = api.get_opt(name).await? else {
        return Ok(false);
    };
    let (state, reason, message) = condition(status);
    let current = object.data.get("status").and_then(|s| s.get("conditions"));
    let ready = current
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    if ready.is_some_and(|c| {
        c["status"] == state && c["reason"] == reason && c["message"] == message.as_str()
    }) {
        return Ok(false);
    }
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let patch = json!({"status": {
        "ready": state == "True",
        "conditions": [{
            "type": "Ready", "status": state, "reason": reason, "message": message,
            "lastTransitionTime": now,
        }],
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(true)
}

/// Runs the duty while `leading` says this replica leads: on every status
/// change, and every `resync` to repair edits made by others.
pub async fn run(
    client: Client,
    mut statuses: watch::Receiver<Arc<Statuses>>,
    mut leading: watch::Receiver<bool>,
    resync: Duration,
) {
    loop {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        let current = statuses.borrow_and_update().clone();
        for (key, status) in current.iter() {
            if let Err(e) = reconcile_one(&client, key, status).await {
                tracing::warn!(kind = key.0, namespace = key.1, name = key.2, error = %e, "policy status not written; retrying");
            }
        }
        tokio::select! {
            _ = statuses.changed() => {}
            _ = tokio::time::sleep(resync) => {}
            _ = leading.changed() => {}
        }
    }
}
