//! The background controller (Kyverno's; see
//! docs/kyverno-semantics.md#mutate-existing and #generate-flow): on the
//! leader of the `gavel-background` Lease, it works off the UpdateRequests
//! the replicas write for admitted triggers (generate, and mutate
//! existing), and follows policy changes ([`policies`]).
//!
//! An UpdateRequest is deleted only once all its work is done, so a
//! leader killed in the middle leaves it for the next one, which does it
//! again: a create that finds the object made, an update that finds it
//! current and a delete that finds it gone change nothing ([`objects`]).
//! A request that fails is marked `Failed` with its retry count and tried
//! again with backoff, up to `max_retries`, after which it stays, Failed,
//! for the operator to see.

mod follow;
mod generate;
mod generating;
mod mutate_existing;
mod mutating;
pub mod objects;
mod policies;
mod work_error;

pub use work_error::WorkError;

use crate::admission::policies::Snapshot;
use crate::admission::update_requests;
use crate::cluster::events::{self, Events, Source};
use crate::cluster::update_requests::{
    BackgroundMetrics, ControllerLabels, FailureLabels, api_resource,
};
use crate::context::ClusterView;
use crate::controllers::leader::while_leading;
use crate::engine::json_context::Builtins;
use crate::engine::json_context::JsonContext;
use crate::engine::{EvalEnv, PolicyResponse, Request, RuleStatus};
use crate::policy::CompiledPolicy;
use arc_swap::ArcSwap;
use futures_util::StreamExt;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

const CONTROLLER: ControllerLabels = ControllerLabels {
    controller_name: "background",
};

/// Settings of the background controller.
#[derive(Debug, Clone)]
pub struct BackgroundOptions {
    /// gavel's namespace, where UpdateRequests live.
    pub namespace: String,
    /// UpdateRequests worked on at once (Kyverno's `--genWorkers`).
    pub workers: usize,
    /// Tries of a failing request before it is left Failed.
    pub max_retries: u64,
    /// How often the policy snapshot is checked for generate changes.
    pub policy_poll: Duration,
}

/// Everything a worker needs.
struct Shared {
    client: Client,
    urs: Api<DynamicObject>,
    opts: BackgroundOptions,
    snapshot: Arc<ArcSwap<Snapshot>>,
    view: Arc<dyn ClusterView>,
    metrics: BackgroundMetrics,
    queue: mpsc::UnboundedSender<String>,
    /// Names queued and not yet taken, so a burst of watch events for one
    /// request queues it once.
    queued: Mutex<HashSet<String>>,
    /// The latest version of each UpdateRequest the watch delivered: the
    /// workers read it there rather than from the API server (a stale copy
    /// costs at most a repeat of idempotent work).
    latest: Mutex<HashMap<String, DynamicObject>>,
    /// GeneratingPolicy downstream known to this lead.
    downstream: generating::Downstream,
    events: Events,
}

impl Shared {
    fn enqueue(&self, name: String) {
        if self.queued.lock().expect("queue set").insert(name.clone()) {
            self.metrics.queue_depth.get_or_create(&CONTROLLER).inc();
            let _ = self.queue.send(name);
        }
    }
}

/// Runs the controller while this replica leads `leading`.
pub async fn run(
    client: Client,
    opts: BackgroundOptions,
    snapshot: Arc<ArcSwap<Snapshot>>,
    view: Arc<dyn ClusterView>,
    leading: watch::Receiver<bool>,
    metrics: BackgroundMetrics,
    events: Events,
) {
    while_leading(leading, "background", || {
        // What a former lead left queued is not this one's to count.
        metrics.queue_depth.get_or_create(&CONTROLLER).set(0);
        // The counters at zero from the start (dashboards rate() them).
        let _ = metrics.reconciles.get_or_create(&CONTROLLER);
        let _ = metrics.requeues.get_or_create(&CONTROLLER);
        let _ = metrics.drops.get_or_create(&CONTROLLER);
        let (tx, rx) = mpsc::unbounded_channel();
        let (downstream, downstream_kinds) = generating::Downstream::new();
        let shared = Arc::new(Shared {
            downstream,
            events: events.clone(),
            urs: Api::namespaced_with(client.clone(), &opts.namespace, &api_resource()),
            client: client.clone(),
            opts: opts.clone(),
            snapshot: snapshot.clone(),
            view: view.clone(),
            metrics: metrics.clone(),
            queue: tx,
            queued: Mutex::new(HashSet::new()),
            latest: Mutex::new(HashMap::new()),
        });
        lead(shared, rx, downstream_kinds)
    })
    .await;
}

/// The leader's work: the UpdateRequest watch, the workers and the policy
/// follower, until the lead is lost (the caller drops this future).
async fn lead(
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<String>,
    downstream_kinds: mpsc::UnboundedReceiver<(String, String)>,
) {
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..shared.opts.workers.max(1) {
        let (shared, rx) = (shared.clone(), rx.clone());
        tasks.spawn(async move {
            loop {
                let next = rx.lock().await.recv().await;
                let Some(name) = next else { return };
                shared.queued.lock().expect("queue set").remove(&name);
                shared.metrics.queue_depth.get_or_create(&CONTROLLER).dec();
                process(&shared, &name).await;
            }
        });
    }
    tasks.spawn(follow::follow(shared.clone(), policies::ClassicRules));
    tasks.spawn(follow::follow(
        shared.clone(),
        generating::GeneratingPolicies,
    ));
    tasks.spawn(follow::follow(shared.clone(), mutating::MutatingPolicies));
    tasks.spawn(generating::watch_downstream(
        shared.clone(),
        downstream_kinds,
    ));
    let urs = shared.urs.clone();
    // Backoff on errors (the CRD missing, the API server down), as every
    // watch of gavel's.
    let mut events = watcher(urs, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let (ur, starting) = match event {
            Ok(watcher::Event::Apply(ur)) => (ur, false),
            Ok(watcher::Event::InitApply(ur)) => (ur, true),
            Ok(watcher::Event::Delete(ur)) => {
                shared.latest.lock().expect("latest").remove(&name_of(&ur));
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "watching UpdateRequests");
                continue;
            }
        };
        let name = name_of(&ur);
        let queue = pending(&ur, starting, shared.opts.max_retries);
        shared
            .latest
            .lock()
            .expect("latest")
            .insert(name.clone(), ur);
        if queue {
            shared.enqueue(name);
        }
    }
}

fn name_of(ur: &DynamicObject) -> String {
    ur.metadata.name.clone().unwrap_or_default()
}

/// Whether an UpdateRequest still has work: new or Pending; a Failed one
/// only when the lead was just taken (its retry timer died with the old
/// leader) and it has tries left.
fn pending(ur: &DynamicObject, starting: bool, max_retries: u64) -> bool {
    if !matches!(
        ur.data["spec"]["requestType"].as_str(),
        Some("generate" | "mutate" | update_requests::CEL_GENERATE | update_requests::CEL_MUTATE)
    ) {
        return false;
    }
    let status = &ur.data["status"];
    match status["state"].as_str().unwrap_or_default() {
        "" | "Pending" => true,
        "Failed" => starting && status["retryCount"].as_u64().unwrap_or(0) < max_retries,
        _ => false,
    }
}

/// Works one UpdateRequest off: every rule context, then the request is
/// deleted; on an error it is marked Failed and retried later.
async fn process(shared: &Arc<Shared>, name: &str) {
    let started = Instant::now();
    let Some(ur) = shared.latest.lock().expect("latest").get(name).cloned() else {
        // Deleted meanwhile: done by someone.
        return;
    };
    let result = work(shared, &ur).await;
    if let Err(WorkError::NotLoadedYet(policy)) = &result {
        // Written for a policy the API server holds and this replica's
        // snapshot does not yet: the work waits for it, counting no try.
        tracing::debug!(ur = name, policy, "waiting for the policy to load");
        shared.metrics.requeues.get_or_create(&CONTROLLER).inc();
        let shared = shared.clone();
        let name = name.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            shared.enqueue(name);
        });
        return;
    }
    record_event(shared, &ur, &result);
    if let Err(e) = &result {
        let labels = FailureLabels {
            controller_name: CONTROLLER.controller_name,
            reason: e.metric_label(),
        };
        shared.metrics.failures.get_or_create(&labels).inc();
    }
    shared.metrics.reconciles.get_or_create(&CONTROLLER).inc();
    shared
        .metrics
        .reconcile_seconds
        .get_or_create(&CONTROLLER)
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(()) => match shared.urs.delete(name, &DeleteParams::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {
                shared.latest.lock().expect("latest").remove(name);
            }
            Err(e) => {
                tracing::warn!(ur = name, error = %e, "deleting a done UpdateRequest");
                retry_later(shared, name.to_string(), 1);
            }
        },
        Err(e) => {
            let message = e.to_string();
            let tries = ur.data["status"]["retryCount"].as_u64().unwrap_or(0) + 1;
            tracing::warn!(ur = name, policy = %ur.data["spec"]["policy"], tries, message, "generate failed");
            let patch =
                json!({"status": {"state": "Failed", "message": message, "retryCount": tries}});
            if let Err(e) = shared
                .urs
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(ur = name, error = %e, "marking an UpdateRequest Failed");
            }
            if tries < shared.opts.max_retries {
                shared.metrics.requeues.get_or_create(&CONTROLLER).inc();
                retry_later(shared, name.to_string(), tries);
            } else {
                shared.metrics.drops.get_or_create(&CONTROLLER).inc();
                tracing::error!(
                    ur = name,
                    message,
                    "generate gave up; the UpdateRequest stays Failed"
                );
            }
        }
    }
}

/// Kyverno's events for one request's work: `PolicyError` on the policy
/// for a failure, `PolicyApplied` for a success (when not omitted), the
/// trigger as the related object.
fn record_event(shared: &Arc<Shared>, ur: &DynamicObject, result: &Result<(), WorkError>) {
    let spec = &ur.data["spec"];
    let key = spec["policy"].as_str().unwrap_or_default();
    let (namespace, name) = key.split_once('/').unwrap_or(("", key));
    let (api_version, kind) = policy_kind(spec);
    let policy = events::reference(api_version, kind, namespace, name);
    let trigger = &spec["resource"];
    let text = |k: &str| trigger[k].as_str().unwrap_or_default();
    let related = (!text("name").is_empty()).then(|| {
        events::reference(
            text("apiVersion"),
            text("kind"),
            text("namespace"),
            text("name"),
        )
    });
    let mutate = matches!(
        spec["requestType"].as_str(),
        Some("mutate" | update_requests::CEL_MUTATE)
    );
    let source = if mutate {
        Source::MutateExisting
    } else {
        Source::Generate
    };
    match result {
        Ok(()) => {
            let (action, note) = if mutate {
                ("ResourceMutated", "resource mutated")
            } else {
                ("ResourceGenerated", "resource generated")
            };
            shared
                .events
                .policy_applied(source, action, policy, related, note.into());
        }
        Err(message) => {
            let rule = spec["rule"].as_str().filter(|r| !r.is_empty());
            let note = match rule {
                Some(rule) => format!("policy {name}/{rule} error: {message}"),
                None => format!("policy {name} error: {message}"),
            };
            shared.events.policy_error(source, policy, related, note);
        }
    }
}

/// The apiVersion and kind of the policy a request is for.
fn policy_kind(spec: &Value) -> (&'static str, &'static str) {
    let cluster = !spec["policy"].as_str().unwrap_or_default().contains('/');
    match spec["requestType"].as_str() {
        Some(update_requests::CEL_GENERATE) if cluster => {
            ("policies.kyverno.io/v1", "GeneratingPolicy")
        }
        Some(update_requests::CEL_GENERATE) => {
            ("policies.kyverno.io/v1", "NamespacedGeneratingPolicy")
        }
        Some(update_requests::CEL_MUTATE) if cluster => {
            ("policies.kyverno.io/v1", "MutatingPolicy")
        }
        Some(update_requests::CEL_MUTATE) => ("policies.kyverno.io/v1", "NamespacedMutatingPolicy"),
        _ if cluster => ("kyverno.io/v1", "ClusterPolicy"),
        _ => ("kyverno.io/v1", "Policy"),
    }
}

/// Whether the API server holds the policy of a request this replica's
/// snapshot lacks: then the snapshot is behind (a policy just written),
/// else the policy was deleted since.
async fn policy_stored(shared: &Arc<Shared>, spec: &Value) -> Result<bool, WorkError> {
    let key = spec["policy"].as_str().unwrap_or_default();
    let (namespace, name) = key.split_once('/').unwrap_or(("", key));
    let (api_version, kind) = policy_kind(spec);
    objects::get(&shared.client, api_version, kind, namespace, name)
        .await
        .map(|found| found.is_some())
        .map_err(|e| WorkError::api(format!("reading policy {key}"), &e))
}

/// Whether a request for a policy missing from this replica's snapshot
/// waits for it: the API server holds the policy (so the snapshot is
/// behind) and the request is not older than any sync takes. A policy
/// gavel rejects would keep it waiting for ever; past that age its
/// failures count as tries.
async fn waiting(
    ur: &DynamicObject,
    shared: &Arc<Shared>,
    spec: &Value,
) -> Result<bool, WorkError> {
    let recent = ur.metadata.creation_timestamp.as_ref().is_none_or(|t| {
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(t.0);
        age < k8s_openapi::jiff::SignedDuration::from_secs(600)
    });
    Ok(recent && policy_stored(shared, spec).await?)
}

fn retry_later(shared: &Arc<Shared>, name: String, tries: u64) {
    let wait = Duration::from_millis(500 * (1 << tries.min(6)));
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        shared.enqueue(name);
    });
}

/// The work of one UpdateRequest.
async fn work(shared: &Arc<Shared>, ur: &DynamicObject) -> Result<(), WorkError> {
    let spec = &ur.data["spec"];
    let key = spec["policy"].as_str().unwrap_or_default().to_string();
    let snapshot = shared.snapshot.load_full();
    // A request written for a policy this replica has not loaded yet (by
    // a replica that already serves it, or just after the policy was
    // written) waits for it.
    if spec["requestType"] == update_requests::CEL_GENERATE {
        if !snapshot.generating.iter().any(|p| p.key == key) && waiting(ur, shared, spec).await? {
            return Err(WorkError::NotLoadedYet(key));
        }
        return generating::work(shared, spec).await;
    }
    if spec["requestType"] == update_requests::CEL_MUTATE {
        if !snapshot.mutating.iter().any(|p| p.key == key) && waiting(ur, shared, spec).await? {
            return Err(WorkError::NotLoadedYet(key));
        }
        return mutating::work(shared, spec).await;
    }
    let index = snapshot
        .policies
        .iter()
        .position(|p| p.qualified_name() == key);
    if index.is_none() && waiting(ur, shared, spec).await? {
        return Err(WorkError::NotLoadedYet(key));
    }
    // A policy deleted since: generate leaves what it made to the policy
    // follower; mutate existing has nothing left to apply.
    let Some(index) = index else {
        return Ok(());
    };
    if spec["requestType"] == "mutate" {
        // Kyverno writes one mutate request per rule, with the trigger as
        // `resource`.
        let rule = spec["rule"].as_str().unwrap_or_default();
        return mutate_existing::mutate_existing(
            shared,
            &snapshot,
            index,
            rule,
            &spec["resource"],
            spec,
        )
        .await
        .map_err(|e| e.within(format!("rule {rule}")));
    }
    let contexts = spec["ruleContext"].as_array().cloned().unwrap_or_default();
    let mut errors = Vec::new();
    for context in contexts {
        let rule = context["rule"].as_str().unwrap_or_default();
        let trigger = &context["trigger"];
        let result = if context["deleteDownstream"] == true {
            generate::delete_downstream(shared, &snapshot.policies[index], rule, trigger).await
        } else {
            generate::generate(shared, &snapshot, index, rule, trigger, spec).await
        };
        if let Err(e) = result {
            errors.push(e.within(format!("rule {rule}")));
        }
    }
    WorkError::all(errors)
}

/// The trigger of a request, read back from the API server; for a DELETE,
/// its last state, the request's oldObject. None when it was deleted and
/// created again under its name (that one has a request of its own), or
/// gone when the work is the controller's own (no admission request: a
/// policy change, a downstream changed by hand).
async fn read_trigger(
    shared: &Arc<Shared>,
    trigger: &Value,
    admission: &Value,
) -> Result<Option<Value>, WorkError> {
    if admission["operation"] == "DELETE" {
        return Ok(Some(admission["oldObject"].clone()));
    }
    let text = |k: &str| trigger[k].as_str().unwrap_or_default();
    let (api_version, kind, namespace, name) = (
        text("apiVersion"),
        text("kind"),
        text("namespace"),
        text("name"),
    );
    let found = objects::get(&shared.client, api_version, kind, namespace, name)
        .await
        .map_err(|e| {
            WorkError::api(format!("reading the trigger {kind} {namespace}/{name}"), &e)
        })?;
    if found.is_none() && !admission.is_object() {
        return Ok(None);
    }
    // Not stored (rejected by a later admission step) or already gone:
    // tried again, then given up.
    let object = found.ok_or_else(|| {
        WorkError::TriggerGone(format!("trigger {kind} {namespace}/{name} not found"))
    })?;
    let uid = text("uid");
    if !uid.is_empty() && object["metadata"]["uid"].as_str().is_some_and(|u| u != uid) {
        return Ok(None);
    }
    Ok(Some(object))
}

/// One rule's result in the background.
struct Evaluated {
    status: RuleStatus,
    message: String,
    /// Downstream resources, or patched targets.
    resources: Vec<Value>,
}

/// What a rule produced: its resources when it passed; nothing when it
/// was skipped or no longer applies (no match, preconditions not met);
/// its message as the error otherwise.
fn produced(evaluated: Option<Evaluated>) -> Result<Vec<Value>, WorkError> {
    match evaluated {
        None => Ok(Vec::new()),
        Some(e) => match e.status {
            RuleStatus::Pass => Ok(e.resources),
            RuleStatus::Skip => Ok(Vec::new()),
            _ => Err(WorkError::Evaluation(e.message)),
        },
    }
}

/// What rule `rule` of the policy `index` produces for a request's
/// trigger (read back first): its downstream resources or patched targets.
/// `policy_fn` (the engine's generate or mutate) runs on a blocking
/// thread, where the resolver may wait on the API server (clone sources,
/// targets).
async fn rule_output<F>(
    shared: &Arc<Shared>,
    snapshot: &Arc<Snapshot>,
    index: usize,
    rule: &str,
    trigger: &Value,
    spec: &Value,
    policy_fn: F,
) -> Result<Vec<Value>, WorkError>
where
    F: for<'p> FnOnce(&'p CompiledPolicy, &Request, &JsonContext, &EvalEnv) -> PolicyResponse<'p>
        + Send
        + 'static,
{
    let admission = &spec["context"]["admissionRequestInfo"]["admissionRequest"];
    let Some(object) = read_trigger(shared, trigger, admission).await? else {
        return Ok(Vec::new());
    };
    let request = background_request(admission, object)?;
    let resolver = objects::background_resolver(&shared.view, &shared.client);
    let snapshot = snapshot.clone();
    let rule = rule.to_string();
    let evaluated = tokio::task::spawn_blocking(move || {
        let policy = &snapshot.policies[index];
        let mut request = request;
        if !request.namespace().is_empty() {
            request.namespace_labels = resolver.namespace_labels(request.namespace());
        }
        let ctx = request.json_context(Builtins::of([policy]));
        let env = EvalEnv {
            resolver: &resolver,
            exceptions: &snapshot.exceptions,
            rule_values: &(),
        };
        let response = policy_fn(policy, &request, &ctx, &env);
        response
            .rules
            .into_iter()
            .find(|r| r.name == rule)
            .map(|r| Evaluated {
                status: r.status,
                message: r.message.to_string(),
                resources: r.resources().to_vec(),
            })
    })
    .await
    .map_err(|e| WorkError::Panicked(e.to_string()))?;
    produced(evaluated)
}

/// The engine's request for background evaluation: the admission request
/// the UpdateRequest kept (for `request.*`), with the trigger as read now.
fn background_request(admission: &Value, object: Value) -> Result<Request, WorkError> {
    if admission.is_object() {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": admission,
        });
        let invalid = |e: &dyn std::fmt::Display| {
            WorkError::Invalid(format!("the UpdateRequest's admission request: {e}"))
        };
        let body = serde_json::to_vec(&review).map_err(|e| invalid(&e))?;
        let mut request = crate::admission::review::decode(&body)
            .map_err(|e| invalid(&e))?
            .request;
        if request.operation != "DELETE" {
            request.object = object.into();
        }
        return Ok(request);
    }
    // Policy-driven work (generateExisting, a changed rule) has no
    // admission request: the trigger as if just created.
    Ok(Request::offline(
        &object,
        "CREATE",
        Default::default(),
        None,
    ))
}
