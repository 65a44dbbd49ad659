//! Following policy changes while leading: the one loop the policy kinds
//! with background work share (classic generate and mutate-existing rules,
//! GeneratingPolicies, MutatingPolicies), and the listings their work
//! starts from.
//!
//! Each kind says what of a policy it compares ([`Followed::states`]) and
//! what a change means; the loop polls the snapshot, compares, and calls
//! back. Taking the lead counts as every policy appearing: the work is
//! idempotent, and a former lead may have stopped in the middle of it.

use super::{Shared, objects};
use crate::admission::policies::Snapshot;
use crate::admission::update_requests::trigger_from_labels;
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

/// A policy kind with background work on policy changes.
pub(super) trait Followed: Send + Sync + 'static {
    /// What names one followed unit (a policy, or a policy's rule).
    type Key: Ord + Send + Sync;
    /// What of a unit is compared: a change is work.
    type State: PartialEq + Send + Sync;

    fn states(&self, snapshot: &Snapshot) -> BTreeMap<Self::Key, Self::State>;

    /// Called before the changes when units appear where there were none
    /// (and so when the lead is taken).
    fn first_appeared(
        &self,
        _shared: &Arc<Shared>,
        _now: &BTreeMap<Self::Key, Self::State>,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// A unit appeared (`before` is `None`) or changed.
    fn changed(
        &self,
        shared: &Arc<Shared>,
        key: &Self::Key,
        before: Option<&Self::State>,
        now: &Self::State,
    ) -> impl Future<Output = ()> + Send;

    /// A unit is gone from the snapshot.
    fn removed(
        &self,
        _shared: &Arc<Shared>,
        _key: &Self::Key,
        _state: &Self::State,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Follows one kind's policies until the lead is lost (the caller drops
/// this future): every snapshot generation compared with the one before.
pub(super) async fn follow<F: Followed>(shared: Arc<Shared>, followed: F) {
    let mut seen = BTreeMap::new();
    let mut generation = None;
    loop {
        let snapshot = shared.snapshot.load_full();
        if generation != Some(snapshot.generation) {
            generation = Some(snapshot.generation);
            let now = followed.states(&snapshot);
            if seen.is_empty() && !now.is_empty() {
                followed.first_appeared(&shared, &now).await;
            }
            for (key, state) in &now {
                let before = seen.get(key);
                if before != Some(state) {
                    followed.changed(&shared, key, before, state).await;
                }
            }
            for (key, state) in &seen {
                if !now.contains_key(key) {
                    followed.removed(&shared, key, state).await;
                }
            }
            seen = now;
        }
        tokio::time::sleep(shared.opts.policy_poll).await;
    }
}

/// The objects of one kind in `namespace` (all namespaces when empty),
/// with their `apiVersion` and kind set (a list leaves them out): the
/// existing triggers a policy's work starts from. A listing that fails is
/// logged and gives none.
pub(super) async fn existing_objects(
    shared: &Shared,
    api_version: &str,
    kind: &str,
    namespace: &str,
    policy: &str,
) -> Vec<Value> {
    match objects::list(&shared.client, api_version, kind, namespace, "").await {
        Ok(found) => found
            .into_iter()
            .map(|mut o| {
                o["apiVersion"] = Value::String(api_version.to_string());
                o["kind"] = Value::String(kind.to_string());
                o
            })
            .collect(),
        Err(e) => {
            tracing::warn!(policy, kind, error = %e, "listing existing triggers");
            Vec::new()
        }
    }
}

/// The triggers a policy's downstream names in its labels, each once:
/// where a synchronized policy's change is carried by generating again.
pub(super) async fn downstream_triggers(
    shared: &Shared,
    kinds: &[(String, String)],
    namespace: &str,
    selector: &str,
    policy: &str,
) -> Vec<Value> {
    let mut triggers = BTreeMap::new();
    for (api_version, kind) in kinds {
        match objects::list(&shared.client, api_version, kind, namespace, selector).await {
            Ok(found) => {
                for o in found {
                    let trigger = trigger_from_labels(|k| {
                        o.pointer("/metadata/labels")
                            .and_then(|l| l.get(k))
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    });
                    triggers.insert(trigger.to_string(), trigger);
                }
            }
            Err(e) => {
                tracing::warn!(policy, kind, error = %e, "listing downstream to regenerate")
            }
        }
    }
    triggers.into_values().collect()
}

/// A compiled policy as a follower compares it: by its revision alone.
pub(super) struct Revision<P>(pub u64, pub P);

impl<P> PartialEq for Revision<P> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
