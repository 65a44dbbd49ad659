//! The values the direct evaluator works on: JSON borrowed from the
//! request as it is, and values an expression builds.
//!
//! A field selection on a JSON object gives a view of the child (no copy);
//! only what an expression constructs (list and map literals, string
//! concatenation, `map()`) is allocated. JSON is read in the representation
//! the request holds it in: the webhook's decoded document ([`Json`],
//! whose key lookups scan a fingerprinted key table), or a
//! `serde_json::Value` (offline runs, autogen's template views, mutation
//! targets). Neither is converted to the other.

use crate::json_doc::{Elements, Json, JsonRef, Key, Kind, PackedJson};
use kube_cel::cel::Value as CelValue;
use kube_cel::cel::objects::{Key as CelKey, Map, OptionalValue};
use serde_json::Value;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

/// Why an evaluation stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum Fail {
    /// Hand the expression to the interpreter (an error, or a case this
    /// evaluator does not implement).
    Interpreter,
    /// The cost budget ran out (the interpreter would run out the same way:
    /// both charge the same weights).
    CostLimit,
    /// A CEL error the interpreter would answer wrongly (the cel crate
    /// selects a field of a string as false), with cel-go's message.
    /// Behind one thin pointer: a `Fail` is then two words, and a
    /// `Result<bool, Fail>` comes back in registers, not through memory
    /// read back right after it was written (`Fail::error`).
    Error(Box<String>),
}

impl Fail {
    /// [`Fail::Error`] with `message`.
    #[cold]
    pub fn error(message: impl Into<String>) -> Fail {
        Fail::Error(Box::new(message.into()))
    }
}

/// One CEL value. `'a` is the lifetime of the JSON it may borrow.
#[derive(Debug, Clone)]
pub enum Val<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Str<'a>),
    Bytes(Arc<[u8]>),
    List(List<'a>),
    Map(MapVal<'a>),
    /// `optional.of(x)` / `optional.none()`.
    Optional(Option<Arc<Val<'a>>>),
    /// A value only the cel crate's interpreter can work with (a
    /// timestamp, a duration, ...): an expression that touches it is
    /// evaluated there instead.
    /// Boxed: it is rare, and a small `Val` is cheaper to move.
    Foreign(Arc<CelValue>),
}

#[derive(Debug, Clone)]
pub enum Str<'a> {
    Borrowed(&'a str),
    Owned(Arc<str>),
}

/// Each variant is at most two words, and the document's has spare values
/// for the tag ([`PackedJson`]), so a list is 16 bytes and a [`Val`] 24:
/// a `Vec`, not a slice, for a `Value`'s array.
#[derive(Debug, Clone)]
pub enum List<'a> {
    Value(&'a Vec<Value>),
    /// An array of a decoded document.
    Doc(PackedJson<'a>),
    Owned(Arc<Vec<Val<'a>>>),
}

#[derive(Debug, Clone)]
pub enum MapVal<'a> {
    Value(&'a serde_json::Map<String, Value>),
    /// An object of a decoded document.
    Doc(PackedJson<'a>),
    /// Entries in insertion order; keys are strings, ints, uints or bools.
    /// Maps built by expressions are small, so lookups are linear.
    Owned(Arc<Vec<(Val<'a>, Val<'a>)>>),
}

impl<'a> Str<'a> {
    pub fn as_str(&self) -> &str {
        match self {
            Str::Borrowed(s) => s,
            Str::Owned(s) => s,
        }
    }
}

impl<'a> Val<'a> {
    pub fn from_json(v: &'a Value) -> Val<'a> {
        match v {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Bool(*b),
            // JSON integers are CEL `int` (as the API server types integer
            // fields), other numbers `double`.
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Val::Int(i),
                (None, Some(u)) => Val::Uint(u),
                _ => Val::Double(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => Val::Str(Str::Borrowed(s)),
            Value::Array(items) => Val::List(List::Value(items)),
            Value::Object(m) => Val::Map(MapVal::Value(m)),
        }
    }

    /// A decoded document's value, typed as [`Val::from_json`] types the
    /// same JSON (the document keeps numbers as serde_json reads them).
    /// Always inlined: built out of line, the value came back through
    /// memory and was read back in wider loads than it was written in (a
    /// stall at every lookup of the CEL evaluator; `perf annotate`).
    #[inline(always)]
    pub fn from_doc(v: Json<'a>) -> Val<'a> {
        match v.kind() {
            Kind::Null => Val::Null,
            Kind::Bool(b) => Val::Bool(b),
            Kind::I64(i) => Val::Int(i),
            Kind::U64(u) => Val::Uint(u),
            Kind::F64(f) => Val::Double(f),
            Kind::Str(s) => Val::Str(Str::Borrowed(s)),
            Kind::Array(_) => Val::List(List::Doc(v.into())),
            Kind::Object(_) => Val::Map(MapVal::Doc(v.into())),
        }
    }

    /// JSON in either representation, read where it lies.
    pub fn from_ref(v: JsonRef<'a>) -> Val<'a> {
        match v {
            JsonRef::Value(v) => Val::from_json(v),
            JsonRef::Doc(j) => Val::from_doc(j),
        }
    }

    pub fn string(s: impl Into<Arc<str>>) -> Val<'a> {
        Val::Str(Str::Owned(s.into()))
    }

    pub fn list(items: Vec<Val<'a>>) -> Val<'a> {
        Val::List(List::Owned(Arc::new(items)))
    }

    /// The CEL type name, as `type()` and error messages give it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Val::Null => "null_type",
            Val::Bool(_) => "bool",
            Val::Int(_) => "int",
            Val::Uint(_) => "uint",
            Val::Double(_) => "double",
            Val::Str(_) => "string",
            Val::Bytes(_) => "bytes",
            Val::List(_) => "list",
            Val::Map(_) => "map",
            Val::Optional(_) => "optional_type",
            Val::Foreign(v) => match **v {
                CelValue::Timestamp(_) => "google.protobuf.Timestamp",
                CelValue::Duration(_) => "google.protobuf.Duration",
                _ => "dyn",
            },
        }
    }

    /// cel-go's Go type of the value (`%T`), which its comprehensions name
    /// when the range is not a list or map; `None` for a value only the
    /// interpreter holds.
    pub fn go_type_name(&self) -> Option<&'static str> {
        Some(match self {
            Val::Null => "types.Null",
            Val::Bool(_) => "types.Bool",
            Val::Int(_) => "types.Int",
            Val::Uint(_) => "types.Uint",
            Val::Double(_) => "types.Double",
            Val::Str(_) => "types.String",
            Val::Bytes(_) => "types.Bytes",
            Val::Optional(_) => "*types.Optional",
            Val::List(_) | Val::Map(_) | Val::Foreign(_) => return None,
        })
    }

    /// The value as the cel crate's interpreter holds it.
    pub fn to_cel(&self) -> CelValue {
        match self {
            Val::Null => CelValue::Null,
            Val::Bool(b) => CelValue::Bool(*b),
            Val::Int(i) => CelValue::Int(*i),
            Val::Uint(u) => CelValue::UInt(*u),
            Val::Double(f) => CelValue::Float(*f),
            Val::Str(s) => CelValue::String(Arc::new(s.as_str().to_string())),
            Val::Bytes(b) => CelValue::Bytes(Arc::new(b.to_vec())),
            Val::List(List::Value(items)) => CelValue::List(Arc::new(
                items.iter().map(crate::cel::values::json_to_cel).collect(),
            )),
            Val::List(List::Doc(j)) | Val::Map(MapVal::Doc(j)) => {
                crate::cel::values::doc_to_cel(j.json())
            }
            Val::List(List::Owned(items)) => {
                CelValue::List(Arc::new(items.iter().map(Val::to_cel).collect()))
            }
            Val::Map(MapVal::Value(m)) => {
                let map: HashMap<CelKey, CelValue> = m
                    .iter()
                    .map(|(k, v)| {
                        (
                            CelKey::String(Arc::new(k.clone())),
                            crate::cel::values::json_to_cel(v),
                        )
                    })
                    .collect();
                CelValue::Map(Map { map: Arc::new(map) })
            }
            Val::Map(MapVal::Owned(entries)) => {
                let map: HashMap<CelKey, CelValue> = entries
                    .iter()
                    .filter_map(|(k, v)| Some((key_of(k)?, v.to_cel())))
                    .collect();
                CelValue::Map(Map { map: Arc::new(map) })
            }
            Val::Optional(Some(v)) => CelValue::Opaque(Arc::new(OptionalValue::of(v.to_cel()))),
            Val::Optional(None) => CelValue::Opaque(Arc::new(OptionalValue::none())),
            Val::Foreign(v) => (**v).clone(),
        }
    }

    /// A value from the cel crate's interpreter (an expression it
    /// evaluated): owned, and foreign where there is no direct form.
    pub fn from_cel(v: &CelValue) -> Val<'static> {
        match v {
            CelValue::Null => Val::Null,
            CelValue::Bool(b) => Val::Bool(*b),
            CelValue::Int(i) => Val::Int(*i),
            CelValue::UInt(u) => Val::Uint(*u),
            CelValue::Float(f) => Val::Double(*f),
            CelValue::String(s) => Val::string(s.as_str()),
            CelValue::Bytes(b) => Val::Bytes(b.as_slice().into()),
            CelValue::List(items) => Val::list(items.iter().map(Val::from_cel).collect()),
            CelValue::Map(m) => Val::Map(MapVal::Owned(Arc::new(
                m.map
                    .iter()
                    .map(|(k, v)| {
                        let key = match k {
                            CelKey::String(s) => Val::string(s.as_str()),
                            CelKey::Int(i) => Val::Int(*i),
                            CelKey::Uint(u) => Val::Uint(*u),
                            CelKey::Bool(b) => Val::Bool(*b),
                        };
                        (key, Val::from_cel(v))
                    })
                    .collect(),
            ))),
            CelValue::Opaque(_) => match <&OptionalValue>::try_from(v) {
                Ok(o) => Val::Optional(o.value().map(|v| Arc::new(Val::from_cel(v)))),
                Err(_) => Val::Foreign(Arc::new(v.clone())),
            },
            other => Val::Foreign(Arc::new(other.clone())),
        }
    }

    /// The value an optional holds (`None` for `optional.none()`); a plain
    /// value is itself, as the interpreter's library treats it.
    pub fn through_optional(self) -> Option<Val<'a>> {
        match self {
            Val::Optional(inner) => inner.map(Arc::unwrap_or_clone),
            v => Some(v),
        }
    }
}

fn key_of(v: &Val) -> Option<CelKey> {
    Some(match v {
        Val::Str(s) => CelKey::String(Arc::new(s.as_str().to_string())),
        Val::Int(i) => CelKey::Int(*i),
        Val::Uint(u) => CelKey::Uint(*u),
        Val::Bool(b) => CelKey::Bool(*b),
        _ => return None,
    })
}

impl<'a> List<'a> {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        match self {
            List::Value(items) => items.len(),
            List::Doc(j) => match j.json().kind() {
                Kind::Array(len) => len as usize,
                _ => 0,
            },
            List::Owned(items) => items.len(),
        }
    }

    /// The element at `i`. A document's array is walked to it (its
    /// elements are not fixed-size), so a loop reads through
    /// [`List::iter`].
    pub fn get(&self, i: usize) -> Option<Val<'a>> {
        match self {
            List::Value(items) => items.get(i).map(Val::from_json),
            List::Doc(j) => j.json().elements().nth(i).map(Val::from_doc),
            List::Owned(items) => items.get(i).cloned(),
        }
    }

    pub fn iter(&self) -> ListIter<'_, 'a> {
        match self {
            List::Value(items) => ListIter::Values(items.iter()),
            List::Doc(j) => ListIter::Doc(j.json().elements()),
            List::Owned(items) => ListIter::Owned(items.iter()),
        }
    }
}

pub enum ListIter<'l, 'a> {
    Values(std::slice::Iter<'a, Value>),
    Doc(Elements<'a>),
    Owned(std::slice::Iter<'l, Val<'a>>),
}

impl<'a> Iterator for ListIter<'_, 'a> {
    type Item = Val<'a>;
    #[inline]
    fn next(&mut self) -> Option<Val<'a>> {
        match self {
            ListIter::Values(items) => items.next().map(Val::from_json),
            ListIter::Doc(items) => items.next().map(Val::from_doc),
            ListIter::Owned(items) => items.next().cloned(),
        }
    }

    /// Exact but for a document's array (whose walk does not count what is
    /// left), so that collecting a `Value`'s or an owned list allocates once.
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            ListIter::Values(items) => items.size_hint(),
            ListIter::Doc(_) => (0, None),
            ListIter::Owned(items) => items.size_hint(),
        }
    }
}

impl<'a> MapVal<'a> {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        match self {
            MapVal::Value(m) => m.len(),
            MapVal::Doc(j) => match j.json().kind() {
                Kind::Object(len) => len as usize,
                _ => 0,
            },
            MapVal::Owned(e) => e.len(),
        }
    }

    /// The entry for a string key (field selection).
    pub fn get_str(&self, key: &str) -> Option<Val<'a>> {
        match self {
            MapVal::Value(m) => crate::json_map::get(m, key).map(Val::from_json),
            MapVal::Doc(j) => j.json().get(key).map(Val::from_doc),
            MapVal::Owned(e) => e
                .iter()
                .find(|(k, _)| matches!(k, Val::Str(s) if s.as_str() == key))
                .map(|(_, v)| v.clone()),
        }
    }

    /// [`MapVal::get_str`] of a field compiled with its fingerprint.
    pub fn get_key(&self, key: &Key) -> Option<Val<'a>> {
        match self {
            MapVal::Doc(j) => j.json().get_key(key).map(Val::from_doc),
            _ => self.get_str(key.as_str()),
        }
    }

    /// [`MapVal::contains_str`] of a field compiled with its fingerprint.
    pub fn contains_key(&self, key: &Key) -> bool {
        match self {
            MapVal::Doc(j) => j.json().get_key(key).is_some(),
            _ => self.contains_str(key.as_str()),
        }
    }

    /// Whether a string key is present (`has()`): no value is built.
    pub fn contains_str(&self, key: &str) -> bool {
        match self {
            MapVal::Value(m) => crate::json_map::get(m, key).is_some(),
            MapVal::Doc(j) => j.json().get(key).is_some(),
            MapVal::Owned(e) => e
                .iter()
                .any(|(k, _)| matches!(k, Val::Str(s) if s.as_str() == key)),
        }
    }

    /// The entry for any key; `Err` when the key's type cannot be a key.
    pub fn get(&self, key: &Val) -> Result<Option<Val<'a>>, String> {
        match key {
            Val::Str(s) => Ok(self.get_str(s.as_str())),
            Val::Int(_) | Val::Uint(_) | Val::Bool(_) => Ok(match self {
                MapVal::Value(_) | MapVal::Doc(_) => None,
                MapVal::Owned(e) => e
                    .iter()
                    .find(|(k, _)| equals(k, key) == Some(true))
                    .map(|(_, v)| v.clone()),
            }),
            // A double finds the integer key it equals, as in cel-go
            // (`{3u: x}[3.0]`; the cel crate keeps the types apart). A map
            // with double keys is an error there, which the interpreter
            // gives.
            Val::Double(_) => Ok(match self {
                MapVal::Value(_) | MapVal::Doc(_) => None,
                MapVal::Owned(e) => e
                    .iter()
                    .find(|(k, _)| {
                        matches!(k, Val::Int(_) | Val::Uint(_)) && equals(k, key) == Some(true)
                    })
                    .map(|(_, v)| v.clone()),
            }),
            other => Err(format!("unsupported map key type {}", other.type_name())),
        }
    }

    /// The keys, in order (comprehensions over a map iterate its keys).
    pub fn keys(&self) -> Vec<Val<'a>> {
        match self {
            MapVal::Value(m) => m.keys().map(|k| Val::Str(Str::Borrowed(k))).collect(),
            // Sorted, as a `serde_json::Map` of the same object serves them.
            MapVal::Doc(j) => j
                .json()
                .entries()
                .map(|(k, _)| Val::Str(Str::Borrowed(k)))
                .collect(),
            MapVal::Owned(e) => e.iter().map(|(k, _)| k.clone()).collect(),
        }
    }

    pub fn entries(&self) -> Vec<(Val<'a>, Val<'a>)> {
        match self {
            MapVal::Value(m) => m
                .iter()
                .map(|(k, v)| (Val::Str(Str::Borrowed(k)), Val::from_json(v)))
                .collect(),
            MapVal::Doc(j) => j
                .json()
                .entries()
                .map(|(k, v)| (Val::Str(Str::Borrowed(k)), Val::from_doc(v)))
                .collect(),
            MapVal::Owned(e) => e.as_ref().clone(),
        }
    }
}

/// A timestamp or a duration: what a foreign value holds that the direct
/// evaluator orders, compares and computes with ([`super::time`]).
#[derive(Clone, Copy)]
pub enum Time {
    At(chrono::DateTime<chrono::FixedOffset>),
    /// Nanoseconds (a duration is Go's int64 nanoseconds in cel-go).
    Span(i64),
}

impl Val<'_> {
    /// Whether the value can key a map: a string, an int, a uint or a
    /// bool (any other key is the interpreter's to reject).
    pub fn is_map_key(&self) -> bool {
        matches!(
            self,
            Val::Str(_) | Val::Int(_) | Val::Uint(_) | Val::Bool(_)
        )
    }

    /// The timestamp or duration this value holds, if it holds one.
    pub fn time(&self) -> Option<Time> {
        match self {
            Val::Foreign(v) => match &**v {
                CelValue::Timestamp(t) => Some(Time::At(*t)),
                CelValue::Duration(d) => d.num_nanoseconds().map(Time::Span),
                _ => None,
            },
            _ => None,
        }
    }
}

/// The order of two timestamps or two durations; `None` for any other
/// pair.
fn time_order(a: &Val, b: &Val) -> Option<Ordering> {
    match (a.time()?, b.time()?) {
        (Time::At(x), Time::At(y)) => Some(x.cmp(&y)),
        (Time::Span(x), Time::Span(y)) => Some(x.cmp(&y)),
        _ => None,
    }
}

/// Adds `key: value` to the entries of a map being built. A repeated key
/// keeps the last value, as in cel-go and the interpreter
/// (`{true: 1, true: 3}[true]` is 3); keys of different types are
/// different keys, as in both (`{0: 1, 0u: 2}` has two entries).
pub fn put_entry<'a>(entries: &mut Vec<(Val<'a>, Val<'a>)>, key: Val<'a>, value: Val<'a>) {
    let same_key = |k: &Val| match (k, &key) {
        (Val::Str(a), Val::Str(b)) => a.as_str() == b.as_str(),
        (Val::Int(a), Val::Int(b)) => a == b,
        (Val::Uint(a), Val::Uint(b)) => a == b,
        (Val::Bool(a), Val::Bool(b)) => a == b,
        _ => false,
    };
    match entries.iter_mut().find(|(k, _)| same_key(k)) {
        Some(entry) => entry.1 = value,
        None => entries.push((key, value)),
    }
}

/// CEL equality, with numbers compared across int, uint and double (as
/// cel-go's heterogeneous equality). Values of different types are not
/// equal. `None` when a foreign value is involved, but for two
/// timestamps or two durations.
pub fn equals(a: &Val, b: &Val) -> Option<bool> {
    Some(match (a, b) {
        (Val::Foreign(_), _) | (_, Val::Foreign(_)) => {
            return time_order(a, b).map(|o| o == Ordering::Equal);
        }
        (Val::Null, Val::Null) => true,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Str(x), Val::Str(y)) => crate::text::same(x.as_str(), y.as_str()),
        (Val::Bytes(x), Val::Bytes(y)) => x == y,
        (Val::List(x), Val::List(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            for (p, q) in x.iter().zip(y.iter()) {
                if !equals(&p, &q)? {
                    return Some(false);
                }
            }
            true
        }
        (Val::Map(x), Val::Map(y)) => {
            if x.len() != y.len() {
                return Some(false);
            }
            for (k, v) in x.entries() {
                match y.get(&k) {
                    Ok(Some(w)) => {
                        if !equals(&v, &w)? {
                            return Some(false);
                        }
                    }
                    _ => return Some(false),
                }
            }
            true
        }
        (Val::Optional(x), Val::Optional(y)) => match (x, y) {
            (None, None) => true,
            (Some(p), Some(q)) => equals(p, q)?,
            _ => false,
        },
        _ => match numeric_order(a, b) {
            Some(o) => o == Ordering::Equal,
            None => false,
        },
    })
}

/// The order of two numbers of any numeric types; `None` for non-numbers
/// and NaN.
fn numeric_order(a: &Val, b: &Val) -> Option<Ordering> {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => Some(x.cmp(y)),
        (Val::Uint(x), Val::Uint(y)) => Some(x.cmp(y)),
        (Val::Double(x), Val::Double(y)) => x.partial_cmp(y),
        (Val::Int(x), Val::Uint(y)) => Some(if *x < 0 {
            Ordering::Less
        } else {
            (*x as u64).cmp(y)
        }),
        (Val::Uint(_), Val::Int(_)) => numeric_order(b, a).map(Ordering::reverse),
        (Val::Int(x), Val::Double(y)) => (*x as f64).partial_cmp(y),
        (Val::Double(_), Val::Int(_)) => numeric_order(b, a).map(Ordering::reverse),
        (Val::Uint(x), Val::Double(y)) => (*x as f64).partial_cmp(y),
        (Val::Double(_), Val::Uint(_)) => numeric_order(b, a).map(Ordering::reverse),
        _ => None,
    }
}

/// CEL ordering (`<`, `<=`, `>`, `>=`): numbers across types, strings,
/// bytes and bools. `Err(None)` when a foreign value is involved (the
/// caller hands the expression to the interpreter), `Err(Some(message))`
/// for types that have no order.
pub fn compare(a: &Val, b: &Val) -> Result<Ordering, Option<String>> {
    match (a, b) {
        (Val::Foreign(_), _) | (_, Val::Foreign(_)) => time_order(a, b).ok_or(None),
        (Val::Str(x), Val::Str(y)) => Ok(x.as_str().cmp(y.as_str())),
        (Val::Bytes(x), Val::Bytes(y)) => Ok(x.cmp(y)),
        (Val::Bool(x), Val::Bool(y)) => Ok(x.cmp(y)),
        _ => numeric_order(a, b).ok_or_else(|| {
            Some(format!(
                "no such overload: {} < {}",
                a.type_name(),
                b.type_name()
            ))
        }),
    }
}

/// Whether two lists hold the very same items, in the same order: the
/// same nodes of a document or values (not only equal ones), so that a
/// pass over one is a pass over the other. `false` when that cannot be
/// told cheaply.
pub fn same_items(a: &Val, b: &Val) -> bool {
    let (Val::List(a), Val::List(b)) = (a, b) else {
        return false;
    };
    match (a, b) {
        (List::Doc(x), List::Doc(y)) => x.same_node(*y),
        (List::Value(x), List::Value(y)) => std::ptr::eq(*x, *y),
        _ => a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| same_item(&x, &y)),
    }
}

fn same_item(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Map(MapVal::Doc(x)), Val::Map(MapVal::Doc(y))) => x.same_node(*y),
        (Val::Map(MapVal::Value(x)), Val::Map(MapVal::Value(y))) => std::ptr::eq(*x, *y),
        _ => false,
    }
}
