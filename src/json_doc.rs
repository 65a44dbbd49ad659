//! A decoded JSON document in two contiguous buffers: the nodes in
//! document order and the text of every string and key. It is the
//! request's representation that issue 36's evaluation core reads: a map is
//! its entries one after the other, so a lookup is a scan of adjacent
//! nodes (lengths first), with no tree to walk and no pointer to chase; a
//! document is two allocations to build and two to free, where a
//! `serde_json::Value` is one per string, key and container.
//!
//! Parsing is serde_json's (its grammar, number rules, recursion limit and
//! errors); only the visitor that stores what it reads is ours. Duplicate
//! keys keep the last value, as `serde_json::Value` does, so the two
//! representations of one text always agree (`to_value`).

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// One node of the document. Containers are followed by their contents;
/// `end` is the index just past their last node, so a walk skips a
/// subtree in one step.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Node {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str {
        start: u32,
        len: u32,
    },
    Array {
        len: u32,
        end: u32,
    },
    /// Followed by `len` live entries, each a `Key` and its value.
    Object {
        len: u32,
        end: u32,
    },
    Key {
        start: u32,
        len: u32,
    },
    /// A key a later duplicate replaced, with its value after it: skipped
    /// by every walk (the value's extent is that value node's own).
    DeadKey,
}

/// A decoded JSON document.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    nodes: Vec<Node>,
    text: String,
}

/// Maps with more keys than this look for an earlier duplicate through a
/// sorted index built after the map, not by rescanning at each key.
const RESCAN_UP_TO: usize = 16;

impl Doc {
    /// Parses JSON text, with serde_json's errors.
    pub fn parse(text: &str) -> Result<Doc, serde_json::Error> {
        let mut doc = Doc {
            // About one node per 12 bytes of compact Kubernetes JSON.
            nodes: Vec::with_capacity(text.len() / 12 + 4),
            text: String::with_capacity(text.len() / 2),
        };
        let mut de = serde_json::Deserializer::from_str(text);
        NodeSeed(&mut doc).deserialize(&mut de)?;
        de.end()?;
        Ok(doc)
    }

    /// The document of a `serde_json::Value` (offline objects, tests).
    pub fn from_value(value: &Value) -> Doc {
        let mut doc = Doc::default();
        doc.push_value(value);
        doc
    }

    fn push_value(&mut self, value: &Value) {
        match value {
            Value::Null => self.nodes.push(Node::Null),
            Value::Bool(b) => self.nodes.push(Node::Bool(*b)),
            Value::Number(n) => self.nodes.push(number_node(n)),
            Value::String(s) => {
                let node = self.text_node(s, false);
                self.nodes.push(node)
            }
            Value::Array(items) => {
                let at = self.open();
                for item in items {
                    self.push_value(item);
                }
                self.close(
                    at,
                    Node::Array {
                        len: len32(items.len()),
                        end: 0,
                    },
                );
            }
            Value::Object(map) => {
                let at = self.open();
                for (k, v) in map {
                    let key = self.text_node(k, true);
                    self.nodes.push(key);
                    self.push_value(v);
                }
                self.close(
                    at,
                    Node::Object {
                        len: len32(map.len()),
                        end: 0,
                    },
                );
            }
        }
    }

    fn text_node(&mut self, s: &str, key: bool) -> Node {
        let start = len32(self.text.len());
        self.text.push_str(s);
        let len = len32(s.len());
        if key {
            Node::Key { start, len }
        } else {
            Node::Str { start, len }
        }
    }

    fn open(&mut self) -> usize {
        self.nodes.push(Node::Null);
        self.nodes.len() - 1
    }

    fn close(&mut self, at: usize, node: Node) {
        let end = len32(self.nodes.len());
        self.nodes[at] = match node {
            Node::Array { len, .. } => Node::Array { len, end },
            Node::Object { len, .. } => Node::Object { len, end },
            other => other,
        };
    }

    /// The root value.
    pub fn root(&self) -> Json<'_> {
        Json { doc: self, at: 0 }
    }

    fn str_at(&self, start: u32, len: u32) -> &str {
        &self.text[start as usize..(start + len) as usize]
    }

    /// The index just past the subtree at `at`.
    fn end_of(&self, at: usize) -> usize {
        match self.nodes[at] {
            Node::Array { end, .. } | Node::Object { end, .. } => end as usize,
            _ => at + 1,
        }
    }

    /// Marks the earlier of two equal keys of one object dead (`keys`: the
    /// indexes of its key nodes); the number marked.
    fn kill_duplicates(&mut self, keys: &[usize]) -> u32 {
        let mut dead = 0;
        if keys.len() <= RESCAN_UP_TO {
            for (i, &k) in keys.iter().enumerate() {
                let name = self.key_text(k);
                if keys[i + 1..]
                    .iter()
                    .any(|&later| self.key_text(later) == name)
                {
                    self.nodes[k] = Node::DeadKey;
                    dead += 1;
                }
            }
        } else {
            let mut sorted: Vec<(usize, usize)> = keys.iter().copied().enumerate().collect();
            sorted.sort_by(|a, b| {
                self.key_text(a.1)
                    .cmp(self.key_text(b.1))
                    .then(a.0.cmp(&b.0))
            });
            let mut kill = Vec::new();
            for pair in sorted.windows(2) {
                if self.key_text(pair[0].1) == self.key_text(pair[1].1) {
                    kill.push(pair[0].1);
                }
            }
            for k in kill {
                self.nodes[k] = Node::DeadKey;
                dead += 1;
            }
        }
        dead
    }

    fn key_text(&self, at: usize) -> &str {
        match self.nodes[at] {
            Node::Key { start, len } => self.str_at(start, len),
            _ => "",
        }
    }
}

fn len32(n: usize) -> u32 {
    // Bodies are limited to a few MiB long before this could overflow.
    u32::try_from(n).expect("a JSON document under 4 GiB")
}

fn number_node(n: &Number) -> Node {
    if let Some(i) = n.as_i64() {
        Node::I64(i)
    } else if let Some(u) = n.as_u64() {
        Node::U64(u)
    } else {
        Node::F64(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// A value of a [`Doc`]: a reference that is two words and `Copy`.
#[derive(Clone, Copy)]
pub struct Json<'d> {
    doc: &'d Doc,
    at: u32,
}

/// What a [`Json`] holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind<'d> {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(&'d str),
    Array(u32),
    Object(u32),
}

impl<'d> Json<'d> {
    fn node(self) -> Node {
        self.doc.nodes[self.at as usize]
    }

    pub fn kind(self) -> Kind<'d> {
        match self.node() {
            Node::Null | Node::Key { .. } | Node::DeadKey => Kind::Null,
            Node::Bool(b) => Kind::Bool(b),
            Node::I64(i) => Kind::I64(i),
            Node::U64(u) => Kind::U64(u),
            Node::F64(f) => Kind::F64(f),
            Node::Str { start, len } => Kind::Str(self.doc.str_at(start, len)),
            Node::Array { len, .. } => Kind::Array(len),
            Node::Object { len, .. } => Kind::Object(len),
        }
    }

    pub fn is_null(self) -> bool {
        matches!(self.node(), Node::Null)
    }

    pub fn as_str(self) -> Option<&'d str> {
        match self.node() {
            Node::Str { start, len } => Some(self.doc.str_at(start, len)),
            _ => None,
        }
    }

    pub fn is_object(self) -> bool {
        matches!(self.node(), Node::Object { .. })
    }

    pub fn is_array(self) -> bool {
        matches!(self.node(), Node::Array { .. })
    }

    /// The value under `key` of an object; `None` for a missing key or a
    /// value that is not an object.
    #[inline]
    pub fn get(self, key: &str) -> Option<Json<'d>> {
        let Node::Object { end, .. } = self.node() else {
            return None;
        };
        let nodes = &self.doc.nodes;
        let want = key.as_bytes();
        let mut at = self.at as usize + 1;
        let end = end as usize;
        while at < end {
            if let Node::Key { start, len } = nodes[at]
                && len as usize == want.len()
                && crate::text::same_bytes(self.doc.str_at(start, len).as_bytes(), want)
            {
                return Some(Json {
                    doc: self.doc,
                    at: len32(at + 1),
                });
            }
            at = self.doc.end_of(at + 1);
        }
        None
    }

    /// The elements of an array (none for any other value).
    pub fn elements(self) -> Elements<'d> {
        let (next, end) = match self.node() {
            Node::Array { end, .. } => (self.at as usize + 1, end as usize),
            _ => (0, 0),
        };
        Elements {
            doc: self.doc,
            next,
            end,
        }
    }

    /// The entries of an object in document order (none for any other
    /// value).
    pub fn entries(self) -> Entries<'d> {
        let (next, end) = match self.node() {
            Node::Object { end, .. } => (self.at as usize + 1, end as usize),
            _ => (0, 0),
        };
        Entries {
            doc: self.doc,
            next,
            end,
        }
    }

    /// The value as a `serde_json::Value` (for the code that still reads
    /// those).
    pub fn to_value(self) -> Value {
        match self.kind() {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(b),
            Kind::I64(i) => Value::from(i),
            Kind::U64(u) => Value::from(u),
            Kind::F64(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
            Kind::Str(s) => Value::String(s.to_string()),
            Kind::Array(len) => {
                let mut out = Vec::with_capacity(len as usize);
                out.extend(self.elements().map(Json::to_value));
                Value::Array(out)
            }
            Kind::Object(_) => Value::Object(
                self.entries()
                    .map(|(k, v)| (k.to_string(), v.to_value()))
                    .collect::<Map<String, Value>>(),
            ),
        }
    }
}

impl fmt::Debug for Json<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_value())
    }
}

/// The elements of an array.
pub struct Elements<'d> {
    doc: &'d Doc,
    next: usize,
    end: usize,
}

impl<'d> Iterator for Elements<'d> {
    type Item = Json<'d>;

    fn next(&mut self) -> Option<Json<'d>> {
        if self.next >= self.end {
            return None;
        }
        let at = self.next;
        self.next = self.doc.end_of(at);
        Some(Json {
            doc: self.doc,
            at: len32(at),
        })
    }
}

/// The live entries of an object, in document order.
pub struct Entries<'d> {
    doc: &'d Doc,
    next: usize,
    end: usize,
}

impl<'d> Iterator for Entries<'d> {
    type Item = (&'d str, Json<'d>);

    fn next(&mut self) -> Option<(&'d str, Json<'d>)> {
        while self.next < self.end {
            let at = self.next;
            self.next = self.doc.end_of(at + 1);
            if let Node::Key { start, len } = self.doc.nodes[at] {
                return Some((
                    self.doc.str_at(start, len),
                    Json {
                        doc: self.doc,
                        at: len32(at + 1),
                    },
                ));
            }
        }
        None
    }
}

/// Reads one value into the document.
struct NodeSeed<'a>(&'a mut Doc);

impl<'de> DeserializeSeed<'de> for NodeSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.0.nodes.push(Node::Null);
        Ok(())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<(), E> {
        self.0.nodes.push(Node::Bool(b));
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, i: i64) -> Result<(), E> {
        self.0.nodes.push(Node::I64(i));
        Ok(())
    }

    fn visit_u64<E: serde::de::Error>(self, u: u64) -> Result<(), E> {
        self.0.nodes.push(number_node(&Number::from(u)));
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(self, f: f64) -> Result<(), E> {
        // serde_json hands only finite numbers over.
        self.0.nodes.push(Node::F64(f));
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        let node = self.0.text_node(s, false);
        self.0.nodes.push(node);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let doc = self.0;
        let at = doc.open();
        let mut len = 0usize;
        while seq.next_element_seed(NodeSeed(doc))?.is_some() {
            len += 1;
        }
        doc.close(
            at,
            Node::Array {
                len: len32(len),
                end: 0,
            },
        );
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let doc = self.0;
        let at = doc.open();
        let mut keys: smallvec::SmallVec<[usize; 16]> = smallvec::SmallVec::new();
        while map.next_key_seed(KeySeed(doc))?.is_some() {
            keys.push(doc.nodes.len() - 1);
            map.next_value_seed(NodeSeed(doc))?;
        }
        let dead = if keys.len() > 1 {
            doc.kill_duplicates(&keys)
        } else {
            0
        };
        let len = keys.len() - dead as usize;
        doc.close(
            at,
            Node::Object {
                len: len32(len),
                end: 0,
            },
        );
        Ok(())
    }
}

/// Reads a map key into the document.
struct KeySeed<'a>(&'a mut Doc);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        let node = self.0.text_node(s, true);
        self.0.nodes.push(node);
        Ok(())
    }

    fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<(), E> {
        Err(E::custom("a map key is not a string"))
    }
}

#[cfg(test)]
mod tests;
