//! Prometheus metrics under Kyverno's names and labels, so that existing
//! dashboards and alerts keep working (docs/kyverno-semantics.md#metrics), plus
//! `gavel_` metrics for what Kyverno lacks.
//!
//! Per-request metrics go through prometheus-client families; per-rule
//! results are counted in each snapshot's rule table
//! ([`crate::admission::rule_table`]) and collected from there; the
//! connection counters are the accept loop's
//! ([`super::connections::ConnectionMetrics`]).

use super::connections::ConnectionMetrics;
pub use crate::admission::rule_table::operation_label;
use crate::admission::rule_table::{BUCKETS, RuleMetrics};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub request_allowed: &'static str,
    pub request_webhook: &'static str,
    pub resource_kind: String,
    pub resource_namespace: String,
    pub resource_request_operation: &'static str,
}

/// How many label sets of admission requests each thread keeps the
/// metric handles of.
const RECENT_CAPACITY: usize = 8;

/// Distinct ids for [`Metrics`] (a process may serve with several, as the
/// tests do), so that cached handles are only used with their own.
static NEXT_METRICS_ID: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The admission families' handles for the label sets this thread
    /// recorded last, newest first, by [`Metrics`] id. A request whose
    /// labels are here costs comparisons of them, not a SipHash of them
    /// and a lookup under a lock in each of the two families. The
    /// families never drop a label set, so a kept handle stays the one
    /// the family exposes.
    static RECENT_ADMISSION_LABELS: RefCell<Vec<KeptHandles>> = const { RefCell::new(Vec::new()) };
}

/// The admission families' handles for one label set of one [`Metrics`].
struct KeptHandles {
    metrics: u64,
    labels: AdmissionLabels,
    requests: Counter,
    duration: Histogram,
}

/// Everything `/metrics` shows.
pub struct Metrics {
    /// Which [`RECENT_ADMISSION_LABELS`] entries are this set's.
    id: u64,
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
    pub lookups: crate::cluster::api::LookupMetrics,
    /// Open, closed (by reason) and refused connections.
    pub connections: ConnectionMetrics,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
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
        let lookups = crate::cluster::api::LookupMetrics::default();
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
        let rules = Arc::new(RuleMetrics::default());
        registry.register_collector(Box::new(rules.clone()));
        let connections = ConnectionMetrics::default();
        connections.register(&mut registry);
        Metrics {
            id: NEXT_METRICS_ID.fetch_add(1, Ordering::Relaxed),
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

    /// Adds the background half's metrics (cluster mode).
    pub fn register_background(
        &mut self,
        background: &crate::cluster::update_requests::BackgroundMetrics,
    ) {
        background.register(&mut self.registry);
    }

    /// The registry, for the controllers' own families.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    pub fn admission(&self, labels: AdmissionLabels, elapsed: Duration) {
        RECENT_ADMISSION_LABELS.with_borrow_mut(|recent| {
            let hit = recent
                .iter()
                .position(|k| k.metrics == self.id && k.labels == labels);
            let index = hit.unwrap_or_else(|| {
                let kept = KeptHandles {
                    metrics: self.id,
                    requests: self.admission_requests.get_or_create(&labels).clone(),
                    duration: self.review_duration.get_or_create(&labels).clone(),
                    labels,
                };
                recent.truncate(RECENT_CAPACITY - 1);
                recent.insert(0, kept);
                0
            });
            let kept = &recent[index];
            kept.duration.observe(elapsed.as_secs_f64());
            kept.requests.inc();
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(namespace: &str) -> AdmissionLabels {
        AdmissionLabels {
            request_allowed: "true",
            request_webhook: "ValidatingWebhookConfiguration",
            resource_kind: "Pod".into(),
            resource_namespace: namespace.into(),
            resource_request_operation: "create",
        }
    }

    /// The count and duration samples of `namespace` in `metrics`'
    /// exposition.
    fn samples(metrics: &Metrics, namespace: &str) -> (String, String) {
        let text = metrics.render();
        let find = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name) && l.contains(&format!("=\"{namespace}\"")))
                .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
                .unwrap_or_default()
        };
        (
            find("kyverno_admission_requests_total{"),
            find("kyverno_admission_review_duration_seconds_count{"),
        )
    }

    /// Kept handles count into their own set's families: two sets on one
    /// thread with the same labels, and more label sets than are kept.
    #[test]
    fn kept_handles_count_for_their_own_metrics() {
        let (a, b) = (Metrics::new(), Metrics::new());
        for _ in 0..3 {
            a.admission(labels("one"), Duration::from_millis(1));
        }
        b.admission(labels("one"), Duration::from_millis(1));
        // More namespaces than a thread keeps, then the first again.
        for i in 0..RECENT_CAPACITY * 2 {
            a.admission(labels(&format!("ns{i}")), Duration::from_millis(1));
        }
        a.admission(labels("one"), Duration::from_millis(1));
        a.admission(labels("ns0"), Duration::from_millis(1));
        assert_eq!(samples(&a, "one"), ("4".into(), "4".into()));
        assert_eq!(samples(&b, "one"), ("1".into(), "1".into()));
        assert_eq!(samples(&a, "ns0"), ("2".into(), "2".into()));
        assert_eq!(samples(&a, "ns1"), ("1".into(), "1".into()));
        assert_eq!(samples(&b, "ns0"), (String::new(), String::new()));
    }
}
