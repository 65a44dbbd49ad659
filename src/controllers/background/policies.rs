//! The background controller's view of policy changes, seen in the
//! snapshot the replica serves:
//! - a rule with `generateExisting` (new, or changed), or a mutate-existing
//!   rule of a policy with `mutateExistingOnPolicyUpdate`: one
//!   UpdateRequest per existing trigger, when the policy appears and when
//!   this replica takes the lead (the work is idempotent, and a leader
//!   change must not lose a policy created meanwhile);
//! - a synchronized `data` rule changed: its downstream resources are
//!   generated again from their triggers;
//! - a synchronized `data` rule or its policy deleted: its downstream
//!   resources are deleted, unless `orphanDownstreamOnPolicyDelete`
//!   (clones are kept, as Kyverno keeps them).

use super::follow::{Followed, downstream_triggers, existing_objects};
use super::generate::downstream_kinds;
use super::{Shared, objects};
use crate::admission::policies::Snapshot;
use crate::admission::update_requests::{self, UpdateRequestSpec};
use crate::engine::Request;
use crate::kinds::builtin_kinds;
use crate::policy::RuleBody;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A generate or mutate-existing rule as the policy follower compares it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RuleState {
    /// The rule's body, serialized: a change is a changed rule.
    spec: String,
    /// A mutate-existing rule (else a generate rule).
    mutate: bool,
    synchronize: bool,
    clones: bool,
    orphan: bool,
    /// Applied to the triggers that exist when the rule appears or changes
    /// (`generateExisting`, `mutateExistingOnPolicyUpdate`).
    existing: bool,
    kinds: Vec<(String, String)>,
}

/// The classic policies' generate and mutate-existing rules, followed by
/// (policy, rule).
pub(super) struct ClassicRules;

impl Followed for ClassicRules {
    type Key = (String, String);
    type State = RuleState;

    fn states(&self, snapshot: &Snapshot) -> BTreeMap<(String, String), RuleState> {
        let mut out = BTreeMap::new();
        for policy in snapshot.policies.iter() {
            for rule in &policy.rules {
                let state = match &rule.body {
                    RuleBody::Generate(g) => {
                        let p = &g.spec.pattern;
                        RuleState {
                            spec: serde_json::to_string(&g.spec).unwrap_or_default(),
                            mutate: false,
                            synchronize: g.spec.synchronize == Some(true),
                            clones: p.clone.is_some() || p.clone_list.is_some(),
                            orphan: g.spec.orphan_downstream_on_policy_delete == Some(true),
                            existing: g.generate_existing,
                            kinds: downstream_kinds(policy, &rule.name),
                        }
                    }
                    RuleBody::Mutate(m) if !m.targets.is_empty() => RuleState {
                        spec: format!("{:?}", (&m.patch, &m.targets)),
                        mutate: true,
                        synchronize: false,
                        clones: false,
                        orphan: false,
                        existing: m.on_policy_update == Some(true),
                        kinds: Vec::new(),
                    },
                    _ => continue,
                };
                out.insert(
                    (policy.qualified_name().to_string(), rule.name.clone()),
                    state,
                );
            }
        }
        out
    }

    async fn changed(
        &self,
        shared: &Arc<Shared>,
        (policy, rule): &(String, String),
        before: Option<&RuleState>,
        now: &RuleState,
    ) {
        if now.existing {
            existing_triggers(shared, policy, rule, now.mutate).await;
        }
        if before.is_some() && now.synchronize && !now.clones {
            regenerate(shared, policy, rule, now).await;
        }
    }

    async fn removed(
        &self,
        shared: &Arc<Shared>,
        (key, rule): &(String, String),
        state: &RuleState,
    ) {
        if state.mutate || !state.synchronize || state.clones || state.orphan {
            return;
        }
        let selector = objects::selector(key, Some(rule), None);
        for (api_version, kind) in &state.kinds {
            match objects::delete_selected(
                &shared.client,
                api_version,
                kind,
                &selector,
                &shared.metrics,
            )
            .await
            {
                Ok(n) => tracing::info!(
                    policy = key,
                    rule,
                    kind,
                    deleted = n,
                    "downstream of a deleted rule deleted"
                ),
                Err(e) => tracing::warn!(
                    policy = key,
                    rule,
                    error = %e,
                    "deleting the downstream of a deleted rule"
                ),
            }
        }
    }
}

/// One UpdateRequest per existing trigger of a rule (generateExisting,
/// mutateExistingOnPolicyUpdate).
async fn existing_triggers(shared: &Arc<Shared>, key: &str, rule_name: &str, mutate: bool) {
    let snapshot = shared.snapshot.load_full();
    let Some(policy) = snapshot.policies.iter().find(|p| p.qualified_name() == key) else {
        return;
    };
    let Some(rule) = policy.rules.iter().find(|r| r.name == rule_name) else {
        return;
    };
    let Some(selectors) = rule.match_resources.kind_selectors() else {
        tracing::warn!(
            policy = key,
            rule = rule_name,
            "existing triggers of a rule that matches any kind are not swept"
        );
        return;
    };
    let namespace = policy.namespace.clone().unwrap_or_default();
    let mut written = 0;
    for kind in builtin_kinds().iter().filter(|k| {
        selectors.iter().any(|s| {
            s.subresource.is_none() && s.kind.matches(k.kind) && {
                let (g, v) = crate::kinds::split_api_version(k.api_version);
                s.group.matches(g) && s.version.matches(v)
            }
        })
    }) {
        for trigger in existing_objects(shared, kind.api_version, kind.kind, &namespace, key).await
        {
            let req = Request::offline(&trigger, "CREATE", Default::default(), None);
            if !rule.selects(&req.match_input()) {
                continue;
            }
            let trigger = update_requests::resource_spec(&trigger);
            if mutate {
                write_mutate(shared, key, rule_name, trigger).await;
            } else {
                let context = json!({
                    "rule": rule_name,
                    "deleteDownstream": false,
                    "synchronize": matches!(&rule.body, RuleBody::Generate(g) if g.spec.synchronize == Some(true)),
                    "trigger": trigger,
                });
                write(shared, key, context).await;
            }
            written += 1;
        }
    }
    tracing::info!(
        policy = key,
        rule = rule_name,
        requests = written,
        mutate,
        "requests written for the existing triggers"
    );
}

/// A synchronized data rule changed: its downstream generated again, one
/// UpdateRequest per trigger its downstream names.
async fn regenerate(shared: &Arc<Shared>, key: &str, rule: &str, state: &RuleState) {
    let selector = objects::selector(key, Some(rule), None);
    for trigger in downstream_triggers(shared, &state.kinds, "", &selector, key).await {
        let context = json!({
            "rule": rule,
            "deleteDownstream": false,
            "synchronize": true,
            "trigger": trigger,
        });
        write(shared, key, context).await;
    }
}

/// Writes a generate UpdateRequest for policy-driven work (no admission
/// request).
async fn write(shared: &Arc<Shared>, policy: &str, context: Value) {
    let spec = json!({
        "requestType": "generate",
        "policy": policy,
        "rule": "",
        "deleteDownstream": false,
        "synchronize": context["synchronize"],
        "resource": context["trigger"],
        "ruleContext": [context],
        "context": {"userInfo": {}, "admissionRequestInfo": {}},
    });
    submit(shared, spec).await;
}

/// Writes a mutate-existing UpdateRequest for policy-driven work.
async fn write_mutate(shared: &Arc<Shared>, policy: &str, rule: &str, trigger: Value) {
    let spec = json!({
        "requestType": "mutate",
        "policy": policy,
        "rule": rule,
        "deleteDownstream": false,
        "synchronize": false,
        "resource": trigger,
        "context": {"userInfo": {}, "admissionRequestInfo": {}},
    });
    submit(shared, spec).await;
}

/// Writes an UpdateRequest for policy-driven work (no admission request).
pub(super) async fn submit(shared: &Arc<Shared>, spec: Value) {
    let request = UpdateRequestSpec {
        spec,
        not_for_own_writes: false,
        username: String::new(),
    };
    crate::cluster::update_requests::write(
        &shared.urs,
        &shared.opts.namespace,
        request,
        &shared.metrics,
    )
    .await;
}
