//! `gavel serve`, put together: the policy source (a polled directory, or
//! the cluster's stores), the resolvers, the serving certificate, the
//! leader-only controllers and the HTTPS server. The one place that knows
//! every part; each part knows only those below it (ARCHITECTURE.md).

use crate::admission::policies::{PolicyStore, Publisher};
use crate::admission::reports::AdmissionReportSink;
use crate::admission::update_requests::{NoUpdateRequests, UpdateRequestSink};
use crate::cluster::events::Events;
use crate::cluster::policy_reports::AdmissionReportWriter;
use crate::cluster::update_requests::{BackgroundMetrics, UpdateRequestWriter};
use crate::context::{ClusterView, NoResolver};
use crate::controllers::cleanup::metrics::CleanupMetrics;
use crate::server::metrics::Metrics;
use crate::server::{
    ConnectionLimits, Drain, State, accept_loop, serve_request, shutdown_signal, tls,
};
use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
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
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        stop.send_replace(true);
    });
    let mut telemetry = Telemetry::new(opts.cluster.is_some());
    let mut publisher = Publisher::default();
    publisher.report_to(
        telemetry.metrics.policies_rejected.clone(),
        telemetry.metrics.rules.clone(),
    );
    let snapshot = publisher.handle();
    // Standalone: a polled directory. Cluster: the stores, and readiness
    // only once every store has synced.
    let (store, cluster) = match &opts.cluster {
        None => (Some(load_directory(&opts.policies, publisher)?), None),
        Some(options) => {
            let cluster =
                Cluster::start(options, opts.deadline, publisher, &snapshot, &mut telemetry)
                    .await?;
            (None, Some(cluster))
        }
    };
    let Telemetry {
        metrics,
        background,
        cleanup,
        events_dropped: _,
    } = telemetry;
    let state = Arc::new(State {
        snapshot,
        ready: AtomicBool::new(false),
        metrics,
        deadline: opts.deadline,
        view: cluster.as_ref().map_or_else(
            || Arc::new(NoResolver) as Arc<dyn ClusterView>,
            |c| c.view.clone(),
        ),
        update_requests: cluster.as_ref().map_or_else(
            || Arc::new(NoUpdateRequests) as Arc<dyn UpdateRequestSink>,
            |c| c.update_requests.clone(),
        ),
        admission_reports: cluster.as_ref().and_then(|c| c.admission_reports.clone()),
        events: cluster
            .as_ref()
            .map_or_else(Events::none, |c| c.events.clone()),
    });
    let mut certificate = ServingCertificate::load(&opts)?;
    let synced = cluster.as_ref().map(|c| c.synced.clone());
    let mut serving = None;
    if let (Some(cluster), Some(options)) = (cluster, &opts.cluster) {
        let duties = Duties {
            options,
            state: &state,
            background,
            cleanup,
            stopping: stopping.clone(),
        };
        serving = duties.start(cluster, &mut certificate, &opts.ca_out);
    }
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(certificate.resolver.clone())?));
    watch_files(store, certificate.files, certificate.resolver, opts.poll);
    let listener = TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("binding {}", opts.listen))?;
    tracing::info!(listen = %listener.local_addr()?, "serving");
    become_ready(&state, synced, serving);
    let service_state = state.clone();
    let handle = move |req| serve_request(req, service_state.clone());
    let not_ready = state.clone();
    let mut stopping = stopping;
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

/// The server's metrics and the counters of the parts that report into
/// them.
struct Telemetry {
    metrics: Metrics,
    background: BackgroundMetrics,
    cleanup: CleanupMetrics,
    events_dropped: Counter,
}

impl Telemetry {
    /// The metrics; in cluster mode with the leaders', the background
    /// controllers' and the event queue's.
    fn new(cluster: bool) -> Telemetry {
        let mut t = Telemetry {
            metrics: Metrics::new(),
            background: BackgroundMetrics::default(),
            cleanup: CleanupMetrics::default(),
            events_dropped: Counter::default(),
        };
        if cluster {
            t.metrics.register_background(&t.background);
            t.cleanup.register(t.metrics.registry_mut());
            t.metrics.registry_mut().register(
                "gavel_events_dropped",
                "Kubernetes Events dropped because the event queue was full",
                t.events_dropped.clone(),
            );
        }
        t
    }
}

/// Standalone mode's policy source: the directory, read once now (a
/// policy that does not load is logged, and rejected).
fn load_directory(dir: &std::path::Path, publisher: Publisher) -> Result<PolicyStore> {
    let mut store = PolicyStore::new(dir);
    store.publisher = publisher;
    for r in store
        .refresh()
        .with_context(|| format!("reading policies from {}", dir.display()))?
    {
        tracing::error!(path = %r.path.display(), reason = r.reason, "policy rejected");
    }
    let s = store.publisher.handle().load();
    tracing::info!(
        policies = s.policy_count(),
        exceptions = s.exceptions.len(),
        dir = %dir.display(),
        "policies loaded"
    );
    if s.policies.iter().any(|p| p.has_generate()) {
        tracing::warn!(
            "generate rules need cluster mode (the background controller writes to the API server): standalone admission ignores them"
        );
    }
    Ok(store)
}

/// The API clients of cluster mode's duties, each with its own token
/// bucket so that none eats into another's budget.
struct Clients {
    /// Leader duties: webhooks, certificates, cleanup's fallback, status.
    controllers: kube::Client,
    /// The background controller, as Kyverno's, has a rate limit of its
    /// own; Events go through it (only the background leaders write them).
    background: kube::Client,
    /// The reports controller's scan, which lists every scanned kind.
    reports: kube::Client,
    /// The cleanup controller, which lists what its policies name and
    /// deletes.
    cleanup: kube::Client,
}

/// Cluster mode's running parts: the stores behind the resolver chain,
/// the policy sync, the writers of admission's side effects.
struct Cluster {
    view: Arc<dyn ClusterView>,
    clients: Clients,
    update_requests: Arc<dyn UpdateRequestSink>,
    admission_reports: Option<Arc<dyn AdmissionReportSink>>,
    events: Events,
    /// The policies' statuses the sync keeps, and the CEL policy kinds
    /// the API server serves.
    policy_statuses: (
        watch::Receiver<Arc<crate::cluster::policy_sync::Statuses>>,
        Vec<kube::discovery::ApiResource>,
    ),
    /// True once the stores synced and the policy set loaded.
    synced: watch::Receiver<bool>,
}

impl Cluster {
    async fn start(
        cluster: &ClusterOptions,
        deadline: Duration,
        publisher: Publisher,
        snapshot: &Arc<ArcSwap<crate::admission::policies::Snapshot>>,
        telemetry: &mut Telemetry,
    ) -> Result<Cluster> {
        use crate::cluster::api::ApiResolver;
        use crate::cluster::informer::{InformerResolver, ResolverChain};
        use crate::cluster::{client, policy_sync::PolicySync, stores::Stores};
        telemetry.metrics.registry_mut().register(
            "gavel_leader",
            "1 while this replica holds the Lease of a duty (lease label), else 0",
            cluster.lease.leading.clone(),
        );
        let queries = telemetry.metrics.client_queries.clone();
        let lookups = telemetry.metrics.lookups.clone();
        let o = &cluster.client;
        let named = |name: &'static str| client::client(o, name, o.qps, o.burst, queries.clone());
        let informers = named("informers").await?;
        let fallback = client::client(
            o,
            "fallback",
            o.fallback_qps,
            o.fallback_burst,
            queries.clone(),
        )
        .await?;
        let clients = Clients {
            controllers: named("controllers").await?,
            background: named("background").await?,
            reports: named("reports").await?,
            cleanup: named("cleanup").await?,
        };
        // The UpdateRequest writes get a client and token bucket of their
        // own: a burst of triggers must not starve the stores.
        let update_requests = Arc::new(UpdateRequestWriter::start(
            named("update-requests").await?,
            &cluster.update_requests,
            telemetry.background.clone(),
        ));
        let admission_reports = cluster.admission_reports.as_ref().map(|opts| {
            Arc::new(AdmissionReportWriter::start(
                clients.reports.clone(),
                snapshot.clone(),
                opts,
                telemetry.background.clone(),
            )) as Arc<dyn AdmissionReportSink>
        });
        let events = Events::start(
            clients.background.clone(),
            &cluster.events,
            telemetry.events_dropped.clone(),
        );
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
        stores
            .activity
            .register(telemetry.metrics.registry_mut(), &stores);
        let view = Arc::new(ResolverChain {
            service: crate::cluster::service::ServiceClient::new(
                cluster.fallback_cache.max_response_bytes,
                deadline,
            ),
            informer: InformerResolver::new(stores.clone()),
            global: global.clone(),
            api: ApiResolver::new(fallback, &cluster.fallback_cache, lookups.clone()),
            metrics: lookups,
        });
        let sync = PolicySync::new(publisher);
        let policy_statuses = (sync.statuses(), status_kinds);
        let debounce = cluster.debounce;
        let (tx, synced) = watch::channel(false);
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
        Ok(Cluster {
            view,
            clients,
            update_requests,
            admission_reports,
            events,
            policy_statuses,
            synced,
        })
    }
}

/// The serving certificate: the operator's files; in cluster mode without
/// them, the Secrets the leader maintains (a throwaway certificate until
/// the first is loaded, and not ready before); standalone, one generated
/// now.
struct ServingCertificate {
    resolver: Arc<tls::SwappableCert>,
    /// The operator's files, reloaded when they change.
    files: Option<tls::CertFiles>,
    /// The CA bundle the webhook configurations carry.
    ca_bundle: watch::Receiver<String>,
    /// Kept so that the bundle stays open when it is fixed.
    _ca_sender: watch::Sender<String>,
}

impl ServingCertificate {
    fn load(opts: &ServeOptions) -> Result<ServingCertificate> {
        let (ca_tx, ca_bundle) = watch::channel(String::new());
        let (cert, files) = match (&opts.tls_cert, &opts.tls_key) {
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
        Ok(ServingCertificate {
            resolver: Arc::new(tls::SwappableCert(ArcSwap::from_pointee(cert))),
            files,
            ca_bundle,
            _ca_sender: ca_tx,
        })
    }
}

/// The leader-only duties of cluster mode, each behind a Lease of its
/// own.
struct Duties<'a> {
    options: &'a ClusterOptions,
    state: &'a Arc<State>,
    background: BackgroundMetrics,
    cleanup: CleanupMetrics,
    stopping: watch::Receiver<bool>,
}

impl Duties<'_> {
    /// The Lease `name`'s leadership, given up when the server stops.
    fn elect(&self, client: &kube::Client, name: &str) -> watch::Receiver<bool> {
        crate::controllers::leader::elect(
            client.clone(),
            name,
            self.options.lease.clone(),
            self.stopping.clone(),
        )
    }

    /// Starts every duty; returns, when the certificate comes from the
    /// Secrets, whether a serving certificate was loaded from them.
    fn start(
        self,
        cluster: Cluster,
        certificate: &mut ServingCertificate,
        ca_out: &std::path::Path,
    ) -> Option<watch::Receiver<bool>> {
        use crate::controllers::{background, cleanup, policy_status, reports, webhooks};
        let Cluster {
            clients,
            events,
            policy_statuses: (statuses, cel_kinds),
            synced,
            ..
        } = cluster;
        let client = &clients.controllers;
        let serving = certificate
            .files
            .is_none()
            .then(|| self.certificates(client, certificate, ca_out));
        let (snapshot, view) = (self.state.snapshot.clone(), self.state.view.clone());
        // Like the webhooks: only once the policy set is loaded, or an
        // empty set would look like every policy deleted.
        let after_sync = |run: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
            let mut synced = synced.clone();
            tokio::spawn(async move {
                if synced.wait_for(|s| *s).await.is_ok() {
                    run.await;
                }
            });
        };
        let options = self.options;
        after_sync(Box::pin(background::run(
            clients.background.clone(),
            options.background.clone(),
            snapshot.clone(),
            view.clone(),
            self.elect(client, "gavel-background"),
            self.background.clone(),
            events.clone(),
        )));
        if !options.reports.interval.is_zero() {
            after_sync(Box::pin(reports::run(
                clients.reports.clone(),
                options.reports.clone(),
                snapshot.clone(),
                view.clone(),
                self.elect(client, "gavel-reports"),
                self.background.clone(),
            )));
        }
        tokio::spawn(cleanup::run(
            clients.cleanup.clone(),
            options.cleanup.clone(),
            view,
            self.elect(client, "gavel-cleanup"),
            self.cleanup.clone(),
            events,
        ));
        let w = &options.webhook;
        tokio::spawn(policy_status::run(
            policy_status::StatusDuty {
                client: client.clone(),
                cel_kinds,
                webhooks: (w.validating_name.clone(), w.mutating_name.clone()),
            },
            statuses,
            self.elect(client, "gavel-policy-status"),
            Duration::from_secs(60),
        ));
        let webhook = webhooks::WebhookOptions {
            validating_name: w.validating_name.clone(),
            mutating_name: w.mutating_name.clone(),
            policy_validating_name: w.policy_validating_name.clone(),
            target: w.target.clone(),
            ca_bundle: certificate.ca_bundle.clone(),
            timeout_seconds: w.timeout_seconds,
            selection: w.selection.clone(),
            resync: w.resync,
            owner_cluster_role: w.owner_cluster_role.clone(),
        };
        // Registered from the synced policy set only, never from an empty
        // one that merely has not loaded yet.
        after_sync(Box::pin(webhooks::run(
            client.clone(),
            webhook,
            snapshot,
            self.elect(client, "gavel-webhooks"),
        )));
        serving
    }

    /// The certificate Secrets: watched on every replica (the serving
    /// certificate swapped in, the CA bundle written to `ca_out` for
    /// clients outside the cluster and probes), maintained by the leader
    /// of `gavel-certs`. Returns whether a serving certificate loaded.
    fn certificates(
        &self,
        client: &kube::Client,
        certificate: &mut ServingCertificate,
        ca_out: &std::path::Path,
    ) -> watch::Receiver<bool> {
        use crate::controllers::certificates;
        let watched = certificates::watch_secrets(
            client.clone(),
            &self.options.certificates,
            certificate.resolver.clone(),
        );
        certificate.ca_bundle = watched.ca_bundle;
        let mut bundle = certificate.ca_bundle.clone();
        let ca_out = ca_out.to_path_buf();
        tokio::spawn(async move {
            while bundle.changed().await.is_ok() {
                let pem = bundle.borrow_and_update().clone();
                let staged = ca_out.with_extension("tmp");
                let written =
                    std::fs::write(&staged, pem).and_then(|()| std::fs::rename(&staged, &ca_out));
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
        tokio::spawn(certificates::run(
            client.clone(),
            self.options.certificates.clone(),
            self.elect(client, "gavel-certs"),
            watched.changed,
        ));
        watched.serving
    }
}

/// Polls the policy directory (standalone) and the certificate files
/// (when the operator gave them).
fn watch_files(
    mut store: Option<PolicyStore>,
    mut cert_files: Option<tls::CertFiles>,
    resolver: Arc<tls::SwappableCert>,
    poll: Duration,
) {
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
}

/// Marks the server ready: standalone at once; in cluster mode once the
/// policy set loaded and (certificates from Secrets) a serving
/// certificate did.
fn become_ready(
    state: &Arc<State>,
    synced: Option<watch::Receiver<bool>>,
    serving: Option<watch::Receiver<bool>>,
) {
    let Some(mut synced) = synced else {
        state.ready.store(true, Ordering::Relaxed);
        return;
    };
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
