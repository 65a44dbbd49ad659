//! Context sources served from the informer stores: ConfigMaps cached by
//! the reflector and the labels of Namespaces. Nothing here calls the API
//! server; what the stores do not hold fails loudly until the API fallback
//! exists.

use super::{ApiCallRequest, ClusterView, ResolveError, Resolver};
use crate::cluster::stores::Stores;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Map, Value};

pub struct InformerResolver {
    stores: Stores,
}

impl InformerResolver {
    pub fn new(stores: Stores) -> InformerResolver {
        InformerResolver { stores }
    }
}

impl Resolver for InformerResolver {
    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<Value>, ResolveError> {
        match self.stores.config_maps.get(namespace, name) {
            Some(cm) => Ok(Some(cm.to_value())),
            None => Err(ResolveError::Failed(format!(
                "unsupported: configMap {namespace}/{name} is not in the informer cache \
                 (label it cache.kyverno.io/enabled=true, or serve with --cache-all-configmaps); \
                 the API fallback is not implemented yet"
            ))),
        }
    }

    fn api_call(&self, call: &ApiCallRequest) -> Result<Option<Value>, ResolveError> {
        Err(ResolveError::Failed(format!(
            "unsupported: apiCall context ({}) in cluster mode is not implemented yet",
            call.url_path
                .as_deref()
                .or(call.url.as_deref())
                .unwrap_or("")
        )))
    }

    fn global_context(&self, name: &str) -> Result<Option<Value>, ResolveError> {
        Err(ResolveError::Failed(format!(
            "unsupported: globalReference {name} in cluster mode is not implemented yet"
        )))
    }
}

impl ClusterView for InformerResolver {
    fn namespace_labels(&self, namespace: &str) -> Option<Map<String, Value>> {
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
