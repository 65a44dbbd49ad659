//! The policies that delete on a schedule
//! (docs/kyverno-semantics.md#cleanup-policies): CleanupPolicy and
//! ClusterCleanupPolicy (kyverno.io, match/exclude and JMESPath
//! conditions on `target`), and DeletingPolicy and
//! NamespacedDeletingPolicy (policies.kyverno.io, matchConstraints and CEL
//! conditions on `object`). Both kinds compile to one
//! [`CompiledCleanupPolicy`]: a schedule, a propagation policy and how the
//! resources to delete are selected.

use super::cel_policy::{CompiledNamed, NamedExpression, compile_named};
use super::cel_policy::{MatchConstraints, PolicyScope};
use super::compile::ExprCache;
use super::conditions::Conditions;
use super::types::{ContextEntry, ObjectMeta};
use crate::matching::CompiledMatch;
use crate::matching::types::MatchResources;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// `spec` of a CleanupPolicy / ClusterCleanupPolicy (kyverno.io/v2).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CleanupSpec {
    #[serde(rename = "match")]
    pub match_resources: MatchResources,
    #[serde(default)]
    pub exclude: Option<MatchResources>,
    #[serde(default)]
    pub conditions: Option<Value>,
    #[serde(default)]
    pub context: Vec<ContextEntry>,
    pub schedule: String,
    #[serde(default)]
    pub deletion_propagation_policy: Option<String>,
}

/// `spec` of a DeletingPolicy / NamespacedDeletingPolicy.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeletingSpec {
    #[serde(default)]
    pub match_constraints: Option<MatchConstraints>,
    #[serde(default)]
    pub conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    pub schedule: String,
    #[serde(default)]
    pub deletion_propagation_policy: Option<String>,
}

/// A document of either kind, strictly decoded.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Doc<S> {
    kind: String,
    metadata: ObjectMeta,
    spec: S,
}

/// When a policy runs: a cron schedule read as Kyverno's cronexpr reads
/// it (five fields; a sixth is the year; seven start with seconds; the
/// `@daily` family), in UTC.
#[derive(Debug, Clone)]
pub struct Schedule(croner::Cron);

impl Schedule {
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let fields = text.split_whitespace().count();
        // croner reads six fields as seconds first; cronexpr as a year last.
        let normalized = match fields {
            6 => format!("0 {text}"),
            _ => text.to_string(),
        };
        if !text.trim_start().starts_with('@') && !matches!(fields, 5..=7) {
            return Err(format!(
                "invalid schedule {text:?}: 5, 6 or 7 fields expected"
            ));
        }
        croner::parser::CronParser::builder()
            .build()
            .parse(&normalized)
            .map(Schedule)
            .map_err(|e| format!("invalid schedule {text:?}: {e}"))
    }

    /// The first time strictly after `after`; `None` when there is none
    /// (a year in the past).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.0.find_next_occurrence(&after, false).ok()
    }
}

/// How the resources a run deletes are selected.
// One per policy, built once: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Selection {
    /// CleanupPolicy: `match`/`exclude`, then `conditions` on `target`.
    Match {
        match_resources: CompiledMatch,
        exclude: Option<CompiledMatch>,
        conditions: Option<Conditions>,
        /// Loaded once per run, before the resources are read.
        context: Vec<ContextEntry>,
        exprs: Arc<ExprCache>,
    },
    /// DeletingPolicy: `matchConstraints` (any operation), then the CEL
    /// `conditions` on `object`, with `variables`.
    Cel {
        scope: PolicyScope,
        variables: Vec<CompiledNamed>,
    },
}

/// A compiled cleanup or deleting policy.
#[derive(Debug, Clone)]
pub struct CompiledCleanupPolicy {
    /// CleanupPolicy, ClusterCleanupPolicy, DeletingPolicy or NamespacedDeletingPolicy.
    pub kind: String,
    pub name: String,
    /// Set for the namespaced kinds: they act only there.
    pub namespace: Option<String>,
    pub schedule: Schedule,
    /// `Foreground`, `Background` or `Orphan`; the API server's default when unset.
    pub propagation: Option<String>,
    pub selection: Selection,
}

impl CompiledCleanupPolicy {
    /// Compiles a policy object of one of the four kinds.
    pub fn compile(object: &Value) -> Result<CompiledCleanupPolicy, String> {
        match object["kind"].as_str().unwrap_or_default() {
            "CleanupPolicy" | "ClusterCleanupPolicy" => compile_cleanup(object),
            "DeletingPolicy" | "NamespacedDeletingPolicy" => compile_deleting(object),
            other => Err(format!("unsupported: kind {other} is not a cleanup policy")),
        }
    }

    /// `namespace/name`, or the name of a cluster-wide policy.
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }

    /// Whether the policy is one of Kyverno's CEL kinds.
    pub fn is_deleting_policy(&self) -> bool {
        matches!(self.selection, Selection::Cel { .. })
    }
}

fn decode<S: serde::de::DeserializeOwned>(object: &Value) -> Result<Doc<S>, String> {
    let mut object = object.clone();
    // What the API server keeps beside the spec does not decide anything.
    if let Value::Object(m) = &mut object {
        m.retain(|k, _| matches!(k.as_str(), "kind" | "metadata" | "spec"));
    }
    serde_path_to_error::deserialize(object).map_err(|e| {
        let path = e.path().to_string();
        format!("{path}: {}", e.into_inner())
    })
}

fn propagation(value: Option<String>) -> Result<Option<String>, String> {
    match value.as_deref() {
        None | Some("Foreground" | "Background" | "Orphan") => Ok(value),
        Some(other) => Err(format!(
            "spec.deletionPropagationPolicy: {other:?} is not one of Foreground, Background, Orphan"
        )),
    }
}

fn namespace_of(kind: &str, metadata: &ObjectMeta) -> Option<String> {
    matches!(kind, "CleanupPolicy" | "NamespacedDeletingPolicy")
        .then(|| metadata.namespace.clone().unwrap_or_default())
}

fn compile_cleanup(object: &Value) -> Result<CompiledCleanupPolicy, String> {
    let doc: Doc<CleanupSpec> = decode(object)?;
    let spec = doc.spec;
    let match_resources =
        CompiledMatch::compile(&spec.match_resources).map_err(|e| format!("spec.match: {e}"))?;
    let exclude = spec
        .exclude
        .as_ref()
        .map(CompiledMatch::compile)
        .transpose()
        .map_err(|e| format!("spec.exclude: {e}"))?;
    // A cleanup run has no admission request: who asked is unknown.
    if match_resources.has_user_info() || exclude.as_ref().is_some_and(|e| e.has_user_info()) {
        return Err(
            "spec.match/exclude: subjects, roles and clusterRoles are not allowed in a cleanup policy"
                .into(),
        );
    }
    if match_resources.kind_selectors().is_none() {
        return Err("spec.match: every resource filter must name its kinds".into());
    }
    for (i, entry) in spec.context.iter().enumerate() {
        if entry.config_map.is_some() || entry.image_registry.is_some() {
            return Err(format!(
                "spec.context[{i}]: only apiCall, variable and globalReference are allowed in a cleanup policy"
            ));
        }
    }
    let mut exprs = ExprCache::default();
    if let Some(c) = &spec.conditions {
        let _ = exprs.add_all_variables(c);
    }
    for entry in &spec.context {
        let _ = exprs.add_all_variables(&serde_json::to_value(entry).unwrap_or(Value::Null));
    }
    let conditions = spec
        .conditions
        .as_ref()
        .map(Conditions::parse)
        .transpose()
        .map_err(|e| format!("spec.conditions: {e}"))?;
    Ok(CompiledCleanupPolicy {
        namespace: namespace_of(&doc.kind, &doc.metadata),
        kind: doc.kind,
        name: doc.metadata.name,
        schedule: Schedule::parse(&spec.schedule).map_err(|e| format!("spec.schedule: {e}"))?,
        propagation: propagation(spec.deletion_propagation_policy)?,
        selection: Selection::Match {
            match_resources,
            exclude,
            conditions,
            context: spec.context,
            exprs: Arc::new(exprs),
        },
    })
}

fn compile_deleting(object: &Value) -> Result<CompiledCleanupPolicy, String> {
    let doc: Doc<DeletingSpec> = decode(object)?;
    let spec = doc.spec;
    // Kyverno matches every resource rule for any operation: a scheduled
    // run has none.
    let mut constraints = spec.match_constraints.clone();
    if let Some(c) = &mut constraints {
        for rule in c
            .resource_rules
            .iter_mut()
            .chain(c.exclude_resource_rules.iter_mut())
        {
            rule.operations = vec!["*".into()];
        }
    }
    let mut scope = PolicyScope::compile(
        &doc.kind,
        &doc.metadata,
        constraints.as_ref(),
        &spec.conditions,
        None,
        None,
    )
    .map_err(|e| e.to_string())?;
    // No autogen: a Pod policy deletes Pods.
    scope.controllers.clear();
    Ok(CompiledCleanupPolicy {
        namespace: namespace_of(&doc.kind, &doc.metadata),
        kind: doc.kind,
        name: doc.metadata.name,
        schedule: Schedule::parse(&spec.schedule).map_err(|e| format!("spec.schedule: {e}"))?,
        propagation: propagation(spec.deletion_propagation_policy)?,
        selection: Selection::Cel {
            scope,
            variables: compile_named(&spec.variables, "spec.variables")?,
        },
    })
}

/// The label that asks for an object's deletion at a time
/// (docs/kyverno-semantics.md#ttl-label).
pub const TTL_LABEL: &str = "cleanup.kyverno.io/ttl";
/// How an object deleted for its TTL label goes (`Foreground`, ...).
pub const PROPAGATION_ANNOTATION: &str = "cleanup.kyverno.io/propagation-policy";

/// A duration as Kyverno's `strfmt.ParseDuration` reads it: a Go duration
/// (`1h30m`), or one number and a unit that may be days or weeks (`1d`,
/// `2 weeks`).
fn ttl_duration(value: &str) -> Option<chrono::Duration> {
    if let Some(d) = crate::units::Duration::parse(value) {
        return chrono::Duration::try_milliseconds((d.seconds() * 1000.0) as i64);
    }
    let value = value.trim();
    let split = value.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = value.split_at(split);
    let n: i64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "ns" | "us" | "µs" | "ms" => return Some(chrono::Duration::zero()),
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        "w" | "wk" | "wks" | "week" | "weeks" => 604_800,
        _ => return None,
    };
    chrono::Duration::try_seconds(n.checked_mul(seconds)?)
}

/// The time a label value names, relative to `created` for a duration.
pub fn deletion_time(value: &str, created: Option<DateTime<Utc>>) -> Result<DateTime<Utc>, String> {
    if let Some(d) = ttl_duration(value) {
        let created = created.ok_or("the object has no creationTimestamp")?;
        return created
            .checked_add_signed(d)
            .ok_or_else(|| format!("{TTL_LABEL}={value}: out of range"));
    }
    if let Ok(t) = NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H%M%SZ") {
        return Ok(t.and_utc());
    }
    if let Ok(d) = NaiveDate::parse_from_str(value, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    }
    Err(format!(
        "{TTL_LABEL}={value}: neither a duration (5m, 1d) nor a time (2006-01-02T150405Z, 2006-01-02)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn schedules_read_as_cronexpr_reads_them() {
        let next = |s: &str, t: &str| {
            Schedule::parse(s)
                .unwrap()
                .next_after(at(t))
                .map(|d| d.to_rfc3339())
        };
        assert_eq!(
            next("*/5 * * * *", "2026-01-01T00:02:30Z").as_deref(),
            Some("2026-01-01T00:05:00+00:00")
        );
        // Strictly after: a run at 00:05:00 is next due at 00:10:00.
        assert_eq!(
            next("*/5 * * * *", "2026-01-01T00:05:00Z").as_deref(),
            Some("2026-01-01T00:10:00+00:00")
        );
        // Six fields: the sixth is the year.
        assert_eq!(
            next("0 3 * * * 2027", "2026-05-01T00:00:00Z").as_deref(),
            Some("2027-01-01T03:00:00+00:00")
        );
        // Seven fields: seconds first, then the year.
        assert_eq!(
            next("*/10 * * * * * *", "2026-01-01T00:00:01Z").as_deref(),
            Some("2026-01-01T00:00:10+00:00")
        );
        assert_eq!(
            next("@daily", "2026-01-01T10:00:00Z").as_deref(),
            Some("2026-01-02T00:00:00+00:00")
        );
        assert_eq!(
            next("0 0 L * *", "2026-02-03T00:00:00Z").as_deref(),
            Some("2026-02-28T00:00:00+00:00")
        );
        for bad in ["", "* * *", "61 * * * *", "* * * * * * * *", "every day"] {
            assert!(Schedule::parse(bad).is_err(), "{bad:?}");
        }
    }

    fn cleanup(spec: Value) -> Value {
        json!({"apiVersion": "kyverno.io/v2", "kind": "ClusterCleanupPolicy",
               "metadata": {"name": "c"}, "spec": spec})
    }

    #[test]
    fn cleanup_policies_compile_or_say_why_not() {
        let ok = CompiledCleanupPolicy::compile(&cleanup(json!({
            "schedule": "*/5 * * * *",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "conditions": {"any": [{"key": "{{ target.metadata.name }}", "operator": "Equals", "value": "x"}]},
            "deletionPropagationPolicy": "Orphan",
        })))
        .unwrap();
        assert_eq!(ok.key(), "c");
        assert_eq!(ok.propagation.as_deref(), Some("Orphan"));
        assert!(!ok.is_deleting_policy());
        let err = |spec: Value| CompiledCleanupPolicy::compile(&cleanup(spec)).unwrap_err();
        let pods = json!({"any": [{"resources": {"kinds": ["Pod"]}}]});
        assert!(err(json!({"schedule": "nope", "match": pods})).contains("spec.schedule"));
        assert!(err(json!({"match": pods})).contains("schedule"));
        assert!(
            err(json!({"schedule": "* * * * *", "match": {"any": [{"subjects": [{"kind": "User", "name": "x"}], "resources": {"kinds": ["Pod"]}}]}}))
                .contains("subjects")
        );
        assert!(
            err(json!({"schedule": "* * * * *", "match": {"any": [{"resources": {"names": ["x"]}}]}}))
                .contains("kinds")
        );
        assert!(
            err(json!({"schedule": "* * * * *", "match": pods, "context": [{"name": "c", "configMap": {"name": "x", "namespace": "y"}}]}))
                .contains("only apiCall")
        );
        assert!(
            err(json!({"schedule": "* * * * *", "match": pods, "deletionPropagationPolicy": "Later"}))
                .contains("Foreground")
        );
        assert!(err(json!({"schedule": "* * * * *", "match": pods, "bogus": 1})).contains("bogus"));
    }

    #[test]
    fn deleting_policies_compile_with_any_operation() {
        let p = CompiledCleanupPolicy::compile(&json!({
            "apiVersion": "policies.kyverno.io/v1beta1", "kind": "NamespacedDeletingPolicy",
            "metadata": {"name": "d", "namespace": "team"},
            "spec": {
                "schedule": "0 * * * *",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                        "operations": ["CREATE"], "resources": ["pods"]}]},
                "conditions": [{"name": "old", "expression": "true"}],
                "variables": [{"name": "v", "expression": "object.metadata.name"}],
            },
            "status": {"lastExecutionTime": "2026-01-01T00:00:00Z"},
        }))
        .unwrap();
        assert_eq!(p.key(), "team/d");
        let Selection::Cel { scope, variables } = &p.selection else {
            panic!("a CEL selection")
        };
        assert_eq!(scope.match_constraints.resource_rules[0].operations, ["*"]);
        assert_eq!(scope.match_conditions.len(), 1);
        assert_eq!(variables.len(), 1);
        let missing = CompiledCleanupPolicy::compile(&json!({
            "kind": "DeletingPolicy", "metadata": {"name": "d"},
            "spec": {"schedule": "0 * * * *"},
        }))
        .unwrap_err();
        assert!(missing.contains("matchConstraints"), "{missing}");
    }
}
