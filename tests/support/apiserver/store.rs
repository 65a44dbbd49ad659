//! Objects, resource versions and the event history that watches replay.
//!
//! One counter gives every write a resourceVersion, as etcd's revision does.
//! The history is bounded; what falls out of it (or is dropped by
//! [`Store::compact`]) answers `410 Gone` to a watch that asks for it.

use super::selector::Selector;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, VecDeque};

/// (group, plural) of a resource type.
pub type TypeKey = (String, String);

/// (namespace, name); the namespace is empty for cluster-scoped objects.
pub type ObjectKey = (String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    pub ty: TypeKey,
    pub kind: EventType,
    pub object: Value,
    /// The object before a modification, so that a filtered watch can turn
    /// an object leaving its selector into DELETED (and entering into ADDED).
    pub old: Option<Value>,
}

pub struct Store {
    pub objects: BTreeMap<TypeKey, BTreeMap<ObjectKey, Value>>,
    /// The resourceVersion of the last write.
    pub rv: u64,
    pub history: VecDeque<Event>,
    /// Events with a resourceVersion at or below this are gone.
    pub compacted: u64,
    pub history_limit: usize,
    next_uid: u64,
}

impl Store {
    pub fn new(history_limit: usize) -> Store {
        Store {
            objects: BTreeMap::new(),
            rv: 1,
            history: VecDeque::new(),
            compacted: 1,
            history_limit,
            next_uid: 1,
        }
    }

    pub fn uid(&mut self) -> String {
        self.next_uid += 1;
        format!(
            "00000000-0000-4000-8000-{:012x}",
            self.next_uid & 0xffff_ffff_ffff
        )
    }

    pub fn get(&self, ty: &TypeKey, key: &ObjectKey) -> Option<&Value> {
        self.objects.get(ty)?.get(key)
    }

    /// Stores `object` under a new resourceVersion and records the event.
    pub fn write(&mut self, ty: &TypeKey, key: ObjectKey, mut object: Value) -> Value {
        self.rv += 1;
        set_meta(&mut object, "resourceVersion", self.rv.to_string().into());
        let old = self
            .objects
            .entry(ty.clone())
            .or_default()
            .insert(key, object.clone());
        let kind = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(ty, kind, object.clone(), old);
        object
    }

    pub fn remove(&mut self, ty: &TypeKey, key: &ObjectKey) -> Option<Value> {
        let mut object = self.objects.get_mut(ty)?.remove(key)?;
        self.rv += 1;
        // kyverno-compat: like the real API, the DELETED event carries the
        // object at the resourceVersion of its deletion.
        set_meta(&mut object, "resourceVersion", self.rv.to_string().into());
        self.record(ty, EventType::Deleted, object.clone(), None);
        Some(object)
    }

    fn record(&mut self, ty: &TypeKey, kind: EventType, object: Value, old: Option<Value>) {
        self.history.push_back(Event {
            rv: self.rv,
            ty: ty.clone(),
            kind,
            object,
            old,
        });
        while self.history.len() > self.history_limit {
            let dropped = self.history.pop_front().expect("non-empty");
            self.compacted = dropped.rv;
        }
    }

    /// Drops the whole history, as etcd compaction does: a watch from any
    /// earlier resourceVersion now gets 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// The events after `rv` (exclusive); `Err` when some of them are gone.
    pub fn events_after(&self, rv: u64) -> Result<impl Iterator<Item = &Event>, u64> {
        if rv < self.compacted {
            return Err(self.compacted);
        }
        let start = self.history.partition_point(|e| e.rv <= rv);
        Ok(self.history.range(start..))
    }
}

pub fn set_meta(object: &mut Value, field: &str, value: Value) {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let meta = object
        .as_object_mut()
        .expect("object")
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
        .expect("object")
        .insert(field.to_string(), value);
}

pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// Which objects a list or watch asks for.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Empty for all namespaces.
    pub namespace: String,
    pub labels: Selector,
    pub fields: Selector,
}

impl Filter {
    pub fn matches(&self, object: &Value) -> bool {
        let namespace = meta_str(object, "namespace").unwrap_or_default();
        if !self.namespace.is_empty() && namespace != self.namespace {
            return false;
        }
        let empty = Map::new();
        let labels = object
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        if !self
            .labels
            .matches(|k| labels.get(k).and_then(Value::as_str))
        {
            return false;
        }
        self.fields.matches(|field| match field {
            "metadata.name" => meta_str(object, "name"),
            "metadata.namespace" => Some(namespace),
            _ => None,
        })
    }
}
