//! Kyverno's pattern language, independent of policies: validate patterns
//! (docs/kyverno-semantics.md#patterns, #scalar-patterns, #pattern-anchors):
//! a resource and a [`CompiledPattern`] in, pass or a [`PatternError`] out.
//! Anchors: conditional `()`, equality
//! `=()`, existence `^()`, negation `X()`, global `<()`; scalar patterns in
//! [`scalar`]. Patterns are compiled once: anchors parsed, keys put in
//! Kyverno's evaluation order, operands parsed. The anchors of mutate
//! overlays are in [`overlay`].

pub mod overlay;
mod scalar;
pub mod set;

pub use scalar::Scalar;

use crate::json_doc::{Kind, View};
use crate::wildcard;
use serde_json::Value;
use std::borrow::Cow;
use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Condition,
    Global,
    Equality,
    Existence,
    Negation,
    AddIfNotPresent,
}

/// Splits `<mod>(<key>)` into its anchor and key.
pub fn parse_anchor(key: &str) -> Option<(Anchor, &str)> {
    let k = key.trim();
    let (anchor, rest) = match k.as_bytes().first()? {
        b'(' => (Anchor::Condition, k),
        b'<' => (Anchor::Global, &k[1..]),
        b'=' => (Anchor::Equality, &k[1..]),
        b'^' => (Anchor::Existence, &k[1..]),
        b'X' => (Anchor::Negation, &k[1..]),
        b'+' => (Anchor::AddIfNotPresent, &k[1..]),
        _ => return None,
    };
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    (!inner.is_empty()).then_some((anchor, inner))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A real mismatch: the rule fails.
    Fail,
    /// A conditional or global anchor did not hold: the rule does not apply.
    Skip,
    /// A negation anchor matched: a hard failure even under other anchors.
    Negation,
}

/// Why a resource does not match; `'r` is the resource's lifetime.
#[derive(Debug, Clone, PartialEq)]
pub struct PatternError<'r> {
    pub kind: ErrorKind,
    /// Path of the failing element (`/spec/containers/0/image/`); empty when none.
    pub path: String,
    detail: Detail<'r>,
}

/// The message of a [`PatternError`]. A failing rule reports only the path,
/// and probes (anyPattern alternatives, existence anchors) drop most
/// errors, so the common mismatch keeps its value and is worded on demand.
#[derive(Debug, Clone, PartialEq)]
enum Detail<'r> {
    Text(String),
    /// `value '<v>' does not match the pattern`, after an anchor's
    /// `<tag> mismatch: ` when one turned it into a skip.
    Mismatch {
        anchor: Option<&'static str>,
        value: Cow<'r, Value>,
    },
}

impl<'r> PatternError<'r> {
    #[cold]
    fn fail(path: &Path, message: String) -> Box<PatternError<'r>> {
        Box::new(PatternError {
            kind: ErrorKind::Fail,
            path: path.render(),
            detail: Detail::Text(message),
        })
    }

    /// The error's message, as Kyverno words it.
    pub fn message(&self) -> Cow<'_, str> {
        self.detail.text()
    }

    pub fn into_message(self) -> String {
        match self.detail {
            Detail::Text(t) => t,
            other => other.text().into_owned(),
        }
    }

    /// The same error as seen through a conditional or global anchor.
    fn under_anchor(mut self: Box<Self>, tag: &'static str) -> Box<PatternError<'r>> {
        // Reworded in its own box: a skip costs no second allocation.
        self.detail = match std::mem::replace(&mut self.detail, Detail::Text(String::new())) {
            Detail::Mismatch {
                anchor: None,
                value,
            } => Detail::Mismatch {
                anchor: Some(tag),
                value,
            },
            other => Detail::Text([tag, " mismatch: ", &other.text()].concat()),
        };
        self.kind = ErrorKind::Skip;
        self
    }
}

impl Detail<'_> {
    fn text(&self) -> Cow<'_, str> {
        let (anchor, value) = match self {
            Detail::Text(t) => return Cow::Borrowed(t),
            Detail::Mismatch { anchor, value } => (anchor, value),
        };
        // Scalars are shown without `fmt`.
        let shown = match value.as_ref() {
            Value::String(s) => Cow::Borrowed(s.as_str()),
            Value::Bool(true) => Cow::Borrowed("true"),
            Value::Bool(false) => Cow::Borrowed("false"),
            Value::Null => Cow::Borrowed("<nil>"),
            other => Cow::Owned(show(other)),
        };
        let mut out = String::new();
        if let Some(tag) = anchor {
            out.push_str(tag);
            out.push_str(" mismatch: ");
        }
        out.push_str("value '");
        out.push_str(&shown);
        out.push_str("' does not match the pattern");
        Cow::Owned(out)
    }
}

/// The error is boxed: the common outcome, `Ok`, then travels in a
/// register instead of through a result the size of the error.
type Res<'r> = Result<(), Box<PatternError<'r>>>;

#[derive(Clone, Copy)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// The path to the element being checked, as a stack of segments that is
/// rendered (`/spec/containers/0/image/`) only when an error needs it.
#[derive(Clone, Copy)]
struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Option<Seg<'a>>,
}

impl<'a> Path<'a> {
    const ROOT: Path<'static> = Path {
        parent: None,
        seg: None,
    };

    fn key(&'a self, k: &'a str) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Some(Seg::Key(k)),
        }
    }

    fn index(&'a self, i: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Some(Seg::Index(i)),
        }
    }
}

impl Path<'_> {
    /// Segments kept on the stack while rendering; deeper paths (rare)
    /// render by recursion.
    const RENDER_DEPTH: usize = 8;

    /// Renders `/spec/containers/0/image/`. Built by hand: every failing
    /// rule renders its path, and `fmt` recursion costs several times more.
    fn render(&self) -> String {
        let mut segs = [Seg::Index(0); Self::RENDER_DEPTH];
        let mut depth = 0;
        let mut len = 1;
        let mut cur = Some(self);
        while let Some(p) = cur {
            if let Some(seg) = p.seg {
                if depth == Self::RENDER_DEPTH {
                    return self.render_deep();
                }
                len += seg.rendered_len();
                segs[depth] = seg;
                depth += 1;
            }
            cur = p.parent;
        }
        let mut out = String::with_capacity(len);
        out.push('/');
        for seg in segs[..depth].iter().rev() {
            seg.push_to(&mut out);
        }
        out
    }

    fn render_deep(&self) -> String {
        let mut out = String::from("/");
        self.write(&mut out);
        out
    }

    /// Appends the segments from the root down, each followed by `/`.
    fn write(&self, out: &mut String) {
        if let Some(p) = self.parent {
            p.write(out);
        }
        if let Some(seg) = self.seg {
            seg.push_to(out);
        }
    }
}

impl Seg<'_> {
    fn rendered_len(self) -> usize {
        match self {
            Seg::Key(k) => k.len() + 1,
            Seg::Index(_) => 4,
        }
    }

    /// Appends the segment and its `/`.
    #[inline]
    fn push_to(self, out: &mut String) {
        match self {
            Seg::Key(k) => out.push_str(k),
            // Most lists in a Pod are short: one digit needs no buffer.
            Seg::Index(i) if i < 10 => out.push(char::from(b'0' + i as u8)),
            Seg::Index(i) => push_long_index(out, i),
        }
        out.push('/');
    }
}

#[cold]
fn push_long_index(out: &mut String, i: usize) {
    out.push_str(IndexText::new(i).as_str());
}

/// An index as text without `fmt`, which costs several times more on the
/// hot path (error paths, anyPattern alternatives).
pub(super) struct IndexText {
    digits: [u8; 20],
    start: usize,
}

impl IndexText {
    pub(super) fn new(mut i: usize) -> IndexText {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (i % 10) as u8;
            i /= 10;
            if i == 0 {
                break;
            }
        }
        IndexText { digits, start }
    }

    pub(super) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.digits[self.start..]).expect("ascii digits")
    }
}

/// A map key of a pattern. Wildcard keys exist only directly under
/// `metadata.labels` / `metadata.annotations`, where Kyverno expands them
/// against the resource's keys.
#[derive(Debug, Clone)]
enum Key {
    Exact(String),
    Wildcard(String),
}

impl Key {
    /// Calls `f` with each resource key this pattern key stands for.
    fn each<'k, 'r: 'k>(
        &'k self,
        resource: impl View<'r>,
        mut f: impl FnMut(&'k str) -> Res<'r>,
    ) -> Res<'r> {
        match self {
            Key::Exact(k) => f(k),
            Key::Wildcard(w) => {
                let mut any = false;
                for k in resource.keys().filter(|k| wildcard::matches(w, k)) {
                    any = true;
                    f(k)?;
                }
                if any { Ok(()) } else { f(w) }
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Node {
    Map(Box<MapNode>),
    Array(Box<ArrayNode>),
    Scalar(Scalar),
}

#[derive(Debug, Clone)]
struct MapNode {
    /// Anchored keys, sorted by their text, evaluated first.
    anchored: Vec<(Anchor, Key, AnchorBody)>,
    /// Plain keys in Kyverno's order: those whose patterns carry anchors first.
    plain: Vec<(Key, PlainBody)>,
}

#[derive(Debug, Clone)]
enum AnchorBody {
    Node(Node),
    /// `^()`: each entry must be matched by at least one list element.
    Existence(Result<Vec<Node>, String>),
}

#[derive(Debug, Clone)]
enum PlainBody {
    /// `key: "*"`: the key must exist with a non-null value.
    Required,
    Node(Node),
}

#[derive(Debug, Clone)]
enum ArrayNode {
    Empty,
    /// Every element must satisfy the map; conditional skips are tolerated.
    OfMaps(Node),
    OfScalar(Scalar),
    /// Nested arrays: compared position by position.
    Positional(Vec<Node>),
}

/// A validate pattern compiled for evaluation.
#[derive(Debug, Clone)]
pub struct CompiledPattern {
    root: Node,
}

fn has_anchors(v: &Value) -> bool {
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, x)| parse_anchor(k).is_some() || has_anchors(x)),
        Value::Array(a) => a.iter().any(has_anchors),
        _ => false,
    }
}

fn bare(k: &str) -> &str {
    parse_anchor(k).map_or(k, |(_, inner)| inner)
}

impl CompiledPattern {
    pub fn compile(pattern: &Value) -> CompiledPattern {
        CompiledPattern {
            root: compile_node(pattern, false),
        }
    }

    /// Validates a resource, held as a `serde_json::Value` or as a
    /// decoded document ([`crate::json_doc`]).
    pub fn validate<'r>(&self, resource: impl View<'r>) -> Res<'r> {
        element(resource, &self.root, &Path::ROOT)
    }
}

/// `wildcard_keys`: this map is `metadata.labels` or `metadata.annotations`.
fn compile_node(v: &Value, wildcard_keys: bool) -> Node {
    match v {
        Value::Object(m) => {
            let key = |k: &str| {
                if wildcard_keys && wildcard::has_wildcard(k) {
                    Key::Wildcard(k.to_string())
                } else {
                    Key::Exact(k.to_string())
                }
            };
            let is_metadata = |k: &str| bare(k) == "metadata";
            let mut anchored: Vec<(&String, Anchor, &str, &Value)> = Vec::new();
            let mut plain: Vec<(bool, &String, &Value)> = Vec::new();
            for (k, x) in m {
                match parse_anchor(k) {
                    Some((a, inner)) => anchored.push((k, a, inner, x)),
                    None => plain.push((has_anchors(x), k, x)),
                }
            }
            anchored.sort_by(|a, b| a.0.cmp(b.0));
            plain.sort_by(|a, b| match (a.0, b.0) {
                (true, false) => Ordering::Less,
                (false, true) => Ordering::Greater,
                (true, true) => b.1.cmp(a.1),
                _ => a.1.cmp(b.1),
            });
            let child =
                |k: &str, x: &Value| compile_node(x, false).with_metadata(is_metadata(k), x);
            Node::Map(Box::new(MapNode {
                anchored: anchored
                    .into_iter()
                    .map(|(k, a, inner, x)| {
                        let body = if a == Anchor::Existence {
                            AnchorBody::Existence(match x {
                                Value::Array(items) if items.iter().all(Value::is_object) => {
                                    Ok(items.iter().map(|i| compile_node(i, false)).collect())
                                }
                                Value::Array(_) => Err(
                                    "invalid pattern: existence anchor list entries must be maps"
                                        .into(),
                                ),
                                _ => {
                                    Err("invalid pattern: existence anchor pattern must be a list"
                                        .into())
                                }
                            })
                        } else {
                            AnchorBody::Node(child(k, x))
                        };
                        (a, key(inner), body)
                    })
                    .collect(),
                plain: plain
                    .into_iter()
                    .map(|(_, k, x)| {
                        let body = if x.as_str() == Some("*") {
                            PlainBody::Required
                        } else {
                            PlainBody::Node(child(k, x))
                        };
                        (key(k), body)
                    })
                    .collect(),
            }))
        }
        Value::Array(items) => Node::Array(Box::new(match items.first() {
            None => ArrayNode::Empty,
            Some(first @ Value::Object(_)) => ArrayNode::OfMaps(compile_node(first, false)),
            Some(Value::Array(_)) => {
                ArrayNode::Positional(items.iter().map(|i| compile_node(i, false)).collect())
            }
            Some(scalar) => ArrayNode::OfScalar(Scalar::compile(scalar)),
        })),
        other => Node::Scalar(Scalar::compile(other)),
    }
}

impl Node {
    /// Recompiles a `metadata` map so that its labels/annotations accept wildcard keys.
    fn with_metadata(self, is_metadata: bool, raw: &Value) -> Node {
        let (true, Value::Object(m)) = (is_metadata, raw) else {
            return self;
        };
        let Node::Map(mut node) = self else {
            return self;
        };
        let wants = |k: &str| matches!(bare(k), "labels" | "annotations");
        for (_, key, body) in node.anchored.iter_mut() {
            if let (Key::Exact(k), AnchorBody::Node(n)) = (&*key, body)
                && wants(k)
                && let Some(x) = m.iter().find(|(rk, _)| bare(rk) == k).map(|(_, x)| x)
            {
                *n = compile_node(x, true);
            }
        }
        for (key, body) in node.plain.iter_mut() {
            if let (Key::Exact(k), PlainBody::Node(n)) = (&*key, body)
                && wants(k)
                && let Some(x) = m.get(k)
            {
                *n = compile_node(x, true);
            }
        }
        Node::Map(node)
    }
}

/// Validates `resource` against `pattern`, compiling it first (for patterns
/// built at evaluation time, e.g. after variable substitution).
pub fn validate<'r>(resource: impl View<'r>, pattern: &Value) -> Res<'r> {
    CompiledPattern::compile(pattern).validate(resource)
}

/// Scalar pattern vs a value (`pattern.Validate` in Kyverno).
pub fn scalar(value: &Value, pattern: &Value) -> bool {
    Scalar::compile(pattern).matches(value)
}

/// A JSON value's type as Go's `encoding/json` names it in its errors
/// (`cannot unmarshal number into ...`), the words Kyverno's messages use.
pub fn go_json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".into(),
        other => other.to_string(),
    }
}

#[cold]
fn mismatch<'r>(path: &Path, value: impl View<'r>) -> Box<PatternError<'r>> {
    Box::new(PatternError {
        kind: ErrorKind::Fail,
        path: path.render(),
        detail: Detail::Mismatch {
            anchor: None,
            value: value.to_cow(),
        },
    })
}

/// A key the resource lacks reads as null.
static NULL: Value = Value::Null;

fn element<'r, V: View<'r>>(resource: V, node: &Node, path: &Path) -> Res<'r> {
    match node {
        Node::Map(m) => match resource.kind() {
            Kind::Object(_) => map(resource, m, path),
            _ => Err(PatternError::fail(
                path,
                format!(
                    "pattern and resource have different structures. Path: {}. Expected map[string]interface {{}}, found {}",
                    path.render(),
                    crate::json_map::go_type(&resource.to_cow())
                ),
            )),
        },
        Node::Array(a) => match resource.kind() {
            Kind::Array(_) => array(resource, a, path),
            _ => Err(PatternError::fail(
                path,
                "resource does not satisfy the expected overlay pattern".to_string(),
            )),
        },
        Node::Scalar(s) => match resource.kind() {
            Kind::Array(_) => match resource.elements().find(|i| !s.matches(*i)) {
                Some(bad) => Err(mismatch(path, bad)),
                None => Ok(()),
            },
            _ if s.matches(resource) => Ok(()),
            _ => Err(mismatch(path, resource)),
        },
    }
}

/// The element under a pattern key: the resource's value, or null.
fn element_at<'r, V: View<'r>>(actual: Option<V>, node: &Node, path: &Path) -> Res<'r> {
    match actual {
        Some(v) => element(v, node, path),
        None => element(&NULL, node, path),
    }
}

fn map<'r, V: View<'r>>(resource: V, node: &MapNode, path: &Path) -> Res<'r> {
    for (anchor, key, body) in &node.anchored {
        key.each(resource, |k| {
            anchor_element(*anchor, k, body, resource, path)
        })?;
    }
    for (key, body) in &node.plain {
        key.each(resource, |k| {
            let actual = resource.get(k);
            match body {
                PlainBody::Required if actual.is_none_or(View::is_null) => {
                    Err(PatternError::fail(path, [k, " not found"].concat()))
                }
                PlainBody::Required => Ok(()),
                PlainBody::Node(n) => element_at(actual, n, &path.key(k)),
            }
        })?;
    }
    Ok(())
}

fn anchor_element<'r, V: View<'r>>(
    anchor: Anchor,
    key: &str,
    body: &AnchorBody,
    resource: V,
    path: &Path,
) -> Res<'r> {
    let child_path = path.key(key);
    let actual = resource.get(key);
    let node = match body {
        AnchorBody::Node(n) => n,
        AnchorBody::Existence(entries) => {
            return match actual {
                None => Ok(()),
                Some(items) if matches!(items.kind(), Kind::Array(_)) => {
                    let entries = entries
                        .as_ref()
                        .map_err(|e| PatternError::fail(&child_path, e.clone()))?;
                    for entry in entries {
                        if !items
                            .elements()
                            .enumerate()
                            .any(|(i, item)| element(item, entry, &child_path.index(i)).is_ok())
                        {
                            return Err(PatternError::fail(
                                &child_path,
                                "existence anchor validation failed".to_string(),
                            ));
                        }
                    }
                    Ok(())
                }
                Some(other) => Err(PatternError::fail(
                    &child_path,
                    format!(
                        "invalid resource type {}: existence ^ () anchor can be used only on list/array type resource",
                        go_json_type(&other.to_cow())
                    ),
                )),
            };
        }
    };
    match anchor {
        Anchor::Condition | Anchor::Global => {
            let tag = if anchor == Anchor::Global {
                "global anchor"
            } else {
                "conditional anchor"
            };
            match actual {
                Some(v) => element(v, node, &child_path).map_err(|e| {
                    // A negation failure inside a condition stays a hard failure.
                    if e.kind == ErrorKind::Negation {
                        e
                    } else {
                        e.under_anchor(tag)
                    }
                }),
                // As Kyverno's anchor handlers: a global anchor whose key
                // the resource lacks holds; a conditional one skips.
                None if anchor == Anchor::Global => Ok(()),
                None => Err(Box::new(PatternError {
                    kind: ErrorKind::Skip,
                    path: child_path.render(),
                    detail: Detail::Text(
                        "conditional anchor mismatch: conditional anchor key doesn't exist in the resource"
                            .to_string(),
                    ),
                })),
            }
        }
        Anchor::Equality => match actual {
            Some(v) => element(v, node, &child_path),
            None => Ok(()),
        },
        Anchor::Negation => match actual {
            Some(_) => {
                let p = child_path.render();
                Err(Box::new(PatternError {
                    kind: ErrorKind::Negation,
                    detail: Detail::Text([&p, " is not allowed"].concat()),
                    path: p,
                }))
            }
            None => Ok(()),
        },
        Anchor::Existence | Anchor::AddIfNotPresent => Ok(()),
    }
}

fn array<'r, V: View<'r>>(resource: V, node: &ArrayNode, path: &Path) -> Res<'r> {
    match node {
        ArrayNode::Empty => Err(PatternError::fail(path, "pattern array empty".into())),
        ArrayNode::OfMaps(first) => {
            let mut applied = 0;
            let mut skipped: Option<Box<PatternError>> = None;
            for (i, item) in resource.elements().enumerate() {
                match element(item, first, &path.index(i)) {
                    Ok(()) => applied += 1,
                    Err(e) if e.kind == ErrorKind::Skip => skipped = skipped.or(Some(e)),
                    Err(e) => return Err(e),
                }
            }
            match skipped {
                Some(mut e) if applied == 0 => {
                    e.kind = ErrorKind::Skip;
                    e.path = path.render();
                    Err(e)
                }
                _ => Ok(()),
            }
        }
        ArrayNode::Positional(items) => {
            let len = resource.elements().count();
            if len < items.len() {
                return Err(PatternError::fail(
                    path,
                    format!(
                        "validate Array failed, array length mismatch, resource Array len is {} and pattern Array len is {}",
                        len,
                        items.len()
                    ),
                ));
            }
            for ((i, p), item) in items.iter().enumerate().zip(resource.elements()) {
                element(item, p, &path.index(i))?;
            }
            Ok(())
        }
        ArrayNode::OfScalar(s) => match resource.elements().find(|i| !s.matches(*i)) {
            Some(bad) => Err(mismatch(path, bad)),
            None => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests;
