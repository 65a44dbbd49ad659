//! Context sources served from the informer stores, and the chain that
//! puts them in front of the API fallback: the store first; on a miss, the
//! API client behind its cache ([`super::api`]).

use super::api::{ApiResolver, LookupMetrics};
use crate::cluster::global_context::GlobalContext;
use crate::cluster::stores::Stores;
use crate::context::{ApiCallRequest, ClusterView, ResolveError, Resolver};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Reads the informer stores; never calls the API server.
pub struct InformerResolver {
    stores: Stores,
}

impl InformerResolver {
    pub fn new(stores: Stores) -> InformerResolver {
        InformerResolver { stores }
    }

    /// A cached ConfigMap, or `None` when the cache does not hold it.
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<Value> {
        self.stores
            .config_maps
            .get(namespace, name)
            .map(|cm| cm.to_value())
    }

    /// The kind served as `resource`: built-in, or from the CRDs store.
    pub fn kind_for_resource(&self, api_version: &str, resource: &str) -> Option<String> {
        if let Some(kind) = crate::kinds::kind_for_resource(api_version, resource) {
            return Some(kind.to_string());
        }
        let (group, version) = crate::kinds::split_api_version(api_version);
        self.stores
            .custom_kind_for_resource(group, version, resource)
    }

    /// Whether objects of a kind live in namespaces: built-in, from the
    /// CRDs store, or (for a kind nobody serves) by its name.
    pub fn is_namespaced(&self, api_version: &str, kind: &str) -> bool {
        if let Some(k) = crate::kinds::builtin(api_version, kind) {
            return k.namespaced;
        }
        let (group, _) = crate::kinds::split_api_version(api_version);
        self.stores
            .custom_kind_is_namespaced(group, kind)
            .unwrap_or_else(|| !crate::kinds::is_cluster_scoped(kind))
    }

    pub fn namespace_labels(&self, namespace: &str) -> Option<Map<String, Value>> {
        let key = ObjectRef::<PartialObjectMeta<Namespace>>::new(namespace);
        let ns = self.stores.namespaces.get(&key)?;
        Some(
            ns.metadata
                .labels
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        )
    }
}

/// The admission path's resolver in cluster mode.
pub struct ResolverChain {
    pub informer: InformerResolver,
    /// `apiCall.service` calls, straight through (nothing to cache).
    pub service: super::service::ServiceClient,
    pub global: Arc<GlobalContext>,
    pub api: ApiResolver,
    pub metrics: LookupMetrics,
}

impl Resolver for ResolverChain {
    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<Value>, ResolveError> {
        if let Some(cm) = self.informer.config_map(namespace, name) {
            self.metrics.count("informer");
            return Ok(Some(cm));
        }
        self.api.config_map(namespace, name).map(Some)
    }

    fn api_call(&self, call: &ApiCallRequest) -> Result<Option<Value>, ResolveError> {
        if call.url_path.is_none() && call.url.is_some() {
            self.metrics.count("api");
            return super::api::block_on(self.service.call(call))?.map(Some);
        }
        self.api.api_call(call).map(Some)
    }

    fn global_context(&self, name: &str) -> Result<Option<Arc<Value>>, ResolveError> {
        match self.global.get(name) {
            Some(Ok(data)) => {
                self.metrics.count("informer");
                Ok(Some(data))
            }
            Some(Err(e)) => Err(ResolveError::Failed(format!(
                "global context entry {name}: {e}"
            ))),
            None => Err(ResolveError::Failed(format!(
                "global context entry {name} not found"
            ))),
        }
    }

    fn kind_for_resource(&self, api_version: &str, resource: &str) -> Option<String> {
        self.informer.kind_for_resource(api_version, resource)
    }

    fn is_namespaced(&self, api_version: &str, kind: &str) -> bool {
        self.informer.is_namespaced(api_version, kind)
    }
}

impl ClusterView for ResolverChain {
    fn namespace_labels(&self, namespace: &str) -> Option<Map<String, Value>> {
        self.informer.namespace_labels(namespace)
    }
}
