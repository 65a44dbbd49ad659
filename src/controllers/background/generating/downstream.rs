//! A GeneratingPolicy's downstream: the kinds it is found in (one labelled
//! list per discovered kind when the lead is taken), the watches that undo
//! anyone else's change to it, and its deletion.

use super::*;
use crate::admission::update_requests::{labels, trigger_from_labels};
use crate::controllers::background::{Shared, objects};
use crate::policy::cel_policy::CompiledGeneratingPolicy;
use futures_util::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// `apiVersion` and kind of downstream objects.
pub(super) type KindKey = (String, String);

/// What the leader knows of GeneratingPolicy downstream, for this lead.
pub(in super::super) struct Downstream {
    /// The kinds each policy (by name, the label value) has downstream in.
    pub(super) kinds: Mutex<BTreeMap<String, BTreeSet<KindKey>>>,
    /// Kinds whose watch has been asked for.
    pub(super) watched: Mutex<BTreeSet<KindKey>>,
    pub(super) watch: mpsc::UnboundedSender<KindKey>,
    /// uid → resourceVersion of the controller's own writes, and uids of
    /// its own deletes (resourceVersion ""), so their watch events are
    /// not taken for someone else's changes.
    pub(super) own: Mutex<HashMap<String, String>>,
}

impl Downstream {
    pub(in super::super) fn new() -> (Downstream, mpsc::UnboundedReceiver<KindKey>) {
        let (watch, rx) = mpsc::unbounded_channel();
        let downstream = Downstream {
            kinds: Mutex::new(BTreeMap::new()),
            watched: Mutex::new(BTreeSet::new()),
            watch,
            own: Mutex::new(HashMap::new()),
        };
        (downstream, rx)
    }

    pub(super) fn kinds_of(&self, policy: &str) -> Vec<KindKey> {
        self.kinds
            .lock()
            .expect("kinds")
            .get(policy)
            .map(|k| k.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Records that `policy` has downstream of `kind`; watched when the
    /// policy synchronizes.
    pub(super) fn record(&self, policy: &str, kind: &KindKey, synchronize: bool) {
        self.kinds
            .lock()
            .expect("kinds")
            .entry(policy.to_string())
            .or_default()
            .insert(kind.clone());
        if synchronize && self.watched.lock().expect("watched").insert(kind.clone()) {
            let _ = self.watch.send(kind.clone());
        }
    }

    pub(super) fn own_write(&self, object: &DynamicObject) {
        if let (Some(uid), Some(rv)) = (&object.metadata.uid, &object.metadata.resource_version) {
            self.own
                .lock()
                .expect("own")
                .insert(uid.clone(), rv.clone());
        }
    }

    pub(super) fn own_delete(&self, uid: &str) {
        self.own
            .lock()
            .expect("own")
            .insert(uid.to_string(), String::new());
    }

    /// Whether a watch event is the controller's own doing.
    pub(super) fn is_own(&self, uid: &str, resource_version: Option<&str>) -> bool {
        let own = self.own.lock().expect("own");
        match (own.get(uid), resource_version) {
            (Some(rv), Some(seen)) => rv == seen,
            (Some(rv), None) => rv.is_empty(),
            (None, _) => false,
        }
    }
}

/// The label selector of a GeneratingPolicy's downstream: Kyverno's
/// labels without a rule name (which a ClusterPolicy's downstream has).
pub(super) fn selector(policy: &str, trigger_uid: Option<&str>) -> String {
    let mut out = format!(
        "{}=kyverno,{}={policy},!{}",
        labels::MANAGED_BY,
        labels::POLICY_NAME,
        labels::RULE_NAME
    );
    if let Some(uid) = trigger_uid.filter(|u| !u.is_empty()) {
        out.push_str(&format!(",{}={uid}", labels::TRIGGER_UID));
    }
    out
}

/// The labels of every GeneratingPolicy's downstream.
pub(super) const ANY_POLICY: &str = "app.kubernetes.io/managed-by=kyverno,generate.kyverno.io/policy-name,!generate.kyverno.io/rule-name";

/// Deletes a trigger's downstream, in every kind the policy is known to
/// have downstream in, except the objects `kept`.
pub(super) async fn delete_downstream(
    shared: &Arc<Shared>,
    policy: &CompiledGeneratingPolicy,
    trigger: &Value,
    kept: &BTreeSet<(String, String, String, String)>,
) -> Result<(), WorkError> {
    let uid = trigger["uid"].as_str().unwrap_or_default();
    if uid.is_empty() {
        return Ok(());
    }
    let selector = selector(&policy.scope.name, Some(uid));
    delete_selected(shared, policy, &selector, kept).await
}

/// Deletes the objects `selector` selects in the policy's downstream
/// kinds (in its namespace, for a NamespacedGeneratingPolicy).
pub(super) async fn delete_selected(
    shared: &Arc<Shared>,
    policy: &CompiledGeneratingPolicy,
    selector: &str,
    kept: &BTreeSet<(String, String, String, String)>,
) -> Result<(), WorkError> {
    let namespace = policy.scope.namespace.clone().unwrap_or_default();
    for (api_version, kind) in shared.downstream.kinds_of(&policy.scope.name) {
        let found = objects::list(&shared.client, &api_version, &kind, &namespace, selector)
            .await
            .map_err(|e| WorkError::api(format!("listing {kind} {selector}"), &e))?;
        for object in found {
            let mut id = identity(&object);
            (id.0, id.1) = (api_version.clone(), kind.clone());
            if kept.contains(&id) {
                continue;
            }
            let uid = object
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            shared.downstream.own_delete(uid);
            let api = objects::api_for(&shared.client, &api_version, &kind, &id.2);
            let deleted = crate::cluster::discovery::delete_once(&api, &id.3, uid, None)
                .await
                .map_err(|e| WorkError::api(format!("deleting {kind} {}/{}", id.2, id.3), &e))?;
            if deleted {
                shared.metrics.count("deleted");
            }
        }
    }
    Ok(())
}

/// Watches the downstream kinds of synchronized policies, as they become
/// known, for changes made by anyone but the controller: each one is
/// undone by generating again from the trigger.
pub(in super::super) async fn watch_downstream(
    shared: Arc<Shared>,
    mut kinds: mpsc::UnboundedReceiver<KindKey>,
) {
    let mut watches = tokio::task::JoinSet::new();
    while let Some((api_version, kind)) = kinds.recv().await {
        let shared = shared.clone();
        watches.spawn(async move {
            let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(
                shared.client.clone(),
                &objects::api_resource(&api_version, &kind),
            );
            let mut events = watcher(api, watcher::Config::default().labels(ANY_POLICY))
                .default_backoff()
                .boxed();
            let mut listed = false;
            while let Some(event) = events.next().await {
                let (meta, deleted) = match event {
                    Ok(watcher::Event::InitDone) => {
                        listed = true;
                        continue;
                    }
                    Ok(watcher::Event::Apply(o)) if listed => (o.metadata, false),
                    Ok(watcher::Event::Delete(o)) if listed => (o.metadata, true),
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(kind, error = %e, "watching generated downstream");
                        continue;
                    }
                };
                let uid = meta.uid.clone().unwrap_or_default();
                let rv = if deleted {
                    None
                } else {
                    meta.resource_version.as_deref()
                };
                if shared.downstream.is_own(&uid, rv) {
                    continue;
                }
                let labels = meta.labels.clone().unwrap_or_default();
                let name = labels.get(labels::POLICY_NAME).cloned().unwrap_or_default();
                let namespace = meta.namespace.clone().unwrap_or_default();
                let snapshot = shared.snapshot.load_full();
                let Some(policy) = policy_of(&snapshot, &name, &namespace) else {
                    continue;
                };
                if !policy.settings.synchronize {
                    continue;
                }
                tracing::info!(
                    policy = policy.key,
                    kind,
                    namespace,
                    object = meta.name.as_deref().unwrap_or_default(),
                    deleted,
                    "downstream changed by someone else; generating it again"
                );
                let trigger =
                    trigger_from_labels(|k| labels.get(k).map(String::as_str).unwrap_or_default());
                request(&shared, policy, trigger, true).await;
            }
        });
    }
    // The sender lives as long as the lead: not reached while leading.
    while watches.join_next().await.is_some() {}
}

/// Finds in which kinds GeneratingPolicies have downstream: one labelled
/// metadata list per discovered kind the controller may list.
pub(super) async fn find_downstream_kinds(
    shared: &Arc<Shared>,
    policies: &BTreeMap<String, State>,
) {
    let resources = match crate::cluster::discovery::resources(&shared.client).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = e, "discovery for GeneratingPolicy downstream");
            return;
        }
    };
    let synchronized: BTreeSet<&str> = policies
        .values()
        .filter(|s| s.synchronize)
        .map(|s| s.policy.scope.name.as_str())
        .collect();
    let mut found = 0;
    for resource in resources.iter().filter(|r| r.supports(&["list", "watch"])) {
        let api: Api<PartialObjectMeta<DynamicObject>> =
            Api::all_with(shared.client.clone(), &resource.api);
        let Ok(list) = api
            .list_metadata(&ListParams::default().labels(ANY_POLICY))
            .await
        else {
            // Not allowed to list: nothing of ours can be there.
            continue;
        };
        let kind = (resource.api.api_version.clone(), resource.api.kind.clone());
        for object in list.items {
            let name = object
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::POLICY_NAME))
                .cloned()
                .unwrap_or_default();
            found += 1;
            shared
                .downstream
                .record(&name, &kind, synchronized.contains(name.as_str()));
        }
    }
    tracing::info!(objects = found, "GeneratingPolicy downstream found");
}
