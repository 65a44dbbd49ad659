//! The kube client: kubeconfig or in-cluster configuration, a client-side
//! token bucket (kube has none built in) and a count of every API request
//! under Kyverno's `kyverno_client_queries_total`.

use http::Request;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};
use tower::{Layer, Service};

/// Where the cluster is and how hard gavel may call it.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// A kubeconfig file; without it, the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    /// Sustained requests per second of the client feeding the stores.
    pub qps: f64,
    /// Requests allowed at once above the sustained rate.
    pub burst: u32,
    /// The same pair for the fallback client near the admission path.
    pub fallback_qps: f64,
    pub fallback_burst: u32,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryLabels {
    /// Which of gavel's clients made the request (`informers`, `fallback`, ...).
    pub client_type: &'static str,
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub operation: &'static str,
    /// kyverno-compat: Kyverno labels the Kind; gavel sees only the path,
    /// so this is the resource (plural) name the request addressed.
    pub resource_kind: String,
    pub resource_namespace: String,
}

pub type QueryCounter = Family<QueryLabels, Counter>;

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("using kubeconfig {0}: {1}")]
    Kubeconfig(String, #[source] kube::config::KubeconfigError),
    #[error("in-cluster configuration: {0}")]
    InCluster(#[source] kube::config::InClusterError),
    #[error("the user agent {0:?} is not a valid header")]
    UserAgent(String),
    #[error("building the kube client: {0}")]
    Build(#[source] kube::Error),
}

/// Builds a client named `client_type` with its own token bucket.
pub async fn client(
    opts: &ClientOptions,
    client_type: &'static str,
    qps: f64,
    burst: u32,
    queries: QueryCounter,
) -> Result<kube::Client, ClientError> {
    let mut config = match &opts.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| ClientError::Kubeconfig(path.display().to_string(), e))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| ClientError::Kubeconfig(path.display().to_string(), e))?
        }
        None => kube::Config::incluster().map_err(ClientError::InCluster)?,
    };
    // Each client names itself, as Kubernetes' own components do, so an
    // audit log tells the admission path's fallback from the stores and
    // the leader's duties.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&user_agent(client_type))
            .map_err(|_| ClientError::UserAgent(user_agent(client_type)))?,
    ));
    let layer = LimitLayer {
        bucket: Arc::new(TokenBucket::new(qps, burst)),
        client_type,
        queries,
    };
    Ok(kube::client::ClientBuilder::try_from(config)
        .map_err(ClientError::Build)?
        .with_layer(&layer)
        .build())
}

/// `gavel/<version> (<os>/<arch>) <client type>`, the shape of
/// Kubernetes' own user agents (`kube-controller-manager/v1.x (linux/amd64) ...`).
pub fn user_agent(client_type: &str) -> String {
    format!(
        "gavel/v{} ({}/{}) {client_type}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// A token bucket: `burst` tokens, refilled at `qps` per second. A qps of
/// zero or less means no limit.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: u32) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes a token, or says how long until one is there.
    pub fn try_take(&self, now: Instant) -> Result<(), Duration> {
        if self.qps <= 0.0 {
            return Ok(());
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last) = *state;
        let elapsed = now.saturating_duration_since(last).as_secs_f64();
        let tokens = (tokens + elapsed * self.qps).min(self.burst);
        if tokens >= 1.0 {
            *state = (tokens - 1.0, now);
            Ok(())
        } else {
            *state = (tokens, now);
            Err(Duration::from_secs_f64((1.0 - tokens) / self.qps))
        }
    }
}

#[derive(Clone)]
struct LimitLayer {
    bucket: Arc<TokenBucket>,
    client_type: &'static str,
    queries: QueryCounter,
}

impl<S> Layer<S> for LimitLayer {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            bucket: self.bucket.clone(),
            client_type: self.client_type,
            queries: self.queries.clone(),
            wait: None,
            token: false,
        }
    }
}

/// Waits for a token in `poll_ready` (so the kube client's buffer holds
/// requests back instead of sending them), then counts each call.
struct Limited<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    client_type: &'static str,
    queries: QueryCounter,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A token has been taken for the next call.
    token: bool,
}

impl<S, B> Service<Request<B>> for Limited<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        while !self.token {
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            match self.bucket.try_take(Instant::now()) {
                Ok(()) => self.token = true,
                Err(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> S::Future {
        self.token = false;
        let (operation, resource, namespace) = describe(req.method(), req.uri());
        self.queries
            .get_or_create(&QueryLabels {
                client_type: self.client_type,
                operation,
                resource_kind: resource,
                resource_namespace: namespace,
            })
            .inc();
        self.inner.call(req)
    }
}

/// (operation, resource, namespace) of an API request, from its method and path.
pub fn describe(method: &http::Method, uri: &http::Uri) -> (&'static str, String, String) {
    let segs: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    // Skip /api/{v} or /apis/{g}/{v}.
    let rest: &[&str] = match segs.as_slice() {
        ["api", _, rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => &[],
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..]
            if !tail.is_empty() && !matches!(tail[0], "status" | "finalize") =>
        {
            (ns.to_string(), tail)
        }
        _ => (String::new(), rest),
    };
    let resource = rest.first().map_or_else(String::new, |r| r.to_string());
    let named = rest.len() > 1;
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let operation = match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    };
    (operation, resource, namespace)
}

/// A read or a write the API server refused or failed: what it was, the
/// answer in a line ([`short`]) and the HTTP status, when it answered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct ApiFailure {
    pub what: String,
    pub reason: String,
    pub code: Option<u16>,
}

impl ApiFailure {
    /// The failure of the call on `what`.
    pub fn new(what: impl Into<String>, e: &kube::Error) -> ApiFailure {
        ApiFailure {
            what: what.into(),
            reason: short(e),
            code: match e {
                kube::Error::Api(status) => Some(status.code),
                _ => None,
            },
        }
    }

    /// The `reason` label of a failure metric: refusals an operator acts
    /// on (RBAC, throttling) apart from conflicts and unreachable servers.
    pub fn metric_label(&self) -> &'static str {
        match self.code {
            Some(401 | 403) => "forbidden",
            Some(409) => "conflict",
            Some(429) => "throttled",
            Some(_) => "api_refused",
            None => "api_unreachable",
        }
    }
}

/// An API error as a line: the API server's own message, not the whole
/// Status.
pub fn short(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}", s.code, s.message),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_failures_say_the_call_and_label_the_status() {
        let refused = |code| {
            let status = kube::core::Status::failure("no", "Forbidden").with_code(code);
            ApiFailure::new("listing pods", &kube::Error::Api(status.boxed()))
        };
        assert_eq!(refused(403).to_string(), "listing pods: 403 no");
        let labels: Vec<_> = [403, 409, 429, 500]
            .map(|code| refused(code).metric_label())
            .to_vec();
        assert_eq!(
            labels,
            ["forbidden", "conflict", "throttled", "api_refused"]
        );
        let unreachable = ApiFailure::new(
            "listing pods",
            &kube::Error::LinesCodecMaxLineLengthExceeded,
        );
        assert_eq!(unreachable.metric_label(), "api_unreachable");
    }

    #[test]
    fn bucket_allows_a_burst_then_the_rate() {
        let bucket = TokenBucket::new(10.0, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(bucket.try_take(t0).is_ok());
        }
        let wait = bucket.try_take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        assert!(bucket.try_take(t0 + Duration::from_millis(100)).is_ok());
        assert!(bucket.try_take(t0 + Duration::from_millis(100)).is_err());
        // Unlimited.
        let free = TokenBucket::new(0.0, 1);
        assert!((0..1000).all(|_| free.try_take(t0).is_ok()));
    }

    #[test]
    fn requests_are_described() {
        use http::Method;
        for (method, uri, want) in [
            (
                Method::GET,
                "/api/v1/namespaces/a/configmaps/x",
                ("get", "configmaps", "a"),
            ),
            (
                Method::GET,
                "/api/v1/configmaps?watch=true&resourceVersion=5",
                ("watch", "configmaps", ""),
            ),
            (
                Method::GET,
                "/apis/kyverno.io/v1/clusterpolicies",
                ("list", "clusterpolicies", ""),
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/a",
                ("update", "namespaces", ""),
            ),
            (
                Method::PATCH,
                "/apis/coordination.k8s.io/v1/namespaces/k/leases/l",
                ("patch", "leases", "k"),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/a/pods",
                ("deletecollection", "pods", "a"),
            ),
        ] {
            let uri: http::Uri = uri.parse().unwrap();
            let (op, res, ns) = describe(&method, &uri);
            assert_eq!((op, res.as_str(), ns.as_str()), want, "{uri}");
        }
    }
}
