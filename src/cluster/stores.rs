//! Informer-backed stores (kube-runtime reflectors) of everything the
//! admission path reads: policies, exceptions, Namespace metadata and
//! cached ConfigMaps. managedFields and the last-applied annotation are
//! stripped before storing: they are most of an object's bytes and no
//! policy reads them.

use super::config_maps::ConfigMapStore;
use super::watch_backoff::relist_at_once;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use tokio::sync::watch;

/// Kyverno's label for ConfigMaps that its informer caches.
pub const CACHE_LABEL: &str = "cache.kyverno.io/enabled=true";

/// Which objects the stores hold.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Cache every ConfigMap, not only those labelled [`CACHE_LABEL`].
    pub cache_all_config_maps: bool,
}

/// The readers of every store, and a signal for policy changes.
#[derive(Clone)]
pub struct Stores {
    pub cluster_policies: Store<DynamicObject>,
    pub policies: Store<DynamicObject>,
    pub exceptions: Store<DynamicObject>,
    /// The policies.kyverno.io kinds the cluster serves (ValidatingPolicy,
    /// MutatingPolicy and their namespaced forms), at their preferred
    /// version; none when their CRDs are not installed.
    pub cel_policies: Vec<(ApiResource, Store<DynamicObject>)>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub config_maps: Arc<ConfigMapStore>,
    /// The cluster's CRDs (names, scope and served versions; their schemas
    /// are dropped): the kinds of custom resources no built-in table
    /// knows, for a subresource request's parent kind and a paramKind's
    /// scope. Not awaited for readiness: nothing else depends on it.
    pub custom_kinds: Store<CustomKind>,
    /// Bumped whenever a policy or exception store changes.
    pub policies_changed: watch::Receiver<u64>,
    /// What each store's watch has seen.
    pub activity: StoreActivity,
}

/// The store a series is about: its resource (plural) name.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabel {
    pub store: String,
}

/// Per store: the watch events and failures its reflector saw, and when
/// the last event came (the dashboards' staleness: a store whose watch
/// keeps failing stops receiving events).
#[derive(Debug, Clone, Default)]
pub struct StoreActivity {
    pub events: Family<StoreLabel, Counter>,
    pub errors: Family<StoreLabel, Counter>,
    pub last_event: Family<StoreLabel, Gauge<f64, AtomicU64>>,
}

/// One store's series, resolved once when its watch starts (no label
/// allocation or family lookup per event). The counters exist at zero
/// from then on: a failure counter that appeared only on the first failure
/// would read as "not exported" to a dashboard, and `rate()` needs the zero.
#[derive(Debug, Clone)]
struct StoreWatch {
    events: Counter,
    errors: Counter,
    last_event: Gauge<f64, AtomicU64>,
}

impl StoreWatch {
    fn observe<T>(&self, event: &Result<T, watcher::Error>) {
        match event {
            Ok(_) => {
                self.events.inc();
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                self.last_event.set(now);
            }
            Err(_) => {
                self.errors.inc();
            }
        }
    }
}

impl StoreActivity {
    fn watch(&self, store: &str) -> StoreWatch {
        let label = StoreLabel {
            store: store.to_string(),
        };
        StoreWatch {
            events: self.events.get_or_create(&label).clone(),
            errors: self.errors.get_or_create(&label).clone(),
            last_event: self.last_event.get_or_create(&label).clone(),
        }
    }

    /// Registers the counters; the sizes are read from `stores` at each
    /// scrape.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry, stores: &Stores) {
        registry.register(
            "gavel_store_events",
            "Watch events each informer store applied",
            self.events.clone(),
        );
        registry.register(
            "gavel_store_watch_errors",
            "Watch failures of each informer store (each is retried with backoff)",
            self.errors.clone(),
        );
        registry.register(
            "gavel_store_last_event_timestamp_seconds",
            "When each informer store last applied a watch event (Unix time)",
            self.last_event.clone(),
        );
        registry.register_collector(Box::new(StoreSizes(stores.clone())));
    }
}

/// `gavel_store_objects`: how many objects each store holds, counted when
/// scraped.
#[derive(Clone)]
struct StoreSizes(Stores);

impl std::fmt::Debug for StoreSizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreSizes")
    }
}

impl Collector for StoreSizes {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let mut sizes: Vec<(String, usize)> = vec![
            ("clusterpolicies".into(), s.cluster_policies.state().len()),
            ("policies".into(), s.policies.state().len()),
            ("policyexceptions".into(), s.exceptions.state().len()),
            ("namespaces".into(), s.namespaces.state().len()),
            ("configmaps".into(), s.config_maps.len()),
            (
                "customresourcedefinitions".into(),
                s.custom_kinds.state().len(),
            ),
        ];
        for (resource, store) in &s.cel_policies {
            sizes.push((store_name(resource), store.state().len()));
        }
        let mut family = encoder.encode_descriptor(
            "gavel_store_objects",
            "Objects each informer store holds",
            None,
            MetricType::Gauge,
        )?;
        for (store, n) in sizes {
            let label = StoreLabel { store };
            ConstGauge::new(n as i64).encode(family.encode_family(&label)?)?;
        }
        Ok(())
    }
}

/// CRDs listed per request by the custom kinds store.
const CRD_PAGE_SIZE: u32 = 10;

/// A CustomResourceDefinition as the custom kinds store reads it: names,
/// scope and served versions. Reading into this rather than k8s-openapi's
/// full type skips the OpenAPI schemas while they are parsed; decoding
/// Kyverno's CRDs into the full type cost gavel a 45 MiB RSS peak at start.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct CustomKind {
    pub metadata: ObjectMeta,
    pub spec: CustomKindSpec,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct CustomKindSpec {
    pub group: String,
    pub names: CustomKindNames,
    pub scope: String,
    #[serde(default)]
    pub versions: Vec<CustomKindVersion>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct CustomKindNames {
    pub kind: String,
    pub plural: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct CustomKindVersion {
    pub name: String,
    #[serde(default)]
    pub served: bool,
}

impl Resource for CustomKind {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "CustomResourceDefinition".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "apiextensions.k8s.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "customresourcedefinitions".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub fn cluster_policy_resource() -> ApiResource {
    resource("kyverno.io", "v1", "ClusterPolicy", "clusterpolicies")
}

pub fn policy_resource() -> ApiResource {
    resource("kyverno.io", "v1", "Policy", "policies")
}

pub fn exception_resource() -> ApiResource {
    resource("kyverno.io", "v2", "PolicyException", "policyexceptions")
}

/// The CEL policy kinds gavel serves from the cluster, and the
/// PolicyException of their group (which exempts resources from them).
pub const CEL_POLICY_KINDS: &[&str] = &[
    "ValidatingPolicy",
    "NamespacedValidatingPolicy",
    "MutatingPolicy",
    "NamespacedMutatingPolicy",
    "GeneratingPolicy",
    "NamespacedGeneratingPolicy",
    "ImageValidatingPolicy",
    "NamespacedImageValidatingPolicy",
    "PolicyException",
];

/// A kind named with its group (`PolicyException.policies.kyverno.io`):
/// PolicyException is a kind of kyverno.io and of policies.kyverno.io.
pub fn qualified_kind(resource: &ApiResource) -> String {
    format!("{}.{}", resource.kind, resource.group)
}

/// A store's name in metrics and logs: its plural, qualified with its
/// group where kyverno.io has the same plural (`policyexceptions` is a
/// kind of both groups, and two series with one label would merge).
pub fn store_name(resource: &ApiResource) -> String {
    if resource.group == "policies.kyverno.io" && resource.plural == "policyexceptions" {
        format!("{}.{}", resource.plural, resource.group)
    } else {
        resource.plural.clone()
    }
}

/// Finds which of [`CEL_POLICY_KINDS`] the cluster serves, and at which
/// version (the group's preferred one that has the kind). A cluster
/// without Kyverno's CEL CRDs serves none; that is not an error.
pub async fn discover_cel_policy_kinds(client: &Client) -> Vec<ApiResource> {
    let group = match kube::discovery::group(client, "policies.kyverno.io").await {
        Ok(group) => group,
        Err(e) => {
            tracing::info!(error = %e, "policies.kyverno.io is not served; CEL policy kinds are not watched");
            return Vec::new();
        }
    };
    group
        .recommended_resources()
        .into_iter()
        .map(|(resource, _)| resource)
        .filter(|r| CEL_POLICY_KINDS.contains(&r.kind.as_str()))
        .collect()
}

/// Removes what no policy reads and what makes up most of an object's size.
pub(crate) fn strip<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

impl Stores {
    /// Starts a reflector per store on the current runtime. Each keeps
    /// itself up to date (relisting after a 410 or a lost watch, with
    /// backoff) for as long as the runtime runs.
    pub fn start(client: Client, opts: &StoreOptions, cel_kinds: Vec<ApiResource>) -> Stores {
        let (changed_tx, policies_changed) = watch::channel(0u64);
        let activity = StoreActivity::default();
        let dynamic = |ar: ApiResource| -> Store<DynamicObject> {
            let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
            let seen = activity.watch(&store_name(&ar));
            let writer = reflector::store::Writer::new(ar);
            let reader = writer.as_reader();
            let changed = changed_tx.clone();
            let stream = relist_at_once(watcher(api, watcher::Config::default())).modify(strip);
            tokio::spawn(reflector::reflector(writer, stream).for_each(move |event| {
                seen.observe(&event);
                match event {
                    Ok(_) => changed.send_modify(|n| *n += 1),
                    Err(e) => tracing::warn!(error = %e, "policy watch failed; retrying"),
                }
                std::future::ready(())
            }));
            reader
        };
        let cluster_policies = dynamic(cluster_policy_resource());
        let policies = dynamic(policy_resource());
        let exceptions = dynamic(exception_resource());
        let cel_policies = cel_kinds
            .into_iter()
            .map(|r| (r.clone(), dynamic(r)))
            .collect();

        let (namespaces, writer) = reflector::store();
        // Metadata only: namespaceSelector and namespace labels need no more.
        let stream = relist_at_once(watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            watcher::Config::default(),
        ))
        .modify(strip);
        tokio::spawn(drive(
            "namespaces",
            activity.watch("namespaces"),
            reflector::reflector(writer, stream),
        ));

        let config_maps = Arc::new(ConfigMapStore::default());
        let config = if opts.cache_all_config_maps {
            watcher::Config::default()
        } else {
            watcher::Config::default().labels(CACHE_LABEL)
        };
        let seen = activity.watch("configmaps");
        let stream = relist_at_once(watcher(Api::<ConfigMap>::all(client.clone()), config))
            .inspect(move |event| seen.observe(event));
        tokio::spawn(config_maps.clone().run(stream));

        let (custom_kinds, writer) = reflector::store();
        // A few CRDs a page: Kyverno's own are hundreds of KiB of schema
        // each, and a list response is held whole while it is read.
        let stream = relist_at_once(watcher(
            Api::<CustomKind>::all(client),
            watcher::Config::default().page_size(CRD_PAGE_SIZE),
        ))
        .modify(strip);
        tokio::spawn(drive(
            "customresourcedefinitions",
            activity.watch("customresourcedefinitions"),
            reflector::reflector(writer, stream),
        ));

        Stores {
            cluster_policies,
            policies,
            exceptions,
            cel_policies,
            namespaces,
            config_maps,
            custom_kinds,
            policies_changed,
            activity,
        }
    }

    /// The kind a CRD serves as `resource` in `group`/`version`.
    pub fn custom_kind_for_resource(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<String> {
        self.custom_kinds
            .state()
            .iter()
            .find(|crd| {
                crd.spec.group == group
                    && crd.spec.names.plural == resource
                    && crd
                        .spec
                        .versions
                        .iter()
                        .any(|v| v.name == version && v.served)
            })
            .map(|crd| crd.spec.names.kind.clone())
    }

    /// Whether a CRD's kind lives in namespaces; `None` when no CRD serves it.
    pub fn custom_kind_is_namespaced(&self, group: &str, kind: &str) -> Option<bool> {
        self.custom_kinds
            .state()
            .iter()
            .find(|crd| crd.spec.group == group && crd.spec.names.kind == kind)
            .map(|crd| crd.spec.scope == "Namespaced")
    }

    /// Resolves once every store has completed its first list.
    pub async fn synced(&self) {
        let _ = self.cluster_policies.wait_until_ready().await;
        let _ = self.policies.wait_until_ready().await;
        let _ = self.exceptions.wait_until_ready().await;
        for (_, store) in &self.cel_policies {
            let _ = store.wait_until_ready().await;
        }
        let _ = self.namespaces.wait_until_ready().await;
        self.config_maps.wait_until_ready().await;
    }
}

async fn drive<S, T>(what: &'static str, seen: StoreWatch, stream: S)
where
    S: futures_util::Stream<Item = Result<T, watcher::Error>>,
{
    stream
        .for_each(|event| {
            seen.observe(&event);
            if let Err(e) = event {
                tracing::warn!(store = what, error = %e, "watch failed; retrying");
            }
            std::future::ready(())
        })
        .await
}
