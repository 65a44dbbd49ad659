//! Kyverno's anchors in a `patchStrategicMerge` overlay
//! (docs/kyverno-semantics.md#mutate-anchors), resolved against the resource
//! before the strategic merge:
//!
//! - conditional `(key)` and global `<(key)` anchors are checked with the
//!   validate pattern semantics; a failed condition on a map abandons the
//!   whole overlay, one in a list element skips that element;
//! - add-if-not-present `+(key)` keeps the key only when the resource
//!   lacks it;
//! - a list element with anchors becomes one element per matching resource
//!   element, addressed by that element's `name`.
//!
//! kyverno-compat: this follows `strategicPreprocessing.go` step by step,
//! quirks included (an anchored element is processed in place across the
//! resource elements; empty maps are dropped from the overlay).

use super::{self as pattern, Anchor, parse_anchor};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub enum AnchorError {
    /// A conditional anchor did not hold.
    Condition(String),
    /// A global anchor did not hold: the rule does not apply.
    Global(String),
    Other(String),
    /// The resource holds something other than a list where the patch has
    /// a list of maps: kyaml's wrong node kind, which the caller words.
    NotAList(Value),
}

fn anchor_of(key: &str) -> Option<Anchor> {
    parse_anchor(key).map(|(a, _)| a)
}

/// Condition or global: the anchors that decide whether a patch applies.
fn contains_condition(a: Option<Anchor>) -> bool {
    matches!(a, Some(Anchor::Condition | Anchor::Global))
}

/// The anchors the preprocessing acts on.
fn has_anchor(a: Option<Anchor>) -> bool {
    contains_condition(a) || a == Some(Anchor::AddIfNotPresent)
}

/// Resolves the anchors of `overlay` against `resource`, in place.
pub fn preprocess(overlay: &mut Value, resource: &Value) -> Result<(), AnchorError> {
    recurse(overlay, Some(resource))?;
    delete_condition_elements(overlay);
    Ok(())
}

/// The overlay as [`preprocess`] leaves it, when that does not depend on
/// the resource (no conditional, global or add-if-not-present anchor):
/// computed once at compile time.
pub fn resource_independent(overlay: &Value) -> Option<Value> {
    if has_anchors(overlay, &has_anchor) {
        return None;
    }
    let mut out = overlay.clone();
    delete_condition_elements(&mut out);
    Some(out)
}

/// What [`preprocess`] checks of the resource for an overlay without
/// anchors (see [`resource_independent`]): where the overlay has a list of
/// maps, the resource has a list there, or nothing. `Err` holds what it
/// has instead.
pub fn lists_of_maps_meet_lists(overlay: &Value, resource: &Value) -> Result<(), Value> {
    fn walk(pattern: &Value, resource: Option<&Value>) -> Result<(), Value> {
        match pattern {
            Value::Object(m) => m
                .iter()
                .try_for_each(|(key, child)| walk(child, resource.and_then(|r| r.get(key)))),
            Value::Array(a) if matches!(a.first(), Some(Value::Object(_))) => match resource {
                None | Some(Value::Null | Value::Array(_)) => Ok(()),
                Some(other) => Err(other.clone()),
            },
            _ => Ok(()),
        }
    }
    walk(overlay, Some(resource))
}

fn recurse(pattern: &mut Value, resource: Option<&Value>) -> Result<(), AnchorError> {
    match pattern {
        Value::Object(_) => walk_map(pattern, resource),
        Value::Array(_) => walk_list(pattern, resource),
        _ => Ok(()),
    }
}

fn walk_map(pattern: &mut Value, resource: Option<&Value>) -> Result<(), AnchorError> {
    handle_add_if_not_present(pattern, resource);
    validate_conditions(pattern, resource)?;
    if let Value::Object(m) = pattern {
        for (key, child) in m.iter_mut() {
            if has_anchor(anchor_of(key)) {
                continue;
            }
            recurse(child, resource.and_then(|r| r.get(key)))?;
        }
    }
    Ok(())
}

fn walk_list(pattern: &mut Value, resource: Option<&Value>) -> Result<(), AnchorError> {
    match pattern.as_array().and_then(|a| a.first()) {
        Some(Value::Object(_)) => process_list_of_maps(pattern, resource),
        _ => Ok(()),
    }
}

fn process_list_of_maps(pattern: &mut Value, resource: Option<&Value>) -> Result<(), AnchorError> {
    // The elements present at the start; processing appends to the list.
    let count = pattern.as_array().map_or(0, Vec::len);
    let resource_elements: &[Value] = match resource {
        None | Some(Value::Null) => &[],
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(AnchorError::NotAList(other.clone()));
        }
    };
    for i in 0..count {
        let Some(element) = pattern.get(i) else {
            break;
        };
        if !has_anchors(element, &has_anchor) {
            continue;
        }
        let has_global = has_anchors(element, &|a| a == Some(Anchor::Global));
        let mut any_global_passed = false;
        let mut last_global_error = None;
        // kyverno-compat: one copy, processed against each resource element in turn.
        let mut copy = element.clone();
        for r in resource_elements {
            match recurse(&mut copy, Some(r)) {
                Err(AnchorError::Condition(_)) => continue,
                Err(e @ AnchorError::Global(_)) => {
                    last_global_error = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
                Ok(()) if has_global => any_global_passed = true,
                Ok(()) => add_named_element(pattern, &copy, r),
            }
        }
        if resource.is_none() {
            match recurse(&mut copy, None) {
                Err(AnchorError::Condition(_)) => continue,
                Err(e) => return Err(e),
                Ok(()) if has_global => any_global_passed = true,
                Ok(()) => {}
            }
        }
        if !any_global_passed && let Some(e) = last_global_error {
            return Err(e);
        }
    }
    Ok(())
}

/// Appends the processed element, named after the resource element it
/// matched, so the strategic merge addresses that element.
fn add_named_element(pattern: &mut Value, processed: &Value, resource_element: &Value) {
    let name = match resource_element.get("name") {
        None | Some(Value::Null) => return,
        Some(Value::String(s)) if s.is_empty() => return,
        Some(n) => n.clone(),
    };
    let mut fresh = processed.clone();
    if delete_anchors(&mut fresh, true, false) {
        return;
    }
    if let Value::Object(m) = &mut fresh {
        m.insert("name".into(), name);
    }
    if let Value::Array(a) = pattern {
        a.push(fresh);
    }
}

/// Drops `+(key)` when the resource has `key`, unwraps it otherwise.
/// Returns how many such anchors there were.
fn handle_add_if_not_present(pattern: &mut Value, resource: Option<&Value>) -> usize {
    let Value::Object(m) = pattern else {
        return 0;
    };
    let anchored: Vec<(String, String)> = m
        .keys()
        .filter_map(|k| match parse_anchor(k) {
            Some((Anchor::AddIfNotPresent, inner)) => Some((k.clone(), inner.to_string())),
            _ => None,
        })
        .collect();
    for (full, key) in &anchored {
        let value = m.remove(full);
        let exists = resource
            .and_then(|r| r.as_object())
            .is_some_and(|r| r.contains_key(key));
        if !exists && let Some(v) = value {
            m.insert(key.clone(), v);
        }
    }
    anchored.len()
}

fn validate_conditions(pattern: &mut Value, resource: Option<&Value>) -> Result<(), AnchorError> {
    check_anchors(pattern, resource, Anchor::Global).map_err(AnchorError::Global)?;
    check_anchors(pattern, resource, Anchor::Condition).map_err(AnchorError::Condition)
}

fn check_anchors(
    pattern: &mut Value,
    resource: Option<&Value>,
    kind: Anchor,
) -> Result<(), String> {
    let Value::Object(m) = pattern else {
        return Ok(());
    };
    let anchored: Vec<(String, String)> = m
        .keys()
        .filter_map(|k| match parse_anchor(k) {
            Some((a, inner)) if a == kind => Some((k.clone(), inner.to_string())),
            _ => None,
        })
        .collect();
    for (full, key) in anchored {
        let Some(value) = resource
            .and_then(|r| r.as_object())
            .and_then(|r| r.get(&key))
        else {
            return Err(format!("could not found \"{key}\" key in the resource"));
        };
        let Some(expected) = m.get_mut(&full) else {
            continue;
        };
        if handle_add_if_not_present(expected, Some(value)) > 0 {
            continue;
        }
        if let Err(e) = pattern::validate(value, expected) {
            return Err(e.into_message());
        }
    }
    Ok(())
}

/// Whether `v` carries an anchor that `pred` accepts, at any depth.
fn has_anchors(v: &Value, pred: &dyn Fn(Option<Anchor>) -> bool) -> bool {
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, x)| pred(anchor_of(k)) || (is_non_empty_node(x) && has_anchors(x, pred))),
        Value::Array(a) => a.iter().any(|x| has_anchors(x, pred)),
        Value::String(s) => contains_condition(anchor_of(s)),
        _ => false,
    }
}

/// kyaml's `!IsNilOrEmpty`: a map or list with content (scalars count as empty).
fn is_non_empty_node(v: &Value) -> bool {
    match v {
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    }
}

fn delete_condition_elements(pattern: &mut Value) {
    let Value::Object(m) = pattern else {
        return;
    };
    m.retain(|key, v| !delete_anchors(v, contains_condition(anchor_of(key)), false));
}

/// Removes condition anchors; true when nothing but anchors was left, so
/// the node must go too (it would otherwise delete resource fields).
fn delete_anchors(node: &mut Value, delete_scalar: bool, traverse_maps: bool) -> bool {
    match node {
        Value::Object(m) => delete_anchors_in_map(m, traverse_maps),
        Value::Array(a) => delete_anchors_in_list(a, traverse_maps),
        _ => delete_scalar,
    }
}

fn delete_anchors_in_map(m: &mut Map<String, Value>, traverse_maps: bool) -> bool {
    let anchored: Vec<String> = m
        .keys()
        .filter(|k| contains_condition(anchor_of(k)))
        .cloned()
        .collect();
    let mut anchors_exist = false;
    for k in anchored {
        let remove = m
            .get_mut(&k)
            .is_some_and(|v| delete_anchors(v, true, traverse_maps));
        if remove {
            m.remove(&k);
        } else {
            anchors_exist = true;
        }
    }
    if anchors_exist {
        let renames: Vec<(String, String)> = m
            .keys()
            .filter_map(|k| match parse_anchor(k) {
                Some((Anchor::Condition | Anchor::Global, inner)) => {
                    Some((k.clone(), inner.to_string()))
                }
                _ => None,
            })
            .collect();
        for (full, key) in renames {
            if let Some(v) = m.remove(&full) {
                m.insert(key, v);
            }
        }
    }
    let mut need_to_delete = true;
    m.retain(|_, v| {
        let remove = delete_anchors(v, false, traverse_maps);
        need_to_delete &= remove;
        !remove
    });
    need_to_delete
}

fn delete_anchors_in_list(list: &mut Vec<Value>, traverse_maps: bool) -> bool {
    let was_empty = list.is_empty();
    let mut originals: Vec<Option<Value>> = std::mem::take(list).into_iter().map(Some).collect();
    // Positions into `originals`, in list order: kyverno-compat, deletion is
    // by index into the shrinking list while the loop walks the originals.
    let mut current: Vec<usize> = (0..originals.len()).collect();
    for (i, slot) in originals.iter_mut().enumerate() {
        let Some(element) = slot.as_mut() else {
            continue;
        };
        let delete = if has_anchors(element, &has_anchor) {
            if traverse_maps && element.is_object() {
                delete_anchors(element, true, traverse_maps)
            } else {
                true
            }
        } else {
            delete_anchors(element, false, traverse_maps)
        };
        if delete && i < current.len() {
            current.remove(i);
        }
    }
    *list = current
        .into_iter()
        .filter_map(|i| originals[i].take())
        .collect();
    list.is_empty() && !was_empty
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(overlay: Value, resource: Value) -> Result<Value, AnchorError> {
        let mut o = overlay;
        preprocess(&mut o, &resource).map(|()| o)
    }

    #[test]
    fn conditions_on_maps_abandon_the_overlay() {
        let res = json!({"metadata": {"labels": {"app": "a"}}});
        let ok = run(
            json!({"metadata": {"labels": {"(app)": "a", "x": "1"}}}),
            res.clone(),
        );
        assert_eq!(ok, Ok(json!({"metadata": {"labels": {"x": "1"}}})));
        let no = run(
            json!({"metadata": {"labels": {"(app)": "b", "x": "1"}}}),
            res,
        );
        assert!(matches!(no, Err(AnchorError::Condition(_))), "{no:?}");
    }

    #[test]
    fn add_if_not_present() {
        let res = json!({"spec": {"a": 1}});
        let got = run(json!({"spec": {"+(a)": 2, "+(b)": 3}}), res).unwrap();
        assert_eq!(got, json!({"spec": {"b": 3}}));
    }

    #[test]
    fn anchored_list_elements_expand_per_matching_element() {
        let res = json!({"spec": {"containers": [
            {"name": "a", "image": "x:latest"},
            {"name": "b", "image": "y:1"},
        ]}});
        let overlay = json!({"spec": {"containers": [
            {"(image)": "*:latest", "imagePullPolicy": "Always"}
        ]}});
        let got = run(overlay, res).unwrap();
        assert_eq!(
            got,
            json!({"spec": {"containers": [{"name": "a", "imagePullPolicy": "Always"}]}})
        );
    }

    #[test]
    fn global_anchor_in_a_list_needs_one_match() {
        let res = json!({"spec": {"containers": [{"name": "a", "image": "corp/x"}]}});
        let overlay = json!({"spec": {
            "containers": [{"<(image)": "corp/*"}],
            "imagePullSecrets": [{"name": "regcred"}],
        }});
        let got = run(overlay.clone(), res).unwrap();
        assert_eq!(
            got,
            json!({"spec": {"imagePullSecrets": [{"name": "regcred"}]}})
        );
        let other = json!({"spec": {"containers": [{"name": "a", "image": "docker/x"}]}});
        assert!(matches!(run(overlay, other), Err(AnchorError::Global(_))));
    }
}
