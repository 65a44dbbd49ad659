//! A request's object held in the representation it arrived in, with a
//! `serde_json::Value` built from a document on first use ([`Document`]),
//! and a borrowed value of either representation ([`JsonRef`]).
//!
//! The webhook decodes an object into a [`Doc`] where the policies read
//! documents (cheaper to decode, free and look up); offline runs and
//! mutation have a `Value`. Code on [`View`] reads whichever is there; the
//! code not moved to it yet asks for the `Value`, which is then built once
//! and kept, so no path pays a conversion twice and none pays one it does
//! not use.

use super::{Doc, Json, Key, Kind, View};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

/// A JSON value as a [`Doc`], a `serde_json::Value`, or both (the
/// `Value` made from the `Doc`); at least one is always set.
#[derive(Clone)]
pub struct Document {
    doc: Option<Doc>,
    value: OnceLock<Value>,
}

impl Document {
    pub fn from_doc(doc: Doc) -> Document {
        Document {
            doc: Some(doc),
            value: OnceLock::new(),
        }
    }

    pub fn from_value(value: Value) -> Document {
        Document {
            doc: None,
            value: OnceLock::from(value),
        }
    }

    /// The value as the evaluators on [`View`] read it: the document's own
    /// representation when there is one, else the `Value` (no conversion).
    #[inline]
    pub fn json(&self) -> JsonRef<'_> {
        match &self.doc {
            Some(doc) => JsonRef::Doc(doc.root()),
            None => JsonRef::Value(self.value()),
        }
    }

    /// The value as a `serde_json::Value`, built from the document on
    /// first use (for the code not yet on [`View`]).
    pub fn value(&self) -> &Value {
        self.value.get_or_init(|| {
            self.doc
                .as_ref()
                .expect("a document holds a value")
                .root()
                .to_value()
        })
    }

    pub fn into_value(self) -> Value {
        match self.value.into_inner() {
            Some(v) => v,
            None => self
                .doc
                .as_ref()
                .expect("a document holds a value")
                .root()
                .to_value(),
        }
    }

    pub fn is_null(&self) -> bool {
        self.json().is_null()
    }

    /// Whether a decoded document has been converted to a `Value` (the
    /// evaluators that read documents in place never ask for one).
    pub fn converted(&self) -> bool {
        self.doc.is_some() && self.value.get().is_some()
    }
}

impl Default for Document {
    /// JSON null (the object of a DELETE, the old object of a CREATE).
    fn default() -> Document {
        Document::from_value(Value::Null)
    }
}

impl From<Doc> for Document {
    fn from(doc: Doc) -> Document {
        Document::from_doc(doc)
    }
}

impl From<Value> for Document {
    fn from(value: Value) -> Document {
        Document::from_value(value)
    }
}

impl PartialEq for Document {
    fn eq(&self, other: &Document) -> bool {
        self.value() == other.value()
    }
}

impl fmt::Debug for Document {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.json().to_cow())
    }
}

impl<'de> Deserialize<'de> for Document {
    /// Decodes straight into a [`Doc`].
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Document, D::Error> {
        Doc::deserialize(de).map(Document::from_doc)
    }
}

/// A borrowed JSON value of either representation. Evaluators generic over
/// [`View`] are called once per representation (`match` on this), so the
/// choice is made once per evaluation, not once per lookup.
#[derive(Debug, Clone, Copy)]
pub enum JsonRef<'r> {
    Value(&'r Value),
    Doc(Json<'r>),
}

impl<'r> From<&'r Value> for JsonRef<'r> {
    fn from(v: &'r Value) -> JsonRef<'r> {
        JsonRef::Value(v)
    }
}

impl<'r> From<Json<'r>> for JsonRef<'r> {
    fn from(j: Json<'r>) -> JsonRef<'r> {
        JsonRef::Doc(j)
    }
}

impl<'r> JsonRef<'r> {
    /// The value as a `serde_json::Value`: borrowed, or converted.
    pub fn to_cow(self) -> Cow<'r, Value> {
        match self {
            JsonRef::Value(v) => Cow::Borrowed(v),
            JsonRef::Doc(j) => Cow::Owned(j.to_value()),
        }
    }

    pub fn to_value(self) -> Value {
        self.to_cow().into_owned()
    }
}

/// Served by dispatch, for code that reads a few fields; evaluators that
/// walk a value match on the representation once instead.
impl<'r> View<'r> for JsonRef<'r> {
    #[inline]
    fn kind(self) -> Kind<'r> {
        match self {
            JsonRef::Value(v) => v.kind(),
            JsonRef::Doc(j) => j.kind(),
        }
    }

    #[inline]
    fn get(self, key: &str) -> Option<JsonRef<'r>> {
        match self {
            JsonRef::Value(v) => View::get(v, key).map(JsonRef::Value),
            JsonRef::Doc(j) => j.get(key).map(JsonRef::Doc),
        }
    }

    #[inline]
    fn get_key(self, key: &Key) -> Option<JsonRef<'r>> {
        match self {
            JsonRef::Value(v) => View::get(v, key.as_str()).map(JsonRef::Value),
            JsonRef::Doc(j) => j.get_key(key).map(JsonRef::Doc),
        }
    }

    fn elements(self) -> impl Iterator<Item = JsonRef<'r>> + 'r {
        let (values, docs) = match self {
            JsonRef::Value(v) => (Some(View::elements(v).map(JsonRef::Value)), None),
            JsonRef::Doc(j) => (None, Some(j.elements().map(JsonRef::Doc))),
        };
        values
            .into_iter()
            .flatten()
            .chain(docs.into_iter().flatten())
    }

    fn keys(self) -> impl Iterator<Item = &'r str> + 'r {
        let (values, docs) = match self {
            JsonRef::Value(v) => (Some(View::keys(v)), None),
            JsonRef::Doc(j) => (None, Some(View::keys(j))),
        };
        values
            .into_iter()
            .flatten()
            .chain(docs.into_iter().flatten())
    }

    fn entries(self) -> impl Iterator<Item = (&'r str, JsonRef<'r>)> + 'r {
        let (values, docs) = match self {
            JsonRef::Value(v) => (Some(View::entries(v)), None),
            JsonRef::Doc(j) => (None, Some(j.entries())),
        };
        let values = values.into_iter().flatten();
        let docs = docs.into_iter().flatten();
        values
            .map(|(k, v)| (k, JsonRef::Value(v)))
            .chain(docs.map(|(k, j)| (k, JsonRef::Doc(j))))
    }

    fn at(self, index: usize) -> Option<JsonRef<'r>> {
        match self {
            JsonRef::Value(v) => View::at(v, index).map(JsonRef::Value),
            JsonRef::Doc(j) => View::at(j, index).map(JsonRef::Doc),
        }
    }

    fn to_cow(self) -> Cow<'r, Value> {
        JsonRef::to_cow(self)
    }
}
