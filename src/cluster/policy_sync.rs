//! Keeps the published policy snapshot in step with the policy stores:
//! on every change (debounced) the changed objects are compiled again and a
//! new snapshot is published. An object that fails to load or compile keeps
//! its previous compiled version in force; it is counted, logged and
//! remembered until its next change.

use super::stores::Stores;
use crate::admission::policies::Publisher;
use crate::policy::load::classify;
use crate::policy::set::{LoadOptions, Policy, PolicySet};
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::Store;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// (kind qualified with its group, namespace, name) of a policy object:
/// a PolicyException of either group may have the same name.
pub type Key = (String, String, String);

/// What one object contributed: its compiled form at the last
/// resourceVersion that compiled (none before the first), and the last
/// failure, if newer.
struct Entry {
    resource_version: String,
    compiled: Option<Policy>,
    failed: Option<(String, String)>,
}

/// A policy object that could not be used, with the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

/// Per policy object: Ok when its latest version is in force, or the
/// reason its latest version was rejected.
pub type Statuses = BTreeMap<Key, Result<(), String>>;

pub struct PolicySync {
    entries: BTreeMap<Key, Entry>,
    pub publisher: Publisher,
    /// What the leader's status duty writes back to the objects.
    statuses: tokio::sync::watch::Sender<std::sync::Arc<Statuses>>,
}

impl PolicySync {
    pub fn new(publisher: Publisher) -> PolicySync {
        PolicySync {
            entries: BTreeMap::new(),
            publisher,
            statuses: tokio::sync::watch::channel(Default::default()).0,
        }
    }

    /// Follows the status of every policy object.
    pub fn statuses(&self) -> tokio::sync::watch::Receiver<std::sync::Arc<Statuses>> {
        self.statuses.subscribe()
    }

    /// Compiles what changed in `stores` and publishes a new snapshot if
    /// anything did. Returns the objects rejected in this pass.
    pub fn refresh(&mut self, stores: &Stores) -> Vec<Rejected> {
        let mut seen: BTreeSet<Key> = BTreeSet::new();
        let mut changed = false;
        let mut rejected = Vec::new();
        for (store, resource) in [
            (
                &stores.cluster_policies,
                super::stores::cluster_policy_resource(),
            ),
            (&stores.policies, super::stores::policy_resource()),
            (&stores.exceptions, super::stores::exception_resource()),
        ] {
            changed |= self.refresh_kind(store, &resource, &mut seen, &mut rejected);
        }
        for (resource, store) in &stores.cel_policies {
            changed |= self.refresh_kind(store, resource, &mut seen, &mut rejected);
        }
        let before = self.entries.len();
        self.entries.retain(|k, _| seen.contains(k));
        changed |= self.entries.len() != before;
        if changed || self.publisher.generation() == 0 {
            let mut set = PolicySet::default();
            for policy in self.entries.values().filter_map(|e| e.compiled.clone()) {
                set.add(policy);
            }
            self.publisher.publish(set);
        }
        rejected
    }

    fn refresh_kind(
        &mut self,
        store: &Store<DynamicObject>,
        resource: &ApiResource,
        seen: &mut BTreeSet<Key>,
        rejected: &mut Vec<Rejected>,
    ) -> bool {
        let mut changed = false;
        for object in store.state() {
            let namespace = object.metadata.namespace.clone().unwrap_or_default();
            let name = object.metadata.name.clone().unwrap_or_default();
            // The generation moves only with the spec: a status write (ours
            // included) must not make an object compile, or fail, again.
            let rv = match object.metadata.generation {
                Some(g) => format!("generation {g}"),
                None => object.metadata.resource_version.clone().unwrap_or_default(),
            };
            let key = (
                super::stores::qualified_kind(resource),
                namespace.clone(),
                name.clone(),
            );
            seen.insert(key.clone());
            let known = self.entries.get(&key);
            if known.is_some_and(|e| {
                e.resource_version == rv || e.failed.as_ref().is_some_and(|(f, _)| *f == rv)
            }) {
                continue;
            }
            match compile(&object, resource) {
                Ok(compiled) => {
                    self.entries.insert(
                        key,
                        Entry {
                            resource_version: rv,
                            compiled,
                            failed: None,
                        },
                    );
                    changed = true;
                }
                Err(reason) => {
                    self.publisher.rejected.inc();
                    rejected.push(Rejected {
                        kind: resource.kind.clone(),
                        namespace,
                        name,
                        reason: reason.clone(),
                    });
                    let entry = self.entries.entry(key).or_insert(Entry {
                        resource_version: String::new(),
                        compiled: None,
                        failed: None,
                    });
                    entry.failed = Some((rv, reason));
                }
            }
        }
        changed
    }

    /// [`PolicySync::refresh`], logging each rejection.
    pub fn refresh_and_log(&mut self, stores: &Stores) {
        let rejected = self.refresh(stores);
        let statuses: Statuses = self
            .entries
            .iter()
            .map(|(k, e)| {
                let status = match &e.failed {
                    Some((_, reason)) => Err(reason.clone()),
                    None => Ok(()),
                };
                (k.clone(), status)
            })
            .collect();
        if **self.statuses.borrow() != statuses {
            self.statuses.send_replace(std::sync::Arc::new(statuses));
        }
        for r in rejected {
            tracing::error!(
                kind = r.kind,
                namespace = r.namespace,
                name = r.name,
                reason = r.reason,
                "policy rejected; its previous version, if any, stays in force"
            );
        }
    }

    /// Refreshes on every store change, at most once per `debounce`, for
    /// as long as the stores run.
    pub async fn run(mut self, stores: Stores, debounce: Duration) {
        let mut changes = stores.policies_changed.clone();
        loop {
            self.refresh_and_log(&stores);
            if changes.changed().await.is_err() {
                return;
            }
            tokio::time::sleep(debounce).await;
            changes.borrow_and_update();
        }
    }
}

/// Loads and compiles one stored object.
fn compile(object: &DynamicObject, resource: &ApiResource) -> Result<Option<Policy>, String> {
    let mut value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    // Items of a list may come without their type.
    value["apiVersion"] = Value::String(resource.api_version.clone());
    value["kind"] = Value::String(resource.kind.clone());
    let source = format!(
        "{}/{}",
        resource.plural,
        match &object.metadata.namespace {
            Some(ns) => format!("{ns}/{}", object.metadata.name.as_deref().unwrap_or("")),
            None => object.metadata.name.clone().unwrap_or_default(),
        }
    );
    let doc = classify(&source, 0, value).map_err(|e| e.to_string())?;
    Policy::compile(doc, &LoadOptions::SERVER).map_err(|r| r.reason)
}
