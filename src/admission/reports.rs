//! Rule results as `wgpolicyk8s.io/v1alpha2` PolicyReports
//! (docs/kyverno-semantics.md#policy-reports), the way Kyverno 1.10+ writes
//! them: one report per resource, named after its
//! uid, in its namespace (a ClusterPolicyReport for a cluster-scoped one),
//! owned by it (so the garbage collector deletes the report with the
//! resource), with a `scope` naming it, a `summary`, and one result per
//! validation rule.
//!
//! A report is rewritten by merging: the results of the policies just
//! evaluated replace theirs, the others stay, and those of policies no
//! longer loaded go. Timestamps are left out of the comparison, so an
//! evaluation that changes nothing writes nothing.

use super::policies::Snapshot;
use crate::engine::{PolicyResponse, RuleResponse, RuleStatus, RuleType};
use crate::json_doc::View;
use crate::policy::cel_policy::{CompiledImageValidatingPolicy, CompiledValidatingPolicy};
use crate::policy::{CompiledPolicy, ReportMeta};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The `process` property of results from an admitted review.
pub const ADMISSION_REVIEW: &str = "admission review";

/// A policy of the snapshot an admitted review was evaluated with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyAt {
    /// `Snapshot::policies[i]`.
    Kyverno(usize),
    /// `Snapshot::validating[i]`.
    Validating(usize),
    /// `Snapshot::image_validating[i]`.
    ImageValidating(usize),
}

/// One rule's result as an admitted review leaves it. The writer's queue
/// holds thousands of these under load, so they are kept compact (about
/// 100 bytes against 1.7 KB for the report result as JSON) and turned into
/// report results only when written, off the admission path.
#[derive(Debug, Clone)]
pub struct PendingResult {
    pub policy: PolicyAt,
    pub rule: Box<str>,
    pub status: RuleStatus,
    pub message: Box<str>,
    /// A CEL policy's auditAnnotations; empty (no allocation) otherwise.
    pub properties: Vec<(String, String)>,
}

/// The identity of a resource as a report names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportSubject {
    pub api_version: Box<str>,
    pub kind: Box<str>,
    pub name: Box<str>,
    /// Empty for a cluster-scoped resource.
    pub namespace: Box<str>,
    pub uid: Box<str>,
}

impl ReportSubject {
    /// The identity of `object`; None without a uid (a CREATE seen by a
    /// mutating webhook, before the API server assigns one).
    pub fn of<'r>(object: impl View<'r>) -> Option<ReportSubject> {
        let meta = object.get("metadata")?;
        let text =
            |v: Option<_>| -> Box<str> { v.and_then(View::as_str).unwrap_or_default().into() };
        let uid = meta.get("uid")?.as_str().filter(|u| !u.is_empty())?;
        Some(ReportSubject {
            api_version: text(object.get("apiVersion")),
            kind: text(object.get("kind")),
            name: text(meta.get("name")),
            namespace: text(meta.get("namespace")),
            uid: uid.into(),
        })
    }

    /// apiVersion, kind and the metadata a report names, as the report
    /// writer reads a resource.
    pub fn to_resource(&self) -> Value {
        let mut metadata = json!({"name": &*self.name, "uid": &*self.uid});
        if !self.namespace.is_empty() {
            metadata["namespace"] = Value::from(&*self.namespace);
        }
        json!({"apiVersion": &*self.api_version, "kind": &*self.kind, "metadata": metadata})
    }
}

/// What an admitted review leaves for its resource's report, in terms of
/// the snapshot it was evaluated with (which the writer holds beside it).
#[derive(Debug, Clone)]
pub struct AdmissionResults {
    pub subject: ReportSubject,
    /// The policies evaluated: their results in the report are replaced.
    pub evaluated: Vec<PolicyAt>,
    /// Policies that no longer select the resource (by name): their
    /// results in the report are removed.
    pub stale: Vec<String>,
    /// Validation rules' results.
    pub results: Vec<PendingResult>,
    /// When the review was evaluated (the results' timestamp).
    pub at_seconds: i64,
}

impl AdmissionResults {
    /// Each policy's response to an admitted review, in compact form.
    pub fn push_policy(&mut self, at: PolicyAt, response: PolicyResponse) {
        let kyverno = matches!(at, PolicyAt::Kyverno(_));
        self.evaluated.push(at);
        self.results.extend(
            response
                .rules
                .into_iter()
                // A classic policy reports its validation rules only.
                .filter(|r| !kyverno || r.rule_type == RuleType::Validation)
                .map(|r| PendingResult {
                    policy: at,
                    rule: r.name.into(),
                    status: r.status,
                    properties: r.properties().to_vec(),
                    message: r.message.into(),
                }),
        );
    }

    /// The names of the evaluated policies (those of `snapshot`) and the
    /// stale ones.
    pub fn evaluated_names(&self, snapshot: &Snapshot) -> BTreeSet<String> {
        self.evaluated
            .iter()
            .map(|&at| match at {
                PolicyAt::Kyverno(i) => snapshot.policies[i].qualified_name().to_string(),
                PolicyAt::Validating(i) => snapshot.validating[i].key.clone(),
                PolicyAt::ImageValidating(i) => snapshot.image_validating[i].key.clone(),
            })
            .chain(self.stale.iter().cloned())
            .collect()
    }

    /// The report results, as Kyverno writes them for an admission review.
    pub fn report_results(&self, snapshot: &Snapshot) -> Vec<Value> {
        self.results
            .iter()
            .map(|r| {
                let rule = RuleView {
                    name: &r.rule,
                    status: r.status,
                    message: &r.message,
                    properties: &r.properties,
                };
                match r.policy {
                    PolicyAt::Kyverno(i) => {
                        let policy = &snapshot.policies[i];
                        Source::Kyverno.value(
                            policy.qualified_name(),
                            &policy.report,
                            ADMISSION_REVIEW,
                            self.at_seconds,
                            &rule,
                        )
                    }
                    PolicyAt::Validating(i) => {
                        let policy = &snapshot.validating[i];
                        Source::ValidatingPolicy.value(
                            &policy.key,
                            &policy.report,
                            ADMISSION_REVIEW,
                            self.at_seconds,
                            &rule,
                        )
                    }
                    PolicyAt::ImageValidating(i) => {
                        let policy = &snapshot.image_validating[i];
                        Source::ImageValidatingPolicy.value(
                            &policy.key,
                            &policy.report,
                            ADMISSION_REVIEW,
                            self.at_seconds,
                            &rule,
                        )
                    }
                }
            })
            .collect()
    }
}

/// Where admission results go (the cluster's report writer; nowhere
/// standalone). `submit` never waits.
pub trait AdmissionReportSink: Send + Sync {
    fn submit(&self, snapshot: Arc<Snapshot>, results: AdmissionResults);
}

/// The `process` property of results from a background scan.
pub const BACKGROUND_SCAN: &str = "background scan";

/// The report results of one policy's response for a resource: validation
/// rules only, fail turned into warn for a policy scored false.
pub fn results(
    policy: &CompiledPolicy,
    response: &PolicyResponse,
    process: &str,
    now_seconds: i64,
) -> Vec<Value> {
    response
        .rules
        .iter()
        .filter(|r| r.rule_type == RuleType::Validation)
        .map(|r| {
            Source::Kyverno.value(
                response.policy,
                &policy.report,
                process,
                now_seconds,
                &RuleView::of(r),
            )
        })
        .collect()
}

/// The report results of a ValidatingPolicy's response (one rule, named
/// after the policy), as Kyverno writes them: source
/// `KyvernoValidatingPolicy`, the policy as `namespace/name` for a
/// namespaced one.
pub fn validating_policy_results(
    policy: &CompiledValidatingPolicy,
    response: &PolicyResponse,
    process: &str,
    now_seconds: i64,
) -> Vec<Value> {
    let at = (process, now_seconds);
    cel_policy_results(
        Source::ValidatingPolicy,
        &policy.key,
        &policy.report,
        response,
        at,
    )
}

/// The report results of an ImageValidatingPolicy's response (one rule),
/// as Kyverno writes them: source `KyvernoImageValidatingPolicy`.
pub fn image_validating_policy_results(
    policy: &CompiledImageValidatingPolicy,
    response: &PolicyResponse,
    process: &str,
    now_seconds: i64,
) -> Vec<Value> {
    let at = (process, now_seconds);
    cel_policy_results(
        Source::ImageValidatingPolicy,
        &policy.key,
        &policy.report,
        response,
        at,
    )
}

/// A CEL policy's report results, every rule of its response.
fn cel_policy_results(
    source: Source,
    key: &str,
    report: &ReportMeta,
    response: &PolicyResponse,
    (process, now_seconds): (&str, i64),
) -> Vec<Value> {
    response
        .rules
        .iter()
        .map(|r| source.value(key, report, process, now_seconds, &RuleView::of(r)))
        .collect()
}

/// What a report result says of a rule, from a response or a pending
/// result.
struct RuleView<'a> {
    name: &'a str,
    status: RuleStatus,
    message: &'a str,
    properties: &'a [(String, String)],
}

impl<'a> RuleView<'a> {
    fn of(r: &'a RuleResponse) -> RuleView<'a> {
        RuleView {
            name: r.name,
            status: r.status,
            message: &r.message,
            properties: r.properties(),
        }
    }
}

/// Which engine a result comes from (its `source`).
#[derive(Clone, Copy)]
enum Source {
    Kyverno,
    ValidatingPolicy,
    ImageValidatingPolicy,
}

impl Source {
    /// The report result of one rule of `policy`.
    fn value(
        self,
        policy: &str,
        meta: &ReportMeta,
        process: &str,
        now_seconds: i64,
        r: &RuleView,
    ) -> Value {
        let source = match self {
            Source::Kyverno => "kyverno",
            Source::ValidatingPolicy => "KyvernoValidatingPolicy",
            Source::ImageValidatingPolicy => "KyvernoImageValidatingPolicy",
        };
        let mut status = r.status;
        if status == RuleStatus::Fail && !meta.scored {
            status = RuleStatus::Warn;
        }
        let mut result = json!({
            "source": source,
            "policy": policy,
            "rule": r.name,
            "result": status.as_str(),
            "message": r.message,
            "scored": meta.scored,
            "timestamp": {"seconds": now_seconds, "nanos": 0},
            "properties": {"process": process},
        });
        if !meta.severity.is_empty() {
            result["severity"] = Value::String(meta.severity.clone());
        }
        if !meta.category.is_empty() {
            result["category"] = Value::String(meta.category.clone());
        }
        for (k, v) in r.properties {
            result["properties"][k] = Value::String(v.clone());
        }
        result
    }
}

/// The API reports are written in: Kyverno's default `wgpolicyk8s.io`, or
/// `openreports.io` (Kyverno's `--openreportsEnabled`), whose Report and
/// ClusterReport hold the same fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReportApi {
    #[default]
    PolicyReport,
    OpenReports,
}

impl ReportApi {
    pub fn group(self) -> &'static str {
        match self {
            ReportApi::PolicyReport => "wgpolicyk8s.io",
            ReportApi::OpenReports => "openreports.io",
        }
    }

    pub fn version(self) -> &'static str {
        match self {
            ReportApi::PolicyReport => "v1alpha2",
            ReportApi::OpenReports => "v1alpha1",
        }
    }

    /// (kind, plural) of the namespaced or the cluster-scoped report.
    pub fn kind(self, namespaced: bool) -> (&'static str, &'static str) {
        match (self, namespaced) {
            (ReportApi::PolicyReport, true) => ("PolicyReport", "policyreports"),
            (ReportApi::PolicyReport, false) => ("ClusterPolicyReport", "clusterpolicyreports"),
            (ReportApi::OpenReports, true) => ("Report", "reports"),
            (ReportApi::OpenReports, false) => ("ClusterReport", "clusterreports"),
        }
    }
}

/// The report of `resource` holding `results`.
pub fn report(api: ReportApi, resource: &Value, results: Vec<Value>) -> Value {
    let text = |p: &str| {
        resource
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (api_version, kind, namespace, name, uid) = (
        text("/apiVersion"),
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
        text("/metadata/uid"),
    );
    let mut metadata = json!({
        "name": uid,
        "labels": {"app.kubernetes.io/managed-by": "kyverno"},
        "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}],
    });
    let mut scope = json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid});
    if !namespace.is_empty() {
        metadata["namespace"] = Value::String(namespace.to_string());
        scope["namespace"] = Value::String(namespace.to_string());
    }
    json!({
        "apiVersion": format!("{}/{}", api.group(), api.version()),
        "kind": api.kind(!namespace.is_empty()).0,
        "metadata": metadata,
        "scope": scope,
        "summary": summary(&results),
        "results": results,
    })
}

/// Counts of each result.
pub fn summary(results: &[Value]) -> Value {
    let count = |what: &str| results.iter().filter(|r| r["result"] == what).count();
    json!({
        "pass": count("pass"),
        "fail": count("fail"),
        "warn": count("warn"),
        "error": count("error"),
        "skip": count("skip"),
    })
}

/// `existing` results merged with `fresh` ones: the results of the
/// policies in `evaluated` are replaced by `fresh`, the results of
/// policies not in `loaded` are dropped, the rest are kept. Sorted by
/// policy and rule, so equal content compares equal.
pub fn merge(
    existing: &[Value],
    evaluated: &BTreeSet<String>,
    loaded: &BTreeSet<String>,
    fresh: Vec<Value>,
) -> Vec<Value> {
    let policy = |r: &Value| r["policy"].as_str().unwrap_or_default().to_string();
    let mut out: Vec<Value> = existing
        .iter()
        .filter(|r| {
            let p = policy(r);
            !evaluated.contains(&p) && loaded.contains(&p)
        })
        .cloned()
        .chain(fresh)
        .collect();
    out.sort_by(|a, b| (policy(a), a["rule"].as_str()).cmp(&(policy(b), b["rule"].as_str())));
    out
}

/// Whether two result lists say the same, timestamps and processes aside.
pub fn same_results(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| comparable(x) == comparable(y))
}

/// A result without what changes at every evaluation: its timestamp, and
/// which process found it (an admission and a scan finding the same
/// result write nothing).
pub fn comparable(result: &Value) -> Value {
    let mut r = result.clone();
    if let Value::Object(m) = &mut r {
        m.remove("timestamp");
        if let Some(Value::Object(p)) = m.get_mut("properties") {
            p.remove("process");
        }
    }
    r
}

/// The result list of a report object.
pub fn results_of(report: &Value) -> Vec<Value> {
    report["results"].as_array().cloned().unwrap_or_default()
}

/// The report's identity fields from `fresh` with the content of `results`,
/// keeping the server's metadata of `existing` (resourceVersion for the
/// compare-and-swap).
pub fn updated(existing: &Value, fresh: &Value, results: Vec<Value>) -> Value {
    let mut out = fresh.clone();
    if let (Some(meta), Some(old)) = (
        out.get_mut("metadata").and_then(Value::as_object_mut),
        existing.get("metadata").and_then(Value::as_object),
    ) {
        for (k, v) in old {
            if !matches!(
                k.as_str(),
                "labels" | "ownerReferences" | "name" | "namespace"
            ) {
                meta.insert(k.clone(), v.clone());
            }
        }
    }
    out["summary"] = summary(&results);
    out["results"] = Value::Array(results);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(policy: &str, rule: &str, outcome: &str, at: i64) -> Value {
        json!({"policy": policy, "rule": rule, "result": outcome, "timestamp": {"seconds": at, "nanos": 0}})
    }

    #[test]
    fn merging_replaces_the_evaluated_policies_and_drops_the_unloaded() {
        let existing = vec![
            result("a", "r1", "fail", 1),
            result("b", "r1", "pass", 1),
            result("gone", "r1", "fail", 1),
        ];
        let evaluated = BTreeSet::from(["a".to_string()]);
        let loaded = BTreeSet::from(["a".to_string(), "b".to_string()]);
        let merged = merge(
            &existing,
            &evaluated,
            &loaded,
            vec![result("a", "r1", "pass", 2)],
        );
        assert_eq!(
            merged,
            vec![result("a", "r1", "pass", 2), result("b", "r1", "pass", 1)]
        );
        assert_eq!(summary(&merged)["pass"], 2);
        let again = merge(
            &merged,
            &evaluated,
            &loaded,
            vec![result("a", "r1", "pass", 3)],
        );
        assert!(same_results(&merged, &again), "only the timestamp moved");
        assert!(!same_results(&existing, &merged));
    }

    #[test]
    fn a_namespaced_resource_gets_a_policy_report_it_owns() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "web", "namespace": "ns", "uid": "u-1"}});
        let r = report(
            ReportApi::PolicyReport,
            &pod,
            vec![result("a", "r1", "fail", 1)],
        );
        assert_eq!(r["kind"], "PolicyReport");
        assert_eq!(r["metadata"]["name"], "u-1");
        assert_eq!(r["metadata"]["namespace"], "ns");
        assert_eq!(r["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(r["scope"]["kind"], "Pod");
        assert_eq!(r["summary"]["fail"], 1);
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "uid": "u-2"}});
        assert_eq!(
            report(ReportApi::PolicyReport, &ns, vec![])["kind"],
            "ClusterPolicyReport"
        );
        let open = report(ReportApi::OpenReports, &ns, vec![]);
        assert_eq!(
            (open["apiVersion"].as_str(), open["kind"].as_str()),
            (Some("openreports.io/v1alpha1"), Some("ClusterReport"))
        );
        assert_eq!(
            report(ReportApi::OpenReports, &pod, vec![])["kind"],
            "Report"
        );
    }
}
