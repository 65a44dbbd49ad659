//! An in-process Kubernetes API server for integration tests.
//!
//! No kube-apiserver can be installed on these machines, so this one follows
//! the real API's conventions closely enough for kube-rs and `kubectl`:
//! discovery (`/version`, `/api`, `/apis`, resource lists, OpenAPI stubs),
//! list with resourceVersion and limit/continue, watch from a
//! resourceVersion with bookmarks and `410 Gone` after compaction, label and
//! field selectors, create/update/patch/delete with optimistic concurrency
//! (409 on a stale resourceVersion), status subresources, CRDs that add
//! resource types, managedFields on every write, and bearer-token auth over
//! real TLS. Faults can be injected: stop and restart, delay, 500s, cut
//! watches, compaction.
//!
//! Deliberate simplifications: server-side apply merges the applied object
//! without field ownership; list continuation reads the current state;
//! deletion is immediate (no finalizers or graceful periods); bodies are JSON
//! only (a protobuf body, as `kubectl create configmap` sends, answers 415).

mod crud;
mod objects;
mod patch;
mod resources;
mod responses;
mod routes;
mod selector;
mod store;
mod watches;

use crud::*;
use objects::*;
use responses::*;
use routes::*;
use watches::*;

pub use resources::ResourceType;
pub use store::EventType;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response};
use selector::Selector;
use serde_json::{Map, Value, json};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use store::{Filter, ObjectKey, Store, TypeKey, meta_str, set_meta};
use tokio::sync::{mpsc, watch};

type Body = BoxBody<Bytes, Infallible>;

/// The bearer token clients must present.
pub const TOKEN: &str = "gavel-test-token";

/// How the test server is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// How many events the watch history keeps; older ones answer 410.
    pub history_limit: usize,
    /// How often a watch that allows bookmarks gets one.
    pub bookmark_interval: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(1),
        }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub user_agent: String,
    pub at: std::time::Instant,
}

struct Shared {
    store: Mutex<Store>,
    types: Mutex<Vec<ResourceType>>,
    /// The resourceVersion of the last write: wakes watches.
    changed: watch::Sender<u64>,
    /// Whether the server accepts connections; false cuts every connection.
    up: watch::Sender<bool>,
    /// Bumped to end every open watch.
    cut_watches: watch::Sender<u64>,
    delay_ms: AtomicU64,
    fail_next: AtomicU64,
    log: Mutex<Vec<Logged>>,
    config: Config,
}

/// A running test server. Dropping it stops it.
pub struct TestApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    ca_pem: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestApiServer {
    pub fn start() -> TestApiServer {
        TestApiServer::with_config(Config::default())
    }

    /// Starts the server on its own thread and runtime, so that it serves
    /// sync tests, async tests and child processes alike.
    pub fn with_config(config: Config) -> TestApiServer {
        let tls = gavel::server::tls::generate(&["127.0.0.1".into(), "localhost".into()])
            .expect("generating test certificates");
        let key =
            gavel::server::tls::certified_key(tls.cert_pem.as_bytes(), tls.key_pem.as_bytes())
                .expect("test certificate");
        let cert = Arc::new(gavel::server::tls::SwappableCert(
            arc_swap::ArcSwap::from_pointee(key),
        ));
        let tls_config =
            Arc::new(gavel::server::tls::server_config(cert).expect("TLS configuration"));
        let mut store = Store::new(config.history_limit);
        for ns in ["default", "kube-system", "kube-public"] {
            let object = new_object(&mut store, "v1", "Namespace", "", ns, json!({}));
            store.write(
                &(String::new(), "namespaces".into()),
                (String::new(), ns.into()),
                object,
            );
        }
        let rv = store.rv;
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            types: Mutex::new(resources::initial_types()),
            changed: watch::channel(rv).0,
            up: watch::channel(true).0,
            cut_watches: watch::channel(0).0,
            delay_ms: AtomicU64::new(0),
            fail_next: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            config,
        });
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding");
        let addr = std_listener.local_addr().expect("address");
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let served = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                std_listener.set_nonblocking(true).expect("nonblocking");
                let first = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                tokio::select! {
                    _ = serve(served, addr, first, tls_config) => {}
                    _ = stopped => {}
                }
            });
            rt.shutdown_timeout(Duration::from_secs(1));
        });
        TestApiServer {
            shared,
            addr,
            ca_pem: tls.ca_pem,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Writes a kubeconfig for this server (CA data, bearer token) into `dir`.
    pub fn write_kubeconfig(&self, dir: &Path) -> PathBuf {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: test\n  user:\n    token: {TOKEN}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n    namespace: default\ncurrent-context: test\n",
            self.url()
        );
        let path = dir.join("kubeconfig");
        std::fs::write(&path, text).expect("writing kubeconfig");
        path
    }

    /// Every request served so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.shared.log.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.log.lock().unwrap().len()
    }

    /// Closes the listener and every connection: clients see connection refused.
    pub fn stop(&self) {
        self.shared.up.send_replace(false);
    }

    /// Listens again on the same address.
    pub fn resume(&self) {
        self.shared.up.send_replace(true);
    }

    /// Delays every request by `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.shared
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// The next `n` requests (discovery included) answer 500.
    pub fn fail_next(&self, n: u64) {
        self.shared.fail_next.store(n, Ordering::Relaxed);
    }

    /// Ends every open watch, as a load balancer or apiserver restart does.
    pub fn cut_watches(&self) {
        self.shared.cut_watches.send_modify(|n| *n += 1);
    }

    /// Drops the event history: watches from earlier resourceVersions get 410.
    pub fn compact(&self) {
        self.shared.store.lock().unwrap().compact();
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.lock().unwrap().rv
    }

    /// Writes an object directly (as create or update, without checks), for
    /// seeding large amounts of data quickly. `api_version` and `kind` must
    /// name a served type.
    pub fn put(&self, object: Value) -> Value {
        let (ty, rt) = self.type_of(&object);
        let ns = meta_str(&object, "namespace")
            .unwrap_or_default()
            .to_string();
        let name = meta_str(&object, "name")
            .expect("metadata.name")
            .to_string();
        let mut store = self.shared.store.lock().unwrap();
        let key = (if rt.namespaced { ns } else { String::new() }, name);
        let stored = match store.get(&ty, &key).cloned() {
            Some(old) => {
                let mut object = object;
                keep_server_fields(&mut object, &old);
                if object.get("spec") != old.get("spec") {
                    let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
                    set_meta(&mut object, "generation", generation.into());
                }
                object
            }
            None => {
                let api_version = object["apiVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let mut object = object;
                stamp_new(&mut store, &mut object, &api_version);
                object
            }
        };
        let stored = store.write(&ty, key, stored);
        // A CustomResourceDefinition serves its type, as one created
        // through the API does.
        if rt.plural == "customresourcedefinitions" {
            let t = ResourceType::from_crd(&stored).expect("a valid CustomResourceDefinition");
            let mut types = self.shared.types.lock().unwrap();
            types.retain(|x| !(x.group == t.group && x.plural == t.plural));
            types.push(t);
        }
        self.shared.changed.send_replace(store.rv);
        stored
    }

    /// Reads an object directly.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let probe = json!({"apiVersion": api_version, "kind": kind});
        let (ty, rt) = self.type_of(&probe);
        let ns = if rt.namespaced { namespace } else { "" };
        self.shared
            .store
            .lock()
            .unwrap()
            .get(&ty, &(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Every object of a type (all namespaces).
    pub fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let probe = json!({"apiVersion": api_version, "kind": kind});
        let (ty, _) = self.type_of(&probe);
        let store = self.shared.store.lock().unwrap();
        store
            .objects
            .get(&ty)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Deletes an object directly.
    pub fn delete(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> bool {
        let probe = json!({"apiVersion": api_version, "kind": kind});
        let (ty, rt) = self.type_of(&probe);
        let ns = if rt.namespaced { namespace } else { "" };
        let mut store = self.shared.store.lock().unwrap();
        let gone = store
            .remove(&ty, &(ns.to_string(), name.to_string()))
            .is_some();
        self.shared.changed.send_replace(store.rv);
        gone
    }

    fn type_of(&self, object: &Value) -> (TypeKey, ResourceType) {
        let api_version = object["apiVersion"].as_str().expect("apiVersion");
        let kind = object["kind"].as_str().expect("kind");
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let types = self.shared.types.lock().unwrap();
        let rt = types
            .iter()
            .find(|t| t.group == group && t.kind == kind)
            .unwrap_or_else(|| panic!("no served type {api_version} {kind}"))
            .clone();
        ((rt.group.clone(), rt.plural.clone()), rt)
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts while `up`; when it goes down, drops the listener (connection
/// refused) and every connection, then binds the same address again once
/// it comes back up.
async fn serve(
    shared: Arc<Shared>,
    addr: SocketAddr,
    first: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let mut listener = Some(first);
    let mut up = shared.up.subscribe();
    loop {
        let current = match listener.take() {
            Some(l) => l,
            None => {
                if up.wait_for(|u| *u).await.map(|_| ()).is_err() {
                    return;
                }
                let socket = tokio::net::TcpSocket::new_v4().expect("socket");
                socket.set_reuseaddr(true).expect("reuseaddr");
                socket.bind(addr).expect("binding the same address again");
                socket.listen(1024).expect("listen")
            }
        };
        loop {
            tokio::select! {
                accepted = current.accept() => {
                    let Ok((tcp, _)) = accepted else { continue };
                    tokio::spawn(connection(shared.clone(), acceptor.clone(), tcp));
                }
                _ = until_down(&mut up) => break,
            }
        }
    }
}

async fn connection(
    shared: Arc<Shared>,
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
) {
    let mut up = shared.up.subscribe();
    let served = async {
        let Ok(tls) = acceptor.accept(tcp).await else {
            return;
        };
        let service = hyper::service::service_fn(move |req| {
            let shared = shared.clone();
            async move { Ok::<_, Infallible>(handle(&shared, req).await) }
        });
        let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
            .await;
    };
    tokio::select! {
        _ = served => {}
        _ = until_down(&mut up) => {}
    }
}

/// Resolves once the server is stopped (or gone).
async fn until_down(up: &mut watch::Receiver<bool>) {
    let _ = up.wait_for(|u| !*u).await.map(|_| ());
}
