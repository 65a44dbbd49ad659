//! The ConfigMap cache. ConfigMaps are the bulk of what gavel caches (tens
//! of thousands in a large cluster), so each is kept compactly: every
//! string it has in one buffer, fields as spans into it. That costs about
//! the object's JSON size, where a typed object with its maps and strings
//! costs about three times as much. The JSON a policy sees is built on
//! lookup.

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
}

type Pairs = Box<[(Span, Span)]>;

/// One ConfigMap as a policy's configMap context sees it.
#[derive(Debug)]
pub struct CachedConfigMap {
    text: Box<str>,
    name: Span,
    namespace: Span,
    uid: Span,
    resource_version: Span,
    creation_timestamp: Span,
    labels: Pairs,
    annotations: Pairs,
    data: Pairs,
    binary_data: Pairs,
    immutable: Option<bool>,
}

/// Collects the strings of one object into one buffer.
#[derive(Default)]
struct Arena {
    text: String,
}

impl Arena {
    fn push(&mut self, s: &str) -> Span {
        let start = self.text.len() as u32;
        self.text.push_str(s);
        Span {
            start,
            len: s.len() as u32,
        }
    }

    fn pairs<'a>(&mut self, map: impl Iterator<Item = (&'a String, &'a str)>) -> Pairs {
        map.map(|(k, v)| (self.push(k), self.push(v))).collect()
    }
}

impl CachedConfigMap {
    pub fn new(cm: &ConfigMap) -> CachedConfigMap {
        let meta = &cm.metadata;
        let mut arena = Arena::default();
        let text = |o: &Option<String>| o.as_deref().unwrap_or_default().to_string();
        let name = arena.push(&text(&meta.name));
        let namespace = arena.push(&text(&meta.namespace));
        let uid = arena.push(&text(&meta.uid));
        let resource_version = arena.push(&text(&meta.resource_version));
        let creation_timestamp = arena.push(
            &meta
                .creation_timestamp
                .as_ref()
                .and_then(|t| serde_json::to_value(t).ok())
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        );
        let empty = BTreeMap::new();
        let labels = arena.pairs(
            meta.labels
                .as_ref()
                .unwrap_or(&empty)
                .iter()
                .map(|(k, v)| (k, v.as_str())),
        );
        let annotations = arena.pairs(
            meta.annotations
                .as_ref()
                .unwrap_or(&empty)
                .iter()
                .filter(|(k, _)| *k != "kubectl.kubernetes.io/last-applied-configuration")
                .map(|(k, v)| (k, v.as_str())),
        );
        let data = arena.pairs(
            cm.data
                .as_ref()
                .unwrap_or(&empty)
                .iter()
                .map(|(k, v)| (k, v.as_str())),
        );
        let binary: Vec<(String, String)> = cm
            .binary_data
            .iter()
            .flatten()
            .map(|(k, v)| {
                let encoded = serde_json::to_value(v)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                (k.clone(), encoded)
            })
            .collect();
        let binary_data = arena.pairs(binary.iter().map(|(k, v)| (k, v.as_str())));
        CachedConfigMap {
            text: arena.text.into_boxed_str(),
            name,
            namespace,
            uid,
            resource_version,
            creation_timestamp,
            labels,
            annotations,
            data,
            binary_data,
            immutable: cm.immutable,
        }
    }

    fn str(&self, span: Span) -> &str {
        &self.text[span.start as usize..(span.start + span.len) as usize]
    }

    pub fn name(&self) -> &str {
        self.str(self.name)
    }

    pub fn namespace(&self) -> &str {
        self.str(self.namespace)
    }

    fn object(&self, pairs: &Pairs) -> Value {
        Value::Object(
            pairs
                .iter()
                .map(|&(k, v)| {
                    (
                        self.str(k).to_string(),
                        Value::String(self.str(v).to_string()),
                    )
                })
                .collect(),
        )
    }

    /// The ConfigMap as JSON, as the API would serve it (without
    /// managedFields and the last-applied annotation).
    pub fn to_value(&self) -> Value {
        let mut meta = Map::new();
        for (field, span) in [
            ("name", self.name),
            ("namespace", self.namespace),
            ("uid", self.uid),
            ("resourceVersion", self.resource_version),
            ("creationTimestamp", self.creation_timestamp),
        ] {
            if span.len > 0 {
                meta.insert(field.into(), Value::String(self.str(span).to_string()));
            }
        }
        if !self.labels.is_empty() {
            meta.insert("labels".into(), self.object(&self.labels));
        }
        if !self.annotations.is_empty() {
            meta.insert("annotations".into(), self.object(&self.annotations));
        }
        let mut out = Map::new();
        out.insert("apiVersion".into(), "v1".into());
        out.insert("kind".into(), "ConfigMap".into());
        out.insert("metadata".into(), Value::Object(meta));
        if !self.data.is_empty() {
            out.insert("data".into(), self.object(&self.data));
        }
        if !self.binary_data.is_empty() {
            out.insert("binaryData".into(), self.object(&self.binary_data));
        }
        if let Some(immutable) = self.immutable {
            out.insert("immutable".into(), immutable.into());
        }
        Value::Object(out)
    }
}

fn key(namespace: &str, name: &str) -> String {
    let mut k = String::with_capacity(namespace.len() + name.len() + 1);
    k.push_str(namespace);
    k.push('/');
    k.push_str(name);
    k
}

/// The cache, fed by a ConfigMap watcher.
#[derive(Debug)]
pub struct ConfigMapStore {
    map: RwLock<HashMap<Box<str>, Arc<CachedConfigMap>>>,
    ready: watch::Sender<bool>,
}

impl Default for ConfigMapStore {
    fn default() -> ConfigMapStore {
        ConfigMapStore {
            map: RwLock::new(HashMap::new()),
            ready: watch::channel(false).0,
        }
    }
}

impl ConfigMapStore {
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedConfigMap>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.get(key(namespace, name).as_str()).cloned()
    }

    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once the first list has been applied.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|r| *r).await.map(|_| ());
    }

    fn insert(map: &mut HashMap<Box<str>, Arc<CachedConfigMap>>, cm: &ConfigMap) {
        let cached = CachedConfigMap::new(cm);
        map.insert(
            key(cached.namespace(), cached.name()).into_boxed_str(),
            Arc::new(cached),
        );
    }

    /// Applies watcher events for as long as the stream runs. A relist
    /// builds a fresh map and swaps it in whole, so readers never see a
    /// half-listed cache.
    pub async fn run<S>(self: Arc<Self>, stream: S)
    where
        S: Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>>,
    {
        let mut fresh: Option<HashMap<Box<str>, Arc<CachedConfigMap>>> = None;
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => fresh = Some(HashMap::new()),
                Ok(watcher::Event::InitApply(cm)) => {
                    if let Some(map) = fresh.as_mut() {
                        Self::insert(map, &cm);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(mut map) = fresh.take() {
                        map.shrink_to_fit();
                        *self.map.write().unwrap_or_else(|e| e.into_inner()) = map;
                    }
                    self.ready.send_replace(true);
                }
                Ok(watcher::Event::Apply(cm)) => Self::insert(
                    &mut self.map.write().unwrap_or_else(|e| e.into_inner()),
                    &cm,
                ),
                Ok(watcher::Event::Delete(cm)) => {
                    let k = key(
                        cm.metadata.namespace.as_deref().unwrap_or_default(),
                        cm.metadata.name.as_deref().unwrap_or_default(),
                    );
                    self.map
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(k.as_str());
                }
                Err(e) => {
                    tracing::warn!(store = "configmaps", error = %e, "watch failed; retrying")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compact_form_round_trips() {
        let original = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "settings", "namespace": "team-a", "uid": "u-1",
                "resourceVersion": "42", "creationTimestamp": "2026-11-22T03:00:00Z",
                "labels": {"cache.kyverno.io/enabled": "true"},
                "annotations": {"note": "kept", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubectl"}],
            },
            "data": {"mode": "strict", "list": "[\"a\",\"b\"]"},
            "binaryData": {"blob": "aGVsbG8="},
        });
        let cm: ConfigMap = serde_json::from_value(original.clone()).unwrap();
        let cached = CachedConfigMap::new(&cm);
        let mut want = original;
        want["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        want["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("kubectl.kubernetes.io/last-applied-configuration");
        assert_eq!(cached.to_value(), want);
        assert_eq!((cached.namespace(), cached.name()), ("team-a", "settings"));
    }
}
