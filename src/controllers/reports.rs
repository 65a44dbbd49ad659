//! The reports controller's background scan
//! (docs/kyverno-semantics.md#background-scan): on the leader of the
//! `gavel-reports` Lease, every `interval` and whenever the policy set
//! changes, each resource of the kinds the `background: true` validate
//! policies and ValidatingPolicies (`evaluation.background.enabled`, on
//! by default) match is evaluated, and its PolicyReport (ClusterPolicyReport
//! for a cluster-scoped resource) written when its results changed.
//!
//! Memory stays bounded at any cluster size: resources are listed a page
//! at a time and evaluated page by page; of the existing reports only a
//! hash of their results is kept. Writes are bounded by what changed: a
//! scan that finds the same results writes nothing, and the controller's
//! client has its own rate limit. A scan cut short (the lead lost, the API
//! server gone) is simply run again: reports are rewritten from what the
//! resources are, never patched incrementally.

use crate::admission::evaluation::{self, Inputs, Mode};
use crate::admission::policies::Snapshot;
use crate::admission::reports::{self, BACKGROUND_SCAN, ReportApi};
use crate::cluster::client::ApiFailure;
use crate::cluster::policy_reports::{
    ReportError, Written, prune_report, report_resources, write_report,
};
use crate::cluster::update_requests::{BackgroundMetrics, ControllerLabels, FailureLabels};
use crate::context::{ClusterView, Resolver};
use crate::controllers::background::objects::{self, BackgroundResolver};
use crate::controllers::leader::while_leading;
use crate::kinds::{BuiltinKind, builtin_kinds, split_api_version};
use arc_swap::ArcSwap;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const CONTROLLER: ControllerLabels = ControllerLabels {
    controller_name: "reports",
};

/// Why a scan was cut short (it runs again at the next interval); the
/// reason labels `gavel_background_failures`.
#[derive(Debug, thiserror::Error)]
enum ScanError {
    /// Listing the resources or the reports failed.
    #[error(transparent)]
    Api(#[from] ApiFailure),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error("evaluation panicked: {0}")]
    Panicked(String),
}

impl ScanError {
    fn metric_label(&self) -> &'static str {
        match self {
            ScanError::Api(failure) => failure.metric_label(),
            ScanError::Report(e) => e.metric_label(),
            ScanError::Panicked(_) => "panicked",
        }
    }
}

/// Settings of the background scan.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Time between full scans (Kyverno's `--backgroundScanInterval`, 1h).
    pub interval: Duration,
    /// Resources listed per API call.
    pub page_size: u32,
    /// How long policy changes gather before a scan starts.
    pub debounce: Duration,
    /// The API the reports are written in.
    pub api: ReportApi,
}

/// Runs the scans while this replica leads `leading`.
pub async fn run(
    client: Client,
    opts: ReportOptions,
    snapshot: Arc<ArcSwap<Snapshot>>,
    view: Arc<dyn ClusterView>,
    leading: watch::Receiver<bool>,
    metrics: BackgroundMetrics,
) {
    while_leading(leading, "reports", || async {
        loop {
            let generation = snapshot.load().generation;
            let started = Instant::now();
            match scan(&client, &opts, &snapshot, &view, &metrics).await {
                Ok(stats) => tracing::info!(
                    resources = stats.resources,
                    written = stats.written,
                    deleted = stats.deleted,
                    seconds = started.elapsed().as_secs_f64(),
                    "background scan done"
                ),
                Err(e) => {
                    let labels = FailureLabels {
                        controller_name: CONTROLLER.controller_name,
                        reason: e.metric_label(),
                    };
                    metrics.failures.get_or_create(&labels).inc();
                    tracing::warn!(error = %e, "background scan cut short; it runs again");
                }
            }
            metrics.reconciles.get_or_create(&CONTROLLER).inc();
            metrics
                .reconcile_seconds
                .get_or_create(&CONTROLLER)
                .observe(started.elapsed().as_secs_f64());
            // The next scan: at the interval, or after a policy change.
            let next = Instant::now() + opts.interval;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if Instant::now() >= next {
                    break;
                }
                if snapshot.load().generation != generation {
                    tokio::time::sleep(opts.debounce).await;
                    break;
                }
            }
        }
    })
    .await;
}

#[derive(Default)]
struct ScanStats {
    resources: usize,
    written: usize,
    deleted: usize,
}

/// What a scan evaluates: indexes of the background policies and of the
/// background ValidatingPolicies, and the kinds they match.
struct Scanned {
    policies: Vec<usize>,
    validating: Vec<usize>,
    /// Indexes of the background ImageValidatingPolicies.
    image_validating: Vec<usize>,
    kinds: Vec<&'static BuiltinKind>,
}

/// The background policies and the kinds they match.
fn scanned(snapshot: &Snapshot) -> Scanned {
    let policies: Vec<usize> = snapshot
        .policies
        .iter()
        .enumerate()
        .filter(|(_, p)| Mode::BackgroundScan.validates_classic(p))
        .map(|(i, _)| i)
        .collect();
    let validating: Vec<usize> = snapshot
        .validating
        .iter()
        .enumerate()
        .filter(|(_, p)| Mode::BackgroundScan.validates_with(p.background, p.mode))
        .map(|(i, _)| i)
        .collect();
    let image_validating: Vec<usize> = snapshot
        .image_validating
        .iter()
        .enumerate()
        .filter(|(_, p)| Mode::BackgroundScan.verifies_images_with(p.background, p.mode))
        .map(|(i, _)| i)
        .collect();
    // A CEL policy's rules name resources (plural), and the Pod
    // controllers autogen evaluates it on.
    let cel_scopes = validating
        .iter()
        .map(|&i| (&snapshot.validating[i].key, &snapshot.validating[i].scope))
        .chain(image_validating.iter().map(|&i| {
            (
                &snapshot.image_validating[i].key,
                &snapshot.image_validating[i].scope,
            )
        }));
    let mut resources: Vec<(String, String)> = Vec::new();
    for (key, scope) in cel_scopes {
        for rule in &scope.match_constraints.resource_rules {
            if rule.resources.iter().any(|r| r.contains('*'))
                || rule.api_groups.iter().any(|g| g == "*")
            {
                tracing::warn!(
                    policy = key,
                    "a CEL policy rule with a wildcard resource or group is not scanned"
                );
                continue;
            }
            for group in &rule.api_groups {
                for resource in rule.resources.iter().filter(|r| !r.contains('/')) {
                    resources.push((group.clone(), resource.clone()));
                    if resource == "pods" {
                        for c in &scope.controllers {
                            resources.push((c.group.to_string(), c.resource.to_string()));
                        }
                    }
                }
            }
        }
    }
    let mut selectors = Vec::new();
    for &i in &policies {
        for rule in snapshot.policies[i]
            .rules
            .iter()
            .filter(|r| r.is_validate())
        {
            match rule.match_resources.kind_selectors() {
                Some(s) => selectors.extend(s),
                None => tracing::warn!(
                    policy = snapshot.policies[i].qualified_name(),
                    rule = rule.name,
                    "a rule that matches any kind is not scanned"
                ),
            }
        }
    }
    let kinds = builtin_kinds()
        .iter()
        .filter(|k| {
            let (g, v) = split_api_version(k.api_version);
            // Reports are not scanned for themselves.
            g != "wgpolicyk8s.io"
                && g != "openreports.io"
                && (selectors.iter().any(|s| {
                    s.subresource.is_none()
                        && s.kind.matches(k.kind)
                        && s.group.matches(g)
                        && s.version.matches(v)
                }) || resources.iter().any(|(rg, r)| rg == g && r == k.plural))
        })
        .collect();
    Scanned {
        policies,
        validating,
        image_validating,
        kinds,
    }
}

/// A hash of results, timestamps and processes aside.
fn results_hash(results: &[Value]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for r in results {
        reports::comparable(r).to_string().hash(&mut h);
    }
    h.finish()
}

/// What a scan keeps of an existing report.
struct Existing {
    namespace: String,
    /// The hash of the scanned policies' results in it.
    hash: u64,
    /// It holds results of a policy no longer loaded.
    stale: bool,
}

/// The existing reports, by name (the resource uid).
async fn existing_reports(
    client: &Client,
    api: ReportApi,
    page_size: u32,
    scanned: &BTreeSet<String>,
    loaded: &BTreeSet<String>,
) -> Result<HashMap<String, Existing>, ApiFailure> {
    let mut out = HashMap::new();
    for resource in report_resources(api) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let mut params = ListParams::default()
            .labels("app.kubernetes.io/managed-by=kyverno")
            .limit(page_size);
        loop {
            let page = api
                .list(&params)
                .await
                .map_err(|e| ApiFailure::new(format!("listing {}", resource.plural), &e))?;
            for report in &page.items {
                let results: Vec<Value> = report.data["results"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| scanned.contains(r["policy"].as_str().unwrap_or_default()))
                    .cloned()
                    .collect();
                let name = report.metadata.name.clone().unwrap_or_default();
                // Results of a policy deleted since: rewritten without them.
                let stale = report.data["results"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| !loaded.contains(r["policy"].as_str().unwrap_or_default()));
                out.insert(
                    name,
                    Existing {
                        namespace: report.metadata.namespace.clone().unwrap_or_default(),
                        hash: results_hash(&results),
                        stale,
                    },
                );
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params.continue_token = Some(token),
                None => break,
            }
        }
    }
    Ok(out)
}

/// One full scan.
async fn scan(
    client: &Client,
    opts: &ReportOptions,
    snapshot: &Arc<ArcSwap<Snapshot>>,
    view: &Arc<dyn ClusterView>,
    metrics: &BackgroundMetrics,
) -> Result<ScanStats, ScanError> {
    let snapshot = snapshot.load_full();
    let Scanned {
        policies,
        validating,
        image_validating,
        kinds,
    } = scanned(&snapshot);
    let scanned_names: BTreeSet<String> = policies
        .iter()
        .map(|&i| snapshot.policies[i].qualified_name().to_string())
        .chain(
            validating
                .iter()
                .map(|&i| snapshot.validating[i].key.clone()),
        )
        .chain(
            image_validating
                .iter()
                .map(|&i| snapshot.image_validating[i].key.clone()),
        )
        .collect();
    let loaded = snapshot.report_policy_names();
    let existing =
        existing_reports(client, opts.api, opts.page_size, &scanned_names, &loaded).await?;
    let mut visited = std::collections::HashSet::new();
    let mut stats = ScanStats::default();
    for kind in kinds {
        let api = objects::api_for(client, kind.api_version, kind.kind, "");
        let mut params = ListParams::default().limit(opts.page_size);
        loop {
            let page = api
                .list(&params)
                .await
                .map_err(|e| ApiFailure::new(format!("listing {}", kind.plural), &e))?;
            let items: Vec<Value> = page
                .items
                .into_iter()
                .map(|o| {
                    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
                    v["apiVersion"] = Value::from(kind.api_version);
                    v["kind"] = Value::from(kind.kind);
                    v
                })
                .collect();
            stats.resources += items.len();
            let evaluated = evaluate_page(client, &snapshot, view, items).await?;
            for (resource, results) in evaluated {
                let uid = resource["metadata"]["uid"].as_str().unwrap_or_default();
                visited.insert(uid.to_string());
                let unchanged = match existing.get(uid) {
                    Some(e) => !e.stale && e.hash == results_hash(&results),
                    None => results.is_empty(),
                };
                if unchanged {
                    continue;
                }
                let absent = !existing.contains_key(uid);
                match write_report(
                    client,
                    opts.api,
                    &resource,
                    &results,
                    &scanned_names,
                    &loaded,
                    absent,
                )
                .await?
                {
                    Written::Wrote => {
                        stats.written += 1;
                        metrics.count("report_written");
                    }
                    Written::Deleted => {
                        stats.deleted += 1;
                        metrics.count("report_deleted");
                    }
                    // Written meanwhile: the next scan compares.
                    Written::Nothing | Written::Conflict => {}
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params.continue_token = Some(token),
                None => break,
            }
        }
    }
    // Reports of resources no scanned kind holds any more (their policy
    // deleted, or changed to other kinds): pruned of unloaded policies'
    // and of scanned policies' results, which the scan found none of.
    for (uid, report) in &existing {
        if visited.contains(uid) || (!report.stale && report.hash == results_hash(&[])) {
            continue;
        }
        match prune_report(
            client,
            opts.api,
            &report.namespace,
            uid,
            &scanned_names,
            &loaded,
        )
        .await?
        {
            Written::Wrote => stats.written += 1,
            Written::Deleted => {
                stats.deleted += 1;
                metrics.count("report_deleted");
            }
            Written::Nothing | Written::Conflict => {}
        }
    }
    Ok(stats)
}

/// Evaluates the background policies on one page of resources, on a
/// blocking thread: each resource with its fresh results (sorted).
async fn evaluate_page(
    client: &Client,
    snapshot: &Arc<Snapshot>,
    view: &Arc<dyn ClusterView>,
    items: Vec<Value>,
) -> Result<Vec<(Value, Vec<Value>)>, ScanError> {
    let resolver = objects::background_resolver(view, client);
    let snapshot = snapshot.clone();
    tokio::task::spawn_blocking(move || {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let inputs = ScanInputs(&resolver);
        items
            .into_iter()
            .map(|resource| {
                let ev = evaluation::evaluate(&snapshot, &resource, Mode::BackgroundScan, &inputs);
                let mut results = Vec::new();
                for (policy, classic) in snapshot.policies.iter().zip(&ev.classic) {
                    if let Some(response) = &classic.validate {
                        results.extend(reports::results(policy, response, BACKGROUND_SCAN, now));
                    }
                }
                for (i, response) in &ev.image_validating {
                    results.extend(reports::image_validating_policy_results(
                        &snapshot.image_validating[*i],
                        response,
                        BACKGROUND_SCAN,
                        now,
                    ));
                }
                for (i, response) in &ev.validating {
                    results.extend(reports::validating_policy_results(
                        &snapshot.validating[*i],
                        response,
                        BACKGROUND_SCAN,
                        now,
                    ));
                }
                results.sort_by(|a, b| {
                    (a["policy"].as_str(), a["rule"].as_str())
                        .cmp(&(b["policy"].as_str(), b["rule"].as_str()))
                });
                (resource, results)
            })
            .collect()
    })
    .await
    .map_err(|e| ScanError::Panicked(e.to_string()))
}

/// What the scan gives the evaluation: existing resources, evaluated as
/// CREATE by no user, their namespaces' labels and every lookup from the
/// cluster.
struct ScanInputs<'a>(&'a BackgroundResolver);

impl Inputs for ScanInputs<'_> {
    fn resolver(&self) -> &dyn Resolver {
        self.0
    }

    fn operation(&self) -> &str {
        "CREATE"
    }

    fn namespace_labels(&self, namespace: &str) -> Option<serde_json::Map<String, Value>> {
        self.0.namespace_labels(namespace)
    }
}
