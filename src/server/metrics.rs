//! Prometheus metrics under Kyverno's names and labels, so that existing
//! dashboards and alerts keep working (kyverno-semantics §14), plus
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
use std::sync::Arc;
use std::time::Duration;

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
