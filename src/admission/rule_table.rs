//! Per-rule result counters under Kyverno's metric names
//! (`kyverno_policy_results_total`, `kyverno_policy_execution_duration_seconds`,
//! `kyverno_policy_rule_info_total`). Per-rule results would cost a
//! label-set hash per rule on the hot path, so each policy snapshot gets a
//! [`RuleTable`]: one map lookup per request by resource kind, namespace and
//! operation, then plain atomic increments indexed by rule. Each worker
//! thread records into a shard of its own: a counter that two cores
//! increment in turn moves its cache line between them on every request
//! (in a profile of the served Pod Security load, the increments were 4%
//! of gavel's CPU with one shared table and 2% sharded,
//! `perf-results/2026-12-02-throughput-answers.md`). The labels are
//! only built when Prometheus scrapes, by the [`RuleMetrics`] collector,
//! which the snapshot publisher hands each new table to.

use crate::engine::RuleStatus;
use crate::policy::cel_policy::{
    CompiledMutatingPolicy, CompiledValidatingPolicy, PolicyScope as CelScope,
};
use crate::policy::compile::PolicyScope;
use crate::policy::{CompiledPolicy, RuleBody};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

/// A map hashed with foldhash rather than SipHash: every review looks a
/// kind and a namespace up in it. Its seed is random per process, so
/// names chosen to collide (a namespace is anyone's to name who may
/// create one) cannot be computed ahead.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Kyverno's default bucket boundaries, in seconds.
pub const BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0,
];

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
    /// Which of Kyverno's metric families count the rule.
    kind: PolicyKind,
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
                kind: PolicyKind::Classic,
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
    fn of_cel(
        kind: PolicyKind,
        scope: &CelScope,
        rule_type: &'static str,
        enforce: bool,
    ) -> RuleLabels {
        RuleLabels {
            kind,
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

/// Count, duration sum and duration buckets of one rule result, on cache
/// lines of its own: the cells of two shards are never on one line.
#[derive(Default)]
#[repr(align(64))]
struct ResultCell {
    count: AtomicU64,
    nanos: AtomicU64,
    /// Not cumulative; the last slot is above every boundary.
    buckets: [AtomicU64; BUCKETS.len() + 1],
}

/// One rule's results; a result's cell exists once it has happened.
/// `OnceBox` is a pointer (8 bytes) where a `OnceLock<Box>` is 16: a
/// table holds one of these per rule, shard, kind, namespace and operation.
#[derive(Default)]
struct RuleCell {
    results: [once_cell::race::OnceBox<ResultCell>; 5],
}

/// The rule counters of one snapshot.
pub struct RuleTable {
    /// The generation of the snapshot this table counts for.
    pub generation: u64,
    /// How many policies that snapshot has.
    pub policies: usize,
    labels: Vec<RuleLabels>,
    /// Where each policy's rules start in `labels`.
    offsets: Vec<usize>,
    /// The threads' shards of the counters; a scrape adds them up.
    shards: Box<[Shard]>,
}

/// The counters one group of threads records into: kind, then namespace,
/// then operation (an index into [`OPERATIONS`]). Nested so that a request
/// looks up with the strings it has. Aligned so that the lock word, which
/// every request writes, is on a line of its own shard.
#[derive(Default)]
#[repr(align(128))]
struct Shard {
    by_resource: RwLock<FastMap<String, FastMap<String, ByOperation>>>,
}

/// How many shards a table has: one per core up to 4, and one more that
/// every other thread shares. Bounded because a busy resource's cells are
/// made once per shard: 5 shards of a 300-rule policy set are 60 KB per
/// kind, namespace and operation counted (and a cluster has thousands of
/// namespaces), where one unsharded table of `OnceLock` cells was 24 KB.
fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .clamp(1, 4)
            + 1
    })
}

/// The shard of the calling thread and whether the thread has it to
/// itself. Threads are numbered as they first record, so the runtime's
/// workers (started together) each get a shard of their own, which they
/// add to without a locked instruction; later threads share the last.
fn shard_of_this_thread(shards: usize) -> (usize, bool) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    let number = NUMBER.with(|n| *n);
    if number + 1 < shards {
        (number, true)
    } else {
        (shards - 1, false)
    }
}

impl Default for RuleTable {
    fn default() -> RuleTable {
        RuleTable::new(&[], &[], &[])
    }
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
            labels.push(RuleLabels::of_cel(
                PolicyKind::Validating,
                &p.scope,
                "validate",
                p.deny,
            ));
        }
        for p in mutating {
            offsets.push(labels.len());
            labels.push(RuleLabels::of_cel(
                PolicyKind::Mutating,
                &p.scope,
                "mutate",
                !p.scope.failure_policy_ignore,
            ));
        }
        RuleTable {
            labels,
            offsets,
            shards: (0..shard_count()).map(|_| Shard::default()).collect(),
            generation: 0,
            policies: policies.len() + validating.len() + mutating.len(),
        }
    }

    /// This table, counting for the snapshot of `generation`.
    pub fn of_generation(mut self, generation: u64) -> RuleTable {
        self.generation = generation;
        self
    }

    /// The counters for requests on one kind, namespace and admission
    /// operation (`CREATE`, ...). Allocates only for a new combination.
    pub fn resource(&self, kind: &str, namespace: &str, operation: &str) -> ResourceCells<'_> {
        let op = operation_index(operation);
        let (shard, exclusive) = shard_of_this_thread(self.shards.len());
        let shard = &self.shards[shard];
        let found = shard
            .by_resource
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(kind)
            .and_then(|by_ns| by_ns.get(namespace))
            .and_then(|by_op| by_op[op].clone());
        let cells = found.unwrap_or_else(|| {
            let mut map = shard.by_resource.write().unwrap_or_else(|e| e.into_inner());
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
            exclusive,
        }
    }
}

/// The counters one request records into.
pub struct ResourceCells<'t> {
    cells: Arc<[RuleCell]>,
    offsets: &'t [usize],
    /// Only this thread writes the cells: a plain load and store adds.
    exclusive: bool,
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
        let cell = cell.results[result_index(status)].get_or_init(Box::default);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let secs = elapsed.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BUCKETS.len());
        let add = |counter: &AtomicU64, n: u64| {
            if self.exclusive {
                // A scrape reads a whole value either way; no other thread
                // writes it, so no addition is lost.
                counter.store(
                    counter.load(Ordering::Relaxed).wrapping_add(n),
                    Ordering::Relaxed,
                );
            } else {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(&cell.count, 1);
        add(&cell.nanos, nanos);
        add(&cell.buckets[bucket], 1);
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

/// The policy kinds Kyverno counts in metric families of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum PolicyKind {
    /// ClusterPolicy and Policy: `kyverno_policy_results`, per rule.
    Classic,
    /// ValidatingPolicy: `kyverno_validating_policy_results`, per policy.
    Validating,
    /// MutatingPolicy: `kyverno_mutating_policy_results`, per policy.
    Mutating,
}

/// policy type, name, namespace, validation mode, background, rule,
/// kind, namespace, operation, result, rule type, policy kind.
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
    PolicyKind,
);

/// The collector of the per-rule metrics across snapshots: counters never
/// go backwards when a snapshot is replaced, because a table whose
/// snapshot is gone is folded into `retired` first.
#[derive(Default)]
pub struct RuleMetrics {
    /// Every table still in use, the current snapshot's last.
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
        for shard in table.shards.iter() {
            Self::add_shard(totals, table, shard);
        }
    }

    fn add_shard(totals: &mut BTreeMap<SeriesKey, Totals>, table: &RuleTable, shard: &Shard) {
        let map = shard.by_resource.read().unwrap_or_else(|e| e.into_inner());
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
                        labels.kind,
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
        // The labels of the policy and the request, in both kinds of family.
        let common = |k: &SeriesKey| -> Vec<(&'static str, String)> {
            vec![
                ("policy_validation_mode", k.3.to_string()),
                ("policy_background_mode", k.4.to_string()),
                ("policy_name", k.1.clone()),
                ("policy_namespace", k.2.clone()),
                ("resource_kind", k.6.clone()),
                ("resource_namespace", k.7.clone()),
                ("resource_request_operation", k.8.clone()),
            ]
        };
        let classic = |k: &SeriesKey| -> Vec<(&'static str, String)> {
            let mut labels = common(k);
            labels.extend([
                ("policy_type", k.0.to_string()),
                ("rule_name", k.5.clone()),
                ("rule_result", k.9.to_string()),
                ("rule_type", k.10.to_string()),
                ("rule_execution_cause", "admission_request".to_string()),
            ]);
            labels
        };
        // kyverno-compat: Kyverno's per-kind families of CEL policies
        // (pkg/metrics/vpol.go, mpol.go) name the policy, not a rule, and
        // label the result `result` and the cause `execution_cause`.
        let cel = |k: &SeriesKey| -> Vec<(&'static str, String)> {
            let mut labels = common(k);
            labels.extend([
                ("execution_cause", "admission_request".to_string()),
                ("result", k.9.to_string()),
            ]);
            labels
        };
        for (kind, results, durations, what, labels) in [
            (
                PolicyKind::Classic,
                "kyverno_policy_results",
                "kyverno_policy_execution_duration_seconds",
                "a rule of a ClusterPolicy or Policy",
                &classic as &dyn Fn(&SeriesKey) -> Vec<(&'static str, String)>,
            ),
            (
                PolicyKind::Validating,
                "kyverno_validating_policy_results",
                "kyverno_validating_policy_execution_duration_seconds",
                "a ValidatingPolicy",
                &cel,
            ),
            (
                PolicyKind::Mutating,
                "kyverno_mutating_policy_results",
                "kyverno_mutating_policy_execution_duration_seconds",
                "a MutatingPolicy",
                &cel,
            ),
        ] {
            let rows: Vec<(Vec<(&'static str, String)>, &Totals)> = totals
                .iter()
                .filter(|(k, _)| k.11 == kind)
                .map(|(k, t)| (labels(k), t))
                .collect();
            // Declared even with no series yet, so that a dashboard's query
            // finds the family it reads.
            {
                let mut family = encoder.encode_descriptor(
                    results,
                    &format!("Results of {what} on admission requests"),
                    None,
                    MetricType::Counter,
                )?;
                for (labels, t) in &rows {
                    ConstCounter::new(t.count).encode(family.encode_family(&labels.as_slice())?)?;
                }
            }
            let mut family = encoder.encode_descriptor(
                durations,
                &format!("Time to evaluate {what} on an admission request"),
                None,
                MetricType::Histogram,
            )?;
            for (labels, t) in &rows {
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
        let current = self
            .tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .cloned()
            .unwrap_or_default();
        {
            let mut family = encoder.encode_descriptor(
                "kyverno_policy_rule_info_total",
                "One per rule of every loaded policy",
                None,
                MetricType::Gauge,
            )?;
            // The snapshot's rule table already holds every rule's labels.
            for l in &current.labels {
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
        ConstGauge::new(current.generation as i64).encode(encoder.encode_descriptor(
            "gavel_policy_snapshot_generation",
            "Generation of the policy snapshot in force; increases with every reload",
            None,
            MetricType::Gauge,
        )?)?;
        ConstGauge::new(current.policies as i64).encode(encoder.encode_descriptor(
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
    use std::time::Duration;

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
