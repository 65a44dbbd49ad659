//! [`View`]: one reading interface over a `serde_json::Value` and a
//! [`Json`] node, so that code reads either representation alike.

use super::*;
use serde_json::{Number, Value};
use std::borrow::Cow;

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

pub(super) fn number_kind(n: &Number) -> Kind<'static> {
    if let Some(i) = n.as_i64() {
        Kind::I64(i)
    } else if let Some(u) = n.as_u64() {
        Kind::U64(u)
    } else {
        Kind::F64(n.as_f64().unwrap_or(f64::NAN))
    }
}
