//! The leader's policy status duty: each policy object gets a `Ready`
//! condition saying whether its latest version is in force (`True`,
//! reason `Succeeded`) or was rejected (`False`, reason `Failed`, with
//! why): in `status.conditions` for the kyverno.io kinds, in
//! `status.conditionStatus` (with `ready`, the READY column of `kubectl
//! get vpol`) for the policies.kyverno.io kinds. Written through the
//! status subresource, only when it differs from what the object has, so
//! running it twice changes nothing.

use crate::cluster::policy_sync::Statuses;
use crate::cluster::stores::{cluster_policy_resource, policy_resource, qualified_kind};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Whether a kind keeps its conditions in `status.conditionStatus` (the
/// policies.kyverno.io kinds).
pub fn uses_condition_status(api_version: &str) -> bool {
    api_version.starts_with("policies.kyverno.io/")
}

/// The status patch that says whether a policy's latest version is in
/// force; None when `object` says so already.
pub fn ready_patch(
    condition_status: bool,
    status: &Result<(), String>,
    object: &Value,
) -> Option<Value> {
    let (state, reason, message) = match status {
        Ok(()) => ("True", "Succeeded", "Ready".to_string()),
        Err(reason) => ("False", "Failed", reason.clone()),
    };
    let held = if condition_status {
        &object["status"]["conditionStatus"]["conditions"]
    } else {
        &object["status"]["conditions"]
    };
    let current = held
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    if current.is_some_and(|c| {
        c["status"] == state && c["reason"] == reason && c["message"] == message.as_str()
    }) {
        return None;
    }
    let condition = json!({
        "type": "Ready", "status": state, "reason": reason, "message": message,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string(),
    });
    Some(if condition_status {
        json!({"status": {"conditionStatus": {
            "ready": state == "True", "message": message, "conditions": [condition],
        }}})
    } else {
        json!({"status": {"conditions": [condition]}})
    })
}

/// Writes one object's condition if it differs; Ok(true) when it wrote.
async fn reconcile_one(
    client: &Client,
    cel_kinds: &[ApiResource],
    (kind, namespace, name): &(String, String, String),
    status: &Result<(), String>,
) -> Result<bool, kube::Error> {
    // PolicyExceptions (of either group) have no status subresource: their
    // CRDs declare none, and Kyverno writes them no condition.
    let Some(resource) = [cluster_policy_resource(), policy_resource()]
        .into_iter()
        .chain(cel_kinds.iter().cloned())
        .filter(|r| r.kind != "PolicyException")
        .find(|r| qualified_kind(r) == *kind)
    else {
        return Ok(false);
    };
    let api: Api<DynamicObject> = if namespace.is_empty() {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), namespace, &resource)
    };
    let Some(object) = api.get_opt(name).await? else {
        return Ok(false);
    };
    let object = serde_json::to_value(&object).unwrap_or_default();
    let Some(patch) = ready_patch(
        uses_condition_status(&resource.api_version),
        status,
        &object,
    ) else {
        return Ok(false);
    };
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(true)
}

/// Runs the duty while `leading` says this replica leads: on every status
/// change, and every `resync` to repair edits made by others.
pub async fn run(
    client: Client,
    cel_kinds: Vec<ApiResource>,
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
            if let Err(e) = reconcile_one(&client, &cel_kinds, key, status).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_conditions_say_whether_a_policy_is_in_force() {
        let bad: Result<(), String> = Err("spec.schedule: invalid".into());
        let patch = ready_patch(false, &bad, &json!({})).unwrap();
        let c = &patch["status"]["conditions"][0];
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some("Failed"))
        );
        assert_eq!(c["message"], "spec.schedule: invalid");
        let patch = ready_patch(true, &bad, &json!({})).unwrap();
        assert_eq!(patch["status"]["conditionStatus"]["ready"], false);
        // Written once: the object holding it needs no patch.
        let held =
            json!({"status": {"conditionStatus": patch["status"]["conditionStatus"].clone()}});
        assert!(ready_patch(true, &bad, &held).is_none());
        assert!(ready_patch(true, &Ok(()), &held).is_some());
        assert!(uses_condition_status("policies.kyverno.io/v1beta1"));
        assert!(!uses_condition_status("kyverno.io/v2"));
    }
}
