//! The transport ceiling that `gavel serve` is measured against: the same
//! accept loop, TLS configuration and hyper stack ([`accept_loop`]), reading
//! and decoding each AdmissionReview body as gavel does, then answering a
//! fixed `allowed: true` with the request's uid. No policies, no metrics.
//!
//! ```text
//! cargo run --release --example baseline_server -- --listen 127.0.0.1:9444
//! ```
//!
//! The certificate is self-signed for `localhost` and `127.0.0.1`; load
//! generators skip verification (wrk always does; k6 with
//! `insecureSkipTLSVerify`).

use anyhow::{Context, Result, bail};
use arc_swap::ArcSwap;
use bytes::Bytes;
use gavel::admission::review;
use gavel::admission::verdict::{self, Verdict};
use gavel::server::MAX_BODY;
use gavel::server::{accept_loop, shutdown_signal, tls};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let status = |code: StatusCode, text: String| {
        let mut r = Response::new(Full::new(Bytes::from(text)));
        *r.status_mut() = code;
        Ok(r)
    };
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return status(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let review = match review::decode(&body) {
        Ok(r) => r,
        Err(e) => return status(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let verdict = Verdict {
        allowed: true,
        ..Verdict::default()
    };
    let mut r = Response::new(Full::new(Bytes::from(verdict::encode(
        &review.uid,
        &verdict,
    ))));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

fn listen_arg() -> Result<SocketAddr> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok("127.0.0.1:9444".parse()?),
        [flag, addr] if flag == "--listen" => addr.parse().context("--listen ADDR:PORT"),
        _ => bail!("usage: baseline_server [--listen ADDR:PORT]"),
    }
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let listen = listen_arg()?;
    let generated = tls::generate(&["localhost".into(), "127.0.0.1".into()])?;
    let key = tls::certified_key(generated.cert_pem.as_bytes(), generated.key_pem.as_bytes())?;
    let resolver = Arc::new(tls::SwappableCert(ArcSwap::from_pointee(key)));
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(resolver)?));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        tracing::info!(listen = %listener.local_addr()?, "baseline serving");
        accept_loop(
            listener,
            acceptor,
            gavel::server::ConnectionLimits::default(),
            gavel::server::connections::ConnectionMetrics::default(),
            answer,
            shutdown_signal(),
            || {},
            gavel::server::Drain {
                delay: Duration::from_secs(5),
                grace: Duration::from_secs(5),
            },
        )
        .await;
        Ok(())
    })
}
