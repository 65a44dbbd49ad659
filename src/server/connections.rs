//! The connections behind the webhook: accepted, handshaken, served over
//! HTTP/2 or HTTP/1.1, and closed. Every limit here holds on both protocols,
//! because the API server speaks HTTP/2 to a loopback or IP address and
//! HTTP/1.1 to a Service, and a hostile client picks whichever hurts more:
//!
//! - **Connections**: at most `max_connections`. At the cap, the connections
//!   that have been idle longest are closed to make room (as nginx reuses
//!   keep-alive connections), so idle or stalled clients cannot lock the
//!   API server out; only when none is idle is a new connection refused.
//! - **Slow clients**: the TLS handshake, then the first request on a
//!   connection and every HTTP/1.1 request head (from its first byte),
//!   must arrive within `header_timeout`; a trickle does not extend it.
//!   hyper's own header timeout is not used: it also runs while an
//!   HTTP/1.1 connection waits idle for its next request, so it would close
//!   kept-alive connections long before the client expects.
//! - **Idle connections**: closed after `idle_timeout` with nothing in
//!   flight (GOAWAY on HTTP/2, a plain close on HTTP/1.1). The default is
//!   longer than the 90 s after which Go's HTTP client, the API server's,
//!   drops its own idle connections, so the client closes first and never
//!   sends a request on a connection the server is closing.
//! - **Headers**: [`MAX_HEADER_BYTES`] on both protocols, counted the same
//!   way (RFC 9113's header list size: name, value and 32 per field, the
//!   request line as pseudo-headers) and answered 431. hyper refuses heads
//!   over [`HEADER_CEILING`] before they reach us: 431 on HTTP/1.1; on
//!   HTTP/2 h2 ends the connection, as Go's server does since
//!   CVE-2023-45288, since decoding an unbounded header block costs without
//!   bound.
//!
//! Body size and the per-request deadline are the handler's (they depend on
//! the route).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// The request head limit on both protocols (Go's servers allow 1 MiB; an
/// AdmissionReview request carries a handful of short headers).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// What hyper itself accepts: its HTTP/1.1 read buffer and the HTTP/2
/// header list size. Above [`MAX_HEADER_BYTES`], so that heads a little
/// over the limit get the same 431 on both protocols; h2 ends a connection
/// whose header block outgrows this.
pub const HEADER_CEILING: usize = 256 * 1024;

/// How many idle connections one new connection over the cap closes: more
/// than one, so that a burst of new connections does not evict one by one.
const EVICT_BATCH: usize = 16;

/// How long a connection that was asked to close (idle or evicted) may take
/// to finish what it has before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// For the TLS handshake, the first request of a connection and each
    /// HTTP/1.1 request head.
    pub header_timeout: Duration,
    /// With nothing in flight for this long, a connection is closed.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

/// How the server stops once asked to. Kubernetes keeps sending to a
/// terminating pod until every node and the API server have seen its
/// endpoint go (seconds), so stopping at once would drop requests.
#[derive(Debug, Clone, Copy)]
pub struct Drain {
    /// After the signal: readiness is false, but new connections are still
    /// accepted and served; HTTP/1.1 answers carry `Connection: close`, so
    /// clients move to another replica at their next request.
    pub delay: Duration,
    /// After the delay: no new connections; HTTP/2 connections get GOAWAY,
    /// idle HTTP/1.1 ones are closed, in-flight requests get this long.
    pub grace: Duration,
}

/// Why a connection ended, as the `reason` label of
/// `gavel_connections_closed` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The client closed it, or an HTTP/1.1 exchange said `Connection: close`.
    Client,
    /// Nothing in flight for the idle timeout.
    Idle,
    /// No complete request (or TLS handshake) within the header timeout.
    Slow,
    /// Closed to make room at the connection cap.
    Evicted,
    TlsFailed,
    /// A protocol error, an oversized HTTP/2 header block, a reset.
    Error,
    Shutdown,
}

impl CloseReason {
    pub fn label(self) -> &'static str {
        match self {
            CloseReason::Client => "client",
            CloseReason::Idle => "idle",
            CloseReason::Slow => "slow",
            CloseReason::Evicted => "evicted",
            CloseReason::TlsFailed => "tls_failed",
            CloseReason::Error => "error",
            CloseReason::Shutdown => "shutdown",
        }
    }
}

/// What the accept loop knows of one live connection.
struct Live {
    /// The registry's epoch, copied so that a request never touches the
    /// registry (its reference count is shared by every connection).
    epoch: Instant,
    in_flight: AtomicU32,
    /// Milliseconds after the epoch at which the connection last
    /// had nothing in flight (set up, or its last answer written).
    idle_since_ms: AtomicU64,
    /// Whether a request has arrived: before it, the header timeout applies.
    served: AtomicBool,
    /// HTTP/1.1: milliseconds after the epoch (+1, so that 0 is none) of
    /// the first byte read with no request in flight, the start of the next
    /// request head.
    head_started_ms: AtomicU64,
    /// Asked to close (evicted); a close already under way ignores it.
    evict: Notify,
    /// A request head has started: its deadline is nearer than the one
    /// the connection's watch sleeps until.
    wake: Notify,
}

impl Live {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn head_started(&self) {
        if self.head_started_ms.load(Ordering::Relaxed) == 0 {
            self.head_started_ms
                .store(self.now_ms() + 1, Ordering::Relaxed);
            self.wake.notify_one();
        }
    }
}

/// The live connections, so that the longest idle can be found at the cap.
struct Registry {
    epoch: Instant,
    next_id: AtomicU64,
    live: Mutex<HashMap<u64, Arc<Live>>>,
}

impl Registry {
    fn add(&self) -> (u64, Arc<Live>) {
        let live = Arc::new(Live {
            epoch: self.epoch,
            in_flight: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
            served: AtomicBool::new(false),
            head_started_ms: AtomicU64::new(0),
            evict: Notify::new(),
            wake: Notify::new(),
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, live.clone());
        (id, live)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Live>>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks up to `n` of the connections idle longest to close; returns how
    /// many. O(live connections), run only at the cap.
    fn evict_idle(&self, n: usize) -> usize {
        let mut idle: Vec<(u64, Arc<Live>)> = self
            .lock()
            .values()
            .filter(|l| l.in_flight.load(Ordering::Relaxed) == 0)
            .map(|l| (l.idle_since_ms.load(Ordering::Relaxed), l.clone()))
            .collect();
        idle.sort_unstable_by_key(|(since, _)| *since);
        idle.truncate(n);
        for (_, live) in &idle {
            live.evict.notify_one();
        }
        idle.len()
    }
}

/// Counts a request in flight on its connection for as long as it lives.
struct InFlight<'a> {
    live: &'a Live,
}

impl<'a> InFlight<'a> {
    fn start(live: &'a Live) -> Self {
        live.served.store(true, Ordering::Relaxed);
        live.in_flight.fetch_add(1, Ordering::Relaxed);
        live.head_started_ms.store(0, Ordering::Relaxed);
        InFlight { live }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.live
            .idle_since_ms
            .store(self.live.now_ms(), Ordering::Relaxed);
        // What was read meanwhile was this request's body.
        self.live.head_started_ms.store(0, Ordering::Relaxed);
        self.live.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The TLS stream of an HTTP/1.1 connection, watched for the first byte of
/// each request head (HTTP/2 connections read PINGs and SETTINGS while
/// idle, which start nothing).
struct Watched<T> {
    inner: T,
    live: Arc<Live>,
    heads: bool,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.heads
            && buf.filled().len() > before
            && self.live.in_flight.load(Ordering::Relaxed) == 0
        {
            self.live.head_started();
        }
        polled
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// RFC 9113's header list size of a request: each field's name and value
/// and 32, with the request line as its pseudo-header fields.
fn header_list_size(req: &Request<Incoming>) -> usize {
    let fields: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum();
    let uri = req.uri();
    let pseudo = req.method().as_str().len()
        + uri.path_and_query().map_or(1, |p| p.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.scheme_str().map_or(0, str::len)
        + 4 * 32;
    fields + pseudo
}

/// Serves TLS connections from `listener` with `handle` (HTTP/2 or
/// HTTP/1.1 by ALPN, within `limits`) until `shutdown` completes; then
/// calls `on_shutdown` (readiness goes false) and drains as [`Drain`] says.
/// Shared with `examples/baseline_server.rs`, so that the transport ceiling
/// it measures is this very loop.
#[allow(clippy::too_many_arguments)]
pub async fn accept_loop<H, F>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
    handle: H,
    shutdown: impl std::future::Future<Output = ()>,
    on_shutdown: impl FnOnce(),
    drain: Drain,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Result<Response<Full<Bytes>>, std::convert::Infallible>>
        + Send
        + 'static,
{
    let max = limits.max_connections.clamp(1, u32::MAX as usize);
    let slots = Arc::new(Semaphore::new(max));
    let registry = Arc::new(Registry {
        epoch: Instant::now(),
        next_id: AtomicU64::new(0),
        live: Mutex::new(HashMap::new()),
    });
    let (closing_all, closing_all_rx) = tokio::sync::watch::channel(false);
    let builder = http_builder();
    let draining = Arc::new(AtomicBool::new(false));
    let handle = {
        let draining = draining.clone();
        move |req: Request<Incoming>| guarded(&handle, &draining, req)
    };
    let serve = |tcp: tokio::net::TcpStream, permit: tokio::sync::OwnedSemaphorePermit| {
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let handle = handle.clone();
        let builder = builder.clone();
        let registry = registry.clone();
        let metrics = metrics.clone();
        let closing_all = closing_all_rx.clone();
        metrics.open.inc();
        tokio::spawn(async move {
            let reason = serve_one(
                tcp,
                acceptor,
                builder,
                handle,
                &registry,
                limits,
                closing_all,
            )
            .await;
            metrics.closed(reason);
            metrics.open.dec();
            drop(permit);
        });
    };
    let accept = || next_connection(&listener, &slots, &registry, max, &metrics);
    // Connections are accepted until the signal and then through the delay:
    // readiness goes false first, and connections keep being served while
    // the endpoint is removed everywhere.
    let stop_accepting = async {
        shutdown.await;
        on_shutdown();
        draining.store(true, Ordering::Relaxed);
        tracing::info!(delay = ?drain.delay, "stopping: readiness is false, still serving");
        tokio::time::sleep(drain.delay).await;
    };
    tokio::pin!(stop_accepting);
    loop {
        tokio::select! {
            accepted = accept() => match accepted {
                Some((tcp, permit)) => serve(tcp, permit),
                None => break,
            },
            _ = &mut stop_accepting => break,
        }
    }
    drop(listener);
    tracing::info!(grace = ?drain.grace, "shutting down: no new connections");
    let _ = closing_all.send(true);
    // Every connection holds a slot until it ends: all slots back means all
    // connections closed.
    match tokio::time::timeout(drain.grace, slots.acquire_many(max as u32)).await {
        Ok(_) => tracing::info!("all connections closed"),
        Err(_) => tracing::warn!("grace period over; closing remaining connections"),
    }
}

/// What a handler's future gives: hyper's services cannot fail.
type Answer = Result<Response<Full<Bytes>>, std::convert::Infallible>;

/// hyper's server for both protocols, with gavel's limits: the request
/// head bounded by [`HEADER_CEILING`], HTTP/2 streams capped.
fn http_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Ours instead (see the module's comment).
        .header_read_timeout(None)
        // The read buffer bounds the request head: over it, 431.
        .max_buf_size(HEADER_CEILING);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256)
        .max_header_list_size(HEADER_CEILING as u32);
    builder
}

/// `handle` behind the header-size limit (431 without reading the body)
/// and, while draining, `Connection: close` on HTTP/1.1 answers.
fn guarded<H, F>(
    handle: &H,
    draining: &AtomicBool,
    req: Request<Incoming>,
) -> impl std::future::Future<Output = Answer> + Send + 'static + use<H, F>
where
    H: Fn(Request<Incoming>) -> F,
    F: std::future::Future<Output = Answer> + Send + 'static,
{
    // Read when the request arrives, so that no request clones the
    // shared Arc (its count is a cache line every core writes).
    let close = req.version() <= http::Version::HTTP_11 && draining.load(Ordering::Relaxed);
    let answer = if header_list_size(&req) <= MAX_HEADER_BYTES {
        Some(handle(req))
    } else {
        // Answered without its body, which is read and thrown away
        // (dropping it would reset an HTTP/2 stream: no status).
        tokio::spawn(super::discard(req.into_body()));
        None
    };
    async move {
        let Some(answer) = answer else {
            let mut response = Response::new(Full::new(Bytes::from(format!(
                "request header fields over {MAX_HEADER_BYTES} bytes"
            ))));
            *response.status_mut() = http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
            return Ok(response);
        };
        let mut response = answer.await?;
        // hyper closes an HTTP/1.1 connection after an answer that
        // says so; the client's next request opens a new one, which
        // the balancer sends to a replica that is not stopping.
        if close {
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        Ok::<_, std::convert::Infallible>(response)
    }
}

/// One accepted connection served to its end: the TLS handshake within
/// the header timeout, then HTTP until the connection closes.
async fn serve_one<G, F>(
    tcp: tokio::net::TcpStream,
    acceptor: TlsAcceptor,
    builder: auto::Builder<TokioExecutor>,
    handle: G,
    registry: &Registry,
    limits: ConnectionLimits,
    closing_all: tokio::sync::watch::Receiver<bool>,
) -> CloseReason
where
    G: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Answer> + Send + 'static,
{
    match tokio::time::timeout(limits.header_timeout, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => {
            let (id, live) = registry.add();
            let heads = tls.get_ref().1.alpn_protocol() != Some(b"h2");
            let tls = Watched {
                inner: tls,
                live: live.clone(),
                heads,
            };
            let service = {
                let live = live.clone();
                hyper::service::service_fn(move |req| {
                    let live = live.clone();
                    let answer = handle(req);
                    async move {
                        let _in_flight = InFlight::start(&live);
                        answer.await
                    }
                })
            };
            let conn = builder
                .serve_connection(TokioIo::new(tls), service)
                .into_owned();
            let reason = drive_connection(conn, &live, limits, closing_all).await;
            registry.remove(id);
            reason
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            CloseReason::TlsFailed
        }
        Err(_) => CloseReason::Slow,
    }
}

/// The next connection with a slot: at the cap, the longest-idle
/// connections are asked to close and the slot waited for a grace period;
/// with none idle, the new connection is refused. `None` when the slots
/// are closed.
async fn next_connection(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
    registry: &Registry,
    max: usize,
    metrics: &ConnectionMetrics,
) -> Option<(tokio::net::TcpStream, tokio::sync::OwnedSemaphorePermit)> {
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _peer)) => tcp,
            Err(e) => {
                // Out of file descriptors, most likely: a pause keeps
                // the loop from spinning while some are released.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return Some((tcp, permit));
        }
        let asked = registry.evict_idle(EVICT_BATCH);
        let wait = if asked > 0 {
            CLOSE_GRACE
        } else {
            Duration::ZERO
        };
        match tokio::time::timeout(wait, slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => return Some((tcp, permit)),
            Ok(Err(_)) => return None,
            Err(_) => {
                tracing::warn!(max, "connection refused: at the cap, none idle");
                metrics.refused.inc();
            }
        }
    }
}

/// Serves one connection to its end, closing it gracefully when it has
/// been idle too long, is evicted, or the server shuts down.
async fn drive_connection<C, E>(
    conn: C,
    live: &Live,
    limits: ConnectionLimits,
    mut closing_all: tokio::sync::watch::Receiver<bool>,
) -> CloseReason
where
    C: std::future::Future<Output = Result<(), E>> + GracefulShutdown,
    E: std::fmt::Display,
{
    tokio::pin!(conn);
    let mut closing: Option<CloseReason> = None;
    // Dropped (the connection cut) if a close asked for is not done by then.
    let mut close_by = Instant::now() + Duration::from_secs(u32::MAX as u64);
    loop {
        let (wake, _) = due(live, limits);
        tokio::select! {
            ended = conn.as_mut() => {
                return match (ended, closing) {
                    (_, Some(reason)) => reason,
                    (Ok(()), None) => CloseReason::Client,
                    (Err(e), None) => {
                        tracing::debug!(error = %e, "connection ended with an error");
                        CloseReason::Error
                    }
                };
            }
            _ = closing_all.wait_for(|c| *c), if closing.is_none() => {
                conn.as_mut().shut_down_gracefully();
                closing = Some(CloseReason::Shutdown);
            }
            _ = live.evict.notified(), if closing.is_none() => {
                conn.as_mut().shut_down_gracefully();
                closing = Some(CloseReason::Evicted);
                close_by = Instant::now() + CLOSE_GRACE;
            }
            // A request head started: the next turn computes its deadline.
            _ = live.wake.notified(), if closing.is_none() => {}
            _ = tokio::time::sleep_until(wake), if closing.is_none() => {
                // A request may have come and gone meanwhile: only a
                // deadline still passed closes.
                let (due, why) = due(live, limits);
                if Instant::now() >= due {
                    // A slow client has nothing in flight to finish and
                    // would not answer the PING of an HTTP/2 graceful
                    // close: it is cut off. An idle one gets GOAWAY.
                    if why == CloseReason::Slow {
                        return why;
                    }
                    conn.as_mut().shut_down_gracefully();
                    closing = Some(why);
                    close_by = Instant::now() + CLOSE_GRACE;
                }
            }
            _ = tokio::time::sleep_until(close_by), if closing.is_some() => {
                return closing.unwrap_or(CloseReason::Error);
            }
        }
    }
}

/// When the connection is due to close if nothing happens, and why: a
/// request head (or the first request) not in by the header timeout, or
/// nothing in flight for the idle timeout.
fn due(live: &Live, limits: ConnectionLimits) -> (Instant, CloseReason) {
    let at = |ms: u64| live.epoch + Duration::from_millis(ms);
    if live.in_flight.load(Ordering::Relaxed) > 0 {
        return (Instant::now() + limits.idle_timeout, CloseReason::Idle);
    }
    let since = at(live.idle_since_ms.load(Ordering::Relaxed));
    if !live.served.load(Ordering::Relaxed) {
        return (since + limits.header_timeout, CloseReason::Slow);
    }
    match live.head_started_ms.load(Ordering::Relaxed) {
        0 => (since + limits.idle_timeout, CloseReason::Idle),
        started => (at(started - 1) + limits.header_timeout, CloseReason::Slow),
    }
}

/// hyper-util's connection types close gracefully through an inherent
/// method; this names it so that [`drive_connection`] can be generic.
pub trait GracefulShutdown {
    fn shut_down_gracefully(self: std::pin::Pin<&mut Self>);
}

impl<I, S, E> GracefulShutdown for auto::Connection<'_, I, S, E>
where
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResBody: hyper::body::Body + Send + 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, S::ResBody>,
{
    fn shut_down_gracefully(self: std::pin::Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CloseLabels {
    reason: &'static str,
}

/// What the accept loop counts: Kyverno exposes nothing of the kind, and
/// without it an idle flood or a slow client shows only as latency.
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    pub open: Gauge,
    closed: Family<CloseLabels, Counter>,
    /// New connections refused at the cap with none idle to close.
    pub refused: Counter,
}

impl ConnectionMetrics {
    pub fn closed(&self, reason: CloseReason) {
        self.closed
            .get_or_create(&CloseLabels {
                reason: reason.label(),
            })
            .inc();
    }

    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "gavel_connections_open",
            "TLS connections open, handshaking included",
            self.open.clone(),
        );
        registry.register(
            "gavel_connections_closed",
            "Connections ended, by reason: client, idle, slow (handshake or request head not in time), evicted (at the cap), tls_failed, error, shutdown",
            self.closed.clone(),
        );
        registry.register(
            "gavel_connections_refused",
            "New connections refused at the connection cap, none being idle",
            self.refused.clone(),
        );
    }
}
