//! `gavel serve`, put together: the policy source (a polled directory, or
//! the cluster's stores), the resolvers, the serving certificate, the
//! leader-only controllers and the HTTPS server. The one place that knows
//! every part; each part knows only those below it (ARCHITECTURE.md).

use crate::admission::policies::{PolicyStore, Publisher};
use crate::admission::update_requests::{NoUpdateRequests, UpdateRequestSink};
use crate::context::{ClusterView, NoResolver};
use crate::server::metrics::Metrics;
use crate::server::{
    ConnectionLimits, Drain, State, accept_loop, serve_request, shutdown_signal, tls,
};
use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// Settings of `gavel serve`, validated by the CLI.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub policies: PathBuf,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_san: Vec<String>,
    /// Where a generated CA is written.
    pub ca_out: PathBuf,
    /// How the server stops after SIGTERM.
    pub drain: Drain,
    pub poll: Duration,
    pub connections: ConnectionLimits,
    /// Per-request deadline; set a little under the webhook's timeoutSeconds.
    pub deadline: Duration,
    /// Cluster mode: policies and context from the API server's stores
    /// instead of `policies`.
    pub cluster: Option<ClusterOptions>,
}

/// How cluster mode reaches and caches the cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub client: crate::cluster::client::ClientOptions,
    pub stores: crate::cluster::stores::StoreOptions,
    /// How long policy changes gather before a snapshot is rebuilt.
    pub debounce: Duration,
    pub fallback_cache: crate::cluster::api::CacheOptions,
    /// Leader election timing and identity.
    pub lease: crate::controllers::leader::LeaseOptions,
    /// The webhook configuration the leader maintains.
    pub webhook: WebhookSettings,
    /// Where admitted requests' generate work is written.
    pub update_requests: crate::cluster::update_requests::WriterOptions,
    /// The background controller (leader only).
    pub background: crate::controllers::background::BackgroundOptions,
    /// The background scan that writes PolicyReports (leader only).
    pub reports: crate::controllers::reports::ReportOptions,
    /// The results of admitted reviews written into PolicyReports (every
    /// replica); None turns them off.
    pub admission_reports: Option<crate::cluster::policy_reports::AdmissionReportOptions>,
    /// The cleanup controller: cleanup and deleting policies, the TTL
    /// label (leader only).
    pub cleanup: crate::controllers::cleanup::CleanupOptions,
    /// Kubernetes Events of the background controllers.
    pub events: crate::cluster::events::EventOptions,
    /// The certificate Secrets (used when no certificate files are given).
    pub certificates: crate::controllers::certificates::CertOptions,
}

/// What the leader needs to register gavel's webhooks; the CA bundle is
/// known only once the serving certificate is.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    pub validating_name: String,
    pub mutating_name: String,
    pub policy_validating_name: String,
    pub target: crate::controllers::webhooks::WebhookTarget,
    pub timeout_seconds: i32,
    pub selection: crate::controllers::webhooks::WebhookSelection,
    pub resync: Duration,
    /// PEM file of the CA of operator-provided certificates.
    pub ca_file: Option<PathBuf>,
    /// The ClusterRole that owns the webhook configurations.
    pub owner_cluster_role: Option<String>,
}

/// Runs the server until SIGTERM or SIGINT, then drains it.
pub fn serve(opts: ServeOptions) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run(opts))
}

async fn run(opts: ServeOptions) -> Result<()> {
    // SIGTERM stops the server and makes the leaders step down at once,
    // so that another replica takes over without waiting out the lease.
    let (stop, mut stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        stop.send_replace(true);
    });
    let mut publisher = Publisher::default();
    let background = crate::cluster::update_requests::BackgroundMetrics::default();
    let cleanup_metrics = crate::controllers::cleanup::metrics::CleanupMetrics::default();
    let mut metrics = Metrics::new();
    let events_dropped = prometheus_client::metrics::counter::Counter::default();
    if let Some(cluster) = &opts.cluster {
        metrics.registry_mut().register(
            "gavel_leader",
            "1 while this replica holds the Lease of a duty (lease label), else 0",
            cluster.lease.leading.clone(),
        );
        metrics.register_background(&background);
        cleanup_metrics.register(metrics.registry_mut());
        metrics.registry_mut().register(
            "gavel_events_dropped",
            "Kubernetes Events dropped because the event queue was full",
            events_dropped.clone(),
        );
    }
    publisher.report_to(metrics.policies_rejected.clone(), metrics.rules.clone());
    let snapshot = publisher.handle();
    let queries = metrics.client_queries.clone();
    let lookups = metrics.lookups.clone();
    // Standalone: a polled directory. Cluster: the stores, and readiness
    // only once every store has synced.
    let mut store = None;
    let mut synced = None;
    let mut cluster_client = None;
    let mut background_client = None;
    let mut reports_client = None;
    let mut cleanup_client = None;
    let mut events = crate::cluster::events::Events::none();
    let mut policy_statuses = None;
    let mut update_requests: Arc<dyn UpdateRequestSink> = Arc::new(NoUpdateRequests);
    let mut admission_reports: Option<Arc<dyn crate::admission::reports::AdmissionReportSink>> =
        None;
    let view: Arc<dyn ClusterView> = match &opts.cluster {
        None => {
            let mut dir = PolicyStore::new(&opts.policies);
            dir.publisher = publisher;
            for r in dir
                .refresh()
                .with_context(|| format!("reading policies from {}", opts.policies.display()))?
            {
                tracing::error!(path = %r.path.display(), reason = r.reason, "policy rejected");
            }
            let s = dir.publisher.handle().load();
            tracing::info!(
                policies = s.policy_count(),
                exceptions = s.exceptions.len(),
                dir = %opts.policies.display(),
                "policies loaded"
            );
            if s.policies.iter().any(|p| p.has_generate()) {
                tracing::warn!(
                    "generate rules need cluster mode (the background controller writes to the API server): standalone admission ignores them"
                );
            }
            store = Some(dir);
            Arc::new(NoResolver)
        }
        Some(cluster) => {
            use crate::cluster::api::ApiResolver;
            use crate::cluster::informer::{InformerResolver, ResolverChain};
            use crate::cluster::{client, policy_sync::PolicySync, stores::Stores};
            let informers = client::client(
                &cluster.client,
                "informers",
                cluster.client.qps,
                cluster.client.burst,
                queries.clone(),
            )
            .await?;
            let fallback = client::client(
                &cluster.client,
                "fallback",
                cluster.client.fallback_qps,
                cluster.client.fallback_burst,
                queries.clone(),
            )
            .await?;
            // Leader duties get their own client and token bucket, so they
            // never eat into the stores' budget (nor the other way round).
            cluster_client = Some(
                client::client(
                    &cluster.client,
                    "controllers",
                    cluster.client.qps,
                    cluster.client.burst,
                    queries.clone(),
                )
                .await?,
            );
            // The UpdateRequest writes get a client and token bucket of
            // their own: a burst of triggers must not starve the stores.
            let writer_client = client::client(
                &cluster.client,
                "update-requests",
                cluster.client.qps,
                cluster.client.burst,
                queries.clone(),
            )
            .await?;
            update_requests =
                Arc::new(crate::cluster::update_requests::UpdateRequestWriter::start(
                    writer_client,
                    &cluster.update_requests,
                    background.clone(),
                ));
            // The background controller, as Kyverno's,
            // has a rate limit of its own.
            background_client = Some(
                client::client(
                    &cluster.client,
                    "background",
                    cluster.client.qps,
                    cluster.client.burst,
                    queries.clone(),
                )
                .await?,
            );
            // So has the reports controller's scan, which lists every
            // scanned kind.
            reports_client = Some(
                client::client(
                    &cluster.client,
                    "reports",
                    cluster.client.qps,
                    cluster.client.burst,
                    queries.clone(),
                )
                .await?,
            );
            if let (Some(opts), Some(reports)) = (&cluster.admission_reports, &reports_client) {
                admission_reports = Some(Arc::new(
                    crate::cluster::policy_reports::AdmissionReportWriter::start(
                        reports.clone(),
                        snapshot.clone(),
                        opts,
                        background.clone(),
                    ),
                ));
            }
            // And the cleanup controller, which lists what its policies
            // name and deletes.
            cleanup_client = Some(
                client::client(
                    &cluster.client,
                    "cleanup",
                    cluster.client.qps,
                    cluster.client.burst,
                    queries.clone(),
                )
                .await?,
            );
            // Events go through the background controller's client and rate
            // limit (only the leaders of the background duties write them).
            if let Some(background) = &background_client {
                events = crate::cluster::events::Events::start(
                    background.clone(),
                    &cluster.events,
                    events_dropped.clone(),
                );
            }
            let global = crate::cluster::global_context::start(
                informers.clone(),
                crate::cluster::global_context::GlobalContextOptions {
                    service: Arc::new(crate::cluster::service::ServiceClient::new(
                        cluster.fallback_cache.max_response_bytes,
                        Duration::from_secs(30),
                    )),
                    max_response_bytes: cluster.fallback_cache.max_response_bytes,
                    debounce: cluster.debounce,
                },
            );
            let cel_kinds = crate::cluster::stores::discover_cel_policy_kinds(&informers).await;
            let status_kinds = cel_kinds.clone();
            let stores = Stores::start(informers, &cluster.stores, cel_kinds);
            stores.activity.register(metrics.registry_mut(), &stores);
            let view = Arc::new(ResolverChain {
                service: crate::cluster::service::ServiceClient::new(
                    cluster.fallback_cache.max_response_bytes,
                    opts.deadline,
                ),
                informer: InformerResolver::new(stores.clone()),
                global: global.clone(),
                api: ApiResolver::new(fallback, &cluster.fallback_cache, lookups.clone()),
                metrics: lookups,
            });
            let sync = PolicySync::new(publisher);
            policy_statuses = Some((sync.statuses(), status_kinds));
            let debounce = cluster.debounce;
            let (tx, rx) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                let mut sync = sync;
                stores.synced().await;
                global.synced().await;
                sync.refresh_and_log(&stores);
                let s = sync.publisher.handle().load();
                tracing::info!(
                    policies = s.policy_count(),
                    exceptions = s.exceptions.len(),
                    "stores synced; policies loaded"
                );
                tx.send_replace(true);
                sync.run(stores, debounce).await;
            });
            synced = Some(rx);
            view
        }
    };
    let state = Arc::new(State {
        snapshot,
        ready: AtomicBool::new(false),
        metrics,
        deadline: opts.deadline,
        view,
        update_requests,
        admission_reports,
    });

    // The serving certificate: the operator's files; in cluster mode
    // without them, the Secrets the leader maintains (a throwaway
    // certificate until the first is loaded, and not ready before);
    // standalone, one generated now.
    let (ca_tx, ca_bundle) = tokio::sync::watch::channel(String::new());
    let mut serving = None;
    let (cert, mut cert_files) = match (&opts.tls_cert, &opts.tls_key) {
        (Some(c), Some(k)) => {
            let mut files = tls::CertFiles::new(c.clone(), k.clone());
            let ca_file = opts
                .cluster
                .as_ref()
                .and_then(|c| c.webhook.ca_file.clone())
                .unwrap_or_else(|| c.clone());
            ca_tx.send_replace(std::fs::read_to_string(&ca_file).unwrap_or_default());
            (files.load()?, Some(files))
        }
        (None, None) => {
            let g = tls::generate(&opts.tls_san)?;
            if opts.cluster.is_none() {
                std::fs::write(&opts.ca_out, &g.ca_pem)
                    .with_context(|| format!("writing the CA to {}", opts.ca_out.display()))?;
                tracing::info!(ca = %opts.ca_out.display(), sans = ?opts.tls_san, "generated a self-signed CA and serving certificate");
            }
            (
                tls::certified_key(g.cert_pem.as_bytes(), g.key_pem.as_bytes())?,
                None,
            )
        }
        _ => anyhow::bail!("--tls-cert and --tls-key go together"),
    };
    let resolver = Arc::new(tls::SwappableCert(ArcSwap::from_pointee(cert)));

    // Leader-only duties.
    if let (Some(client), Some(cluster), Some(synced)) =
        (cluster_client, &opts.cluster, synced.clone())
    {
        use crate::controllers::{certificates, leader, policy_status, webhooks};
        let mut ca_bundle = ca_bundle;
        if cert_files.is_none() {
            let watched = certificates::watch_secrets(
                client.clone(),
                &cluster.certificates,
                resolver.clone(),
            );
            ca_bundle = watched.ca_bundle;
            serving = Some(watched.serving);
            // Clients outside the cluster (and probes) find the current
            // bundle where the log says.
            let mut bundle = ca_bundle.clone();
            let ca_out = opts.ca_out.clone();
            tokio::spawn(async move {
                while bundle.changed().await.is_ok() {
                    let pem = bundle.borrow_and_update().clone();
                    let staged = ca_out.with_extension("tmp");
                    let written = std::fs::write(&staged, pem)
                        .and_then(|()| std::fs::rename(&staged, &ca_out));
                    match written {
                        Ok(()) => {
                            tracing::info!(ca = %ca_out.display(), "CA bundle from its Secret written")
                        }
                        Err(e) => {
                            tracing::warn!(ca = %ca_out.display(), error = %e, "writing the CA bundle")
                        }
                    }
                }
            });
            let leading = leader::elect(
                client.clone(),
                "gavel-certs",
                cluster.lease.clone(),
                stopping.clone(),
            );
            tokio::spawn(certificates::run(
                client.clone(),
                cluster.certificates.clone(),
                leading,
                watched.changed,
            ));
        }
        let leading = leader::elect(
            client.clone(),
            "gavel-webhooks",
            cluster.lease.clone(),
            stopping.clone(),
        );
        let snapshot_handle = state.snapshot.clone();
        let w = &cluster.webhook;
        let webhook = webhooks::WebhookOptions {
            validating_name: w.validating_name.clone(),
            mutating_name: w.mutating_name.clone(),
            policy_validating_name: w.policy_validating_name.clone(),
            target: w.target.clone(),
            ca_bundle,
            timeout_seconds: w.timeout_seconds,
            selection: w.selection.clone(),
            resync: w.resync,
            owner_cluster_role: w.owner_cluster_role.clone(),
        };
        {
            let leading = leader::elect(
                client.clone(),
                "gavel-background",
                cluster.lease.clone(),
                stopping.clone(),
            );
            let client = background_client.clone().unwrap_or_else(|| client.clone());
            let opts = cluster.background.clone();
            let (snapshot, view) = (state.snapshot.clone(), state.view.clone());
            let background = background.clone();
            let events = events.clone();
            let mut synced = synced.clone();
            // Like the webhooks: only once the policy set is loaded, or an
            // empty set would look like every policy deleted.
            tokio::spawn(async move {
                if synced.wait_for(|s| *s).await.is_ok() {
                    crate::controllers::background::run(
                        client, opts, snapshot, view, leading, background, events,
                    )
                    .await;
                }
            });
        }
        if !cluster.reports.interval.is_zero() {
            let leading = leader::elect(
                client.clone(),
                "gavel-reports",
                cluster.lease.clone(),
                stopping.clone(),
            );
            let client = reports_client.clone().unwrap_or_else(|| client.clone());
            let opts = cluster.reports.clone();
            let (snapshot, view) = (state.snapshot.clone(), state.view.clone());
            let background = background.clone();
            let mut synced = synced.clone();
            tokio::spawn(async move {
                if synced.wait_for(|s| *s).await.is_ok() {
                    crate::controllers::reports::run(
                        client, opts, snapshot, view, leading, background,
                    )
                    .await;
                }
            });
        }
        {
            let leading = leader::elect(
                client.clone(),
                "gavel-cleanup",
                cluster.lease.clone(),
                stopping.clone(),
            );
            let client = cleanup_client.clone().unwrap_or_else(|| client.clone());
            tokio::spawn(crate::controllers::cleanup::run(
                client,
                cluster.cleanup.clone(),
                state.view.clone(),
                leading,
                cleanup_metrics.clone(),
                events.clone(),
            ));
        }
        if let Some((statuses, cel_kinds)) = policy_statuses {
            let leading = leader::elect(
                client.clone(),
                "gavel-policy-status",
                cluster.lease.clone(),
                stopping.clone(),
            );
            tokio::spawn(policy_status::run(
                client.clone(),
                cel_kinds,
                statuses,
                leading,
                Duration::from_secs(60),
            ));
        }
        // Registered from the synced policy set only, never from an empty
        // one that merely has not loaded yet.
        tokio::spawn(async move {
            let mut synced = synced;
            if synced.wait_for(|s| *s).await.is_ok() {
                webhooks::run(client, webhook, snapshot_handle, leading).await;
            }
        });
    }
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(resolver.clone())?));

    // Background: policy directory and certificate files.
    let poll = opts.poll;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(poll);
        loop {
            tick.tick().await;
            match store.as_mut().map(PolicyStore::refresh) {
                Some(Ok(rejected)) => {
                    for r in rejected {
                        tracing::error!(path = %r.path.display(), reason = r.reason, "policy rejected; its last good version stays in force");
                    }
                }
                Some(Err(e)) => tracing::error!(error = %e, "rescanning policies"),
                None => {}
            }
            if let Some(files) = cert_files.as_mut() {
                match files.reload_if_changed() {
                    Some(Ok(key)) => {
                        resolver.0.store(Arc::new(key));
                        tracing::info!("serving certificate reloaded");
                    }
                    Some(Err(e)) => {
                        tracing::error!(error = %e, "certificate reload failed; keeping the current one")
                    }
                    None => {}
                }
            }
        }
    });

    let listener = TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("binding {}", opts.listen))?;
    tracing::info!(listen = %listener.local_addr()?, "serving");
    match synced {
        None => state.ready.store(true, Ordering::Relaxed),
        Some(mut synced) => {
            let ready = state.clone();
            tokio::spawn(async move {
                let serving_ok = match serving {
                    Some(mut s) => s.wait_for(|s| *s).await.is_ok(),
                    None => true,
                };
                if serving_ok && synced.wait_for(|s| *s).await.is_ok() {
                    ready.ready.store(true, Ordering::Relaxed);
                }
            });
        }
    }

    let service_state = state.clone();
    let handle = move |req| serve_request(req, service_state.clone());
    let not_ready = state.clone();
    accept_loop(
        listener,
        acceptor,
        opts.connections,
        state.metrics.connections.clone(),
        handle,
        async move {
            let _ = stopping.wait_for(|s| *s).await;
        },
        move || not_ready.ready.store(false, Ordering::Relaxed),
        opts.drain,
    )
    .await;
    Ok(())
}
