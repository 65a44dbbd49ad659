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

use serde_json::{Map, Number, Value};
use smallvec::SmallVec;
use std::fmt;

mod build;
mod document;
mod view;
use build::*;
pub use document::{Document, JsonRef};
pub use view::*;

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

#[cfg(test)]
mod tests;
