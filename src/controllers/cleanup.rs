//! The cleanup controller (docs/kyverno-semantics.md#cleanup-policies), on
//! the leader of the `gavel-cleanup` Lease: CleanupPolicy /
//! ClusterCleanupPolicy and DeletingPolicy / NamespacedDeletingPolicy run
//! on their cron schedules and delete what
//! they select; objects carrying the `cleanup.kyverno.io/ttl` label are
//! deleted when it expires (`ttl`).
//!
//! The durable record is the policy's `status.lastExecutionTime`, as in
//! Kyverno: a run is due at the schedule's first time after it (after
//! `creationTimestamp` before the first run). A leader that dies mid-run
//! leaves it unwritten, so the next leader runs the policy again. Every
//! deletion is safe to repeat, because a lease does not fence: it names
//! the object's uid as a precondition (a newer object of the same name is
//! left alone) and a 404 means done.

pub mod metrics;
pub mod ttl;
mod watched;

use crate::cluster::client::short;
use crate::cluster::discovery::{self, Discovered, delete_once, propagation_policy};
use crate::cluster::events::{self, Events, Source};
use crate::context::ClusterView;
use crate::controllers::background::objects;
use crate::controllers::leader::while_leading;
use crate::controllers::policy_status::{ready_patch, uses_condition_status};
use crate::engine::cleanup::{Candidate, RunContext, selects};
use crate::policy::cleanup::{CompiledCleanupPolicy, Selection};
use chrono::{DateTime, Utc};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use metrics::{CleanupMetrics, PolicyDeletionLabels};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, watch};
use watched::{Objects, Watch};

/// Settings of the cleanup controller.
#[derive(Debug, Clone)]
pub struct CleanupOptions {
    /// Time between discoveries of the API's kinds (the TTL watches and
    /// the kinds policies name): Kyverno's `--ttlReconciliationInterval`.
    pub interval: Duration,
    /// Resources listed per API call.
    pub page_size: u32,
    /// Policies run at the same time (Kyverno's cleanup workers).
    pub workers: usize,
    /// Tries of a run that meets errors before its time is recorded anyway
    /// (it then waits for its next scheduled time).
    pub max_tries: u32,
}

/// The policy kinds, by (group, plural).
const POLICY_RESOURCES: [(&str, &str); 4] = [
    ("kyverno.io", "cleanuppolicies"),
    ("kyverno.io", "clustercleanuppolicies"),
    ("policies.kyverno.io", "deletingpolicies"),
    ("policies.kyverno.io", "namespaceddeletingpolicies"),
];

/// What the leader knows of one policy besides its object.
struct PolicyState {
    /// uid and generation the compilation is of.
    compiled_for: (String, i64),
    compiled: Result<Arc<CompiledCleanupPolicy>, String>,
    /// The last run this leader finished (the status may lag behind).
    ran_at: Option<DateTime<Utc>>,
    running: bool,
    failures: u32,
    retry_at: Option<Instant>,
    /// The version whose Ready condition this leader wrote (or found).
    status_for: (String, i64),
}

/// How a run ended.
struct Outcome {
    key: String,
    /// The time recorded in the status (None: tried again later).
    recorded: Option<DateTime<Utc>>,
}

/// Runs the controller while this replica leads `leading`.
pub async fn run(
    client: Client,
    opts: CleanupOptions,
    view: Arc<dyn ClusterView>,
    leading: watch::Receiver<bool>,
    metrics: CleanupMetrics,
    events: Events,
) {
    while_leading(leading, "cleanup", || {
        let (client, opts, view, metrics, events) = (
            client.clone(),
            opts.clone(),
            view.clone(),
            metrics.clone(),
            events.clone(),
        );
        async move { lead(client, opts, view, metrics, events).await }
    })
    .await;
}

async fn lead(
    client: Client,
    opts: CleanupOptions,
    view: Arc<dyn ClusterView>,
    metrics: CleanupMetrics,
    events: Events,
) {
    let policies: Objects<Value> = Default::default();
    let mut policy_watches: HashMap<String, (Discovered, Watch)> = HashMap::new();
    let mut ttl = ttl::Ttl::default();
    let mut states: HashMap<String, PolicyState> = HashMap::new();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Outcome>();
    let workers = Arc::new(Semaphore::new(opts.workers.max(1)));
    let mut resources: Arc<Vec<Discovered>> = Arc::new(Vec::new());
    let mut next_discovery = Instant::now();
    loop {
        if Instant::now() >= next_discovery {
            match discovery::resources(&client).await {
                Ok(found) => {
                    resources = Arc::new(found);
                    watch_policies(&client, &resources, &mut policy_watches, &policies);
                    ttl.reconcile(&client, &resources).await;
                    next_discovery = Instant::now() + opts.interval;
                }
                Err(e) => {
                    tracing::warn!(error = e, "cleanup: discovery failed; tried again");
                    next_discovery = Instant::now() + Duration::from_secs(5);
                }
            }
        }
        while let Ok(outcome) = done_rx.try_recv() {
            if let Some(state) = states.get_mut(&outcome.key) {
                state.running = false;
                match outcome.recorded {
                    Some(at) => {
                        state.ran_at = Some(at);
                        state.failures = 0;
                        state.retry_at = None;
                    }
                    None => {
                        state.failures += 1;
                        let wait = Duration::from_secs((5u64 << state.failures.min(6)).min(300));
                        state.retry_at = Some(Instant::now() + wait);
                    }
                }
            }
        }
        let objects: Vec<(Discovered, Value)> = {
            let all = watched::lock(&policies);
            policy_watches
                .iter()
                .flat_map(|(id, (resource, _))| {
                    all.get(id)
                        .into_iter()
                        .flat_map(|set| set.values())
                        .map(|o| (resource.clone(), o.clone()))
                })
                .collect()
        };
        let mut seen = std::collections::HashSet::new();
        let mut invalid = 0;
        for (resource, object) in objects {
            let key = format!(
                "{}/{}/{}",
                resource.api.kind,
                object["metadata"]["namespace"].as_str().unwrap_or_default(),
                object["metadata"]["name"].as_str().unwrap_or_default()
            );
            seen.insert(key.clone());
            let state = refresh(&mut states, &key, &object);
            if state.status_for != state.compiled_for {
                state.status_for = state.compiled_for.clone();
                let compiled = state.compiled.as_ref().map(|_| ()).map_err(Clone::clone);
                let condition_status = uses_condition_status(&resource.api.api_version);
                if let Some(patch) = ready_patch(condition_status, &compiled, &object) {
                    let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
                    let api = resource.api(&client, namespace);
                    let name = object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    tokio::spawn(async move {
                        if let Err(e) = api
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                        {
                            tracing::warn!(
                                policy = name,
                                error = short(&e),
                                "Ready condition not written"
                            );
                        }
                    });
                }
            }
            let policy = match &state.compiled {
                Ok(p) => p.clone(),
                Err(_) => {
                    invalid += 1;
                    continue;
                }
            };
            if state.running || state.retry_at.is_some_and(|t| t > Instant::now()) {
                continue;
            }
            let now = Utc::now();
            if !is_due(&policy, &object, state.ran_at, now) {
                continue;
            }
            state.running = true;
            let failures = state.failures;
            let job = Job {
                client: client.clone(),
                view: view.clone(),
                metrics: metrics.clone(),
                events: events.clone(),
                resources: resources.clone(),
                policy_resource: resource,
                policy,
                page_size: opts.page_size,
                // The last try records its time whatever it met.
                record_anyway: failures + 1 >= opts.max_tries,
            };
            let (done, workers) = (done_tx.clone(), workers.clone());
            tokio::spawn(async move {
                let Ok(_permit) = workers.acquire_owned().await else {
                    return;
                };
                let recorded = job.run().await;
                let _ = done.send(Outcome { key, recorded });
            });
        }
        states.retain(|k, s| seen.contains(k) || s.running);
        metrics.invalid_policies.set(invalid);
        ttl.delete_expired(&client, &metrics).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Starts a watch per discovered policy kind (the CRDs may come later).
fn watch_policies(
    client: &Client,
    resources: &[Discovered],
    watches: &mut HashMap<String, (Discovered, Watch)>,
    into: &Objects<Value>,
) {
    for resource in resources {
        let wanted = POLICY_RESOURCES
            .iter()
            .any(|(g, p)| resource.api.group == *g && resource.api.plural == *p);
        if !wanted || watches.contains_key(&resource.id()) {
            continue;
        }
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource.api);
        let (api_version, kind) = (resource.api.api_version.clone(), resource.api.kind.clone());
        let events = watcher(api, watcher::Config::default());
        let watch = watched::spawn(
            resource.id(),
            events,
            into.clone(),
            move |o: &DynamicObject| {
                let mut v = serde_json::to_value(o).ok()?;
                v["apiVersion"] = Value::from(api_version.as_str());
                v["kind"] = Value::from(kind.as_str());
                Some(v)
            },
        );
        watches.insert(resource.id(), (resource.clone(), watch));
    }
}

/// The state of `key`, compiled again when the policy's spec changed.
fn refresh<'s>(
    states: &'s mut HashMap<String, PolicyState>,
    key: &str,
    object: &Value,
) -> &'s mut PolicyState {
    let version = (
        object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        object["metadata"]["generation"]
            .as_i64()
            .unwrap_or_default(),
    );
    let state = states
        .entry(key.to_string())
        .or_insert_with(|| PolicyState {
            compiled_for: (String::new(), -1),
            compiled: Err(String::new()),
            ran_at: None,
            running: false,
            failures: 0,
            retry_at: None,
            status_for: (String::new(), -1),
        });
    if state.compiled_for != version {
        state.compiled = CompiledCleanupPolicy::compile(object).map(Arc::new);
        if let Err(e) = &state.compiled {
            tracing::warn!(
                policy = key,
                error = e,
                "cleanup policy not run: it does not compile"
            );
        }
        if state.compiled_for.0 != version.0 {
            // Another object of that name: its own record.
            state.ran_at = None;
        }
        state.compiled_for = version;
    }
    state
}

fn timestamp(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()?.parse().ok()
}

/// Whether the policy's next run is due: the schedule's first time after
/// its last run (the later of its status and this leader's record), or
/// after its creation.
fn is_due(
    policy: &CompiledCleanupPolicy,
    object: &Value,
    ran_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> bool {
    let recorded = timestamp(&object["status"]["lastExecutionTime"]);
    let reference = match (recorded, ran_at) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
    .or_else(|| timestamp(&object["metadata"]["creationTimestamp"]));
    let Some(reference) = reference else {
        return false;
    };
    policy
        .schedule
        .next_after(reference)
        .is_some_and(|due| due <= now)
}

/// One run of one policy.
struct Job {
    client: Client,
    view: Arc<dyn ClusterView>,
    metrics: CleanupMetrics,
    events: Events,
    resources: Arc<Vec<Discovered>>,
    policy_resource: Discovered,
    policy: Arc<CompiledCleanupPolicy>,
    page_size: u32,
    record_anyway: bool,
}

impl Job {
    /// Deletes what the policy selects, then records the run's time in
    /// its status; None when it should be tried again.
    async fn run(self) -> Option<DateTime<Utc>> {
        let started = Instant::now();
        let (deleted, errors) = self.delete_selected().await;
        let key = self.policy.key();
        if !errors.is_empty() {
            tracing::warn!(
                policy = key,
                deleted,
                errors = errors.len(),
                first = errors[0],
                "cleanup run met errors"
            );
            if !self.record_anyway {
                return None;
            }
        } else {
            tracing::info!(
                policy = key,
                deleted,
                seconds = started.elapsed().as_secs_f64(),
                "cleanup run done"
            );
        }
        let now = Utc::now();
        match self.record(now).await {
            Ok(()) => Some(now),
            Err(e) => {
                tracing::warn!(
                    policy = key,
                    error = e,
                    "recording the run failed; it runs again"
                );
                None
            }
        }
    }

    async fn record(&self, at: DateTime<Utc>) -> Result<(), String> {
        let namespace = self.policy.namespace.as_deref().unwrap_or_default();
        let api = self.policy_resource.api(&self.client, namespace);
        let status =
            json!({"status": {"lastExecutionTime": at.format("%Y-%m-%dT%H:%M:%SZ").to_string()}});
        match api
            .patch_status(
                &self.policy.name,
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await
        {
            Ok(_) => Ok(()),
            // The policy is gone: nothing to record.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(short(&e)),
        }
    }

    /// The kinds the policy names, as discovery has them.
    fn targets(&self) -> Vec<Discovered> {
        let mut out: Vec<Discovered> = Vec::new();
        let mut add = |r: &Discovered| {
            if !out.iter().any(|o| o.id() == r.id()) {
                out.push(r.clone());
            }
        };
        match &self.policy.selection {
            Selection::Match {
                match_resources, ..
            } => {
                for s in match_resources.kind_selectors().unwrap_or_default() {
                    if s.subresource.is_some() {
                        continue;
                    }
                    for r in self.resources.iter().filter(|r| {
                        s.kind.matches(&r.api.kind)
                            && s.group.matches(&r.api.group)
                            && s.version.matches(&r.api.version)
                    }) {
                        add(r);
                    }
                }
            }
            Selection::Cel { scope, .. } => {
                let listed = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
                for rule in &scope.match_constraints.resource_rules {
                    for r in self.resources.iter().filter(|r| {
                        listed(&rule.api_groups, &r.api.group)
                            && listed(&rule.resources, &r.api.plural)
                    }) {
                        if listed(&rule.api_versions, &r.api.version) {
                            add(r);
                            continue;
                        }
                        // Discovery lists the group's preferred version; a
                        // rule that names another one lists at that one (a
                        // version the server does not serve fails the run,
                        // which is tried again and reported).
                        for version in rule.api_versions.iter().filter(|v| *v != "*") {
                            add(&r.at_version(version));
                        }
                    }
                }
            }
        }
        // A namespaced policy acts in its namespace: cluster-scoped kinds
        // have nothing there.
        if self.policy.namespace.is_some() {
            out.retain(|r| r.namespaced);
        }
        out
    }

    async fn delete_selected(&self) -> (usize, Vec<String>) {
        let mut errors = Vec::new();
        let mut deleted = 0;
        let namespaces = match self.namespaces().await {
            Ok(n) => Arc::new(n),
            Err(e) => return (0, vec![e]),
        };
        for target in self.targets() {
            // A namespaced policy lists its namespace; the others all.
            let api = target.api(
                &self.client,
                self.policy.namespace.as_deref().unwrap_or_default(),
            );
            let mut params = ListParams::default().limit(self.page_size);
            loop {
                let page = match api.list(&params).await {
                    Ok(p) => p,
                    Err(e) => {
                        self.count_error(&target.api.kind, "");
                        // Kinds the controller may not list are skipped,
                        // as Kyverno skips them; others fail the run.
                        if !matches!(&e, kube::Error::Api(s) if s.code == 403 || s.code == 404) {
                            errors.push(format!("listing {}: {}", target.id(), short(&e)));
                        }
                        break;
                    }
                };
                let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
                let items: Vec<Value> = page
                    .items
                    .into_iter()
                    .map(|o| {
                        let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
                        v["apiVersion"] = Value::from(target.api.api_version.as_str());
                        v["kind"] = Value::from(target.api.kind.as_str());
                        v
                    })
                    .collect();
                match self.select(items, &target.api.plural, &namespaces).await {
                    Ok(selected) => {
                        for s in selected {
                            match s {
                                Ok(object) => match self.delete(&target, &object).await {
                                    Ok(true) => deleted += 1,
                                    Ok(false) => {}
                                    Err(e) => errors.push(e),
                                },
                                Err(e) => errors.push(e),
                            }
                        }
                    }
                    Err(e) => {
                        errors.push(e);
                        return (deleted, errors);
                    }
                }
                match next {
                    Some(token) => params.continue_token = Some(token),
                    None => break,
                }
            }
        }
        (deleted, errors)
    }

    /// The Namespace objects, by name (namespaceSelector, namespaceObject).
    async fn namespaces(&self) -> Result<HashMap<String, Value>, String> {
        let api = objects::api_for(&self.client, "v1", "Namespace", "");
        let mut out = HashMap::new();
        let mut params = ListParams::default().limit(self.page_size);
        loop {
            let page = api
                .list(&params)
                .await
                .map_err(|e| format!("listing namespaces: {}", short(&e)))?;
            for ns in page.items {
                let mut v = serde_json::to_value(ns).unwrap_or(Value::Null);
                v["apiVersion"] = json!("v1");
                v["kind"] = json!("Namespace");
                out.insert(
                    v["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    v,
                );
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params.continue_token = Some(token),
                None => return Ok(out),
            }
        }
    }

    /// Evaluates the policy on one page, on a blocking thread (context
    /// entries and CEL lookups may read the API server): each selected
    /// object, or the error that kept one from being decided.
    async fn select(
        &self,
        items: Vec<Value>,
        plural: &str,
        namespaces: &Arc<HashMap<String, Value>>,
    ) -> Result<Vec<Result<Value, String>>, String> {
        let resolver = objects::background_resolver(&self.view, &self.client);
        let (policy, plural, namespaces) =
            (self.policy.clone(), plural.to_string(), namespaces.clone());
        tokio::task::spawn_blocking(move || {
            // Loaded per page: the context cannot cross threads.
            let run = RunContext::load(&policy, &resolver)?;
            Ok(items
                .into_iter()
                .filter_map(|object| {
                    let ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
                    let candidate = Candidate {
                        object: &object,
                        resource: &plural,
                        namespace: namespaces.get(ns),
                    };
                    match selects(&policy, &run, &candidate, &resolver) {
                        Ok(true) => Some(Ok(object)),
                        Ok(false) => None,
                        Err(e) => Some(Err(e)),
                    }
                })
                .collect())
        })
        .await
        .map_err(|e| format!("evaluation panicked: {e}"))?
    }

    /// Deletes one selected object: Ok(true) when this call deleted it.
    async fn delete(&self, target: &Discovered, object: &Value) -> Result<bool, String> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
        let propagation = self
            .policy
            .propagation
            .as_deref()
            .and_then(propagation_policy);
        let related = || {
            Some(events::reference(
                &target.api.api_version,
                &target.api.kind,
                namespace,
                name,
            ))
        };
        let what = format!("{}/{namespace}/{name}", target.api.kind);
        match delete_once(&target.api(&self.client, namespace), name, uid, propagation).await {
            Ok(deleted) => {
                if deleted {
                    self.events.policy_applied(
                        Source::Cleanup,
                        "ResourceCleanedUp",
                        self.policy_reference(),
                        related(),
                        format!("successfully cleaned up the target resource {what}"),
                    );
                    self.family(true)
                        .get_or_create(&self.labels(&target.api.kind, namespace))
                        .inc();
                    tracing::info!(
                        policy = self.policy.key(),
                        kind = target.api.kind,
                        namespace,
                        name,
                        "deleted by cleanup policy"
                    );
                }
                Ok(deleted)
            }
            Err(e) => {
                self.count_error(&target.api.kind, namespace);
                self.events.policy_error(
                    Source::Cleanup,
                    self.policy_reference(),
                    related(),
                    format!(
                        "failed to clean up the target resource {what}: {}",
                        short(&e)
                    ),
                );
                Err(format!("deleting {what}: {}", short(&e)))
            }
        }
    }

    /// The policy, as its events name it.
    fn policy_reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        events::reference(
            &self.policy_resource.api.api_version,
            &self.policy_resource.api.kind,
            self.policy.namespace.as_deref().unwrap_or_default(),
            &self.policy.name,
        )
    }

    fn labels(&self, kind: &str, namespace: &str) -> PolicyDeletionLabels {
        PolicyDeletionLabels {
            policy_type: self.policy.kind.clone(),
            policy_namespace: self.policy.namespace.clone().unwrap_or_default(),
            policy_name: self.policy.name.clone(),
            resource_kind: kind.to_string(),
            resource_namespace: namespace.to_string(),
        }
    }

    fn family(
        &self,
        deleted: bool,
    ) -> &prometheus_client::metrics::family::Family<
        PolicyDeletionLabels,
        prometheus_client::metrics::counter::Counter,
    > {
        match (self.policy.is_deleting_policy(), deleted) {
            (false, true) => &self.metrics.cleanup_deleted,
            (false, false) => &self.metrics.cleanup_errors,
            (true, true) => &self.metrics.deleting_deleted,
            (true, false) => &self.metrics.deleting_errors,
        }
    }

    fn count_error(&self, kind: &str, namespace: &str) {
        self.family(false)
            .get_or_create(&self.labels(kind, namespace))
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_after_the_last_run_or_the_creation() {
        let policy = CompiledCleanupPolicy::compile(&json!({
            "kind": "ClusterCleanupPolicy", "metadata": {"name": "c"},
            "spec": {"schedule": "*/10 * * * *", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}},
        }))
        .unwrap();
        let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let created = json!({"metadata": {"creationTimestamp": "2026-01-01T00:01:00Z"}});
        assert!(!is_due(&policy, &created, None, t("2026-01-01T00:09:59Z")));
        assert!(is_due(&policy, &created, None, t("2026-01-01T00:10:00Z")));
        let ran = json!({"metadata": {"creationTimestamp": "2026-01-01T00:01:00Z"},
                         "status": {"lastExecutionTime": "2026-01-01T00:10:00Z"}});
        assert!(!is_due(&policy, &ran, None, t("2026-01-01T00:15:00Z")));
        assert!(is_due(&policy, &ran, None, t("2026-01-01T00:20:00Z")));
        // This leader's own record counts before the status shows it.
        assert!(!is_due(
            &policy,
            &created,
            Some(t("2026-01-01T00:10:01Z")),
            t("2026-01-01T00:15:00Z")
        ));
        assert!(!is_due(
            &policy,
            &json!({"metadata": {}}),
            None,
            t("2026-01-01T00:15:00Z")
        ));
    }
}
