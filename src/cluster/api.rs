//! The API fallback: what the informer stores do not hold is fetched from
//! the API server by a client with its own rate limit, behind a moka cache
//! (bounded, with a TTL; concurrent misses for one key make one call).
//! The engine asks synchronously, so a miss blocks its worker thread for
//! the call (`block_in_place` on the multi-threaded runtime); hits never
//! wait.

use crate::context::{ApiCallRequest, ResolveError};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LookupLabels {
    /// informer, cache or api.
    pub source: &'static str,
}

/// Context lookups by where they were served from, and the latency of
/// the calls that reached the API server.
#[derive(Clone)]
pub struct LookupMetrics {
    pub lookups: Family<LookupLabels, Counter>,
    pub fallback_seconds: Histogram,
}

impl Default for LookupMetrics {
    fn default() -> LookupMetrics {
        LookupMetrics {
            lookups: Family::default(),
            fallback_seconds: Histogram::new([
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
        }
    }
}

impl LookupMetrics {
    pub fn count(&self, source: &'static str) {
        self.lookups.get_or_create(&LookupLabels { source }).inc();
    }
}

/// How the fallback cache is bounded.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    pub ttl: Duration,
    pub capacity: u64,
    /// Responses larger than this are errors (Kyverno's `--maxAPICallResponseLength`).
    pub max_response_bytes: usize,
}

pub struct ApiResolver {
    client: kube::Client,
    cache: moka::future::Cache<String, Arc<Value>>,
    metrics: LookupMetrics,
    max_response_bytes: usize,
}

impl ApiResolver {
    pub fn new(client: kube::Client, opts: &CacheOptions, metrics: LookupMetrics) -> ApiResolver {
        ApiResolver {
            client,
            cache: moka::future::Cache::builder()
                .max_capacity(opts.capacity)
                .time_to_live(opts.ttl)
                .build(),
            metrics,
            max_response_bytes: opts.max_response_bytes,
        }
    }

    /// A ConfigMap by namespace and name.
    pub fn config_map(&self, namespace: &str, name: &str) -> Result<Value, ResolveError> {
        let path = format!("/api/v1/namespaces/{namespace}/configmaps/{name}");
        self.cached_get(&path)
    }

    /// An `apiCall` entry's `urlPath`: GET through the cache, POST straight through.
    pub fn api_call(&self, call: &ApiCallRequest) -> Result<Value, ResolveError> {
        let Some(path) = call.url_path.as_deref() else {
            return Err(ResolveError::Failed(
                "unsupported: apiCall.service (calls to services outside the API server)".into(),
            ));
        };
        match call.method.as_str() {
            "GET" => self.cached_get(path),
            "POST" => {
                let request = url_path_request(path, call)?;
                self.metrics.count("api");
                block_on(self.fetch(request)).and_then(|r| r)
            }
            other => Err(ResolveError::Failed(format!(
                "apiCall: unsupported method {other:?}"
            ))),
        }
    }

    fn cached_get(&self, path: &str) -> Result<Value, ResolveError> {
        // A hit completes without waiting: take it here, without lending
        // the worker thread to block_in_place.
        use futures_util::FutureExt;
        if let Some(Some(hit)) = self.cache.get(path).now_or_never() {
            self.metrics.count("cache");
            return Ok((*hit).clone());
        }
        let loaded = Arc::new(AtomicBool::new(false));
        let init = {
            let loaded = loaded.clone();
            let request = http::Request::get(path)
                .body(Vec::new())
                .map_err(|e| ResolveError::Failed(e.to_string()))?;
            let fetch = self.fetch(request);
            async move {
                loaded.store(true, Ordering::Relaxed);
                fetch.await.map(Arc::new)
            }
        };
        let result = block_on(self.cache.try_get_with(path.to_string(), init))?;
        let source = if loaded.load(Ordering::Relaxed) {
            "api"
        } else {
            "cache"
        };
        self.metrics.count(source);
        result
            .map(|v| (*v).clone())
            .map_err(|e: Arc<ResolveError>| (*e).clone())
    }

    fn fetch(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> impl std::future::Future<Output = Result<Value, ResolveError>> + Send + 'static {
        let client = self.client.clone();
        let histogram = self.metrics.fallback_seconds.clone();
        let max_bytes = self.max_response_bytes;
        async move {
            let started = Instant::now();
            let result = fetch_json(&client, request, max_bytes).await;
            histogram.observe(started.elapsed().as_secs_f64());
            result
        }
    }
}

/// The API request of an `apiCall` to `path` (GET, or POST with the body
/// built from `data`).
pub(crate) fn url_path_request(
    path: &str,
    call: &ApiCallRequest,
) -> Result<http::Request<Vec<u8>>, ResolveError> {
    let request = match call.method.as_str() {
        "GET" => http::Request::get(path).body(Vec::new()),
        "POST" => {
            let body = serde_json::to_vec(call.body.as_ref().unwrap_or(&Value::Null))
                .map_err(|e| ResolveError::Failed(e.to_string()))?;
            http::Request::post(path)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body)
        }
        other => {
            return Err(ResolveError::Failed(format!(
                "apiCall: unsupported method {other:?}"
            )));
        }
    };
    request.map_err(|e| ResolveError::Failed(e.to_string()))
}

/// Sends `request` to the API server and reads a JSON answer of at most
/// `max_bytes`, without managedFields.
pub(crate) async fn fetch_json(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
    max_bytes: usize,
) -> Result<Value, ResolveError> {
    let path = request.uri().path().to_string();
    let text = client
        .request_text(request)
        .await
        .map_err(|e| lookup_error(&path, e))?;
    if text.len() > max_bytes {
        return Err(ResolveError::Failed(format!(
            "{path}: response of {} bytes exceeds the limit of {max_bytes}",
            text.len()
        )));
    }
    let mut value: Value = serde_json::from_str(&text)
        .map_err(|e| ResolveError::Failed(format!("{path}: response is not JSON: {e}")))?;
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    Ok(value)
}

/// The lookup error of a failed API request to `path`, by its cause.
fn lookup_error(path: &str, e: kube::Error) -> ResolveError {
    match &e {
        kube::Error::Api(s) if s.code == 404 => {
            ResolveError::NotFound(format!("{path}: not found"))
        }
        kube::Error::Api(s) => ResolveError::of_status(s.code, format!("{path}: {e}")),
        _ if is_timeout(&e) => ResolveError::TimedOut(format!("{path}: {e}")),
        _ => ResolveError::Failed(format!("{path}: {e}")),
    }
}

/// Whether a client error is a timeout (of the connection, or of the
/// request the client's timeouts bound).
fn is_timeout(e: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        source = err.source();
    }
    false
}

/// Runs `fut` to completion from synchronous engine code. Only a
/// multi-threaded runtime can lend its worker; anywhere else the lookup
/// fails with a clear error rather than deadlocking.
pub(crate) fn block_on<F: std::future::Future>(fut: F) -> Result<F::Output, ResolveError> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            Ok(tokio::task::block_in_place(|| handle.block_on(fut)))
        }
        _ => Err(ResolveError::Failed(
            "the API fallback needs the server's multi-threaded runtime".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose every request fails: only the cache can answer.
    fn unreachable_client() -> kube::Client {
        let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, std::io::Error>(std::io::Error::other(
                "no API server in this test",
            ))
        });
        kube::Client::new(service, "default")
    }

    /// A failed lookup says why, by variant: what callers branch on.
    #[test]
    fn lookup_errors_name_their_cause() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // A client is made on a runtime.
        let _entered = runtime.enter();
        let answering = |code: u16| {
            let service =
                tower::service_fn(move |_: http::Request<kube::client::Body>| async move {
                    let status = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                    "status": "Failure", "message": "no", "reason": "x", "code": code});
                    http::Response::builder()
                        .status(code)
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&status).unwrap(),
                        ))
                        .map_err(std::io::Error::other)
                });
            kube::Client::new(service, "default")
        };
        let timing_out = {
            let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
                Err::<http::Response<kube::client::Body>, std::io::Error>(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "deadline",
                ))
            });
            kube::Client::new(service, "default")
        };
        let lookup = |client: kube::Client| {
            let request = http::Request::get("/api/v1/namespaces/a/configmaps/b")
                .body(Vec::new())
                .unwrap();
            runtime
                .block_on(fetch_json(&client, request, 1 << 20))
                .unwrap_err()
        };
        let not_found = lookup(answering(404));
        assert_eq!(
            not_found,
            ResolveError::NotFound("/api/v1/namespaces/a/configmaps/b: not found".into())
        );
        for (code, label) in [
            (403, "forbidden"),
            (401, "forbidden"),
            (429, "throttled"),
            (504, "timed_out"),
            (500, "failed"),
        ] {
            assert_eq!(lookup(answering(code)).metric_label(), label, "{code}");
        }
        assert_eq!(lookup(timing_out).metric_label(), "timed_out");
        assert_eq!(lookup(unreachable_client()).metric_label(), "failed");
    }

    #[test]
    fn a_cache_hit_needs_no_blocking() {
        // A current-thread runtime cannot lend its worker (block_in_place
        // would fail): a hit must be answered without it.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let metrics = LookupMetrics::default();
            let opts = CacheOptions {
                ttl: Duration::from_secs(60),
                capacity: 10,
                max_response_bytes: 1000,
            };
            let resolver = ApiResolver::new(unreachable_client(), &opts, metrics.clone());
            let path = "/api/v1/namespaces/default/configmaps/flags";
            let miss = resolver.config_map("default", "flags").unwrap_err();
            assert!(miss.to_string().contains("multi-threaded"), "{miss}");
            let value = serde_json::json!({"data": {"frozen": "no"}});
            resolver
                .cache
                .insert(path.to_string(), Arc::new(value.clone()))
                .await;
            assert_eq!(resolver.config_map("default", "flags").unwrap(), value);
            let hits = metrics
                .lookups
                .get_or_create(&LookupLabels { source: "cache" })
                .get();
            assert_eq!(hits, 1);
        });
    }
}
