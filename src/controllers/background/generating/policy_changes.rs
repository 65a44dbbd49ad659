//! What a GeneratingPolicy's appearance, change or deletion starts:
//! `generateExisting`, regeneration of a synchronized policy's downstream,
//! and deletion of a deleted policy's downstream.

use super::*;
use crate::admission::policies::Snapshot;
use crate::admission::update_requests::resource_spec;
use crate::controllers::background::follow::{Followed, downstream_triggers, existing_objects};
use crate::controllers::background::{Shared, objects};
use crate::engine::Request;
use crate::engine::cel::constraints_select;
use crate::json_doc::JsonRef;
use crate::policy::cel_policy::CompiledGeneratingPolicy;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A GeneratingPolicy as the follower compares it.
#[derive(Debug, Clone)]
pub(in super::super) struct State {
    pub(super) revision: u64,
    pub(super) synchronize: bool,
    pub(super) orphan: bool,
    pub(super) existing: bool,
    pub(super) policy: CompiledGeneratingPolicy,
}

impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        (self.revision, self.synchronize, self.orphan, self.existing)
            == (
                other.revision,
                other.synchronize,
                other.orphan,
                other.existing,
            )
    }
}

/// The GeneratingPolicies, followed by key: downstream kinds found when
/// the first appears (and when the lead is taken); `generateExisting`
/// when a policy appears or changes; a synchronized policy's change
/// carried to its downstream; a deleted one's downstream deleted unless
/// orphaned.
pub(in super::super) struct GeneratingPolicies;

impl Followed for GeneratingPolicies {
    type Key = String;
    type State = State;

    fn states(&self, snapshot: &Snapshot) -> BTreeMap<String, State> {
        snapshot
            .generating
            .iter()
            .map(|p| {
                let s = &p.settings;
                let state = State {
                    revision: p.revision,
                    synchronize: s.synchronize,
                    orphan: s.orphan_downstream_on_policy_delete,
                    existing: s.generate_existing,
                    policy: p.clone(),
                };
                (p.key.clone(), state)
            })
            .collect()
    }

    async fn first_appeared(&self, shared: &Arc<Shared>, now: &BTreeMap<String, State>) {
        find_downstream_kinds(shared, now).await;
    }

    async fn changed(
        &self,
        shared: &Arc<Shared>,
        _key: &String,
        before: Option<&State>,
        now: &State,
    ) {
        if now.existing && before.is_none_or(|b| b.revision != now.revision) {
            existing_triggers(shared, &now.policy).await;
        }
        if before.is_some() && now.synchronize {
            regenerate(shared, &now.policy).await;
        }
    }

    async fn removed(&self, shared: &Arc<Shared>, key: &String, state: &State) {
        if !state.synchronize || state.orphan {
            return;
        }
        let policy = &state.policy;
        let selector = selector(&policy.scope.name, None);
        match delete_selected(shared, policy, &selector, &BTreeSet::new()).await {
            Ok(()) => tracing::info!(
                policy = key,
                "downstream of a deleted GeneratingPolicy deleted"
            ),
            Err(e) => tracing::warn!(
                policy = key,
                error = %e,
                "deleting the downstream of a deleted GeneratingPolicy"
            ),
        }
    }
}

/// One UpdateRequest per trigger a synchronized policy's downstream
/// names: its change carried over.
pub(super) async fn regenerate(shared: &Arc<Shared>, policy: &CompiledGeneratingPolicy) {
    let namespace = policy.scope.namespace.clone().unwrap_or_default();
    let kinds = shared.downstream.kinds_of(&policy.scope.name);
    let selector = selector(&policy.scope.name, None);
    for trigger in downstream_triggers(shared, &kinds, &namespace, &selector, &policy.key).await {
        request(shared, policy, trigger, true).await;
    }
}

/// One UpdateRequest per existing trigger of a policy (`generateExisting`):
/// the objects of each resource its constraints name.
pub(super) async fn existing_triggers(shared: &Arc<Shared>, policy: &CompiledGeneratingPolicy) {
    let namespace = policy.scope.namespace.clone().unwrap_or_default();
    let kinds = objects::kinds_named(
        shared.view.as_ref(),
        &policy.scope.match_constraints.resource_rules,
        &policy.key,
    );
    let mut written = 0;
    for (api_version, kind) in kinds {
        for trigger in existing_objects(shared, &api_version, &kind, &namespace, &policy.key).await
        {
            let ns = trigger
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let labels = if ns.is_empty() {
                None
            } else {
                shared.view.namespace_labels(&ns)
            };
            let req = Request::offline(&trigger, "CREATE", Default::default(), labels);
            if !constraints_select(&policy.scope, &req, JsonRef::Value(&trigger), None) {
                continue;
            }
            request(
                shared,
                policy,
                resource_spec(&trigger),
                policy.settings.synchronize,
            )
            .await;
            written += 1;
        }
    }
    tracing::info!(
        policy = policy.key,
        requests = written,
        "requests written for the existing triggers"
    );
}
