//! `gavel serve`: the admission webhook over HTTPS.
//!
//! Data flow: [`tls`] terminates TLS (HTTP/2 or HTTP/1.1 by ALPN), hyper
//! reads a body of at most [`handler::MAX_BODY`], [`handler::admit`] decodes
//! the AdmissionReview ([`review`]), evaluates it against the current
//! [`policies::Snapshot`] and encodes the verdict. Background tasks poll the
//! policy directory and the certificate files; SIGTERM/SIGINT drain the
//! server gracefully.

pub mod handler;
pub mod policies;
pub mod review;
pub mod tls;
pub mod yaml_text;

use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use bytes::Bytes;
use handler::{MAX_BODY, Route};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use policies::{PolicyStore, Snapshot};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
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
    pub grace: Duration,
    pub poll: Duration,
    pub max_connections: usize,
}

/// Counters exposed on `/metrics`.
#[derive(Default)]
pub struct Metrics {
    allowed: AtomicU64,
    denied: AtomicU64,
    malformed: AtomicU64,
    review_nanos: AtomicU64,
}

/// What every connection shares.
pub struct State {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub ready: AtomicBool,
    pub metrics: Metrics,
    pub policies_rejected: Arc<AtomicU64>,
}

impl State {
    fn render_metrics(&self) -> String {
        let m = &self.metrics;
        let (allowed, denied) = (
            m.allowed.load(Ordering::Relaxed),
            m.denied.load(Ordering::Relaxed),
        );
        let snapshot = self.snapshot.load();
        format!(
            "# TYPE kyverno_admission_requests_total counter\n\
             kyverno_admission_requests_total{{request_allowed=\"true\"}} {allowed}\n\
             kyverno_admission_requests_total{{request_allowed=\"false\"}} {denied}\n\
             # TYPE kyverno_admission_review_duration_seconds summary\n\
             kyverno_admission_review_duration_seconds_sum {}\n\
             kyverno_admission_review_duration_seconds_count {}\n\
             # TYPE gavel_requests_malformed_total counter\n\
             gavel_requests_malformed_total {}\n\
             # TYPE gavel_policies_rejected_total counter\n\
             gavel_policies_rejected_total {}\n\
             # TYPE gavel_policy_snapshot_generation gauge\n\
             gavel_policy_snapshot_generation {}\n\
             # TYPE gavel_policies gauge\n\
             gavel_policies {}\n",
            m.review_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            allowed + denied,
            m.malformed.load(Ordering::Relaxed),
            self.policies_rejected.load(Ordering::Relaxed),
            snapshot.generation,
            snapshot.policies.len(),
        )
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Serves one HTTP request. Never panics on input: every failure becomes a status.
pub async fn serve_request(
    req: Request<Incoming>,
    state: Arc<State>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let route = handler::route(req.uri().path());
    Ok(match route {
        Route::Liveness => text(StatusCode::OK, "ok"),
        Route::Readiness if state.ready.load(Ordering::Relaxed) => text(StatusCode::OK, "ready"),
        Route::Readiness => text(StatusCode::SERVICE_UNAVAILABLE, "not ready"),
        Route::Metrics => text(StatusCode::OK, state.render_metrics()),
        Route::NotFound => text(StatusCode::NOT_FOUND, "not found"),
        Route::Validate(_) | Route::Mutate(_) => {
            if req.method() != Method::POST {
                return Ok(text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "POST an AdmissionReview",
                ));
            }
            review_request(route, req, &state).await
        }
    })
}

async fn review_request(
    route: Route,
    req: Request<Incoming>,
    state: &State,
) -> Response<Full<Bytes>> {
    let too_large = || {
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("AdmissionReview body over {MAX_BODY} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        state.metrics.malformed.fetch_add(1, Ordering::Relaxed);
        return too_large();
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            state.metrics.malformed.fetch_add(1, Ordering::Relaxed);
            return too_large();
        }
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("reading body: {e}")),
    };
    let started = Instant::now();
    // One snapshot for the whole request, however the set changes meanwhile.
    let snapshot = state.snapshot.load_full();
    match handler::admit(route, &body, &snapshot) {
        Ok(outcome) => {
            let counter = if outcome.allowed {
                &state.metrics.allowed
            } else {
                &state.metrics.denied
            };
            counter.fetch_add(1, Ordering::Relaxed);
            state
                .metrics
                .review_nanos
                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            tracing::debug!(
                kind = outcome.kind,
                namespace = outcome.namespace,
                operation = outcome.operation,
                allowed = outcome.allowed,
                "review"
            );
            let mut r = Response::new(Full::new(Bytes::from(outcome.body)));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => {
            state.metrics.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "rejected review");
            text(StatusCode::BAD_REQUEST, e.to_string())
        }
    }
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
    let mut store = PolicyStore::new(&opts.policies);
    for r in store
        .refresh()
        .with_context(|| format!("reading policies from {}", opts.policies.display()))?
    {
        tracing::error!(path = %r.path.display(), reason = r.reason, "policy rejected");
    }
    let state = Arc::new(State {
        snapshot: store.handle(),
        ready: AtomicBool::new(false),
        metrics: Metrics::default(),
        policies_rejected: store.rejected.clone(),
    });
    {
        let s = state.snapshot.load();
        tracing::info!(
            policies = s.policies.len(),
            exceptions = s.exceptions.len(),
            dir = %opts.policies.display(),
            "policies loaded"
        );
    }
    if state
        .snapshot
        .load()
        .policies
        .iter()
        .any(|p| !p.has_validate())
    {
        tracing::warn!(
            "mutate is not implemented yet: /mutate answers allowed with no patch, and non-validate rules are not evaluated"
        );
    }

    let (cert, mut cert_files) = match (&opts.tls_cert, &opts.tls_key) {
        (Some(c), Some(k)) => {
            let mut files = tls::CertFiles::new(c.clone(), k.clone());
            (files.load()?, Some(files))
        }
        (None, None) => {
            let g = tls::generate(&opts.tls_san)?;
            std::fs::write(&opts.ca_out, &g.ca_pem)
                .with_context(|| format!("writing the CA to {}", opts.ca_out.display()))?;
            tracing::info!(ca = %opts.ca_out.display(), sans = ?opts.tls_san, "generated a self-signed CA and serving certificate");
            (
                tls::certified_key(g.cert_pem.as_bytes(), g.key_pem.as_bytes())?,
                None,
            )
        }
        _ => anyhow::bail!("--tls-cert and --tls-key go together"),
    };
    let resolver = Arc::new(tls::SwappableCert(ArcSwap::from_pointee(cert)));
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(resolver.clone())?));

    // Background: policy directory and certificate files.
    let poll = opts.poll;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(poll);
        loop {
            tick.tick().await;
            match store.refresh() {
                Ok(rejected) => {
                    for r in rejected {
                        tracing::error!(path = %r.path.display(), reason = r.reason, "policy rejected; its last good version stays in force");
                    }
                }
                Err(e) => tracing::error!(error = %e, "rescanning policies"),
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
    state.ready.store(true, Ordering::Relaxed);

    let connections = Arc::new(Semaphore::new(opts.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(256);
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, _peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let Ok(permit) = connections.clone().acquire_owned().await else { break };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let state = state.clone();
                let builder = builder.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    let service = hyper::service::service_fn(move |req| serve_request(req, state.clone()));
                    let conn = builder.serve_connection(TokioIo::new(tls), service).into_owned();
                    if let Err(e) = watcher.watch(conn).await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    drop(permit);
                });
            }
            _ = &mut shutdown => break,
        }
    }
    // Readiness goes false first, then in-flight requests get the grace period.
    state.ready.store(false, Ordering::Relaxed);
    drop(listener);
    tracing::info!(grace = ?opts.grace, "shutting down");
    match tokio::time::timeout(opts.grace, graceful.shutdown()).await {
        Ok(()) => tracing::info!("all connections closed"),
        Err(_) => tracing::warn!("grace period over; closing remaining connections"),
    }
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
