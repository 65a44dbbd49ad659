//! When each of a rule's context entries is loaded (docs/kyverno-semantics.md#context-entries).
//!
//! Kyverno defers every context entry: an entry is loaded when a query
//! first names it (a `{{ }}` variable, a foreach `list`, a `variable`'s
//! JMESPath on the context), and an entry's own queries load the entries
//! defined before it that they name. An entry nothing reaches is never
//! loaded, so its failures never happen: a `variable` that reads
//! `request.object` (nil on DELETE) named only in a pattern's message does
//! not stop a DELETE, which skips patterns. gavel finds the names each step
//! of a rule reads when the policy is compiled and loads, before each step,
//! the entries it reaches that are not loaded yet, in Kyverno's order.
//!
//! The steps are the rule's preconditions, then its body, then a validate
//! rule's message (rendered only when the rule fails). Kyverno loads at the
//! first query within a step; gavel loads for the whole step, so an entry
//! named only by a condition Kyverno never reaches (an `any` that already
//! held) is loaded here.

use super::types::{ContextEntry, Rule};
use regex::Regex;
use serde_json::Value;

/// The entries to load before each step of one rule, as indexes into its
/// `context`, each list in load order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeferredContext {
    pub before_preconditions: Box<[usize]>,
    pub before_body: Box<[usize]>,
    /// A validate rule's message; empty for other rules, whose messages
    /// are part of their body.
    pub before_message: Box<[usize]>,
}

impl DeferredContext {
    /// The steps of `rule`.
    pub fn of(rule: &Rule) -> DeferredContext {
        let entries = &rule.context;
        if entries.is_empty() {
            return DeferredContext::default();
        }
        let names: Vec<Option<Regex>> = entries.iter().map(|e| name_matcher(&e.name)).collect();
        // What each entry's own queries reach among the entries before it.
        let deps: Vec<Vec<bool>> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| named(&names[..i], &entry_queries(e), entries.len()))
            .collect();
        let mut loaded = vec![false; entries.len()];
        let mut step = |queries: Vec<String>| {
            let direct = named(&names, &queries, entries.len());
            let mut order = Vec::new();
            load_order(&direct, entries.len(), &deps, &mut loaded, &mut order);
            order.into_boxed_slice()
        };
        let mut pre = Vec::new();
        if let Some(p) = &rule.preconditions {
            template_queries(p, &mut pre);
        }
        let before_preconditions = step(pre);
        let mut body = Vec::new();
        let mut message = Vec::new();
        if let Some(v) = &rule.validate {
            let mut v = serde_json::to_value(v).unwrap_or_default();
            if let Some(m) = v.as_object_mut().and_then(|o| o.remove("message")) {
                template_queries(&m, &mut message);
            }
            body_queries(&v, &mut body);
        }
        for part in [&rule.mutate, &rule.generate].into_iter().flatten() {
            body_queries(part, &mut body);
        }
        for v in &rule.verify_images {
            body_queries(v, &mut body);
        }
        let before_body = step(body);
        let before_message = step(message);
        DeferredContext {
            before_preconditions,
            before_body,
            before_message,
        }
    }
}

/// Kyverno's test of whether a query names an entry: the name at an ASCII
/// word boundary, not after a `.` or a word character, so `x` is named by
/// `x.y` and `f(x)` but not by `y.x` or `xy`. Kyverno puts the name into
/// its pattern as it is; here it is escaped, so a name with `.` in it
/// names only itself. `None` for a name no pattern can be made of.
fn name_matcher(name: &str) -> Option<Regex> {
    Regex::new(&format!(
        r"(?:\A|\z|\s|[^.0-9A-Za-z]){}(?-u:\b)",
        regex::escape(name)
    ))
    .ok()
}

/// Which of the entries `names` stands for some query names.
fn named(names: &[Option<Regex>], queries: &[String], len: usize) -> Vec<bool> {
    let mut out: Vec<bool> = names
        .iter()
        .map(|n| {
            n.as_ref()
                .is_some_and(|re| queries.iter().any(|q| re.is_match(q)))
        })
        .collect();
    out.resize(len, false);
    out
}

/// Kyverno's order: each entry named, lowest first, after the entries
/// before it that its own queries name; an entry loads once.
fn load_order(
    direct: &[bool],
    limit: usize,
    deps: &[Vec<bool>],
    loaded: &mut [bool],
    order: &mut Vec<usize>,
) {
    for (i, &named) in direct.iter().enumerate().take(limit) {
        if named && !loaded[i] {
            loaded[i] = true;
            load_order(&deps[i], i, deps, loaded, order);
            order.push(i);
        }
    }
}

/// The strings of `v` (and its keys) that hold `{{ }}` variables.
fn template_queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.contains("{{") => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| template_queries(v, out)),
        Value::Object(m) => {
            for (k, v) in m {
                if k.contains("{{") {
                    out.push(k.clone());
                }
                template_queries(v, out);
            }
        }
        _ => {}
    }
}

/// A body's queries: its variables, and the expressions it evaluates on
/// the context as they are (foreach `list`s, the `jmesPath` of the
/// `variable`s of foreach context entries).
fn body_queries(v: &Value, out: &mut Vec<String>) {
    template_queries(v, out);
    fn whole(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Array(a) => a.iter().for_each(|v| whole(v, out)),
            Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("list" | "jmesPath", Value::String(s)) => out.push(s.clone()),
                        _ => whole(v, out),
                    }
                }
            }
            _ => {}
        }
    }
    whole(v, out);
}

/// An entry's own queries: its variables, and a `variable`'s JMESPath
/// when it reads the context (it has no `value` to read).
fn entry_queries(entry: &ContextEntry) -> Vec<String> {
    let mut out = Vec::new();
    template_queries(&serde_json::to_value(entry).unwrap_or_default(), &mut out);
    if let Some(var) = &entry.variable
        && var.value.is_none()
        && let Some(p) = &var.jmes_path
    {
        out.push(p.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> Rule {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn names_match_as_kyverno_matches_them() {
        let re = name_matcher("one").unwrap();
        for (q, hit) in [
            ("one", true),
            ("one.two", true),
            ("{{ one }}", true),
            ("to_string(one)", true),
            ("x.one", false),
            ("oneself", false),
            ("someone", false),
            ("`one`", true),
        ] {
            assert_eq!(re.is_match(q), hit, "{q}");
        }
    }

    /// An entry only the message reads waits for the message; one nothing
    /// reads never loads; an entry's own reads come first.
    #[test]
    fn entries_load_before_the_step_that_reads_them() {
        let r = rule(json!({
            "name": "r",
            "context": [
                {"name": "ns", "variable": {"jmesPath": "request.object.metadata.name"}},
                {"name": "unused", "variable": {"jmesPath": "request.object.x"}},
                {"name": "labels", "variable": {"jmesPath": "ns"}},
                {"name": "op", "variable": {"value": "{{ request.operation }}"}}
            ],
            "preconditions": {"all": [{"key": "{{ op }}", "operator": "Equals", "value": "CREATE"}]},
            "validate": {
                "message": "namespace {{ ns }} is not allowed",
                "pattern": {"metadata": {"labels": {"team": "?*"}}}
            }
        }));
        let d = DeferredContext::of(&r);
        assert_eq!(&*d.before_preconditions, &[3]);
        assert_eq!(&*d.before_body, &[] as &[usize]);
        assert_eq!(&*d.before_message, &[0]);
        let mut r = r;
        r.validate.as_mut().unwrap().message = Some("{{ labels }}".into());
        let d = DeferredContext::of(&r);
        assert_eq!(&*d.before_message, &[0, 2]);
    }

    /// Kyverno's conformance case `deferred/resolve-overriden-variable`:
    /// `one` reads the `foo` defined before it, not the one after.
    #[test]
    fn an_entry_reads_only_the_entries_before_it() {
        let r = rule(json!({
            "name": "one",
            "context": [
                {"name": "foo", "variable": {"value": "foo"}},
                {"name": "one", "variable": {"jmesPath": "foo"}},
                {"name": "foo", "variable": {"value": "baz"}}
            ],
            "mutate": {"foreach": [{
                "list": "['dummy']",
                "context": [{"name": "foo", "variable": {"value": "bar"}}],
                "patchStrategicMerge": {"data": {"one": "{{ one }}"}}
            }]}
        }));
        let d = DeferredContext::of(&r);
        assert_eq!(&*d.before_body, &[0, 1]);
    }
}
