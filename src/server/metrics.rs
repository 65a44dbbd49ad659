//! Prometheus metrics under Kyverno's names and labels, so that existing
//! dashboards and alerts keep working (kyverno-semantics §14), plus
//! `gavel_` metrics for what Kyverno lacks.
//!
//! Per-request metrics go through prometheus-client families. Per-rule
//! results would cost a label-set hash per rule on the hot path, so each
//! policy snapshot gets a [`RuleTable`]: one map lookup per request by
//! resource kind, namespace and operation, then plain atomic increments
//! indexed by rule. The labels are only built when Prometheus scrapes.

use super::policies::Snapshot;
use crate::engine::RuleStatus;
use crate::policy::cel_policy::{
    CompiledMutatingPolicy, CompiledValidatingPolicy, PolicyScope as CelScope,
};
use crate::policy::compile::PolicyScope;
use crate::policy::{CompiledPolicy, RuleBody};
use arc_swap::ArcSwap;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

/// Kyverno's default bucket boundaries, in seconds.
const BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub request_allowed: &'static str,
    pub request_webhook: &'static str,
    pub resource_kind: String,
    pub resource_namespace: String,
    pub resource_request_operation: &'static str,
}

/// Everything `/metrics` shows.
pub struct Metrics {
    registry: Registry,
    admission_requests: Family<AdmissionLabels, Counter>,
    review_duration: Family<AdmissionLabels, Histogram>,
    /// Requests answered 400 or 413 before evaluation.
    pub malformed: Counter,
    /// Policy files that failed to load or compile (shared with the store).
    pub policies_rejected: Counter,
    pub rules: Arc<RuleMetrics>,
    /// Every request to the API server, by client (cluster mode).
    pub client_queries: crate::cluster::client::QueryCounter,
    /// Context lookups by source and API fallback latency (cluster mode).
    pub lookups: crate::context::api::LookupMetrics,
    /// Open, closed (by reason) and refused connections.
    pub connections: ConnectionMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CloseLabels {
    reason: &'static str,
}

/// What the accept loop counts: Kyverno exposes nothing of the kind, and
/// without it an idle flood or a slow client shows only as latency.
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    pub open: Gauge,
    closed: Family<CloseLabels, Counter>,
    /// New connections refused at the cap with none idle to close.
    pub refused: Counter,
}

impl ConnectionMetrics {
    pub fn closed(&self, reason: super::connections::CloseReason) {
        self.closed
            .get_or_create(&CloseLabels {
                reason: reason.label(),
            })
            .inc();
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "gavel_connections_open",
            "TLS connections open, handshaking included",
            self.open.clone(),
        );
        registry.register(
            "gavel_connections_closed",
            "Connections ended, by reason: client, idle, slow (handshake or request head not in time), evicted (at the cap), tls_failed, error, shutdown",
            self.closed.clone(),
        );
        registry.register(
            "gavel_connections_refused",
            "New connections refused at the connection cap, none being idle",
            self.refused.clone(),
        );
    }
}

impl Metrics {
    pub fn new(snapshot: Arc<ArcSwap<Snapshot>>) -> Metrics {
        let mut registry = Registry::default();
        let admission_requests = Family::<AdmissionLabels, Counter>::default();
        registry.register(
            "kyverno_admission_requests",
            "Admission requests answered, by verdict and resource",
            admission_requests.clone(),
        );
        let review_duration =
            Family::<AdmissionLabels, Histogram>::new_with_constructor(histogram as fn() -> _);
        registry.register(
            "kyverno_admission_review_duration_seconds",
            "Time to decide an admission request, from decoded body to encoded response",
            review_duration.clone(),
        );
        let malformed = Counter::default();
        registry.register(
            "gavel_requests_malformed",
            "Requests rejected with 400 or 413 before evaluation",
            malformed.clone(),
        );
        let policies_rejected = Counter::default();
        registry.register(
            "gavel_policies_rejected",
            "Policy files that failed to load or compile; the last good version stayed in force",
            policies_rejected.clone(),
        );
        let client_queries = crate::cluster::client::QueryCounter::default();
        registry.register(
            "kyverno_client_queries",
            "Requests to the Kubernetes API server, by client, operation and resource",
            client_queries.clone(),
        );
        let lookups = crate::context::api::LookupMetrics::default();
        registry.register(
            "gavel_context_lookups",
            "Context entry lookups by source: informer store, fallback cache or API server",
            lookups.lookups.clone(),
        );
        registry.register(
            "gavel_context_fallback_duration_seconds",
            "Latency of context lookups that reached the API server",
            lookups.fallback_seconds.clone(),
        );
        let rules = Arc::new(RuleMetrics {
            snapshot,
            tables: Mutex::new(Vec::new()),
            retired: Mutex::new(BTreeMap::new()),
        });
        registry.register_collector(Box::new(rules.clone()));
        let connections = ConnectionMetrics::default();
        connections.register(&mut registry);
        Metrics {
            registry,
            admission_requests,
            review_duration,
            malformed,
            policies_rejected,
            client_queries,
            lookups,
            rules,
            connections,
        }
    }

    pub fn admission(&self, labels: AdmissionLabels, elapsed: Duration) {
        self.review_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        self.admission_requests.get_or_create(&labels).inc();
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// Kyverno's `resource_request_operation` values.
const OPERATIONS: [&str; 5] = ["create", "update", "delete", "connect", "unknown"];

/// The index into [`OPERATIONS`] of an admission operation.
fn operation_index(operation: &str) -> usize {
    match operation {
        "CREATE" => 0,
        "UPDATE" => 1,
        "DELETE" => 2,
        "CONNECT" => 3,
        _ => 4,
    }
}

/// `create`, `update`, `delete` or `connect`, as Kyverno labels operations.
pub fn operation_label(operation: &str) -> &'static str {
    OPERATIONS[operation_index(operation)]
}

/// The rule cells of one kind and namespace, per operation.
type ByOperation = [Option<Arc<[RuleCell]>>; OPERATIONS.len()];

/// The label values that describe one rule of one policy.
#[derive(Debug, Clone)]
struct RuleLabels {
    rule_type: &'static str,
    validation_mode: &'static str,
    policy_type: &'static str,
    background: &'static str,
    policy_name: String,
    policy_namespace: String,
    rule_name: String,
}

impl RuleLabels {
    fn of(policy: &CompiledPolicy) -> Vec<RuleLabels> {
        policy
            .rules
            .iter()
            .map(|rule| RuleLabels {
                rule_type: match &rule.body {
                    RuleBody::Validate(_) => "validate",
                    RuleBody::Mutate(_) => "mutate",
                    RuleBody::Generate(_) => "generate",
                    RuleBody::VerifyImages(_) => "verifyImages",
                },
                validation_mode: if rule.is_audit() { "audit" } else { "enforce" },
                policy_type: match policy.scope {
                    PolicyScope::Cluster => "cluster",
                    PolicyScope::Namespaced => "namespaced",
                },
                background: if policy.background { "true" } else { "false" },
                policy_name: policy.name.clone(),
                policy_namespace: policy.namespace.clone().unwrap_or_else(|| "-".into()),
                rule_name: rule.name.clone(),
            })
            .collect()
    }

    /// A CEL policy reports as one rule named after the policy.
    fn of_cel(scope: &CelScope, rule_type: &'static str, enforce: bool) -> RuleLabels {
        RuleLabels {
            rule_type,
            validation_mode: if enforce { "enforce" } else { "audit" },
            policy_type: if scope.namespace.is_some() {
                "namespaced"
            } else {
                "cluster"
            },
            background: "false",
            policy_name: scope.name.clone(),
            policy_namespace: scope.namespace.clone().unwrap_or_else(|| "-".into()),
            rule_name: scope.name.clone(),
        }
    }
}

const RESULTS: [&str; 5] = ["pass", "fail", "warn", "error", "skip"];

fn result_index(status: RuleStatus) -> usize {
    match status {
        RuleStatus::Pass => 0,
        RuleStatus::Fail => 1,
        RuleStatus::Warn => 2,
        RuleStatus::Error => 3,
        RuleStatus::Skip => 4,
    }
}

/// Count, duration sum and duration buckets of one rule result.
#[derive(Default)]
struct ResultCell {
    count: AtomicU64,
    nanos: AtomicU64,
    /// Not cumulative; the last slot is above every boundary.
    buckets: [AtomicU64; BUCKETS.len() + 1],
}

/// One rule's results; a result's cell exists once it has happened.
#[derive(Default)]
struct RuleCell {
    results: [OnceLock<Box<ResultCell>>; 5],
}

/// The rule counters of one snapshot.
#[derive(Default)]
pub struct RuleTable {
    labels: Vec<RuleLabels>,
    /// Where each policy's rules start in `labels`.
    offsets: Vec<usize>,
    /// Kind, then namespace, then operation (an index into [`OPERATIONS`]).
    /// Nested so that a request looks up with the strings it has.
    by_resource: RwLock<HashMap<String, HashMap<String, ByOperation>>>,
}

impl RuleTable {
    /// Policies are numbered in order: the classic ones, then the
    /// ValidatingPolicies, then the MutatingPolicies.
    pub fn new(
        policies: &[CompiledPolicy],
        validating: &[CompiledValidatingPolicy],
        mutating: &[CompiledMutatingPolicy],
    ) -> RuleTable {
        let mut labels = Vec::new();
        let mut offsets = Vec::with_capacity(policies.len() + validating.len() + mutating.len());
        for p in policies {
            offsets.push(labels.len());
            labels.extend(RuleLabels::of(p));
        }
        for p in validating {
            offsets.push(labels.len());
            labels.push(RuleLabels::of_cel(&p.scope, "validate", p.deny));
        }
        for p in mutating {
            offsets.push(labels.len());
            labels.push(RuleLabels::of_cel(
                &p.scope,
                "mutate",
                !p.scope.failure_policy_ignore,
            ));
        }
        RuleTable {
            labels,
            offsets,
            by_resource: RwLock::new(HashMap::new()),
        }
    }

    /// The counters for requests on one kind, namespace and admission
    /// operation (`CREATE`, ...). Allocates only for a new combination.
    pub fn resource(&self, kind: &str, namespace: &str, operation: &str) -> ResourceCells<'_> {
        let op = operation_index(operation);
        let found = self
            .by_resource
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(kind)
            .and_then(|by_ns| by_ns.get(namespace))
            .and_then(|by_op| by_op[op].clone());
        let cells = found.unwrap_or_else(|| {
            let mut map = self.by_resource.write().unwrap_or_else(|e| e.into_inner());
            map.entry(kind.to_string())
                .or_default()
                .entry(namespace.to_string())
                .or_default()[op]
                .get_or_insert_with(|| {
                    (0..self.labels.len())
                        .map(|_| RuleCell::default())
                        .collect()
                })
                .clone()
        });
        ResourceCells {
            cells,
            offsets: &self.offsets,
        }
    }
}

/// The counters one request records into.
pub struct ResourceCells<'t> {
    cells: Arc<[RuleCell]>,
    offsets: &'t [usize],
}

impl ResourceCells<'_> {
    /// Records rule `rule` of snapshot policy `policy`.
    pub fn record(&self, policy: usize, rule: usize, status: RuleStatus, elapsed: Duration) {
        let Some(cell) = self
            .offsets
            .get(policy)
            .and_then(|o| self.cells.get(o + rule))
        else {
            return;
        };
        let cell = cell.results[result_index(status)].get_or_init(Default::default);
        cell.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        cell.nanos.fetch_add(nanos, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BUCKETS.len());
        cell.buckets[bucket].fetch_add(1, Ordering::Relaxed);
    }
}

/// Totals of one series of `kyverno_policy_results` and
/// `kyverno_policy_execution_duration_seconds`.
#[derive(Default, Clone)]
struct Totals {
    count: u64,
    nanos: u64,
    buckets: [u64; BUCKETS.len() + 1],
}

/// policy type, name, namespace, validation mode, background, rule,
/// kind, namespace, operation, result, rule type.
type SeriesKey = (
    &'static str,
    String,
    String,
    &'static str,
    &'static str,
    String,
    String,
    String,
    String,
    &'static str,
    &'static str,
);

/// The collector of the per-rule metrics across snapshots: counters never
/// go backwards when a snapshot is replaced, because a table whose
/// snapshot is gone is folded into `retired` first.
pub struct RuleMetrics {
    snapshot: Arc<ArcSwap<Snapshot>>,
    tables: Mutex<Vec<Arc<RuleTable>>>,
    retired: Mutex<BTreeMap<SeriesKey, Totals>>,
}

impl std::fmt::Debug for RuleMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuleMetrics")
    }
}

impl RuleMetrics {
    /// Keeps `table` for scraping; called for every published snapshot.
    pub fn track(&self, table: Arc<RuleTable>) {
        self.tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(table);
    }

    fn add(totals: &mut BTreeMap<SeriesKey, Totals>, table: &RuleTable) {
        let map = table.by_resource.read().unwrap_or_else(|e| e.into_inner());
        let resources = map.iter().flat_map(|(kind, by_ns)| {
            by_ns.iter().flat_map(move |(namespace, by_op)| {
                by_op.iter().enumerate().filter_map(move |(op, cells)| {
                    Some((kind, namespace, OPERATIONS[op], cells.as_ref()?))
                })
            })
        });
        for (kind, namespace, operation, cells) in resources {
            for (labels, cell) in table.labels.iter().zip(cells.iter()) {
                for (r, result) in cell.results.iter().enumerate() {
                    let Some(result) = result.get() else { continue };
                    let series = (
                        labels.policy_type,
                        labels.policy_name.clone(),
                        labels.policy_namespace.clone(),
                        labels.validation_mode,
                        labels.background,
                        labels.rule_name.clone(),
                        kind.to_string(),
                        namespace.to_string(),
                        operation.to_string(),
                        RESULTS[r],
                        labels.rule_type,
                    );
                    let t = totals.entry(series).or_default();
                    t.count += result.count.load(Ordering::Relaxed);
                    t.nanos += result.nanos.load(Ordering::Relaxed);
                    for (sum, b) in t.buckets.iter_mut().zip(&result.buckets) {
                        *sum += b.load(Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// Retired totals plus every live table.
    fn totals(&self) -> BTreeMap<SeriesKey, Totals> {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        tables.retain(|t| {
            // Only this list holds it: its snapshot is gone and no request
            // can record into it any more.
            let gone = Arc::strong_count(t) == 1;
            if gone {
                Self::add(&mut retired, t);
            }
            !gone
        });
        let mut totals = retired.clone();
        for t in tables.iter() {
            Self::add(&mut totals, t);
        }
        totals
    }
}

impl prometheus_client::collector::Collector for RuleMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let totals = self.totals();
        let labels_of = |k: &SeriesKey| -> [(&'static str, String); 12] {
            [
                ("policy_validation_mode", k.3.to_string()),
                ("policy_type", k.0.to_string()),
                ("policy_background_mode", k.4.to_string()),
                ("policy_name", k.1.clone()),
                ("policy_namespace", k.2.clone()),
                ("resource_kind", k.6.clone()),
                ("resource_namespace", k.7.clone()),
                ("resource_request_operation", k.8.clone()),
                ("rule_name", k.5.clone()),
                ("rule_result", k.9.to_string()),
                ("rule_type", k.10.to_string()),
                ("rule_execution_cause", "admission_request".to_string()),
            ]
        };
        {
            let mut family = encoder.encode_descriptor(
                "kyverno_policy_results",
                "Rule results of admission requests",
                None,
                MetricType::Counter,
            )?;
            for (key, t) in &totals {
                let labels = labels_of(key);
                ConstCounter::new(t.count).encode(family.encode_family(&labels.as_slice())?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "kyverno_policy_execution_duration_seconds",
                "Time to evaluate a rule on an admission request",
                None,
                MetricType::Histogram,
            )?;
            for (key, t) in &totals {
                let labels = labels_of(key);
                // Per-bucket counts: the encoder makes them cumulative.
                let buckets: Vec<(f64, u64)> = BUCKETS
                    .iter()
                    .copied()
                    .chain([f64::INFINITY])
                    .zip(t.buckets)
                    .collect();
                family
                    .encode_family(&labels.as_slice())?
                    .encode_histogram::<Vec<(String, String)>>(
                        t.nanos as f64 / 1e9,
                        t.count,
                        &buckets,
                        None,
                    )?;
            }
        }
        let snapshot = self.snapshot.load();
        {
            let mut family = encoder.encode_descriptor(
                "kyverno_policy_rule_info_total",
                "One per rule of every loaded policy",
                None,
                MetricType::Gauge,
            )?;
            // The snapshot's rule table already holds every rule's labels.
            for l in &snapshot.rule_table.labels {
                let labels = [
                    ("policy_validation_mode", l.validation_mode),
                    ("policy_type", l.policy_type),
                    ("policy_background_mode", l.background),
                    ("policy_namespace", l.policy_namespace.as_str()),
                    ("policy_name", l.policy_name.as_str()),
                    ("rule_name", l.rule_name.as_str()),
                    ("rule_type", l.rule_type),
                    ("status_ready", "true"),
                ];
                ConstGauge::new(1_i64).encode(family.encode_family(&labels.as_slice())?)?;
            }
        }
        ConstGauge::new(snapshot.generation as i64).encode(encoder.encode_descriptor(
            "gavel_policy_snapshot_generation",
            "Generation of the policy snapshot in force; increases with every reload",
            None,
            MetricType::Gauge,
        )?)?;
        ConstGauge::new(snapshot.policy_count() as i64).encode(encoder.encode_descriptor(
            "gavel_policies",
            "Policies in the snapshot in force",
            None,
            MetricType::Gauge,
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::load::{LoadedDocument, load_policy_text};

    /// A policy with two rules, `a` and `b`.
    fn policy() -> CompiledPolicy {
        let rule = |name: &str| {
            format!(
                "
    - name: {name}
      match:
        any:
          - resources:
              kinds: [Pod]
      validate:
        message: m
        pattern:
          metadata:
            name: \"?*\""
            )
        };
        let text = format!(
            "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: p
spec:
  rules:{}{}
",
            rule("a"),
            rule("b")
        );
        match load_policy_text("p.yaml", &text).unwrap().remove(0) {
            LoadedDocument::Policy(p) => CompiledPolicy::compile(&p).unwrap(),
            _ => unreachable!("a ClusterPolicy"),
        }
    }

    /// Requests record from many threads at once; a scrape sees them all.
    #[test]
    fn records_from_many_threads_add_up() {
        let table = RuleTable::new(&[policy()], &[], &[]);
        let threads = 9;
        std::thread::scope(|s| {
            for t in 0..threads {
                let table = &table;
                s.spawn(move || {
                    let cells = table.resource("Pod", "default", "CREATE");
                    for _ in 0..100 {
                        cells.record(0, t % 2, RuleStatus::Pass, Duration::from_micros(3));
                    }
                    cells.record(0, 1, RuleStatus::Fail, Duration::from_secs(40));
                });
            }
        });
        let mut totals = BTreeMap::new();
        RuleMetrics::add(&mut totals, &table);
        let count = |rule: &str, result: &str| {
            totals
                .iter()
                .filter(|(k, _)| k.5 == rule && k.9 == result)
                .map(|(k, t)| {
                    assert_eq!(
                        (k.6.as_str(), k.7.as_str(), k.8.as_str()),
                        ("Pod", "default", "create")
                    );
                    t
                })
                .fold(Totals::default(), |mut sum, t| {
                    sum.count += t.count;
                    sum.nanos += t.nanos;
                    for (s, b) in sum.buckets.iter_mut().zip(&t.buckets) {
                        *s += b;
                    }
                    sum
                })
        };
        assert_eq!(totals.len(), 3);
        let a = count("a", "pass");
        assert_eq!(a.count, 100 * (threads as u64).div_ceil(2));
        assert_eq!(a.nanos, a.count * 3_000);
        assert_eq!(count("b", "pass").count, 100 * (threads as u64 / 2));
        let failed = count("b", "fail");
        assert_eq!(failed.count, threads as u64);
        // Forty seconds is above every bucket boundary.
        assert_eq!(failed.buckets[BUCKETS.len()], threads as u64);
    }
}
