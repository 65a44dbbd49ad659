//! The transport ceiling that `gavel serve` is measured against: the same
//! accept loop, TLS configuration and hyper stack ([`accept_loop`]), reading
//! and decoding each AdmissionReview body as gavel does, then answering a
//! fixed `allowed: true` with the request's uid. No policies, no metrics.
//!
//! With `--replay FILE` (AdmissionReview answers, one JSON document per
//! line, as gavel wrote them), a review whose uid has an answer there gets
//! that answer's bytes: the transport ceiling for gavel's own answers. A
//! denial is kilobytes that TLS, the kernel and the client handle and an
//! `allowed: true` is not, so this separates what gavel's answers cost
//! from what its evaluation costs (`k6/throughput.sh` runs both).
//!
//! ```text
//! cargo run --release --example baseline_server -- --listen 127.0.0.1:9444 [--replay FILE]
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
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Recorded answers by the uid of their review (`--replay`). Leaked into
/// static bytes: a clone of shared `Bytes` would write a reference count
/// that every core fights over, which the bare server must not pay.
static REPLAY: OnceLock<HashMap<String, Bytes>> = OnceLock::new();

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
    let recorded = REPLAY.get().and_then(|answers| answers.get(&review.uid));
    let body = match recorded {
        Some(bytes) => bytes.clone(),
        None => {
            let verdict = Verdict {
                allowed: true,
                ..Verdict::default()
            };
            Bytes::from(verdict::encode(&review.uid, &verdict))
        }
    };
    let mut r = Response::new(Full::new(body));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

// Parsed with clap, as gavel's own arguments are.
/// The bare TLS and hyper server that gavel's throughput is measured against.
#[derive(clap::Parser)]
#[command(name = "baseline_server")]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:9444")]
    listen: SocketAddr,
    /// AdmissionReview answers to replay, one JSON document per line.
    #[arg(long)]
    replay: Option<String>,
}

/// The answers in `path` (one AdmissionReview response per line) by uid.
fn recorded_answers(path: &str) -> Result<HashMap<String, Bytes>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let mut answers = HashMap::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let answer: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{path}:{}", n + 1))?;
        let Some(uid) = answer.pointer("/response/uid").and_then(|u| u.as_str()) else {
            bail!("{path}:{}: an answer without response.uid", n + 1);
        };
        let bytes: &'static [u8] = Box::leak(line.as_bytes().to_vec().into_boxed_slice());
        answers.insert(uid.to_string(), Bytes::from_static(bytes));
    }
    Ok(answers)
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let args = <Args as clap::Parser>::parse();
    let listen = args.listen;
    let replay = match &args.replay {
        Some(path) => recorded_answers(path)?,
        None => HashMap::new(),
    };
    REPLAY
        .set(replay)
        .expect("the answers are set once, before serving");
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
