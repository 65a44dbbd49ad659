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
struct RuleState {
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

type PolicyStates = BTreeMap<String, BTreeMap<String, RuleState>>;

fn policy_states(snapshot: &Snapshot) -> PolicyStates {
    let mut out = PolicyStates::new();
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
            out.entry(policy.qualified_name().to_string())
                .or_default()
                .insert(rule.name.clone(), state);
        }
    }
    out
}

/// Follows the snapshot's generate and mutate-existing policies while
/// leading.
pub(super) async fn follow(shared: Arc<Shared>) {
    let mut seen = policy_states(&shared.snapshot.load());
    let mut generation = shared.snapshot.load().generation;
    // Taking the lead: the existing triggers of every rule that asks.
    for (key, rules) in &seen {
        for (rule, state) in rules {
            if state.existing {
                existing_triggers(&shared, key, rule, state.mutate).await;
            }
        }
    }
    loop {
        tokio::time::sleep(shared.opts.policy_poll).await;
        let snapshot = shared.snapshot.load_full();
        if snapshot.generation == generation {
            continue;
        }
        generation = snapshot.generation;
        let now = policy_states(&snapshot);
        for (key, rules) in &now {
            for (rule, state) in rules {
                let before = seen.get(key).and_then(|r| r.get(rule));
                if before == Some(state) {
                    continue;
                }
                if state.existing {
                    existing_triggers(&shared, key, rule, state.mutate).await;
                }
                if before.is_some() && state.synchronize && !state.clones {
                    regenerate(&shared, key, rule, state).await;
                }
            }
        }
        for (key, rules) in &seen {
            for (rule, state) in rules {
                let gone = now.get(key).is_none_or(|r| !r.contains_key(rule));
                if gone && !state.mutate && state.synchronize && !state.clones && !state.orphan {
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
                                error = e,
                                "deleting the downstream of a deleted rule"
                            ),
                        }
                    }
                }
            }
        }
        seen = now;
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
        let triggers = match objects::list(
            &shared.client,
            kind.api_version,
            kind.kind,
            &namespace,
            "",
        )
        .await
        {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(policy = key, kind = kind.kind, error = %e, "listing triggers for generateExisting");
                continue;
            }
        };
        for trigger in triggers {
            let mut trigger = trigger;
            trigger["apiVersion"] = Value::String(kind.api_version.into());
            trigger["kind"] = Value::String(kind.kind.into());
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
    let mut triggers = BTreeMap::new();
    for (api_version, kind) in &state.kinds {
        match objects::list(&shared.client, api_version, kind, "", &selector).await {
            Ok(objects) => {
                for o in objects {
                    let trigger = update_requests::trigger_from_labels(|k| {
                        o.pointer("/metadata/labels")
                            .and_then(|l| l.get(k))
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    });
                    triggers.insert(trigger.to_string(), trigger);
                }
            }
            Err(e) => {
                tracing::warn!(policy = key, rule, error = %e, "listing downstream to regenerate")
            }
        }
    }
    for trigger in triggers.into_values() {
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
