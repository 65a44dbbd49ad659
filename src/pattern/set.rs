//! Many validate patterns decided in one walk of a resource.
//!
//! Evaluated one by one, the patterns of a policy set read the same paths
//! again and again: 17 Pod Security policies look up `spec`, its
//! containers and their `securityContext` once per pattern. A
//! [`PatternSet`] merges the patterns into one tree of paths, walks the
//! resource once along it, and answers for each pattern whether it
//! passes and, when it fails, the path at which its own walk would stop
//! (each key keeps each pattern's place in that pattern's order of
//! evaluation, so the failure it meets first is the one kept).
//!
//! Only patterns whose outcome is a plain conjunction of checks join a
//! set: exact keys, the wildcard keys of `metadata.labels` and
//! `metadata.annotations` (each resource key they match checked in turn,
//! in key order, as [`CompiledPattern`] expands them), plain, equality
//! `=()` and negation `X()` anchors, arrays of one map or of scalars,
//! scalars. Conditional, global and existence anchors and positional or
//! empty arrays make a pattern's result depend on more than "every check
//! holds" (skips, alternatives), so such patterns are left to
//! [`CompiledPattern`]. Within
//! the subset every check the set makes is one [`CompiledPattern::validate`]
//! makes, on the same value, with the same answer (`tests` below, on
//! random patterns and resources, and `tests/plan.rs`, on every pattern and
//! resource of the corpora, hold both to agreement).

use super::{
    Anchor, AnchorBody, ArrayNode, CompiledPattern, IndexText, Key, MapNode, Node, PlainBody,
    Scalar, bare,
};
use crate::json_doc::{self, Kind, View};
use crate::wildcard;
use serde_json::Value;

/// Patterns merged into one tree of paths; see the module's documentation.
#[derive(Debug, Default)]
pub struct PatternSet {
    root: PathNode,
    len: u32,
    /// Every key of the tree with each pattern's place for it, numbered
    /// for the steps of a failure's path.
    keys: Vec<KeyInfo>,
}

/// A key of the tree: its text, and each pattern's place for it in its
/// map's order of evaluation (anchored keys by their text, then plain keys
/// in Kyverno's order), which tells which failure a pattern's own walk
/// meets first.
#[derive(Debug)]
struct KeyInfo {
    /// Fingerprinted once: the walk looks it up in every request.
    key: json_doc::Key,
    /// (pattern, ordinal), by pattern: patterns are added in order.
    ordinals: Vec<(u32, u32)>,
}

impl KeyInfo {
    fn ordinal(&self, pattern: u32) -> u32 {
        self.ordinals
            .binary_search_by_key(&pattern, |(p, _)| *p)
            .map_or(u32::MAX, |i| self.ordinals[i].1)
    }
}

/// The checks of every pattern at one path of the resource.
#[derive(Debug, Default)]
struct PathNode {
    /// Patterns with a map here: the value must be an object.
    objects: Vec<u32>,
    /// Patterns with an array of maps here: the value must be an array,
    /// each element satisfying `elements`.
    arrays: Vec<u32>,
    elements: Option<Box<PathNode>>,
    /// Scalar patterns: an array's every element matches, or the value does.
    scalars: Vec<(u32, Scalar)>,
    /// Arrays of one scalar: the value must be an array whose every
    /// element matches.
    array_scalars: Vec<(u32, Scalar)>,
    keys: Vec<KeyChecks>,
    /// Wildcard keys (`metadata.annotations`' `example.com/*`): their
    /// checks apply to each resource key one matches, or to a missing key
    /// when it matches none. Kept apart so that the walk of the exact
    /// keys, on every object, tests nothing more.
    wildcards: Vec<KeyChecks>,
}

/// The checks of every pattern on one key of an object.
#[derive(Debug)]
struct KeyChecks {
    /// Its number in `PatternSet::keys`, which holds its text.
    info: u32,
    /// Fail when the key is missing: plain keys whose pattern is a map, an
    /// array, or a scalar that does not match null (a missing key is
    /// validated as null).
    required: Vec<u32>,
    /// `key: "*"`: fail when the key is missing or null.
    required_not_null: Vec<u32>,
    /// `X(key)`: fail when the key is present, whatever its value.
    negated: Vec<u32>,
    /// The checks on the key's value when present (plain keys and `=()`).
    value: PathNode,
}

/// Which patterns of a [`PatternSet`] a resource passes, and where each
/// failing one fails first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passing {
    /// One bit per pattern, set when it fails: what `first_failures` says,
    /// kept apart so that a rule's verdict is one load, not a scan of the
    /// failures (0.4k instructions of a violating Pod's 77k).
    failed: Vec<u64>,
    /// The first failure of each failing pattern, in its own walk's order.
    first_failures: Vec<FirstFailure>,
    /// The steps from the root to each first failure, one after another.
    steps: Vec<Step>,
    /// The resource keys that wildcard keys matched on the way, in the
    /// order visited ([`Step::Matched`]).
    texts: Vec<Box<str>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FirstFailure {
    pattern: u32,
    /// Its steps in `Passing::steps`.
    steps: std::ops::Range<usize>,
    /// The key whose check failed (see [`Walk::fail`]), as a step.
    key: Option<Step>,
    key_in_path: bool,
}

impl Passing {
    pub fn passes(&self, pattern: u32) -> bool {
        let (word, bit) = ((pattern / 64) as usize, pattern % 64);
        self.failed.get(word).is_some_and(|w| w & (1 << bit) == 0)
    }
}

/// Where a failing pattern's own walk stops ([`PatternSet::failure`]).
pub struct FailurePath<'a> {
    keys: &'a [KeyInfo],
    texts: &'a [Box<str>],
    steps: &'a [Step],
    /// The key whose check failed, when the walk names it in the path.
    key: Option<&'a str>,
}

impl FailurePath<'_> {
    /// The length of the path in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        let steps: usize = self
            .steps
            .iter()
            .map(|s| match s {
                Step::Key(k) => self.keys[*k as usize].key.as_str().len() + 1,
                Step::Matched { text, .. } => self.texts[*text as usize].len() + 1,
                Step::Index(i) => i.checked_ilog10().map_or(1, |d| d as usize + 1) + 1,
            })
            .sum();
        1 + steps + self.key.map_or(0, |k| k.len() + 1)
    }

    /// Never: a path starts at the root, `/`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Appends the path, `/spec/containers/0/`, to `out`.
    #[inline]
    pub fn write_to(&self, out: &mut String) {
        out.push('/');
        for s in self.steps {
            match s {
                Step::Key(k) => out.push_str(self.keys[*k as usize].key.as_str()),
                Step::Matched { text, .. } => out.push_str(&self.texts[*text as usize]),
                // Most indexes are one digit: no text made for them.
                Step::Index(i) => match u8::try_from(*i) {
                    Ok(d @ 0..=9) => out.push(char::from(b'0' + d)),
                    _ => out.push_str(IndexText::new(*i).as_str()),
                },
            }
            out.push('/');
        }
        if let Some(k) = self.key {
            out.push_str(k);
            out.push('/');
        }
    }
}

/// One step from the root: a key (by its number), a resource key that a
/// wildcard key (by its number) matched (by its number in
/// `Passing::texts`), or an array's element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Key(u32),
    Matched { key: u32, text: u32 },
    Index(usize),
}

/// Where the walk is, and what it found.
struct Walk<'s> {
    set: &'s PatternSet,
    steps: Vec<Step>,
    out: Passing,
}

impl<'s> Walk<'s> {
    /// Records that `pattern` fails here. `key` is the key whose check
    /// failed, which ranks the failure; `key_in_path` whether the
    /// pattern's own walk names it in the path (a negation, a missing map)
    /// or stops at the map holding it (`key: "*"`). The failure first in
    /// the pattern's own order is kept: the one its walk reports.
    #[cold]
    fn fail(&mut self, pattern: u32, key: Option<Step>, key_in_path: bool) {
        let (word, bit) = ((pattern / 64) as usize, 1 << (pattern % 64));
        // A pattern's first failure is recorded as it is; only a later one
        // (the same alternative failing on another container) is ranked
        // against the one held.
        let known = match self.out.failed[word] & bit {
            0 => None,
            _ => self
                .out
                .first_failures
                .iter()
                .position(|f| f.pattern == pattern),
        };
        self.out.failed[word] |= bit;
        if let Some(i) = known {
            let f = &self.out.first_failures[i];
            let before = self.out.steps[f.steps.clone()].iter().copied().chain(f.key);
            let here = self.steps.iter().copied().chain(key);
            if self.set.comes_first(pattern, before, here) {
                return;
            }
        }
        if self.out.first_failures.is_empty() {
            // Room for a typical request's failures at once, rather than
            // growing a step at a time.
            self.out.first_failures.reserve(32);
            self.out.steps.reserve(128);
        }
        let start = self.out.steps.len();
        self.out.steps.extend_from_slice(&self.steps);
        let record = FirstFailure {
            pattern,
            steps: start..self.out.steps.len(),
            key,
            key_in_path,
        };
        match known {
            Some(i) => self.out.first_failures[i] = record,
            None => self.out.first_failures.push(record),
        }
    }

    fn fail_all(&mut self, patterns: &[u32], key: Option<Step>, key_in_path: bool) {
        for p in patterns {
            self.fail(*p, key, key_in_path);
        }
    }
}

impl PatternSet {
    pub fn new() -> PatternSet {
        PatternSet::default()
    }

    /// The number of patterns in the set.
    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `pattern`, returning its number in the set; `None` when its
    /// outcome is more than a conjunction of checks (see the module's
    /// documentation) and it must be evaluated on its own.
    pub fn add(&mut self, pattern: &CompiledPattern) -> Option<u32> {
        if !conjunctive(&pattern.root) {
            return None;
        }
        let id = self.len;
        self.len += 1;
        merge(&mut self.root, &mut self.keys, &pattern.root, id);
        Some(id)
    }

    /// Walks `resource` once and tells which patterns it passes.
    pub fn passing<'r>(&self, resource: impl View<'r>) -> Passing {
        let mut walk = Walk {
            set: self,
            steps: Vec::with_capacity(8),
            out: Passing {
                failed: vec![0; (self.len as usize).div_ceil(64)],
                first_failures: Vec::new(),
                steps: Vec::new(),
                texts: Vec::new(),
            },
        };
        walk_node(&self.root, resource, &mut walk);
        walk.out
    }

    /// The path at which a failing pattern's own walk stops
    /// ([`super::PatternError`]'s `path`, `/spec/containers/0/`), as
    /// `passing` found it; `None` when it passes.
    pub fn failure_path(&self, passing: &Passing, pattern: u32) -> Option<String> {
        let failure = self.failure(passing, pattern)?;
        let mut path = String::with_capacity(failure.len());
        failure.write_to(&mut path);
        Some(path)
    }

    /// [`PatternSet::failure_path`] before it is worded: only failing
    /// rules ask, and they write it straight into their message.
    #[inline]
    pub fn failure<'a>(&'a self, passing: &'a Passing, pattern: u32) -> Option<FailurePath<'a>> {
        let f = passing
            .first_failures
            .iter()
            .find(|f| f.pattern == pattern)?;
        Some(FailurePath {
            keys: &self.keys,
            texts: &passing.texts,
            steps: &passing.steps[f.steps.clone()],
            // A failing key is a key step; an index never names one.
            key: f.key.filter(|_| f.key_in_path).and_then(|k| match k {
                Step::Key(k) => Some(self.keys[k as usize].key.as_str()),
                Step::Matched { text, .. } => Some(&*passing.texts[text as usize]),
                Step::Index(_) => None,
            }),
        })
    }

    /// Whether `pattern`'s own walk meets the failure at path `a` no later
    /// than the one at `b`: their steps compared by their places in the
    /// pattern's order, as a list (a prefix comes first, as a map's own
    /// check precedes its keys'). Steps the two share rank alike and are
    /// passed over without looking their places up.
    fn comes_first(
        &self,
        pattern: u32,
        mut a: impl Iterator<Item = Step>,
        mut b: impl Iterator<Item = Step>,
    ) -> bool {
        // The keys a wildcard matched rank at its place, in the order
        // visited (the resource's key order, as the pattern expands it).
        let rank = |s: Step| match s {
            Step::Key(k) => (self.keys[k as usize].ordinal(pattern), 0),
            Step::Matched { key, text } => (self.keys[key as usize].ordinal(pattern), text),
            Step::Index(i) => (i as u32, 0),
        };
        loop {
            match (a.next(), b.next()) {
                (None, _) => return true,
                (Some(_), None) => return false,
                (Some(x), Some(y)) if x == y => {}
                (Some(x), Some(y)) => match rank(x).cmp(&rank(y)) {
                    std::cmp::Ordering::Equal => {}
                    order => return order.is_lt(),
                },
            }
        }
    }
}

/// Whether the pattern's outcome is "every check holds" (no skips, no
/// alternatives, no positions), each check with one place in its order.
fn conjunctive(node: &Node) -> bool {
    match node {
        Node::Scalar(_) => true,
        Node::Array(a) => match &**a {
            ArrayNode::OfMaps(m) => conjunctive(m),
            ArrayNode::OfScalar(_) => true,
            ArrayNode::Empty | ArrayNode::Positional(_) => false,
        },
        Node::Map(m) => {
            let MapNode { anchored, plain } = &**m;
            let mut keys: Vec<&str> = anchored
                .iter()
                .map(|(_, k, _)| k)
                .chain(plain.iter().map(|(k, _)| k))
                .map(|k| match k {
                    Key::Exact(k) | Key::Wildcard(k) => bare(k),
                })
                .collect();
            keys.sort_unstable();
            // A key given twice (`a` and `=(a)`) would merge two places in
            // the order into one.
            let distinct = keys.windows(2).all(|w| w[0] != w[1]);
            distinct
                && anchored
                    .iter()
                    .all(|(anchor, _, body)| match (anchor, body) {
                        (Anchor::Equality, AnchorBody::Node(n)) => conjunctive(n),
                        (Anchor::Negation, AnchorBody::Node(_)) => true,
                        _ => false,
                    })
                && plain.iter().all(|(_, body)| match body {
                    PlainBody::Required => true,
                    PlainBody::Node(n) => conjunctive(n),
                })
        }
    }
}

fn merge(at: &mut PathNode, keys: &mut Vec<KeyInfo>, node: &Node, id: u32) {
    match node {
        Node::Scalar(s) => at.scalars.push((id, s.clone())),
        Node::Array(a) => match &**a {
            ArrayNode::OfMaps(m) => {
                at.arrays.push(id);
                merge(at.elements.get_or_insert_default(), keys, m, id);
            }
            ArrayNode::OfScalar(s) => at.array_scalars.push((id, s.clone())),
            ArrayNode::Empty | ArrayNode::Positional(_) => {
                unreachable!("not conjunctive: left out by PatternSet::add")
            }
        },
        Node::Map(m) => {
            at.objects.push(id);
            // Ordinals in the order `pattern::map` evaluates the entries.
            let mut ordinal = 0;
            for (anchor, key, body) in &m.anchored {
                let AnchorBody::Node(n) = body else {
                    unreachable!("not conjunctive: left out by PatternSet::add")
                };
                let checks = key_checks(at, keys, key, id, ordinal);
                ordinal += 1;
                match anchor {
                    Anchor::Equality => merge(&mut checks.value, keys, n, id),
                    Anchor::Negation => checks.negated.push(id),
                    _ => unreachable!("not conjunctive: left out by PatternSet::add"),
                }
            }
            for (key, body) in &m.plain {
                let checks = key_checks(at, keys, key, id, ordinal);
                ordinal += 1;
                match body {
                    PlainBody::Required => checks.required_not_null.push(id),
                    PlainBody::Node(n) => {
                        // A missing key is validated as null: maps and arrays
                        // fail on it, a scalar as it matches null.
                        let missing_fails = match n {
                            Node::Scalar(s) => !s.matches(&Value::Null),
                            _ => true,
                        };
                        if missing_fails {
                            checks.required.push(id);
                        }
                        merge(&mut checks.value, keys, n, id);
                    }
                }
            }
        }
    }
}

fn key_checks<'a>(
    at: &'a mut PathNode,
    keys: &mut Vec<KeyInfo>,
    key: &Key,
    id: u32,
    ordinal: u32,
) -> &'a mut KeyChecks {
    let (key, list) = match key {
        Key::Exact(k) => (k.as_str(), &mut at.keys),
        Key::Wildcard(k) => (k.as_str(), &mut at.wildcards),
    };
    let index = match list
        .iter()
        .position(|k| keys[k.info as usize].key.as_str() == key)
    {
        Some(i) => i,
        None => {
            keys.push(KeyInfo {
                key: json_doc::Key::new(key),
                ordinals: Vec::new(),
            });
            list.push(KeyChecks {
                info: (keys.len() - 1) as u32,
                required: Vec::new(),
                required_not_null: Vec::new(),
                negated: Vec::new(),
                value: PathNode::default(),
            });
            list.len() - 1
        }
    };
    let checks = &mut list[index];
    keys[checks.info as usize].ordinals.push((id, ordinal));
    checks
}

fn walk_node<'s, 'r, V: View<'r>>(node: &'s PathNode, value: V, walk: &mut Walk<'s>) {
    for (id, s) in &node.scalars {
        let holds = match value.kind() {
            Kind::Array(_) => value.elements().all(|e| s.matches(e)),
            _ => s.matches(value),
        };
        if !holds {
            walk.fail(*id, None, false);
        }
    }
    match value.kind() {
        Kind::Object(_) => {
            walk.fail_all(&node.arrays, None, false);
            for (id, _) in &node.array_scalars {
                walk.fail(*id, None, false);
            }
            for checks in &node.keys {
                match value.get_key(&walk.set.keys[checks.info as usize].key) {
                    Some(v) => key_present(checks, v, Step::Key(checks.info), walk),
                    None => key_missing(checks, walk),
                }
            }
            for checks in &node.wildcards {
                let key = walk.set.keys[checks.info as usize].key.as_str();
                let mut matched = false;
                for (k, v) in value.entries() {
                    if wildcard::matches(key, k) {
                        matched = true;
                        let text = u32::try_from(walk.out.texts.len()).unwrap_or(u32::MAX);
                        walk.out.texts.push(k.into());
                        let step = Step::Matched {
                            key: checks.info,
                            text,
                        };
                        key_present(checks, v, step, walk);
                    }
                }
                if !matched {
                    key_missing(checks, walk);
                }
            }
        }
        Kind::Array(_) => {
            walk.fail_all(&node.objects, None, false);
            for (id, s) in &node.array_scalars {
                if !value.elements().all(|e| s.matches(e)) {
                    walk.fail(*id, None, false);
                }
            }
            if let Some(elements) = &node.elements {
                for (i, e) in value.elements().enumerate() {
                    walk.steps.push(Step::Index(i));
                    walk_node(elements, e, walk);
                    walk.steps.pop();
                }
            }
        }
        _ => {
            walk.fail_all(&node.objects, None, false);
            walk.fail_all(&node.arrays, None, false);
            for (id, _) in &node.array_scalars {
                walk.fail(*id, None, false);
            }
        }
    }
}

/// The checks of a key on its value `v`, present in the object; `step`
/// names the key in paths.
#[inline(always)]
fn key_present<'s, 'r, V: View<'r>>(checks: &'s KeyChecks, v: V, step: Step, walk: &mut Walk<'s>) {
    if !checks.negated.is_empty() {
        walk.fail_all(&checks.negated, Some(step), true);
    }
    if v.is_null() && !checks.required_not_null.is_empty() {
        walk.fail_all(&checks.required_not_null, Some(step), false);
    }
    walk.steps.push(step);
    walk_node(&checks.value, v, walk);
    walk.steps.pop();
}

/// The checks of a key missing from the object.
fn key_missing(checks: &KeyChecks, walk: &mut Walk<'_>) {
    let step = Step::Key(checks.info);
    if !checks.required.is_empty() {
        walk.fail_all(&checks.required, Some(step), true);
    }
    if !checks.required_not_null.is_empty() {
        walk.fail_all(&checks.required_not_null, Some(step), false);
    }
}

#[cfg(test)]
mod tests;
