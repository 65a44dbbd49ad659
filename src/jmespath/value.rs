//! Values during JMESPath evaluation, shared by the interpreter and the
//! functions it calls: [`Val`] (borrowed, computed or lazy lists), the
//! scopes of `let`, truthiness, JSON equality and numbers.

use super::JmesError;
use crate::json_doc::{Json, JsonRef, Kind, View};
use crate::text::same;
use serde_json::Value;
use std::borrow::Cow;

/// A value during evaluation: borrowed from the input, computed, or a list
/// of either that is only turned into JSON when something needs it (so
/// projections over a large object copy nothing they do not return).
///
/// Kept to three words (every payload is a pointer, or a document's
/// pointer and index), so that it and the `Result` of each step stay small.
#[derive(Debug, Clone)]
pub enum Val<'a> {
    Ref(&'a Value),
    /// A value of a decoded document (a request's object), borrowed.
    Doc(Json<'a>),
    Own(Box<Value>),
    List(Box<Vec<Val<'a>>>),
    /// The policy engine's layered context, whose fields are looked up on
    /// demand; turned into JSON only when used as a whole.
    Scope(&'a Scope<'a>),
    /// An object of the scope that is likewise served field by field. A
    /// reference to the box, not to the object, to stay one word wide.
    #[allow(clippy::borrowed_box)]
    Lazy(&'a Box<dyn Root + 'a>),
}

/// An object served field by field instead of as one JSON value, so that a
/// context made of borrowed parts never has to be assembled.
pub trait Root {
    fn field(&self, name: &str) -> Option<Val<'_>>;
    /// The whole object as JSON (for `@` and functions taking it as a value).
    fn to_value(&self) -> Value;
}

impl std::fmt::Debug for dyn Root + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Root({})", self.to_value())
    }
}

/// What one evaluation step gives; the error is boxed to keep the result
/// two words wide.
pub type Eval<'a> = Result<Val<'a>, Box<JmesError>>;

pub static NULL: Value = Value::Null;
static TRUE: Value = Value::Bool(true);
static FALSE: Value = Value::Bool(false);

pub fn null<'a>() -> Val<'a> {
    Val::Ref(&NULL)
}

pub(super) fn boolean<'a>(b: bool) -> Val<'a> {
    Val::Ref(if b { &TRUE } else { &FALSE })
}

impl<'a> Val<'a> {
    /// A computed value; null and booleans need no allocation.
    pub fn own(v: Value) -> Val<'a> {
        match v {
            Value::Null => null(),
            Value::Bool(b) => boolean(b),
            other => Val::Own(Box::new(other)),
        }
    }

    pub fn list(items: Vec<Val<'a>>) -> Val<'a> {
        Val::List(Box::new(items))
    }

    /// The value when it is plain JSON (not a list or a scope).
    pub fn as_json(&self) -> Option<&Value> {
        match self {
            Val::Ref(v) => Some(v),
            Val::Own(v) => Some(v),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        match self {
            Val::Doc(j) => j.is_null(),
            other => other.as_json().is_some_and(Value::is_null),
        }
    }

    pub fn is_array(&self) -> bool {
        match self {
            Val::List(_) => true,
            Val::Doc(j) => j.is_array(),
            other => other.as_json().is_some_and(Value::is_array),
        }
    }

    /// The value when it is one JSON value of either representation (not
    /// a list or a scope).
    pub fn as_json_ref(&self) -> Option<JsonRef<'_>> {
        match self {
            Val::Ref(v) => Some(JsonRef::Value(v)),
            Val::Own(v) => Some(JsonRef::Value(v)),
            Val::Doc(j) => Some(JsonRef::Doc(*j)),
            _ => None,
        }
    }

    pub(super) fn truthy(&self) -> bool {
        match self {
            Val::Ref(v) => is_truthy(v),
            Val::Doc(j) => match j.kind() {
                Kind::Null | Kind::Bool(false) => false,
                Kind::Str(s) => !s.is_empty(),
                Kind::Array(len) | Kind::Object(len) => len > 0,
                _ => true,
            },
            Val::Own(v) => is_truthy(v),
            Val::List(items) => !items.is_empty(),
            Val::Scope(s) => is_truthy(&s.to_value()),
            Val::Lazy(r) => is_truthy(&r.to_value()),
        }
    }

    /// The value as JSON, borrowing where possible.
    pub fn into_cow(self) -> Cow<'a, Value> {
        match self {
            Val::Ref(v) => Cow::Borrowed(v),
            Val::Doc(j) => Cow::Owned(j.to_value()),
            Val::Own(v) => Cow::Owned(*v),
            Val::List(items) => Cow::Owned(Value::Array(
                items.into_iter().map(Val::into_owned).collect(),
            )),
            Val::Scope(s) => Cow::Owned(s.to_value()),
            Val::Lazy(r) => Cow::Owned(r.to_value()),
        }
    }

    pub fn into_owned(self) -> Value {
        self.into_cow().into_owned()
    }

    /// The elements, when this is an array.
    pub fn into_elements(self) -> Option<Vec<Val<'a>>> {
        match self {
            Val::Ref(Value::Array(a)) => Some(a.iter().map(Val::Ref).collect()),
            Val::Doc(j) if j.is_array() => Some(j.elements().map(Val::Doc).collect()),
            Val::Own(v) => match *v {
                Value::Array(a) => Some(a.into_iter().map(Val::own).collect()),
                _ => None,
            },
            Val::List(items) => Some(*items),
            _ => None,
        }
    }

    /// The values, when this is an object.
    pub(super) fn into_values(self) -> Option<Vec<Val<'a>>> {
        match self {
            Val::Ref(Value::Object(m)) => Some(m.values().map(Val::Ref).collect()),
            Val::Doc(j) if j.is_object() => Some(j.entries().map(|(_, v)| Val::Doc(v)).collect()),
            Val::Own(v) => match *v {
                Value::Object(m) => Some(m.into_iter().map(|(_, v)| Val::own(v)).collect()),
                _ => None,
            },
            Val::Scope(s) => Val::own(s.to_value()).into_values(),
            Val::Lazy(r) => Val::own(r.to_value()).into_values(),
            _ => None,
        }
    }

    pub(super) fn field(self, key: &str) -> Val<'a> {
        match self {
            Val::Ref(Value::Object(m)) => crate::json_map::get(m, key)
                .map(Val::Ref)
                .unwrap_or_else(null),
            Val::Doc(j) => j.get(key).map(Val::Doc).unwrap_or_else(null),
            Val::Own(v) => match *v {
                Value::Object(mut m) => m.remove(key).map(Val::own).unwrap_or_else(null),
                _ => null(),
            },
            Val::Scope(s) => s.field(key).unwrap_or_else(null),
            Val::Lazy(r) => r.field(key).unwrap_or_else(null),
            _ => null(),
        }
    }
}

/// A layered scope of named values: the policy engine's JSON context. A
/// rule or a foreach element gets a child scope over its parent, so
/// leaving a scope is dropping it; values may be borrowed from the request
/// or an enclosing scope, and one object (the admission request) may be
/// served field by field.
pub struct Scope<'p> {
    parent: Option<&'p Scope<'p>>,
    lazy: Option<(&'static str, Box<dyn Root + 'p>)>,
    /// Names in the order they were set; the last one wins.
    vars: Vec<(Cow<'static, str>, Slot<'p>)>,
}

/// A value in a scope: borrowed from the request (or an enclosing scope)
/// in either representation, or computed.
#[derive(Debug)]
pub enum Slot<'p> {
    Ref(&'p Value),
    Doc(Json<'p>),
    Own(Value),
}

impl Slot<'_> {
    pub fn get(&self) -> JsonRef<'_> {
        match self {
            Slot::Ref(v) => JsonRef::Value(v),
            Slot::Doc(j) => JsonRef::Doc(*j),
            Slot::Own(v) => JsonRef::Value(v),
        }
    }

    fn val(&self) -> Val<'_> {
        match self {
            Slot::Ref(v) => Val::Ref(v),
            Slot::Doc(j) => Val::Doc(*j),
            Slot::Own(v) => Val::Ref(v),
        }
    }
}

impl<'a> From<JsonRef<'a>> for Val<'a> {
    fn from(j: JsonRef<'a>) -> Val<'a> {
        match j {
            JsonRef::Value(v) => Val::Ref(v),
            JsonRef::Doc(j) => Val::Doc(j),
        }
    }
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scope({})", self.to_value())
    }
}

impl<'p> Scope<'p> {
    /// A root scope; `lazy` is an object served field by field under its name.
    pub fn new(lazy: Option<(&'static str, Box<dyn Root + 'p>)>, capacity: usize) -> Scope<'p> {
        Scope {
            parent: None,
            lazy,
            vars: Vec::with_capacity(capacity),
        }
    }

    /// A scope over this one: what is set in it is gone when it is dropped.
    pub fn child(&'p self) -> Scope<'p> {
        Scope {
            parent: Some(self),
            lazy: None,
            vars: Vec::new(),
        }
    }

    pub fn set(&mut self, name: impl Into<Cow<'static, str>>, value: Slot<'p>) {
        self.vars.push((name.into(), value));
    }

    /// A value that is plain JSON (not the lazy object) by name.
    pub fn get(&self, name: &str) -> Option<JsonRef<'_>> {
        match self.vars.iter().rev().find(|(k, _)| same(k, name)) {
            Some((_, slot)) => Some(slot.get()),
            None if self.lazy.as_ref().is_some_and(|(k, _)| same(k, name)) => None,
            None => self.parent.and_then(|p| p.get(name)),
        }
    }

    pub fn field(&self, name: &str) -> Option<Val<'_>> {
        if let Some((_, slot)) = self.vars.iter().rev().find(|(k, _)| same(k, name)) {
            return Some(slot.val());
        }
        if let Some((k, r)) = &self.lazy
            && same(k, name)
        {
            return Some(Val::Lazy(r));
        }
        self.parent.and_then(|p| p.field(name))
    }

    /// The whole scope as one JSON object.
    pub fn to_value(&self) -> Value {
        let mut out = match self.parent {
            Some(p) => p.to_value(),
            None => Value::Object(serde_json::Map::new()),
        };
        let m = out.as_object_mut().expect("a scope is an object");
        if let Some((k, r)) = &self.lazy {
            m.insert(k.to_string(), r.to_value());
        }
        for (k, slot) in &self.vars {
            m.insert(k.to_string(), slot.get().to_value());
        }
        out
    }
}

/// JMESPath truthiness: false, null, empty string, empty list and empty object are false.
pub fn is_truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Number(_) => true,
    }
}

/// Builds a JSON number, keeping integral values integral so they print as Go does.
pub fn number(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
        Value::from(f as i64)
    } else {
        serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

/// [`json_equal`] on values of either representation.
pub fn view_equal(l: JsonRef, r: JsonRef) -> bool {
    match (l, r) {
        // Two `Value`s: the walk without a representation check per step.
        (JsonRef::Value(a), JsonRef::Value(b)) => deep_equal(a, b),
        _ => deep_equal(l, r),
    }
}

/// Deep equality with numbers compared by value (1 == 1.0), as Go's float64 decoding does.
pub fn json_equal(l: &Value, r: &Value) -> bool {
    deep_equal(l, r)
}

/// [`json_equal`] on any two views.
pub fn deep_equal<'x, 'y>(l: impl View<'x>, r: impl View<'y>) -> bool {
    match (l.kind(), r.kind()) {
        (Kind::Array(n), Kind::Array(m)) => {
            n == m
                && l.elements()
                    .zip(r.elements())
                    .all(|(x, y)| deep_equal(x, y))
        }
        (Kind::Object(n), Kind::Object(m)) => {
            n == m
                && l.entries()
                    .all(|(k, v)| r.get(k).is_some_and(|w| deep_equal(v, w)))
        }
        (a, b) => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
    }
}
