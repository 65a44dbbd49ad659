//! A decoded JSON document in three contiguous buffers: the values in
//! document order, a key table per object, and the text of every string
//! and key. It is the request representation that issue 36's evaluation
//! core reads. A lookup scans the object's key table, a run of 16-byte
//! entries each led by a fingerprint of its key (length, first, middle and
//! last byte), so a key that is not there costs a compare per entry and
//! touches none of the values; a document is three allocations to build
//! and three to free, where a `serde_json::Value` is one per string, key
//! and container.
//!
//! Parsing is serde_json's (its grammar, number rules, recursion limit and
//! errors); only the visitor that stores what it reads is ours. An
//! object's key table is in document order with a repeated key's last
//! value kept, as `serde_json::Value`'s `BTreeMap` keeps it, and its
//! entries are served sorted by key, as the `BTreeMap` serves them, so the
//! two representations of one text read the same, in the same order
//! (`to_value`, and the [`View`] both implement).

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::fmt;

mod document;
pub use document::{Document, JsonRef};

/// One value of the document. An array is followed by its elements; an
/// object by its values (in document order; its keys are in the key table
/// at `keys`). `end` is the index just past the last node of either, so a
/// walk skips a subtree in one step.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Node {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str { start: u32, len: u32 },
    Array { len: u32, end: u32 },
    Object { len: u32, keys: u32, end: u32 },
}

/// One key of an object's key table.
#[derive(Debug, Clone, Copy, PartialEq)]
struct KeyEntry {
    print: u32,
    start: u32,
    len: u32,
    /// The node of its value.
    value: u32,
}

/// The fingerprint of a key: its length (low byte) and its first, middle
/// and last bytes. Sibling keys of Kubernetes objects differ in it almost
/// always (`name`/`type`/`kind` by their first byte), so a scan compares
/// text only for the key it finds.
#[inline]
fn fingerprint(key: &[u8]) -> u32 {
    match key {
        [] => 0,
        [first, ..] => {
            let last = key[key.len() - 1];
            let middle = key[key.len() / 2];
            (key.len() as u32 & 0xff)
                | (u32::from(*first) << 8)
                | (u32::from(middle) << 16)
                | (u32::from(last) << 24)
        }
    }
}

/// A key whose fingerprint is computed once, where it is compiled (a CEL
/// field selection, a JMESPath key path, a key of the merged pattern
/// walk), rather than on every lookup: [`Json::get_key`], [`View::get_key`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key {
    name: Box<str>,
    print: u32,
}

impl Key {
    pub fn new(name: &str) -> Key {
        Key {
            name: name.into(),
            print: fingerprint(name.as_bytes()),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.name
    }
}

/// As the name alone: compiled plans are told apart by their debug text
/// (`cel::shared_plans`), which the fingerprint would only repeat.
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.name.fmt(f)
    }
}

/// A decoded JSON document.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    nodes: Vec<Node>,
    keys: Vec<KeyEntry>,
    text: String,
}

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

    fn push_value(&mut self, value: &Value) {
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

    fn push_text(&mut self, s: &str) -> (u32, u32) {
        let start = len32(self.text.len());
        self.text.push_str(s);
        (start, len32(s.len()))
    }

    /// A key just read, whose value is the next node.
    fn key_entry(&mut self, key: &str) -> KeyEntry {
        let (start, len) = self.push_text(key);
        KeyEntry {
            print: fingerprint(key.as_bytes()),
            start,
            len,
            value: len32(self.nodes.len()),
        }
    }

    fn open(&mut self) -> usize {
        self.nodes.push(Node::Null);
        self.nodes.len() - 1
    }

    fn close_array(&mut self, at: usize, len: usize) {
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
    fn close_object(&mut self, at: usize, mut keys: SmallVec<[KeyEntry; 16]>) {
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

    fn key_text(&self, k: &KeyEntry) -> &[u8] {
        &self.text.as_bytes()[k.start as usize..(k.start + k.len) as usize]
    }

    /// Removes every entry whose key comes again later in the object, as
    /// `serde_json::Map` keeps the last value of a repeated key. A small
    /// object compares fingerprints pairwise; a large one sorts, so that a
    /// body of many keys costs `n log n`, not `n²`.
    fn drop_repeated_keys(&self, keys: &mut SmallVec<[KeyEntry; 16]>) {
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

/// A [`Json`] for an enum whose other variants are pointers: the same two
/// words, with a byte of one valid value where `Json` has padding. That
/// byte gives the enum spare values for its tag, so it needs no tag of its
/// own. The CEL evaluator's lists and maps hold these
/// (`cel::direct::value`), and its values stay 24 bytes: at 32, it took
/// 3-5% fewer instructions and 13-25% more time on the Pod Security
/// set (copies of its values and their `Option`s became unaligned
/// two-part moves). `Json` itself has no such byte: enums that hold it
/// with several one-word variants (JMESPath's values) would shrink, and
/// decoding their tag from it cost the pattern engine about 1k
/// instructions per evaluation.
#[derive(Clone, Copy)]
pub struct PackedJson<'d> {
    doc: &'d Doc,
    at: u32,
    // Never read: it is there for its layout.
    #[allow(dead_code)]
    niche: Niche,
}

#[derive(Clone, Copy)]
#[repr(u8)]
enum Niche {
    Only = 0,
}

impl<'d> From<Json<'d>> for PackedJson<'d> {
    #[inline]
    fn from(j: Json<'d>) -> PackedJson<'d> {
        PackedJson {
            doc: j.doc,
            at: j.at,
            niche: Niche::Only,
        }
    }
}

impl<'d> PackedJson<'d> {
    #[inline]
    pub fn json(self) -> Json<'d> {
        Json {
            doc: self.doc,
            at: self.at,
        }
    }

    /// Whether both are the same node of the same document (not only
    /// equal values).
    pub fn same_node(self, other: PackedJson) -> bool {
        std::ptr::eq(self.doc, other.doc) && self.at == other.at
    }
}

impl fmt::Debug for PackedJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.json().fmt(f)
    }
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

    #[inline]
    pub fn kind(self) -> Kind<'d> {
        match self.node() {
            Node::Null => Kind::Null,
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

    /// The key table of an object (empty for any other value).
    fn key_table(self) -> &'d [KeyEntry] {
        match self.node() {
            Node::Object { len, keys, .. } => &self.doc.keys[keys as usize..(keys + len) as usize],
            _ => &[],
        }
    }

    /// The value under `key` of an object; `None` for a missing key or a
    /// value that is not an object. Always inlined (and so is the
    /// [`View`] method that calls it): the merged pattern walk looks up
    /// every key of every object it visits, and builds that left either
    /// out of line spent about 1k more instructions per evaluation of the
    /// Pod Security set (callgrind, `evaluate/pss17`).
    #[inline(always)]
    pub fn get(self, key: &str) -> Option<Json<'d>> {
        self.get_printed(key.as_bytes(), fingerprint(key.as_bytes()))
    }

    /// [`Json::get`] of a key fingerprinted beforehand.
    #[inline(always)]
    pub fn get_key(self, key: &Key) -> Option<Json<'d>> {
        self.get_printed(key.name.as_bytes(), key.print)
    }

    #[inline(always)]
    fn get_printed(self, want: &[u8], print: u32) -> Option<Json<'d>> {
        let text = self.doc.text.as_bytes();
        self.key_table()
            .iter()
            .find(|k| {
                k.print == print
                    && k.len as usize == want.len()
                    && crate::text::same_of_one_length(
                        &text[k.start as usize..(k.start + k.len) as usize],
                        want,
                    )
            })
            .map(|k| Json {
                doc: self.doc,
                at: k.value,
            })
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

    /// The entries of an object, ordered by key as a `serde_json::Map`
    /// (none for any other value). The key table is in document order, so
    /// this sorts a copy of it.
    pub fn entries(self) -> Entries<'d> {
        let mut keys: SmallVec<[KeyEntry; 16]> = self.key_table().iter().copied().collect();
        // Keys are unique after decoding: an unstable sort is exact.
        keys.sort_unstable_by(|a, b| self.doc.key_text(a).cmp(self.doc.key_text(b)));
        Entries {
            doc: self.doc,
            keys: keys.into_iter(),
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
            // The map sorts the keys itself: the table's order will do.
            Kind::Object(_) => Value::Object(
                self.key_table()
                    .iter()
                    .map(|k| {
                        let value = Json {
                            doc: self.doc,
                            at: k.value,
                        };
                        (
                            self.doc.str_at(k.start, k.len).to_string(),
                            value.to_value(),
                        )
                    })
                    .collect::<Map<String, Value>>(),
            ),
        }
    }
}

impl<'d> Kind<'d> {
    /// A number's value as a float (Go's `float64` of it); `None` for
    /// anything else.
    pub fn as_f64(self) -> Option<f64> {
        match self {
            Kind::I64(i) => Some(i as f64),
            Kind::U64(u) => Some(u as f64),
            Kind::F64(f) => Some(f),
            _ => None,
        }
    }

    pub fn as_str(self) -> Option<&'d str> {
        match self {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// A JSON value as the evaluators read it, whichever representation holds
/// it: a `&serde_json::Value` (policies, offline objects, the code not yet
/// moved to documents) or a [`Json`] of a decoded [`Doc`]. Evaluators
/// written against it serve both.
pub trait View<'r>: Copy + 'r {
    fn kind(self) -> Kind<'r>;
    /// The value under `key` of an object.
    fn get(self, key: &str) -> Option<Self>;
    /// [`View::get`] of a key compiled beforehand: a document reads it by
    /// the fingerprint the key carries ([`Json::get_key`]).
    fn get_key(self, key: &Key) -> Option<Self> {
        self.get(key.as_str())
    }
    /// The elements of an array (none for any other value).
    fn elements(self) -> impl Iterator<Item = Self> + 'r;
    /// The keys of an object (none for any other value).
    fn keys(self) -> impl Iterator<Item = &'r str> + 'r;
    /// The entries of an object, ordered by key (none for any other value).
    fn entries(self) -> impl Iterator<Item = (&'r str, Self)> + 'r;
    /// The element at `index` of an array.
    fn at(self, index: usize) -> Option<Self>;
    /// The value as a `serde_json::Value`, borrowed where it is one.
    fn to_cow(self) -> Cow<'r, Value>;

    fn is_null(self) -> bool {
        matches!(self.kind(), Kind::Null)
    }

    fn is_array(self) -> bool {
        matches!(self.kind(), Kind::Array(_))
    }

    fn is_object(self) -> bool {
        matches!(self.kind(), Kind::Object(_))
    }

    fn as_str(self) -> Option<&'r str> {
        self.kind().as_str()
    }
}

impl<'r> View<'r> for &'r Value {
    #[inline]
    fn kind(self) -> Kind<'r> {
        match self {
            Value::Null => Kind::Null,
            Value::Bool(b) => Kind::Bool(*b),
            Value::Number(n) => number_kind(n),
            Value::String(s) => Kind::Str(s),
            Value::Array(a) => Kind::Array(len32(a.len())),
            Value::Object(m) => Kind::Object(len32(m.len())),
        }
    }

    #[inline]
    fn get(self, key: &str) -> Option<&'r Value> {
        match self {
            Value::Object(m) => crate::json_map::get(m, key),
            _ => None,
        }
    }

    fn elements(self) -> impl Iterator<Item = &'r Value> + 'r {
        match self {
            Value::Array(a) => a.iter(),
            _ => [].iter(),
        }
    }

    fn keys(self) -> impl Iterator<Item = &'r str> + 'r {
        self.as_object()
            .into_iter()
            .flat_map(|m| m.keys().map(String::as_str))
    }

    fn entries(self) -> impl Iterator<Item = (&'r str, &'r Value)> + 'r {
        self.as_object()
            .into_iter()
            .flat_map(|m| m.iter().map(|(k, v)| (k.as_str(), v)))
    }

    fn at(self, index: usize) -> Option<&'r Value> {
        self.as_array()?.get(index)
    }

    fn to_cow(self) -> Cow<'r, Value> {
        Cow::Borrowed(self)
    }
}

impl<'r> View<'r> for Json<'r> {
    #[inline]
    fn kind(self) -> Kind<'r> {
        Json::kind(self)
    }

    #[inline(always)]
    fn get(self, key: &str) -> Option<Json<'r>> {
        Json::get(self, key)
    }

    #[inline(always)]
    fn get_key(self, key: &Key) -> Option<Json<'r>> {
        Json::get_key(self, key)
    }

    fn elements(self) -> impl Iterator<Item = Json<'r>> + 'r {
        Json::elements(self)
    }

    fn keys(self) -> impl Iterator<Item = &'r str> + 'r {
        self.entries().map(|(k, _)| k)
    }

    fn entries(self) -> impl Iterator<Item = (&'r str, Json<'r>)> + 'r {
        Json::entries(self)
    }

    fn at(self, index: usize) -> Option<Json<'r>> {
        Json::elements(self).nth(index)
    }

    fn to_cow(self) -> Cow<'r, Value> {
        Cow::Owned(self.to_value())
    }
}

fn number_kind(n: &Number) -> Kind<'static> {
    if let Some(i) = n.as_i64() {
        Kind::I64(i)
    } else if let Some(u) = n.as_u64() {
        Kind::U64(u)
    } else {
        Kind::F64(n.as_f64().unwrap_or(f64::NAN))
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

/// The entries of an object, ordered by key.
pub struct Entries<'d> {
    doc: &'d Doc,
    keys: smallvec::IntoIter<[KeyEntry; 16]>,
}

impl<'d> Iterator for Entries<'d> {
    type Item = (&'d str, Json<'d>);

    fn next(&mut self) -> Option<(&'d str, Json<'d>)> {
        let k = self.keys.next()?;
        Some((
            self.doc.str_at(k.start, k.len),
            Json {
                doc: self.doc,
                at: k.value,
            },
        ))
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
struct KeySeed<'a>(&'a mut Doc);

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

#[cfg(test)]
mod tests;
