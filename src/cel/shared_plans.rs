//! One plan per distinct request-wide expression, whichever policies hold
//! it: the plan's address is how a request recognises a value it has
//! already computed for another policy (`allContainers` is the same list
//! in a dozen Pod Security policies). Keys of other request-wide answers
//! (which resources a policy's constraints select) are interned the same
//! way.

use super::direct::Node;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Interned values by their text. Entries are weak: a value lives as long
/// as a policy holds it.
type Table<T> = Mutex<Option<HashMap<String, Weak<T>>>>;

/// Plans by their canonical form (the compiled tree's debug text, which
/// is the same for the same expression however it is spaced or
/// parenthesised).
static PLANS: Table<Node> = Mutex::new(None);

/// Keys by their text: equal texts, one `Arc`.
static KEYS: Table<str> = Mutex::new(None);

/// How many entries a table may hold before dead ones are swept.
const SWEEP_AT: usize = 1024;

/// The plan every policy with this expression shares.
pub fn intern(node: Node) -> Arc<Node> {
    intern_in(&PLANS, format!("{node:?}"), |_| Arc::new(node))
}

/// The key every holder of this text shares; compare with `Arc::ptr_eq`.
pub fn intern_key(text: String) -> Arc<str> {
    intern_in(&KEYS, text, |text| Arc::from(text))
}

/// The live value of `table` for `text`, else `make(text)`, recorded.
fn intern_in<T: ?Sized>(
    table: &Table<T>,
    text: String,
    make: impl FnOnce(&str) -> Arc<T>,
) -> Arc<T> {
    // A poisoned lock only means another thread panicked while holding
    // it; the table is still a valid cache.
    let mut guard = table.lock().unwrap_or_else(|p| p.into_inner());
    let entries = guard.get_or_insert_with(HashMap::new);
    if let Some(value) = entries.get(&text).and_then(Weak::upgrade) {
        return value;
    }
    if entries.len() >= SWEEP_AT {
        entries.retain(|_, value| value.strong_count() > 0);
    }
    let value = make(&text);
    entries.insert(text, Arc::downgrade(&value));
    value
}

#[cfg(test)]
mod tests {
    use crate::cel::Program;
    use std::sync::Arc;

    #[test]
    fn the_same_expression_gets_the_same_plan_however_it_is_written() {
        let a =
            Program::compile("object.spec.containers + object.spec.?initContainers.orValue([])")
                .unwrap();
        let b = Program::compile(
            "(object.spec.containers +\n  (object.spec.?initContainers.orValue([])))",
        )
        .unwrap();
        // The long way round (`has(...) ? ... : []`), as half the Pod
        // Security policies write it.
        let c = Program::compile(
            "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])",
        )
        .unwrap();
        assert!(Arc::ptr_eq(
            a.request_wide_plan().unwrap(),
            c.request_wide_plan().unwrap()
        ));
        let other = Program::compile("object.spec.containers").unwrap();
        let (pa, pb) = (
            a.request_wide_plan().unwrap(),
            b.request_wide_plan().unwrap(),
        );
        assert!(Arc::ptr_eq(pa, pb));
        assert!(!Arc::ptr_eq(pa, other.request_wide_plan().unwrap()));
    }

    #[test]
    fn only_expressions_of_the_objects_alone_are_request_wide() {
        for source in [
            "variables.a + object.spec.containers",
            "request.userInfo.username",
            "params.spec.x",
            "object.metadata.name == namespaceObject.metadata.name",
        ] {
            let p = Program::compile(source).unwrap();
            assert!(p.is_direct(), "{source}");
            assert!(p.request_wide_plan().is_none(), "{source}");
        }
        let p = Program::compile(
            "object.spec.containers.map(c, c.name) + oldObject.spec.containers.map(c, c.name)",
        )
        .unwrap();
        assert!(p.request_wide_plan().is_some());
    }
}
