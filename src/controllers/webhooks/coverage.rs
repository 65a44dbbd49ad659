//! What the webhooks must cover: the kinds, operations and subresources
//! the served policies match, resolved against discovery, split by side
//! (validating, mutating) and by failure policy.

use crate::admission::policies::Snapshot;
use crate::policy::cel_policy::PolicyScope as CelScope;
use crate::policy::compile::{CompiledRule, RuleBody};
use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;
use kube::Client;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

/// (group, version, resource) of every kind, from discovery.
pub(super) type KindMap = BTreeMap<String, Vec<(String, String, String)>>;

pub(super) async fn discover(client: &Client) -> Result<KindMap, kube::Error> {
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await?;
    let mut kinds = KindMap::new();
    for group in discovery.groups() {
        for (resource, _) in group.recommended_resources() {
            kinds.entry(resource.kind.clone()).or_default().push((
                resource.group.clone(),
                resource.version.clone(),
                resource.plural.clone(),
            ));
        }
    }
    Ok(kinds)
}

/// Whether a policy of `snapshot` matches a kind `kinds` does not have.
pub(super) fn names_unknown_kind(snapshot: &Snapshot, kinds: &KindMap) -> bool {
    snapshot
        .policies
        .iter()
        .flat_map(|p| &p.rules)
        .filter_map(|r| r.match_resources.kind_selectors())
        .flatten()
        .any(|k| !kinds.contains_key(k.kind.as_str()))
}

/// Admission operations in the order the API lists them.
pub(super) const OPERATIONS: [&str; 4] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Side {
    Validating,
    Mutating,
}

impl Side {
    /// Kyverno's default operations per side.
    pub(super) fn default_operations(self) -> &'static [&'static str] {
        match self {
            Side::Validating => &OPERATIONS,
            Side::Mutating => &OPERATIONS[..2],
        }
    }
}

/// The sides a rule is registered on
/// (docs/kyverno-semantics.md#webhook-registration): mutate rules (not mutate
/// existing) on the mutating side; validate, generate and mutate-existing
/// on the validating side; verifyImages on both.
pub(super) fn sides(rule: &CompiledRule) -> &'static [Side] {
    match &rule.body {
        RuleBody::Validate(_) | RuleBody::Generate(_) => &[Side::Validating],
        RuleBody::Mutate(m) if !m.targets.is_empty() => &[Side::Validating],
        RuleBody::Mutate(_) => &[Side::Mutating],
        RuleBody::VerifyImages(_) => &[Side::Validating, Side::Mutating],
    }
}

/// What one webhook covers.
#[derive(Debug, Default)]
pub(super) struct Coverage {
    /// Operations of rules with no kinds to resolve (any kind).
    pub(super) everything: BTreeSet<&'static str>,
    /// (group, version) → resource → operations.
    pub(super) resources: BTreeMap<(String, String), BTreeMap<String, BTreeSet<&'static str>>>,
    pub(super) timeout: Option<i32>,
}

impl Coverage {
    pub(super) fn add(&mut self, rule: &CompiledRule, side: Side, kinds: &KindMap) {
        let wanted = rule.match_resources.possible_operations();
        let ops: BTreeSet<&'static str> = side
            .default_operations()
            .iter()
            .copied()
            .filter(|op| wanted.as_ref().is_none_or(|w| w.iter().any(|o| o == op)))
            .collect();
        if ops.is_empty() {
            return;
        }
        let Some(selectors) = rule.match_resources.kind_selectors() else {
            self.everything.extend(&ops);
            return;
        };
        for selector in selectors {
            let kind = selector.kind.as_str();
            let Some(found) = kinds.get(kind) else {
                tracing::warn!(kind, "kind not served by the API server; not registered");
                continue;
            };
            // The version is left to matchPolicy Equivalent: discovery
            // lists preferred versions only.
            for (g, v, r) in found.iter().filter(|(g, _, _)| selector.group.matches(g)) {
                let set = self.resources.entry((g.clone(), v.clone())).or_default();
                match &selector.subresource {
                    Some(sub) if sub.is_wildcard() => {
                        set.entry(format!("{r}/*")).or_default().extend(&ops);
                    }
                    Some(sub) => {
                        set.entry(format!("{r}/{}", sub.as_str()))
                            .or_default()
                            .extend(&ops);
                    }
                    None => {
                        set.entry(r.clone()).or_default().extend(&ops);
                        if r == "pods" {
                            set.entry("pods/ephemeralcontainers".into())
                                .or_default()
                                .extend(&ops);
                        }
                    }
                }
            }
        }
    }

    /// The kinds a generate rule writes, on every change (Kyverno registers
    /// them so that a synchronized downstream resource changed or deleted by
    /// someone else is generated again; see
    /// docs/kyverno-semantics.md#webhook-registration).
    pub(super) fn add_downstream(&mut self, rule: &CompiledRule, kinds: &KindMap) {
        let RuleBody::Generate(g) = &rule.body else {
            return;
        };
        for (api_version, kind) in g.downstream_kinds() {
            let (group, _) = crate::kinds::split_api_version(&api_version);
            let Some(found) = kinds.get(&kind) else {
                tracing::warn!(kind, "kind not served by the API server; not registered");
                continue;
            };
            for (g, v, r) in found.iter().filter(|(g, _, _)| g == group) {
                self.resources
                    .entry((g.clone(), v.clone()))
                    .or_default()
                    .entry(r.clone())
                    .or_default()
                    .extend(&OPERATIONS[..3]);
            }
        }
    }

    /// A CEL policy's resourceRules as they are written (they name
    /// resources, not kinds), plus the Pod controllers autogen covers.
    /// `every_operation`: registered for all of the side's operations
    /// whatever the rules list (a GeneratingPolicy's trigger deleted or
    /// changed takes its downstream along, so Kyverno registers them so).
    pub(super) fn add_cel(&mut self, scope: &CelScope, side: Side, every_operation: bool) {
        let default_ops = side.default_operations();
        let ops_of = |listed: &[String]| -> BTreeSet<&'static str> {
            default_ops
                .iter()
                .copied()
                .filter(|op| every_operation || listed.iter().any(|o| o == "*" || o == op))
                .collect()
        };
        for rule in &scope.match_constraints.resource_rules {
            let ops = ops_of(&rule.operations);
            if ops.is_empty() {
                continue;
            }
            let wild = |list: &[String]| list.iter().any(|x| x == "*");
            if wild(&rule.api_groups) || wild(&rule.api_versions) || wild(&rule.resources) {
                self.everything.extend(&ops);
                continue;
            }
            for g in &rule.api_groups {
                for v in &rule.api_versions {
                    let set = self.resources.entry((g.clone(), v.clone())).or_default();
                    for r in &rule.resources {
                        set.entry(r.clone()).or_default().extend(&ops);
                    }
                }
            }
            if rule.resources.iter().any(|r| r == "pods") {
                for c in &scope.controllers {
                    self.resources
                        .entry((c.group.to_string(), "v1".into()))
                        .or_default()
                        .entry(c.resource.to_string())
                        .or_default()
                        .extend(&ops);
                }
            }
        }
    }

    pub(super) fn rules(&self) -> Vec<RuleWithOperations> {
        let ordered = |ops: &BTreeSet<&str>| -> Vec<String> {
            OPERATIONS
                .iter()
                .filter(|o| ops.contains(*o))
                .map(|o| o.to_string())
                .collect()
        };
        if !self.everything.is_empty() {
            let mut ops = self.everything.clone();
            ops.extend(self.resources.values().flat_map(|r| r.values().flatten()));
            return vec![RuleWithOperations {
                api_groups: Some(vec!["*".into()]),
                api_versions: Some(vec!["*".into()]),
                resources: Some(vec!["*/*".into()]),
                operations: Some(ordered(&ops)),
                scope: Some("*".into()),
            }];
        }
        let mut rules = Vec::new();
        for ((g, v), resources) in &self.resources {
            // One rule per set of operations, so no resource gets more than it needs.
            let mut by_ops: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
            for (r, ops) in resources {
                by_ops.entry(ordered(ops)).or_default().push(r.clone());
            }
            for (ops, resources) in by_ops {
                rules.push(RuleWithOperations {
                    api_groups: Some(vec![g.clone()]),
                    api_versions: Some(vec![v.clone()]),
                    resources: Some(resources),
                    operations: Some(ops),
                    scope: Some("*".into()),
                });
            }
        }
        rules
    }
}
