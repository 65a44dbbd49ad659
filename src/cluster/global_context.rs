//! GlobalContextEntry (`kyverno.io/v2alpha1`,
//! docs/kyverno-semantics.md#global-context-entries): data cached ahead of
//! admission, so `globalReference` context entries never wait on the API.
//!
//! A `kubernetesResource` entry runs a reflector for its resource and
//! republishes the objects (a JSON array, sorted by namespace and name)
//! shortly after each change. An `apiCall` entry is fetched in the
//! background every `refreshInterval`, retried up to `retryLimit` times;
//! when every try fails the entry holds the error, and policies that read
//! it fail with it, as in Kyverno. Projections are evaluated when the data
//! is published, never per request. Readers take an `Arc` from an
//! arc-swapped map: no lock, no copy.

use super::stores::{resource, strip};
use super::watch_backoff::relist_at_once;
use crate::cluster::api::{fetch_json, url_path_request};
use crate::context::ApiCallRequest;
use crate::jmespath::Expression;
use arc_swap::ArcSwap;
use futures_util::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersion};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a lookup of an entry (or `<entry>.<projection>`) finds.
pub type EntryData = Result<Arc<Value>, String>;

pub fn entry_resource() -> ApiResource {
    resource(
        "kyverno.io",
        "v2alpha1",
        "GlobalContextEntry",
        "globalcontextentries",
    )
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    kubernetes_resource: Option<KubernetesResource>,
    api_call: Option<ApiCall>,
    #[serde(default)]
    projections: Vec<Projection>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KubernetesResource {
    #[serde(default)]
    group: String,
    version: String,
    resource: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ApiCall {
    url_path: Option<String>,
    method: Option<String>,
    #[serde(default)]
    data: Vec<KeyValue>,
    service: Option<Value>,
    refresh_interval: Option<String>,
    retry_limit: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyValue {
    key: String,
    value: Value,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Projection {
    name: String,
    jmes_path: String,
}

/// The cached data of every entry, by name (and `<entry>.<projection>`).
pub struct GlobalContext {
    data: ArcSwap<HashMap<String, EntryData>>,
    ready: watch::Receiver<bool>,
}

impl GlobalContext {
    /// An entry or projection; a projection of a failed entry (whose
    /// projections may be unknown) gets the entry's error.
    pub fn get(&self, name: &str) -> Option<EntryData> {
        let data = self.data.load();
        if let Some(found) = data.get(name) {
            return Some(found.clone());
        }
        let (entry, _) = name.rsplit_once('.')?;
        data.get(entry).filter(|d| d.is_err()).cloned()
    }

    /// Resolves once the entries that existed at start have each been
    /// loaded or have failed once (a broken entry must not keep gavel
    /// unready; it reports its error to the policies that read it).
    pub async fn synced(&self) {
        let mut ready = self.ready.clone();
        let _ = ready.wait_for(|r| *r).await;
    }

    /// Sets `entry` and its projections; removes projections it no longer has.
    fn publish(&self, entry: &str, data: EntryData, projections: &[(String, Expression)]) {
        let mut values = vec![(entry.to_string(), data.clone())];
        for (name, expr) in projections {
            let value = match &data {
                Ok(v) => expr
                    .search(v)
                    .map(|r| Arc::new(r.into_owned()))
                    .map_err(|e| format!("projection {name}: {e}")),
                Err(e) => Err(e.clone()),
            };
            values.push((format!("{entry}.{name}"), value));
        }
        self.data.rcu(|map| {
            let mut map = HashMap::clone(map);
            map.retain(|k, _| !owned_by(k, entry));
            map.extend(values.iter().cloned());
            map
        });
    }

    fn remove(&self, entry: &str) {
        self.data.rcu(|map| {
            let mut map = HashMap::clone(map);
            map.retain(|k, _| !owned_by(k, entry));
            map
        });
    }
}

/// `key` is `entry` or one of its projections.
fn owned_by(key: &str, entry: &str) -> bool {
    key.strip_prefix(entry)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// Settings shared by every entry.
#[derive(Clone)]
pub struct GlobalContextOptions {
    /// For `apiCall.service` entries.
    pub service: Arc<crate::cluster::service::ServiceClient>,
    /// Responses of `apiCall` entries larger than this are errors.
    pub max_response_bytes: usize,
    /// How long changes to a resource gather before it is republished.
    pub debounce: Duration,
}

/// Watches GlobalContextEntry objects and keeps one task per entry.
pub fn start(client: Client, opts: GlobalContextOptions) -> Arc<GlobalContext> {
    let (ready_tx, ready) = watch::channel(false);
    let context = Arc::new(GlobalContext {
        data: ArcSwap::default(),
        ready,
    });
    let ar = entry_resource();
    let writer = reflector::store::Writer::new(ar.clone());
    let entries = writer.as_reader();
    let stream = reflector::reflector(
        writer,
        relist_at_once(watcher(
            Api::<DynamicObject>::all_with(client.clone(), &ar),
            watcher::Config::default(),
        )),
    );
    let manager = Manager {
        client,
        context: context.clone(),
        opts,
        running: HashMap::new(),
    };
    tokio::spawn(manager.run(entries, stream, ready_tx));
    context
}

struct Running {
    spec: Spec,
    task: JoinHandle<()>,
    loaded: watch::Receiver<bool>,
}

struct Manager {
    client: Client,
    context: Arc<GlobalContext>,
    opts: GlobalContextOptions,
    running: HashMap<String, Running>,
}

impl Manager {
    async fn run<S>(mut self, entries: Store<DynamicObject>, stream: S, ready: watch::Sender<bool>)
    where
        S: futures_util::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>,
    {
        let mut stream = std::pin::pin!(stream);
        let mut waiting = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                Ok(_) => self.reconcile(&entries),
                Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 404 => {
                    // The CRD is not installed: there are no entries to wait for.
                    if !waiting {
                        tracing::warn!(
                            "GlobalContextEntry is not served; globalReference entries will fail"
                        );
                        ready.send_replace(true);
                        waiting = true;
                    }
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "GlobalContextEntry watch failed; retrying");
                    continue;
                }
            }
            if !waiting {
                waiting = true;
                let loads: Vec<_> = self.running.values().map(|r| r.loaded.clone()).collect();
                let ready = ready.clone();
                tokio::spawn(async move {
                    for mut loaded in loads {
                        let _ = loaded.wait_for(|l| *l).await;
                    }
                    ready.send_replace(true);
                });
            }
        }
    }

    /// Starts entries that are new or changed, stops those that are gone.
    fn reconcile(&mut self, entries: &Store<DynamicObject>) {
        let mut seen = Vec::new();
        for object in entries.state() {
            let Some(name) = object.meta().name.clone() else {
                continue;
            };
            seen.push(name.clone());
            let spec = object.data.get("spec").cloned().unwrap_or(Value::Null);
            let spec = match parse(spec) {
                Ok(spec) => spec,
                Err(reason) => {
                    tracing::error!(entry = name, reason, "GlobalContextEntry rejected");
                    if let Some(old) = self.running.remove(&name) {
                        old.task.abort();
                    }
                    self.context.publish(&name, Err(reason), &[]);
                    continue;
                }
            };
            if self.running.get(&name).is_some_and(|r| r.spec == spec) {
                continue;
            }
            if let Some(old) = self.running.remove(&name) {
                old.task.abort();
            }
            let (loaded_tx, loaded) = watch::channel(false);
            let task = tokio::spawn(run_entry(
                self.client.clone(),
                name.clone(),
                spec.clone(),
                self.context.clone(),
                self.opts.clone(),
                loaded_tx,
            ));
            tracing::info!(entry = name, "GlobalContextEntry started");
            self.running.insert(name, Running { spec, task, loaded });
        }
        self.running.retain(|name, r| {
            let keep = seen.contains(name);
            if !keep {
                r.task.abort();
                self.context.remove(name);
                tracing::info!(entry = name, "GlobalContextEntry removed");
            }
            keep
        });
        // Rejected entries that were deleted.
        let stale: Vec<String> = self
            .context
            .data
            .load()
            .keys()
            .filter(|k| !seen.iter().any(|s| owned_by(k, s)))
            .cloned()
            .collect();
        for k in stale {
            self.context.remove(&k);
        }
    }
}

fn parse(spec: Value) -> Result<Spec, String> {
    let spec: Spec = serde_path_to_error::deserialize(spec)
        .map_err(|e| format!("invalid spec at {}: {}", e.path(), e.inner()))?;
    match (&spec.kubernetes_resource, &spec.api_call) {
        (Some(_), None) | (None, Some(_)) => {}
        _ => return Err("exactly one of kubernetesResource and apiCall is required".into()),
    }
    if let Some(call) = &spec.api_call {
        match (&call.url_path, &call.service) {
            (Some(_), None) => {}
            (None, Some(service)) if service.get("url").and_then(Value::as_str).is_some() => {}
            (None, Some(_)) => return Err("apiCall.service needs a url".into()),
            _ => return Err("apiCall needs exactly one of urlPath and service".into()),
        }
        if !call.data.is_empty() && call.method.as_deref() != Some("POST") {
            return Err("apiCall.data requires method POST".into());
        }
        if call.retry_limit == Some(0) {
            return Err("apiCall.retryLimit must be at least 1".into());
        }
        refresh_interval(call)?;
    }
    for p in &spec.projections {
        Expression::parse(&p.jmes_path)
            .map_err(|e| format!("projection {}: invalid jmesPath: {e}", p.name))?;
    }
    Ok(spec)
}

fn refresh_interval(call: &ApiCall) -> Result<Duration, String> {
    let Some(text) = &call.refresh_interval else {
        return Ok(Duration::from_secs(600));
    };
    let seconds = crate::units::duration::Duration::parse(text)
        .map(|d| d.seconds())
        .ok_or_else(|| format!("apiCall.refreshInterval {text:?} is not a duration"))?;
    if seconds <= 0.0 {
        return Err("apiCall.refreshInterval must be positive".into());
    }
    Ok(Duration::from_secs_f64(seconds))
}

async fn run_entry(
    client: Client,
    name: String,
    spec: Spec,
    context: Arc<GlobalContext>,
    opts: GlobalContextOptions,
    loaded: watch::Sender<bool>,
) {
    let projections: Vec<(String, Expression)> = spec
        .projections
        .iter()
        .filter_map(|p| Some((p.name.clone(), Expression::parse(&p.jmes_path).ok()?)))
        .collect();
    let publish = |data: EntryData| {
        if let Err(e) = &data {
            tracing::warn!(entry = name, error = e, "GlobalContextEntry failed");
        }
        context.publish(&name, data, &projections);
        loaded.send_replace(true);
    };
    if let Some(r) = &spec.kubernetes_resource {
        watch_resource(client, r, &opts, publish).await;
    } else if let Some(call) = &spec.api_call {
        poll(client, call, &opts, publish).await;
    }
}

/// The resource's ApiResource and whether it is namespaced, from discovery.
async fn discover(client: &Client, r: &KubernetesResource) -> Result<(ApiResource, bool), String> {
    let gv = GroupVersion::gv(&r.group, &r.version);
    let group = kube::discovery::oneshot::pinned_group(client, &gv)
        .await
        .map_err(|e| format!("discovery of {}/{}: {e}", r.group, r.version))?;
    group
        .versioned_resources(&r.version)
        .into_iter()
        .find(|(ar, _)| ar.plural == r.resource)
        .map(|(ar, caps)| (ar, caps.scope == kube::discovery::Scope::Namespaced))
        .ok_or_else(|| {
            format!(
                "resource {:?} is not served in {}/{}",
                r.resource, r.group, r.version
            )
        })
}

async fn watch_resource(
    client: Client,
    r: &KubernetesResource,
    opts: &GlobalContextOptions,
    publish: impl Fn(EntryData),
) {
    let (ar, namespaced) = loop {
        match discover(&client, r).await {
            Ok(found) => break found,
            Err(e) => {
                publish(Err(e));
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        }
    };
    let api = if namespaced && !r.namespace.is_empty() {
        Api::<DynamicObject>::namespaced_with(client, &r.namespace, &ar)
    } else {
        Api::<DynamicObject>::all_with(client, &ar)
    };
    let writer = reflector::store::Writer::new(ar.clone());
    let store = writer.as_reader();
    let stream = reflector::reflector(
        writer,
        relist_at_once(watcher(api, watcher::Config::default())).modify(strip),
    );
    let mut stream = std::pin::pin!(stream);
    let mut dirty = false;
    let mut published = false;
    loop {
        let next = if dirty {
            match tokio::time::timeout(opts.debounce, stream.next()).await {
                Ok(next) => next,
                Err(_) => {
                    publish(Ok(Arc::new(objects(&store, &ar))));
                    dirty = false;
                    published = true;
                    continue;
                }
            }
        } else {
            stream.next().await
        };
        match next {
            None => return,
            Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => {}
            Some(Ok(_)) => dirty = true,
            Some(Err(e)) => {
                // The reflector relists by itself; until the first list
                // succeeds the entry reports why it has no data.
                if !published {
                    publish(Err(format!("watching {}: {e}", r.resource)));
                }
            }
        }
    }
}

/// The stored objects as Kyverno presents them: a JSON array, each with
/// its apiVersion and kind.
fn objects(store: &Store<DynamicObject>, ar: &ApiResource) -> Value {
    let mut objects = store.state();
    objects.sort_by(|a, b| {
        (a.metadata.namespace.as_deref(), a.metadata.name.as_deref())
            .cmp(&(b.metadata.namespace.as_deref(), b.metadata.name.as_deref()))
    });
    Value::Array(
        objects
            .iter()
            .filter_map(|o| {
                let mut v = serde_json::to_value(&**o).ok()?;
                let map = v.as_object_mut()?;
                map.entry("apiVersion")
                    .or_insert_with(|| ar.api_version.clone().into());
                map.entry("kind").or_insert_with(|| ar.kind.clone().into());
                Some(v)
            })
            .collect(),
    )
}

async fn poll(
    client: Client,
    call: &ApiCall,
    opts: &GlobalContextOptions,
    publish: impl Fn(EntryData),
) {
    let every = refresh_interval(call).unwrap_or(Duration::from_secs(600));
    let tries = call.retry_limit.unwrap_or(3).max(1);
    loop {
        let mut result = Err(String::new());
        for attempt in 0..tries {
            let request = call_request(call);
            result = match &request.url_path {
                None => opts.service.call(&request).await,
                Some(path) => match url_path_request(path, &request) {
                    Ok(http) => fetch_json(&client, http, opts.max_response_bytes).await,
                    Err(e) => Err(e),
                },
            }
            .map_err(|e| e.to_string());
            if result.is_ok() {
                break;
            }
            if attempt + 1 < tries {
                tokio::time::sleep(Duration::from_millis(500) * 2u32.pow(attempt.min(5))).await;
            }
        }
        publish(result.map(Arc::new));
        tokio::time::sleep(every).await;
    }
}

/// The entry's call in the form the context sources take.
fn call_request(call: &ApiCall) -> ApiCallRequest {
    let text = |v: &Value| v.as_str().map(str::to_string);
    let service = call.service.as_ref();
    ApiCallRequest {
        url_path: call.url_path.clone(),
        url: service.and_then(|s| s.get("url")).and_then(text),
        method: call.method.clone().unwrap_or_else(|| "GET".into()),
        body: (!call.data.is_empty()).then(|| {
            Value::Object(
                call.data
                    .iter()
                    .map(|kv| (kv.key.clone(), kv.value.clone()))
                    .collect(),
            )
        }),
        ca_bundle: service.and_then(|s| s.get("caBundle")).and_then(text),
        headers: service
            .and_then(|s| s.get("headers"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|h| Some((text(h.get("key")?)?, text(h.get("value")?)?)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn context() -> GlobalContext {
        GlobalContext {
            data: ArcSwap::default(),
            ready: watch::channel(true).1,
        }
    }

    #[test]
    fn projections_are_computed_on_publish_and_follow_the_entry() {
        let ctx = context();
        let projections = vec![(
            "names".to_string(),
            Expression::parse("[].metadata.name").unwrap(),
        )];
        let data = json!([{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]);
        ctx.publish("svc", Ok(Arc::new(data.clone())), &projections);
        ctx.publish("svc-other", Ok(Arc::new(json!(1))), &[]);
        assert_eq!(*ctx.get("svc").unwrap().unwrap(), data);
        assert_eq!(*ctx.get("svc.names").unwrap().unwrap(), json!(["a", "b"]));
        // A failure reaches the projections too.
        ctx.publish("svc", Err("down".into()), &projections);
        assert_eq!(ctx.get("svc.names").unwrap().unwrap_err(), "down");
        // Removing the entry removes its projections, and only them.
        ctx.publish("svc", Err("rejected".into()), &[]);
        assert_eq!(ctx.get("svc.anything").unwrap().unwrap_err(), "rejected");
        ctx.remove("svc");
        assert!(ctx.get("svc").is_none() && ctx.get("svc.names").is_none());
        assert!(ctx.get("svc-other").is_some());
    }

    #[test]
    fn specs_are_checked() {
        let ok = parse(
            json!({"kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "projections": [{"name": "names", "jmesPath": "[].metadata.name"}]}),
        );
        assert!(ok.is_ok(), "{ok:?}");
        let both = parse(
            json!({"kubernetesResource": {"version": "v1", "resource": "pods"},
            "apiCall": {"urlPath": "/api/v1/pods"}}),
        );
        assert!(both.unwrap_err().contains("exactly one"));
        let unknown =
            parse(json!({"apiCall": {"urlPath": "/x", "refreshInterval": "1m", "extra": 1}}));
        assert!(unknown.unwrap_err().contains("apiCall"));
        assert!(parse(json!({"apiCall": {"service": {"url": "https://x"}}})).is_ok());
        let no_url = parse(json!({"apiCall": {"service": {"caBundle": "x"}}}));
        assert!(no_url.unwrap_err().contains("needs a url"));
        let interval = parse(json!({"apiCall": {"urlPath": "/x", "refreshInterval": "soon"}}));
        assert!(interval.unwrap_err().contains("not a duration"));
        let data_get =
            parse(json!({"apiCall": {"urlPath": "/x", "data": [{"key": "a", "value": 1}]}}));
        assert!(data_get.unwrap_err().contains("POST"));
        let projection = parse(
            json!({"apiCall": {"urlPath": "/x"}, "projections": [{"name": "p", "jmesPath": "[["}]}),
        );
        assert!(projection.unwrap_err().contains("projection p"));
    }
}
