//! Building a document: from text through serde_json's deserializer (its
//! grammar, limits and errors; only the visitor is ours), or from a
//! `serde_json::Value`, with a repeated key's last value kept.

use super::*;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};
use smallvec::SmallVec;
use std::fmt;
impl Doc {
    /// Parses JSON text, with serde_json's errors.
    pub fn parse(text: &str) -> Result<Doc, serde_json::Error> {
        let mut doc = Doc {
            // About one node per 12 bytes of compact Kubernetes JSON.
            nodes: Vec::with_capacity(text.len() / 12 + 4),
            keys: Vec::with_capacity(text.len() / 24 + 4),
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

    pub(super) fn push_value(&mut self, value: &Value) {
        match value {
            Value::Null => self.nodes.push(Node::Null),
            Value::Bool(b) => self.nodes.push(Node::Bool(*b)),
            Value::Number(n) => self.nodes.push(number_node(n)),
            Value::String(s) => {
                let (start, len) = self.push_text(s);
                self.nodes.push(Node::Str { start, len })
            }
            Value::Array(items) => {
                let at = self.open();
                for item in items {
                    self.push_value(item);
                }
                self.close_array(at, items.len());
            }
            Value::Object(map) => {
                let at = self.open();
                let mut keys: SmallVec<[KeyEntry; 16]> = SmallVec::new();
                for (k, v) in map {
                    keys.push(self.key_entry(k));
                    self.push_value(v);
                }
                self.close_object(at, keys);
            }
        }
    }

    pub(super) fn push_text(&mut self, s: &str) -> (u32, u32) {
        let start = len32(self.text.len());
        self.text.push_str(s);
        (start, len32(s.len()))
    }

    /// A key just read, whose value is the next node.
    pub(super) fn key_entry(&mut self, key: &str) -> KeyEntry {
        let (start, len) = self.push_text(key);
        KeyEntry {
            print: fingerprint(key.as_bytes()),
            start,
            len,
            value: len32(self.nodes.len()),
        }
    }

    pub(super) fn open(&mut self) -> usize {
        self.nodes.push(Node::Null);
        self.nodes.len() - 1
    }

    pub(super) fn close_array(&mut self, at: usize, len: usize) {
        let end = len32(self.nodes.len());
        self.nodes[at] = Node::Array {
            len: len32(len),
            end,
        };
    }

    /// Stores the object's keys as its table, in document order, with only
    /// the last of a repeated key kept. Not sorted: a lookup scans
    /// fingerprints either way, and sorting every object's keys was a fifth
    /// of decoding a review; [`Json::entries`] sorts when it is asked.
    pub(super) fn close_object(&mut self, at: usize, mut keys: SmallVec<[KeyEntry; 16]>) {
        if keys.len() > 1 {
            self.drop_repeated_keys(&mut keys);
        }
        let table = len32(self.keys.len());
        self.keys.extend_from_slice(&keys);
        let end = len32(self.nodes.len());
        self.nodes[at] = Node::Object {
            len: len32(keys.len()),
            keys: table,
            end,
        };
    }

    pub(super) fn key_text(&self, k: &KeyEntry) -> &[u8] {
        &self.text.as_bytes()[k.start as usize..(k.start + k.len) as usize]
    }

    /// Removes every entry whose key comes again later in the object, as
    /// `serde_json::Map` keeps the last value of a repeated key. A small
    /// object compares fingerprints pairwise; a large one sorts, so that a
    /// body of many keys costs `n log n`, not `n²`.
    pub(super) fn drop_repeated_keys(&self, keys: &mut SmallVec<[KeyEntry; 16]>) {
        let same =
            |a: &KeyEntry, b: &KeyEntry| a.print == b.print && self.key_text(a) == self.key_text(b);
        let mut keep: SmallVec<[bool; 16]> = SmallVec::from_elem(true, keys.len());
        if keys.len() <= 32 {
            for i in 0..keys.len() {
                keep[i] = !keys[i + 1..].iter().any(|later| same(&keys[i], later));
            }
        } else {
            let mut order: Vec<usize> = (0..keys.len()).collect();
            order.sort_by(|&a, &b| {
                self.key_text(&keys[a])
                    .cmp(self.key_text(&keys[b]))
                    .then(a.cmp(&b))
            });
            for pair in order.windows(2) {
                if same(&keys[pair[0]], &keys[pair[1]]) {
                    keep[pair[0]] = false;
                }
            }
        }
        if keep.iter().all(|k| *k) {
            return;
        }
        let mut index = 0;
        keys.retain(|_| {
            index += 1;
            keep[index - 1]
        });
    }
}

pub(super) fn len32(n: usize) -> u32 {
    // Bodies are limited to a few MiB long before this could overflow.
    u32::try_from(n).expect("a JSON document under 4 GiB")
}

pub(super) fn number_node(n: &Number) -> Node {
    if let Some(i) = n.as_i64() {
        Node::I64(i)
    } else if let Some(u) = n.as_u64() {
        Node::U64(u)
    } else {
        Node::F64(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Decodes a value embedded in a larger text (the object of an
/// AdmissionReview) into a document of its own.
impl<'de> serde::Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Doc, D::Error> {
        let mut doc = Doc {
            // A Pod's worth, so that a typical object grows its buffers
            // once or twice.
            nodes: Vec::with_capacity(256),
            keys: Vec::with_capacity(128),
            text: String::with_capacity(2048),
        };
        NodeSeed(&mut doc).deserialize(de)?;
        Ok(doc)
    }
}

/// Reads one value into the document.
pub(super) struct NodeSeed<'a>(&'a mut Doc);

impl<'de> DeserializeSeed<'de> for NodeSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
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
        let (start, len) = self.0.push_text(s);
        self.0.nodes.push(Node::Str { start, len });
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let doc = self.0;
        let at = doc.open();
        let mut len = 0usize;
        while seq.next_element_seed(NodeSeed(doc))?.is_some() {
            len += 1;
        }
        doc.close_array(at, len);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let doc = self.0;
        let at = doc.open();
        let mut keys: SmallVec<[KeyEntry; 16]> = SmallVec::new();
        while let Some(key) = map.next_key_seed(KeySeed(doc))? {
            keys.push(key);
            map.next_value_seed(NodeSeed(doc))?;
        }
        doc.close_object(at, keys);
        Ok(())
    }
}

/// Reads a map key into the document's text; its entry points at the
/// node its value is read into next.
pub(super) struct KeySeed<'a>(&'a mut Doc);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = KeyEntry;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<KeyEntry, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = KeyEntry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<KeyEntry, E> {
        Ok(self.0.key_entry(s))
    }
}
