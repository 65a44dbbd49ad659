//! `apiCall.service`: a JSON service outside the API server
//! (docs/kyverno-semantics.md#context-entries), over HTTPS trusting
//! `caBundle` when given and the system's roots otherwise,
//! or plain HTTP. The response must be JSON, within the size limit, with a
//! 2xx status. Nothing is cached: a service answer may depend on the
//! request (POST bodies, headers), as in Kyverno.

use crate::context::{ApiCallRequest, ResolveError};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::{CertificateDer, pem::PemObject};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

pub struct ServiceClient {
    /// Trusting the system's roots, built on first use.
    system: std::sync::OnceLock<Result<HttpsClient, String>>,
    /// One client (and connection pool) per caBundle seen, so a bundle is
    /// parsed once rather than per call; bounded.
    by_ca: std::sync::Mutex<std::collections::HashMap<String, HttpsClient>>,
    max_response_bytes: usize,
    timeout: Duration,
}

fn failed(e: impl std::fmt::Display) -> ResolveError {
    ResolveError::Failed(e.to_string())
}

fn client(tls: rustls::ClientConfig) -> HttpsClient {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    Client::builder(TokioExecutor::new()).build(connector)
}

fn tls_with(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn system_client() -> Result<HttpsClient, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)
        .map_err(|e| format!("the system's CA roots: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

impl ServiceClient {
    pub fn new(max_response_bytes: usize, timeout: Duration) -> ServiceClient {
        ServiceClient {
            system: std::sync::OnceLock::new(),
            by_ca: Default::default(),
            max_response_bytes,
            timeout,
        }
    }

    fn client_for(&self, ca_bundle: Option<&str>) -> Result<HttpsClient, ResolveError> {
        match ca_bundle.filter(|b| !b.trim().is_empty()) {
            Some(pem) => {
                let mut clients = self.by_ca.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(c) = clients.get(pem) {
                    return Ok(c.clone());
                }
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                    let cert = cert.map_err(|e| failed(format!("service.caBundle: {e}")))?;
                    roots
                        .add(cert)
                        .map_err(|e| failed(format!("service.caBundle: {e}")))?;
                }
                let built = tls_with(roots).map(client).map_err(failed)?;
                if clients.len() >= 64 {
                    clients.clear();
                }
                clients.insert(pem.to_string(), built.clone());
                Ok(built)
            }
            None => self
                .system
                .get_or_init(system_client)
                .clone()
                .map_err(failed),
        }
    }

    /// Calls `call.url` and parses its JSON answer.
    pub async fn call(&self, call: &ApiCallRequest) -> Result<Value, ResolveError> {
        let url = call
            .url
            .as_deref()
            .ok_or_else(|| failed("apiCall.service needs a url"))?;
        let client = self.client_for(call.ca_bundle.as_deref())?;
        let mut request = http::Request::builder()
            .method(call.method.as_str())
            .uri(url);
        for (k, v) in &call.headers {
            request = request.header(k.as_str(), v.as_str());
        }
        let body = match (&call.body, call.method.as_str()) {
            (Some(b), _) => {
                request = request.header(http::header::CONTENT_TYPE, "application/json");
                serde_json::to_vec(b).map_err(failed)?
            }
            (None, _) => Vec::new(),
        };
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| failed(format!("apiCall {url}: {e}")))?;
        let exchange = async {
            let response = client
                .request(request)
                .await
                .map_err(|e| failed(format!("apiCall {url}: {e}")))?;
            let status = response.status();
            let limited = Limited::new(response.into_body(), self.max_response_bytes);
            let bytes = limited.collect().await.map_err(|e| {
                failed(format!(
                    "apiCall {url}: response over the limit of {} bytes or unreadable: {e}",
                    self.max_response_bytes
                ))
            })?;
            let bytes = bytes.to_bytes();
            if !status.is_success() {
                return Err(failed(format!(
                    "apiCall {url}: HTTP {status}: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                )));
            }
            serde_json::from_slice(&bytes)
                .map_err(|e| failed(format!("apiCall {url}: response is not JSON: {e}")))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                failed(format!(
                    "apiCall {url}: no answer within {:?}",
                    self.timeout
                ))
            })?
    }
}
