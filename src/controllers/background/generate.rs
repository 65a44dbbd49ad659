//! Generate work (docs/kyverno-semantics.md#generate-flow): a rule's downstream
//! for one trigger, created or kept in line; or, for a trigger gone or no
//! longer matching, deleted.

use super::{Shared, WorkError, objects, rule_output};
use crate::admission::policies::Snapshot;
use crate::engine::generate::generate_policy;
use crate::policy::{CompiledPolicy, RuleBody};
use serde_json::Value;
use std::sync::Arc;

/// The kinds a generate rule's downstream can have.
pub(super) fn downstream_kinds(policy: &CompiledPolicy, rule: &str) -> Vec<(String, String)> {
    policy
        .rules
        .iter()
        .filter(|r| r.name == rule)
        .filter_map(|r| match &r.body {
            RuleBody::Generate(g) => Some(g.downstream_kinds()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Deletes what one rule generated for one trigger.
pub(super) async fn delete_downstream(
    shared: &Arc<Shared>,
    policy: &CompiledPolicy,
    rule: &str,
    trigger: &Value,
) -> Result<(), WorkError> {
    let selector = objects::selector(policy.qualified_name(), Some(rule), Some(trigger));
    for (api_version, kind) in downstream_kinds(policy, rule) {
        objects::delete_selected(
            &shared.client,
            &api_version,
            &kind,
            &selector,
            &shared.metrics,
        )
        .await?;
    }
    Ok(())
}

/// Generates one rule's downstream for a trigger read back from the API
/// server, and writes it.
pub(super) async fn generate(
    shared: &Arc<Shared>,
    snapshot: &Arc<Snapshot>,
    index: usize,
    rule: &str,
    trigger: &Value,
    spec: &Value,
) -> Result<(), WorkError> {
    let policy = &snapshot.policies[index];
    let synchronize = policy.rules.iter().any(|r| {
        r.name == rule
            && matches!(&r.body, RuleBody::Generate(g) if g.spec.synchronize == Some(true))
    });
    let resources = rule_output(
        shared,
        snapshot,
        index,
        rule,
        trigger,
        spec,
        generate_policy,
    )
    .await?;
    for resource in &resources {
        objects::apply(&shared.client, resource, synchronize, &shared.metrics).await?;
    }
    Ok(())
}
