//! Server-side apply's merge (structured-merge-diff): what the API server
//! does with a MutatingAdmissionPolicy's ApplyConfiguration. Objects merge
//! field by field; lists merge as their `x-kubernetes-list-type` says:
//! `map` lists item by item on their keys, `set` lists as a union, and
//! every other list (including those of kinds the schema does not know)
//! is replaced whole.

use crate::kinds::schema::{ListKind, Schema};
use serde_json::Value;

/// Merges `config` into `live`, the way apply merges an applied
/// configuration into the live object. `schema` is the live object's
/// schema, if it is a built-in kind.
pub fn merge(live: &Value, config: &Value, schema: Option<Schema>) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) => {
            let mut out = l.clone();
            for (k, cv) in c {
                let sub = schema.and_then(|s| s.field(k));
                let merged = match out.get(k) {
                    Some(lv) => merge(lv, cv, sub),
                    None => cv.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(c)) => {
            let kind = schema.map_or(ListKind::Atomic, Schema::list_kind);
            let elements = schema.and_then(Schema::elements);
            match kind {
                ListKind::Atomic => config.clone(),
                ListKind::Set | ListKind::Map(_) => Value::Array(merge_list(l, c, kind, elements)),
            }
        }
        _ => config.clone(),
    }
}

/// The identity of a list item: the item itself in a set, its key fields
/// in a map list (a missing key reads as null).
fn key_of(item: &Value, kind: ListKind) -> Value {
    match kind {
        ListKind::Map(keys) => Value::Array(
            keys.iter()
                .map(|k| item.get(*k).cloned().unwrap_or(Value::Null))
                .collect(),
        ),
        _ => item.clone(),
    }
}

/// Merges two associative lists keeping apply's order: live items stay
/// where they were, items only in the configuration are placed after the
/// live items before the next shared one, and shared items follow the
/// configuration's order.
fn merge_list(
    live: &[Value],
    config: &[Value],
    kind: ListKind,
    elements: Option<Schema>,
) -> Vec<Value> {
    let lkeys: Vec<Value> = live.iter().map(|i| key_of(i, kind)).collect();
    let ckeys: Vec<Value> = config.iter().map(|i| key_of(i, kind)).collect();
    let in_config = |k: &Value| ckeys.contains(k);
    let live_item = |k: &Value| lkeys.iter().position(|x| x == k).map(|i| &live[i]);
    // Shared keys in the configuration's order: the order they must keep.
    let mut shared = ckeys.iter().filter(|k| lkeys.contains(k));
    let mut next_shared = shared.next();
    let mut merged: Vec<&Value> = Vec::new();
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let merge_item = |l: Option<&Value>, c: &Value| match l {
        Some(l) => merge(l, c, elements),
        None => c.clone(),
    };
    let (mut li, mut ci) = (0, 0);
    while li < live.len() || ci < config.len() {
        if li < live.len() && ci < config.len() {
            if lkeys[li] == ckeys[ci] {
                merged.push(&ckeys[ci]);
                out.push(merge_item(Some(&live[li]), &config[ci]));
                li += 1;
                ci += 1;
                next_shared = shared.next();
                continue;
            }
            // A shared item that is not the next one in the
            // configuration's order: it is placed later.
            if in_config(&lkeys[li]) && next_shared.is_some_and(|n| *n != lkeys[li]) {
                li += 1;
                continue;
            }
        }
        if li < live.len() {
            if !in_config(&lkeys[li]) {
                out.push(live[li].clone());
                li += 1;
                continue;
            }
            if merged.contains(&&lkeys[li]) {
                li += 1;
                continue;
            }
        }
        if ci < config.len() {
            let key = &ckeys[ci];
            if !merged.contains(&key) {
                merged.push(key);
                out.push(merge_item(live_item(key), &config[ci]));
            }
            ci += 1;
            if next_shared == Some(key) {
                next_shared = shared.next();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_merge(live: Value, config: Value) -> Value {
        merge(&live, &config, Schema::for_kind("v1", "Pod"))
    }

    #[test]
    fn map_lists_merge_items_by_key() {
        let live = json!({"spec": {"containers": [
            {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}});
        let config = json!({"spec": {"containers": [
            {"name": "b", "imagePullPolicy": "Always"}, {"name": "c", "image": "c:1"}]}});
        assert_eq!(
            pod_merge(live, config),
            json!({"spec": {"containers": [
                {"name": "a", "image": "a:1"},
                {"name": "b", "image": "b:1", "imagePullPolicy": "Always"},
                {"name": "c", "image": "c:1"}]}})
        );
    }

    #[test]
    fn shared_items_follow_the_configuration_order() {
        let live = json!({"spec": {"volumes": [{"name": "x"}, {"name": "a"}, {"name": "b"}]}});
        let config = json!({"spec": {"volumes": [{"name": "b"}, {"name": "n"}, {"name": "a"}]}});
        assert_eq!(
            pod_merge(live, config),
            json!({"spec": {"volumes": [{"name": "x"}, {"name": "b"}, {"name": "n"}, {"name": "a"}]}})
        );
    }

    #[test]
    fn atomic_lists_are_replaced_and_sets_united() {
        let live = json!({"metadata": {"finalizers": ["a", "b"]},
                          "spec": {"tolerations": [{"key": "x"}]}});
        let config = json!({"metadata": {"finalizers": ["c", "a"]},
                            "spec": {"tolerations": [{"key": "y"}]}});
        assert_eq!(
            pod_merge(live, config),
            json!({"metadata": {"finalizers": ["c", "a", "b"]},
                   "spec": {"tolerations": [{"key": "y"}]}})
        );
    }

    #[test]
    fn unknown_kinds_merge_objects_and_replace_lists() {
        let live = json!({"spec": {"a": 1, "list": [1, 2], "m": {"x": 1}}});
        let config = json!({"spec": {"list": [3], "m": {"y": 2}}});
        assert_eq!(
            merge(&live, &config, None),
            json!({"spec": {"a": 1, "list": [3], "m": {"x": 1, "y": 2}}})
        );
    }

    #[test]
    fn multi_key_items_match_on_every_key() {
        let live = json!({"spec": {"containers": [{"name": "c", "ports": [
            {"containerPort": 80, "protocol": "TCP"}]}]}});
        let config = json!({"spec": {"containers": [{"name": "c", "ports": [
            {"containerPort": 80, "protocol": "UDP"},
            {"containerPort": 80, "protocol": "TCP", "name": "http"}]}]}});
        assert_eq!(
            pod_merge(live, config),
            json!({"spec": {"containers": [{"name": "c", "ports": [
                {"containerPort": 80, "protocol": "UDP"},
                {"containerPort": 80, "protocol": "TCP", "name": "http"}]}]}})
        );
    }
}
