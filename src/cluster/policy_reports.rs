//! PolicyReports in the API server (`wgpolicyk8s.io/v1alpha2`), one per
//! resource, named after its uid and owned by it: written by the reports
//! controller's background scan and, from every replica, with the results
//! of the reviews it admitted (`AdmissionReportWriter`).
//!
//! Every write reads the report, merges (the results of the policies just
//! evaluated replace theirs; those of policies no longer loaded go) and
//! replaces it at the resourceVersion read, so writers never lose each
//! other's results: a 409 is read again.

use crate::admission::policies::Snapshot;
use crate::admission::reports::{self, AdmissionReportSink, AdmissionResults, ReportApi};
use crate::cluster::client::ApiFailure;
use crate::cluster::update_requests::BackgroundMetrics;
use arc_swap::ArcSwap;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;

/// Why a report could not be written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
    /// The report built is not a valid object (a bug in gavel).
    #[error("{0}")]
    Invalid(String),
}

impl ReportError {
    /// The `reason` label of a failure metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReportError::Api(failure) => failure.metric_label(),
            ReportError::Invalid(_) => "invalid",
        }
    }
}

/// The namespaced and the cluster-scoped report resource of `api`.
pub fn report_resources(api: ReportApi) -> [ApiResource; 2] {
    let resource = |namespaced: bool| {
        let (kind, plural) = api.kind(namespaced);
        ApiResource {
            group: api.group().into(),
            version: api.version().into(),
            api_version: format!("{}/{}", api.group(), api.version()),
            kind: kind.into(),
            plural: plural.into(),
        }
    };
    [resource(true), resource(false)]
}

/// The reports of a namespace, or the cluster's ("").
pub fn report_api(client: &Client, api: ReportApi, namespace: &str) -> Api<DynamicObject> {
    let [namespaced, cluster] = report_resources(api);
    if namespace.is_empty() {
        Api::all_with(client.clone(), &cluster)
    } else {
        Api::namespaced_with(client.clone(), namespace, &namespaced)
    }
}

/// Drops from one report the results of the scanned policies (the scan
/// did not find its resource) and of the policies no longer loaded;
/// deletes it when nothing is left.
pub async fn prune_report(
    client: &Client,
    report_kind: ReportApi,
    namespace: &str,
    uid: &str,
    scanned: &BTreeSet<String>,
    loaded: &BTreeSet<String>,
) -> Result<Written, ReportError> {
    let api = report_api(client, report_kind, namespace);
    let fail = |e: kube::Error| ReportError::Api(ApiFailure::new(format!("report {uid}"), &e));
    let Some(existing) = api.get_opt(uid).await.map_err(fail)? else {
        return Ok(Written::Nothing);
    };
    let existing = serde_json::to_value(existing).unwrap_or(Value::Null);
    let held = reports::results_of(&existing);
    let kept = reports::merge(&held, scanned, loaded, Vec::new());
    if kept.is_empty() {
        return match api.delete(uid, &DeleteParams::default()).await {
            Ok(_) => Ok(Written::Deleted),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Written::Nothing),
            Err(e) => Err(fail(e)),
        };
    }
    if reports::same_results(&held, &kept) {
        return Ok(Written::Nothing);
    }
    let mut report = existing.clone();
    report["summary"] = reports::summary(&kept);
    report["results"] = Value::Array(kept);
    let report: DynamicObject = serde_json::from_value(report)
        .map_err(|e| ReportError::Invalid(format!("report {uid}: {e}")))?;
    match api.replace(uid, &PostParams::default(), &report).await {
        Ok(_) => Ok(Written::Wrote),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Written::Nothing),
        Err(e) => Err(fail(e)),
    }
}

/// What a report write did.
pub enum Written {
    Wrote,
    Deleted,
    Nothing,
    /// Another writer changed the report meanwhile (a 409): the caller
    /// reads it again, or leaves it to the next scan.
    Conflict,
}

/// Writes one resource's report: merged with what it holds (the results
/// of the policies not in `scanned` stay), created, replaced at the
/// resourceVersion read, or deleted when nothing is left.
///
/// `absent`: the caller has just listed the reports and found none for
/// this resource, so it is created without reading it first (half the
/// requests of a first scan); a 409 says another writer was quicker.
pub async fn write_report(
    client: &Client,
    report_kind: ReportApi,
    resource: &Value,
    fresh: &[Value],
    scanned: &BTreeSet<String>,
    loaded: &BTreeSet<String>,
    absent: bool,
) -> Result<Written, ReportError> {
    let uid = resource["metadata"]["uid"].as_str().unwrap_or_default();
    let namespace = resource["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let api = report_api(client, report_kind, namespace);
    let fail = |e: kube::Error| ReportError::Api(ApiFailure::new(format!("report of {uid}"), &e));
    let existing = if absent {
        None
    } else {
        api.get_opt(uid).await.map_err(fail)?
    };
    let existing = existing.map(|o| serde_json::to_value(o).unwrap_or(Value::Null));
    let held = existing
        .as_ref()
        .map(reports::results_of)
        .unwrap_or_default();
    let merged = reports::merge(&held, scanned, loaded, fresh.to_vec());
    let to_object = |v: Value| {
        serde_json::from_value::<DynamicObject>(v)
            .map_err(|e| ReportError::Invalid(format!("report of {uid}: {e}")))
    };
    match existing {
        None if merged.is_empty() => Ok(Written::Nothing),
        None => {
            let report = to_object(reports::report(report_kind, resource, merged))?;
            match api.create(&PostParams::default(), &report).await {
                Ok(_) => Ok(Written::Wrote),
                // Written meanwhile (another replica, a deposed leader).
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Written::Conflict),
                // The resource is gone (its namespace terminating).
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 403 => Ok(Written::Nothing),
                Err(e) => Err(fail(e)),
            }
        }
        Some(_) if merged.is_empty() => match api.delete(uid, &DeleteParams::default()).await {
            Ok(_) => Ok(Written::Deleted),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Written::Nothing),
            Err(e) => Err(fail(e)),
        },
        Some(_) if reports::same_results(&held, &merged) => Ok(Written::Nothing),
        Some(existing) => {
            let fresh_report = reports::report(report_kind, resource, Vec::new());
            let report = to_object(reports::updated(&existing, &fresh_report, merged))?;
            match api.replace(uid, &PostParams::default(), &report).await {
                Ok(_) => Ok(Written::Wrote),
                // Changed meanwhile.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Written::Conflict),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(Written::Nothing),
                Err(e) => Err(fail(e)),
            }
        }
    }
}

/// Settings of the admission report writer.
#[derive(Debug, Clone)]
pub struct AdmissionReportOptions {
    /// Results held for writing before new ones are dropped.
    pub queue: usize,
    pub workers: usize,
    /// How long after the review a report is written. The report is owned
    /// by the resource, which a CREATE stores only after every webhook
    /// answered: written before, the garbage collector could find its
    /// owner missing and delete it. A resource that never comes to be
    /// (another webhook denied it) takes its report with it.
    pub delay: Duration,
    pub api: ReportApi,
}

/// Writes the results of admitted reviews into their resources' reports,
/// from a bounded queue, after the answer: admission never waits on it.
/// Reports are not a durable record: results lost with a full queue or a
/// killed replica come back with the resource's next review (or scan).
pub struct AdmissionReportWriter {
    queue: mpsc::Sender<Queued>,
    metrics: BackgroundMetrics,
}

impl AdmissionReportWriter {
    pub fn start(
        client: Client,
        snapshot: Arc<ArcSwap<Snapshot>>,
        opts: &AdmissionReportOptions,
        metrics: BackgroundMetrics,
    ) -> AdmissionReportWriter {
        let (tx, rx) = mpsc::channel::<Queued>(opts.queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..opts.workers.max(1) {
            let (rx, client, snapshot, metrics) = (
                rx.clone(),
                client.clone(),
                snapshot.clone(),
                metrics.clone(),
            );
            let (delay, api) = (opts.delay, opts.api);
            tokio::spawn(async move {
                loop {
                    let next = rx.lock().await.recv().await;
                    let Some(queued) = next else { return };
                    tokio::time::sleep_until(queued.at + delay).await;
                    write_admission_results(&client, api, &snapshot, &queued, &metrics).await;
                }
            });
        }
        AdmissionReportWriter { queue: tx, metrics }
    }
}

impl AdmissionReportSink for AdmissionReportWriter {
    fn submit(&self, evaluated_with: Arc<Snapshot>, results: AdmissionResults) {
        let queued = Queued {
            at: Instant::now(),
            evaluated_with,
            results,
        };
        if self.queue.try_send(queued).is_err() {
            self.metrics.count("admission_report_dropped");
        }
    }
}

/// An admitted review's results waiting to be written, with the snapshot
/// they refer to.
struct Queued {
    at: Instant,
    evaluated_with: Arc<Snapshot>,
    results: AdmissionResults,
}

/// One admission's results into its report: conflicts read again, other
/// failures tried again with backoff, a few times.
async fn write_admission_results(
    client: &Client,
    api: ReportApi,
    snapshot: &Arc<ArcSwap<Snapshot>>,
    queued: &Queued,
    metrics: &BackgroundMetrics,
) {
    // Built here, off the admission path, from the compact form queued.
    let resource = queued.results.subject.to_resource();
    let results = queued.results.report_results(&queued.evaluated_with);
    let evaluated = queued.results.evaluated_names(&queued.evaluated_with);
    let mut wait = Duration::from_millis(200);
    for _ in 0..5 {
        let loaded = snapshot.load().report_policy_names();
        match write_report(client, api, &resource, &results, &evaluated, &loaded, false).await {
            Ok(Written::Conflict) => continue,
            Ok(Written::Wrote | Written::Deleted) => {
                metrics.count("admission_report_written");
                return;
            }
            Ok(Written::Nothing) => return,
            Err(e) => {
                tracing::debug!(error = %e, "writing admission results; tried again");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
    }
    metrics.count("admission_report_error");
    tracing::warn!(
        resource = &*queued.results.subject.name,
        "admission results not written"
    );
}
