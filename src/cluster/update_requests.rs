//! The durable record of generate work: every replica writes the
//! UpdateRequests (`kyverno.io/v2`, in gavel's namespace) its admissions
//! leave, and the background controller's leader works them off and
//! deletes them. Written after the review is answered, from a bounded
//! queue, by a few tasks with their own client, as Kyverno's webhook writes
//! them from a goroutine: admission never waits on the API server.
//!
//! A write the API server refuses for good (403, 404 when the CRD is
//! missing, 422) is logged and counted; a transient failure (5xx, 429, no
//! connection) is retried with backoff, so an API server restart loses no
//! work that reached the queue. A full queue drops the request, counted
//! and logged: the trigger was admitted, and admission must not block.

use crate::admission::update_requests::{UpdateRequestSink, UpdateRequestSpec, Written};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{Mutex, mpsc, oneshot};

/// The UpdateRequest resource.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kyverno.io", "v2", "UpdateRequest"),
        "updaterequests",
    )
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller_name: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    /// created, updated, deleted (generate), patched (mutate existing).
    pub action: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub controller_name: &'static str,
    /// Why the work failed (`WorkError::metric_label`).
    pub reason: &'static str,
}

/// The background half's counters: UpdateRequests written by the
/// replicas, and the work of each controller (Kyverno's
/// `kyverno_controller_*` names where it has them).
#[derive(Clone)]
pub struct BackgroundMetrics {
    pub written: Counter,
    pub dropped: Counter,
    pub write_errors: Counter,
    pub reconciles: Family<ControllerLabels, Counter>,
    pub requeues: Family<ControllerLabels, Counter>,
    pub drops: Family<ControllerLabels, Counter>,
    pub queue_depth: Family<ControllerLabels, Gauge>,
    pub reconcile_seconds: Family<ControllerLabels, Histogram>,
    pub objects: Family<ObjectLabels, Counter>,
    pub failures: Family<FailureLabels, Counter>,
}

impl Default for BackgroundMetrics {
    fn default() -> BackgroundMetrics {
        BackgroundMetrics {
            written: Counter::default(),
            dropped: Counter::default(),
            write_errors: Counter::default(),
            reconciles: Family::default(),
            requeues: Family::default(),
            drops: Family::default(),
            queue_depth: Family::default(),
            reconcile_seconds: Family::new_with_constructor(|| {
                Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0])
            }),
            objects: Family::default(),
            failures: Family::default(),
        }
    }
}

impl BackgroundMetrics {
    /// One more object `action` (`gavel_background_objects`).
    pub fn count(&self, action: &'static str) {
        self.objects.get_or_create(&ObjectLabels { action }).inc();
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gavel_update_requests_written",
            "UpdateRequests this replica wrote for admitted triggers",
            self.written.clone(),
        );
        registry.register(
            "gavel_update_requests_dropped",
            "UpdateRequests dropped because the write queue was full",
            self.dropped.clone(),
        );
        registry.register(
            "gavel_update_requests_write_errors",
            "UpdateRequests the API server refused for good",
            self.write_errors.clone(),
        );
        registry.register(
            "kyverno_controller_reconcile",
            "Work items a background controller reconciled",
            self.reconciles.clone(),
        );
        registry.register(
            "kyverno_controller_requeue",
            "Work items a background controller put back after an error",
            self.requeues.clone(),
        );
        registry.register(
            "kyverno_controller_drop",
            "Work items a background controller gave up on",
            self.drops.clone(),
        );
        registry.register(
            "gavel_controller_queue_depth",
            "Work items waiting in a background controller's queue",
            self.queue_depth.clone(),
        );
        registry.register(
            "gavel_controller_reconcile_duration_seconds",
            "Time a background controller took per work item",
            self.reconcile_seconds.clone(),
        );
        registry.register(
            "gavel_background_objects",
            "Objects the background controller created, updated or deleted (generate) or patched (mutate existing)",
            self.objects.clone(),
        );
        registry.register(
            "gavel_background_failures",
            "Background work items that failed, by controller and reason",
            self.failures.clone(),
        );
    }
}

/// Settings of the writer.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// gavel's namespace, where UpdateRequests live.
    pub namespace: String,
    /// Requests waiting to be written before new ones are dropped.
    pub queue: usize,
    /// Writes in flight at once.
    pub workers: usize,
}

/// The replica's [`UpdateRequestSink`].
pub struct UpdateRequestWriter {
    queue: mpsc::Sender<(UpdateRequestSpec, oneshot::Sender<()>)>,
    /// The identity gavel's own client has (SelfSubjectReview), once known.
    own_username: Arc<OnceLock<String>>,
    metrics: BackgroundMetrics,
}

impl UpdateRequestWriter {
    pub fn start(
        client: kube::Client,
        opts: &WriterOptions,
        metrics: BackgroundMetrics,
    ) -> UpdateRequestWriter {
        let (tx, rx) = mpsc::channel::<(UpdateRequestSpec, oneshot::Sender<()>)>(opts.queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &opts.namespace, &api_resource());
        for _ in 0..opts.workers.max(1) {
            let rx = rx.clone();
            let api = api.clone();
            let metrics = metrics.clone();
            let namespace = opts.namespace.clone();
            tokio::spawn(async move {
                loop {
                    let next = rx.lock().await.recv().await;
                    let Some((request, done)) = next else { return };
                    write(&api, &namespace, request, &metrics).await;
                    let _ = done.send(());
                }
            });
        }
        let own_username = Arc::new(OnceLock::new());
        let known = own_username.clone();
        tokio::spawn(async move {
            let mut wait = Duration::from_secs(1);
            loop {
                match whoami(&client).await {
                    Ok(name) => {
                        tracing::info!(username = name, "gavel's own identity");
                        let _ = known.set(name);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "SelfSubjectReview failed; retrying");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(Duration::from_secs(30));
                    }
                }
            }
        });
        UpdateRequestWriter {
            queue: tx,
            own_username,
            metrics,
        }
    }
}

impl UpdateRequestSink for UpdateRequestWriter {
    fn submit(&self, requests: Vec<UpdateRequestSpec>) -> Written {
        let mut written = Vec::new();
        for request in requests {
            if request.not_for_own_writes && self.own_username.get() == Some(&request.username) {
                continue;
            }
            let (done, wait) = oneshot::channel();
            if self.queue.try_send((request, done)).is_err() {
                self.metrics.dropped.inc();
                tracing::error!(
                    "UpdateRequest queue full: generate work of an admitted request dropped"
                );
                continue;
            }
            written.push(wait);
        }
        Box::pin(async move {
            for w in written {
                let _ = w.await;
            }
        })
    }
}

/// The username the API server knows this client by.
async fn whoami(client: &kube::Client) -> Result<String, kube::Error> {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let request = http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).expect("JSON"))
        .map_err(kube::Error::HttpError)?;
    let review: Value = client.request(request).await?;
    Ok(review
        .pointer("/status/userInfo/username")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string())
}

/// Writes one UpdateRequest, retrying what may pass later.
pub async fn write(
    api: &Api<DynamicObject>,
    namespace: &str,
    request: UpdateRequestSpec,
    metrics: &BackgroundMetrics,
) {
    let policy = request.spec["policy"].as_str().unwrap_or_default();
    let mut labels = serde_json::Map::new();
    // Kyverno labels its UpdateRequests by policy, for `kubectl get ur -l`.
    let (policy_ns, policy_name) = policy.split_once('/').unwrap_or(("", policy));
    labels.insert("generate.kyverno.io/policy-name".into(), policy_name.into());
    if !policy_ns.is_empty() {
        labels.insert(
            "generate.kyverno.io/policy-namespace".into(),
            policy_ns.into(),
        );
    }
    let object = json!({
        "apiVersion": "kyverno.io/v2",
        "kind": "UpdateRequest",
        "metadata": {"generateName": "ur-", "namespace": namespace, "labels": labels},
        "spec": request.spec,
    });
    let object: DynamicObject = match serde_json::from_value(object) {
        Ok(o) => o,
        Err(e) => {
            metrics.write_errors.inc();
            tracing::error!(error = %e, "building an UpdateRequest");
            return;
        }
    };
    let mut wait = Duration::from_millis(100);
    loop {
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {
                metrics.written.inc();
                return;
            }
            Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 => {
                metrics.write_errors.inc();
                tracing::error!(
                    policy,
                    code = s.code,
                    reason = s.message,
                    "UpdateRequest refused"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(policy, error = %e, "writing an UpdateRequest; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(10));
            }
        }
    }
}
