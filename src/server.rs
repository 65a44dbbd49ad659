//! The HTTPS transport of the admission webhook, and nothing else: TLS
//! ([`tls`]: HTTP/2 or HTTP/1.1 by ALPN, certificates swapped whole),
//! connections and their limits ([`connections`]), routes, bodies of at
//! most [`MAX_BODY`] handed to [`crate::admission::pipeline::admit`]
//! against the current snapshot, `/metrics` ([`metrics`]), health, and the
//! graceful drain on SIGTERM/SIGINT. `crate::cli::serve` puts it together
//! with the policy sources and the controllers.

pub mod connections;
pub mod metrics;
pub mod tls;

use crate::admission::pipeline::{self, Webhook};
use crate::admission::policies::Snapshot;
use crate::admission::update_requests::UpdateRequestSink;
use crate::context::ClusterView;
use crate::policy::FailurePolicy;
use arc_swap::ArcSwap;
use bytes::Bytes;
pub use connections::{ConnectionLimits, Drain, accept_loop};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use metrics::{AdmissionLabels, Metrics};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What every connection shares.
pub struct State {
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub ready: AtomicBool,
    pub metrics: Metrics,
    /// How long a review may take, from the first byte of its body.
    pub deadline: Duration,
    /// Context sources and namespace labels: the informer stores in
    /// cluster mode, nothing standalone.
    pub view: Arc<dyn ClusterView>,
    /// Where admitted requests leave their generate work (the cluster's
    /// UpdateRequest writer; nothing standalone).
    pub update_requests: Arc<dyn UpdateRequestSink>,
    /// Where admitted reviews' results go for PolicyReports (the cluster's
    /// report writer); None: not computed.
    pub admission_reports: Option<Arc<dyn crate::admission::reports::AdmissionReportSink>>,
    /// Where reviews' Events go (the cluster's event writer; nothing
    /// standalone).
    pub events: crate::cluster::events::Events,
}

/// Largest AdmissionReview body accepted (the API server's own limit is 3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/validate` and `/mutate`, or `/validate/fail|ignore` and
    /// `/mutate/fail|ignore` for the policies of one failurePolicy.
    Admission(Webhook),
    Liveness,
    Readiness,
    Metrics,
    NotFound,
}

pub fn route(path: &str) -> Route {
    let with_policy = |rest: &str| match rest {
        "" => Some(None),
        "/fail" => Some(Some(FailurePolicy::Fail)),
        "/ignore" => Some(Some(FailurePolicy::Ignore)),
        _ => None,
    };
    if let Some(rest) = path.strip_prefix("/validate")
        && let Some(p) = with_policy(rest)
    {
        return Route::Admission(Webhook::Validate(p));
    }
    if let Some(rest) = path.strip_prefix("/mutate")
        && let Some(p) = with_policy(rest)
    {
        return Route::Admission(Webhook::Mutate(p));
    }
    match path {
        "/policyvalidate" => Route::Admission(Webhook::PolicyValidation),
        "/verifyttl" => Route::Admission(Webhook::TtlValidation),
        "/health/liveness" => Route::Liveness,
        "/health/readiness" => Route::Readiness,
        "/metrics" => Route::Metrics,
        _ => Route::NotFound,
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
    let route = route(req.uri().path());
    Ok(match route {
        Route::Liveness => text(StatusCode::OK, "ok"),
        Route::Readiness if state.ready.load(Ordering::Relaxed) => text(StatusCode::OK, "ready"),
        Route::Readiness => text(StatusCode::SERVICE_UNAVAILABLE, "not ready"),
        Route::Metrics => {
            let mut r = text(StatusCode::OK, state.metrics.render());
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            r
        }
        Route::NotFound => text(StatusCode::NOT_FOUND, "not found"),
        Route::Admission(webhook) => {
            if req.method() != Method::POST {
                return Ok(text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "POST an AdmissionReview",
                ));
            }
            // Boxed: a review's future holds kilobytes of state, which
            // every layer above (hyper's service, the connection's task)
            // would otherwise move a few times per request.
            Box::pin(review_request(webhook, req, &state)).await
        }
    })
}

async fn review_request(
    webhook: Webhook,
    req: Request<Incoming>,
    state: &State,
) -> Response<Full<Bytes>> {
    let deadline = tokio::time::Instant::now() + state.deadline;
    let body = match read_body(req, state, deadline).await {
        Ok(body) => body,
        Err(answer) => return answer,
    };
    let started = Instant::now();
    // One snapshot for the whole request, however the set changes
    // meanwhile. A guard rather than a clone of the Arc: the clone would
    // write the shared reference count, a cache line every core fights
    // over, twice per request.
    let snapshot = state.snapshot.load();
    let mut admitted = pipeline::admit_reporting(
        webhook,
        &body,
        &snapshot,
        Some(deadline.into_std()),
        &*state.view,
        state.admission_reports.is_some(),
    );
    if let Ok(outcome) = &mut admitted
        && let (Some(sink), Some(results)) = (&state.admission_reports, outcome.report.take())
    {
        // The results name policies by their place in this snapshot; the
        // writer holds it until they are written.
        sink.submit(Arc::clone(&snapshot), results);
    }
    // Not held across the wait below.
    drop(snapshot);
    match admitted {
        Ok(mut outcome) => {
            for event in std::mem::take(&mut outcome.events) {
                state.events.admission(event);
            }
            if !outcome.update_requests.is_empty() {
                // The generate work is in the API server before the answer
                // is (Kyverno writes it after answering, and loses it when
                // killed in between); past the deadline the answer goes out
                // and the write goes on.
                let written = state
                    .update_requests
                    .submit(std::mem::take(&mut outcome.update_requests));
                if tokio::time::timeout_at(deadline, written).await.is_err() {
                    tracing::warn!(
                        "UpdateRequests not yet written at the request deadline; answering anyway"
                    );
                }
            }
            answered(webhook, outcome, state, started)
        }
        Err(e) => {
            state.metrics.malformed.inc();
            tracing::warn!(error = %e, "rejected review");
            text(StatusCode::BAD_REQUEST, e.to_string())
        }
    }
}

/// A review's body, read within the deadline and [`MAX_BODY`]; otherwise
/// the answer to the request.
async fn read_body(
    req: Request<Incoming>,
    state: &State,
    deadline: tokio::time::Instant,
) -> Result<Bytes, Response<Full<Bytes>>> {
    // The answer goes before the whole body is read. Dropping the rest
    // would reset an HTTP/2 stream (clients then report the reset, not the
    // 413) and close an HTTP/1.1 connection, so the rest is read and thrown
    // away in the background, within bounds.
    let too_large = |rest: Incoming| {
        state.metrics.malformed.inc();
        tokio::spawn(discard(rest));
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
    let mut incoming = req.into_body();
    if declared.is_some_and(|n| n > MAX_BODY) {
        return Err(too_large(incoming));
    }
    // A body that arrives in one frame (most reviews) is kept as it came;
    // one in several is gathered into one buffer. Written out rather than
    // http-body-util's `Limited` and `collect` (the bare server's): those
    // cost 0.5-1.6k instructions more per request (callgrind, step 19),
    // and the limit must leave `incoming` to `too_large`.
    let mut body = Bytes::new();
    let mut gathered: Option<bytes::BytesMut> = None;
    let read = async {
        while let Some(frame) = incoming.frame().await {
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            let len = match &mut gathered {
                Some(all) => {
                    all.extend_from_slice(&data);
                    all.len()
                }
                None if body.is_empty() => {
                    body = data;
                    body.len()
                }
                None => {
                    let size = body.len() + data.len();
                    let all = gathered.insert(bytes::BytesMut::with_capacity(
                        declared.unwrap_or(0).max(size),
                    ));
                    all.extend_from_slice(&body);
                    all.extend_from_slice(&data);
                    size
                }
            };
            if len > MAX_BODY {
                return Ok(false);
            }
        }
        Ok::<_, hyper::Error>(true)
    };
    let outcome = tokio::time::timeout_at(deadline, read).await;
    match outcome {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => return Err(too_large(incoming)),
        Ok(Err(e)) => return Err(text(StatusCode::BAD_REQUEST, format!("reading body: {e}"))),
        Err(_) => {
            return Err(text(
                StatusCode::REQUEST_TIMEOUT,
                "the body did not arrive before the request deadline",
            ));
        }
    }
    Ok(gathered.map_or(body, bytes::BytesMut::freeze))
}

/// The answer to a review that was decided, counted in the admission
/// metrics.
fn answered(
    webhook: Webhook,
    outcome: pipeline::Outcome,
    state: &State,
    started: Instant,
) -> Response<Full<Bytes>> {
    tracing::debug!(
        kind = outcome.kind,
        namespace = outcome.namespace,
        operation = outcome.operation,
        allowed = outcome.allowed,
        "review"
    );
    let operation = metrics::operation_label(&outcome.operation);
    state.metrics.admission(
        AdmissionLabels {
            request_allowed: if outcome.allowed { "true" } else { "false" },
            request_webhook: match webhook {
                Webhook::Mutate(_) => "MutatingWebhookConfiguration",
                Webhook::Validate(_) | Webhook::PolicyValidation | Webhook::TtlValidation => {
                    "ValidatingWebhookConfiguration"
                }
            },
            resource_kind: outcome.kind,
            resource_namespace: outcome.namespace,
            resource_request_operation: operation,
        },
        started.elapsed(),
    );
    let mut r = Response::new(Full::new(Bytes::from(outcome.body)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// How much of an oversized body is read and thrown away, and for how long,
/// before the stream is reset after all: an honest client's oversized
/// review is a few MiB; a hostile one must not hold a task forever.
const DISCARD_BYTES: usize = 64 * 1024 * 1024;
const DISCARD_TIME: Duration = Duration::from_secs(10);

/// Reads the rest of `body` and drops it (see `review_request`).
pub(crate) async fn discard(mut body: Incoming) {
    let drain = async {
        let mut read = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                read += data.len();
                if read > DISCARD_BYTES {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_TIME, drain).await;
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let validate = |p| Route::Admission(Webhook::Validate(p));
        assert_eq!(route("/validate"), validate(None));
        assert_eq!(route("/validate/fail"), validate(Some(FailurePolicy::Fail)));
        assert_eq!(
            route("/mutate/ignore"),
            Route::Admission(Webhook::Mutate(Some(FailurePolicy::Ignore)))
        );
        assert_eq!(route("/validate/other"), Route::NotFound);
        assert_eq!(route("/validatex"), Route::NotFound);
        assert_eq!(route("/health/readiness"), Route::Readiness);
    }
}
