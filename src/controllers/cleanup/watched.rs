//! Objects kept in memory from watches, one watch per resource, as the
//! cleanup controller's informers: the cleanup and deleting policies, and
//! the metadata of the objects that carry the TTL label.

use crate::cluster::watch_backoff::relist_at_once;
use futures_util::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::watcher;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// `namespace/name` (or `name`) of a watched object.
pub fn object_key<K: ResourceExt>(o: &K) -> String {
    match o.namespace() {
        Some(ns) => format!("{ns}/{}", o.name_any()),
        None => o.name_any(),
    }
}

/// What the watches hold: by resource id, by object key.
pub type Objects<V> = Arc<Mutex<HashMap<String, HashMap<String, V>>>>;

/// A watch that stops when dropped (the lead lost, the resource gone).
pub struct Watch(tokio::task::JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Keeps `into[id]` in line with the watch `events`; `convert` makes the
/// stored value (None leaves the object out).
pub fn spawn<K, V, S, F>(id: String, events: S, into: Objects<V>, convert: F) -> Watch
where
    K: ResourceExt + Send + 'static,
    V: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    F: Fn(&K) -> Option<V> + Send + 'static,
{
    Watch(tokio::spawn(async move {
        let mut events = std::pin::pin!(relist_at_once(events));
        let mut listing: HashMap<String, V> = HashMap::new();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => listing.clear(),
                Ok(watcher::Event::InitApply(o)) => {
                    if let Some(v) = convert(&o) {
                        listing.insert(object_key(&o), v);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    let objects = std::mem::take(&mut listing);
                    lock(&into).insert(id.clone(), objects);
                }
                Ok(watcher::Event::Apply(o)) => {
                    let key = object_key(&o);
                    let mut all = lock(&into);
                    let set = all.entry(id.clone()).or_default();
                    match convert(&o) {
                        Some(v) => set.insert(key, v),
                        None => set.remove(&key),
                    };
                }
                Ok(watcher::Event::Delete(o)) => {
                    if let Some(set) = lock(&into).get_mut(&id) {
                        set.remove(&object_key(&o));
                    }
                }
                Err(e) => tracing::debug!(resource = id, error = %e, "watch failed; it resumes"),
            }
        }
    }))
}

/// The map, even if a holder panicked (it holds plain data).
pub fn lock<V>(
    objects: &Objects<V>,
) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, V>>> {
    objects.lock().unwrap_or_else(|e| e.into_inner())
}
