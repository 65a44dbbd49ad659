//! One plan per distinct request-wide expression, whichever policies hold
//! it: the plan's address is how a request recognises a value it has
//! already computed for another policy (`allContainers` is the same list
//! in a dozen Pod Security policies). Keys of other request-wide answers
//! (which resources a policy's constraints select) are interned the same
//! way.

use super::direct::Node;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Plans by their canonical form (the compiled tree's debug text, which
/// is the same for the same expression however it is spaced or
/// parenthesised). Entries are weak: a plan lives as long as a policy
/// holds it.
static PLANS: Mutex<Option<HashMap<String, Weak<Node>>>> = Mutex::new(None);

/// How many entries the table may hold before dead ones are swept.
const SWEEP_AT: usize = 1024;

/// The plan every policy with this expression shares.
pub fn intern(node: Node) -> Arc<Node> {
    let key = format!("{node:?}");
    // A poisoned lock only means another thread panicked while holding
    // it; the table is still a valid cache.
    let mut guard = PLANS.lock().unwrap_or_else(|p| p.into_inner());
    let plans = guard.get_or_insert_with(HashMap::new);
    if let Some(plan) = plans.get(&key).and_then(Weak::upgrade) {
        return plan;
    }
    if plans.len() >= SWEEP_AT {
        plans.retain(|_, plan| plan.strong_count() > 0);
    }
    let plan = Arc::new(node);
    plans.insert(key, Arc::downgrade(&plan));
    plan
}

/// Keys by their text, for the same reason: equal texts, one `Arc`.
static KEYS: Mutex<Option<HashMap<Box<str>, Weak<str>>>> = Mutex::new(None);

/// The key every holder of this text shares; compare with `Arc::ptr_eq`.
pub fn intern_key(text: String) -> Arc<str> {
    let mut guard = KEYS.lock().unwrap_or_else(|p| p.into_inner());
    let keys = guard.get_or_insert_with(HashMap::new);
    if let Some(key) = keys.get(text.as_str()).and_then(Weak::upgrade) {
        return key;
    }
    if keys.len() >= SWEEP_AT {
        keys.retain(|_, key| key.strong_count() > 0);
    }
    let key: Arc<str> = text.as_str().into();
    keys.insert(text.into_boxed_str(), Arc::downgrade(&key));
    key
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
