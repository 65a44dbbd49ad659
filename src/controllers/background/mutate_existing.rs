//! Mutate existing (docs/kyverno-semantics.md#mutate-existing): a rule's
//! `targets`, read from the API server, patched and written back. A target
//! the patch leaves as it is gets no write, so doing the work twice changes
//! nothing the second time.

use super::{Shared, WorkError, objects, rule_output};
use crate::admission::policies::Snapshot;
use crate::engine::mutate::mutate_policy;
use serde_json::Value;
use std::sync::Arc;

/// Applies one mutate-existing rule for a trigger.
pub(super) async fn mutate_existing(
    shared: &Arc<Shared>,
    snapshot: &Arc<Snapshot>,
    index: usize,
    rule: &str,
    trigger: &Value,
    spec: &Value,
) -> Result<(), WorkError> {
    let targets = rule_output(
        shared,
        snapshot,
        index,
        rule,
        trigger,
        spec,
        |p, r, c, e| mutate_policy(p, r, c, e).response,
    )
    .await?;
    for target in &targets {
        objects::replace(&shared.client, target, &shared.metrics).await?;
    }
    Ok(())
}
