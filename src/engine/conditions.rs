//! Condition operators (docs/kyverno-semantics.md#condition-operators) for
//! deny, preconditions and exception conditions. Keys and values arrive
//! with variables already substituted, as JMESPath left them: borrowed from
//! the request's document or the policy, or lists of such. A projection's
//! result is compared where it lies, never turned into JSON just to be
//! compared.

use crate::jmespath::{Streamed, Val, deep_equal, go_sprint};
use crate::json_doc::{Json, JsonRef, Kind, View};
use crate::policy::conditions::Operator;
use crate::units::semver::Version;
use crate::units::{Duration, Quantity};
use crate::wildcard;
use serde_json::Value;
use std::borrow::Cow;
use std::cmp::Ordering;

/// A condition's key or value: JSON in either representation, or a list
/// that JMESPath built of borrowed elements (a flatten or a projection).
#[derive(Clone, Copy)]
enum Operand<'a> {
    Json(JsonRef<'a>),
    List(&'a [Val<'a>]),
}

impl<'a> Operand<'a> {
    /// `v` as an operand; [`borrowable`] said it is one.
    fn of(v: &'a Val<'a>) -> Operand<'a> {
        match v {
            Val::List(items) => Operand::List(items),
            // A scope object never reaches here ([`evaluate_vals`] turns
            // one into JSON first); null is only the type's completion.
            other => Operand::Json(other.as_json_ref().unwrap_or(JsonRef::Value(&Value::Null))),
        }
    }

    fn as_f64(self) -> Option<f64> {
        self.kind().as_f64()
    }
}

/// An operand is read as JSON: a list is an array of its elements, so the
/// shared printing and equality serve it.
impl<'a> View<'a> for Operand<'a> {
    fn kind(self) -> Kind<'a> {
        match self {
            Operand::Json(j) => j.kind(),
            Operand::List(items) => Kind::Array(u32::try_from(items.len()).unwrap_or(u32::MAX)),
        }
    }

    fn get(self, key: &str) -> Option<Operand<'a>> {
        match self {
            Operand::Json(j) => j.get(key).map(Operand::Json),
            Operand::List(_) => None,
        }
    }

    fn elements(self) -> impl Iterator<Item = Operand<'a>> + 'a {
        let (json, list) = match self {
            Operand::Json(j) => (Some(j.elements().map(Operand::Json)), None),
            Operand::List(items) => (None, Some(items.iter().map(Operand::of))),
        };
        json.into_iter().flatten().chain(list.into_iter().flatten())
    }

    fn keys(self) -> impl Iterator<Item = &'a str> + 'a {
        self.entries().map(|(k, _)| k)
    }

    fn entries(self) -> impl Iterator<Item = (&'a str, Operand<'a>)> + 'a {
        let json = match self {
            Operand::Json(j) => Some(j.entries().map(|(k, v)| (k, Operand::Json(v)))),
            Operand::List(_) => None,
        };
        json.into_iter().flatten()
    }

    fn at(self, index: usize) -> Option<Operand<'a>> {
        self.elements().nth(index)
    }

    fn to_cow(self) -> Cow<'a, Value> {
        match self {
            Operand::Json(j) => j.to_cow(),
            Operand::List(_) => Cow::Owned(Value::Array(
                self.elements().map(|e| e.to_cow().into_owned()).collect(),
            )),
        }
    }
}

/// Whether every part of `v` is JSON or a list of such: a scope object
/// (`request`, `@` of the context) is served field by field and has no
/// JSON to borrow.
fn borrowable(v: &Val) -> bool {
    match v {
        Val::List(items) => items.iter().all(borrowable),
        other => other.as_json_ref().is_some(),
    }
}

/// Go's `fmt.Sprint` of an operand, borrowing strings (the common case in
/// set operators).
fn sprint(v: Operand<'_>) -> Cow<'_, str> {
    match v.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(go_sprint(v)),
    }
}

/// Evaluates `key <operator> value` on JSON.
pub fn evaluate(op: Operator, key: &Value, value: &Value) -> bool {
    evaluate_with(
        op,
        Operand::Json(key.into()),
        Operand::Json(value.into()),
        false,
    )
}

/// Evaluates `key <operator> value` on substituted variables, told whether
/// `value` passed [`is_plain_list`](crate::policy::conditions::is_plain_list):
/// the policy's literal lists are checked once, when compiled.
pub fn evaluate_vals(op: Operator, key: &Val, value: &Val, plain_list: bool) -> bool {
    let (key_json, value_json) = (as_json(key), as_json(value));
    let key = Operand::of(key_json.as_ref().unwrap_or(key));
    let value = Operand::of(value_json.as_ref().unwrap_or(value));
    evaluate_with(op, key, value, plain_list)
}

/// `v` as JSON when it is not [`borrowable`] as it is.
fn as_json(v: &Val) -> Option<Val<'static>> {
    (!borrowable(v)).then(|| Val::own(v.clone().into_owned()))
}

/// [`evaluate`] on operands, told whether `value` is a plain literal list.
fn evaluate_with(op: Operator, key: Operand, value: Operand, plain_list: bool) -> bool {
    use Operator::*;
    match op {
        Equals => equals(key, value),
        NotEquals => !equals(key, value),
        In => in_op(key, value, false),
        NotIn => in_op(key, value, true),
        AnyIn => set_op(key, value, SetOp::AnyIn, plain_list),
        AllIn => set_op(key, value, SetOp::AllIn, plain_list),
        AnyNotIn => set_op(key, value, SetOp::AnyNotIn, plain_list),
        AllNotIn => set_op(key, value, SetOp::AllNotIn, plain_list),
        GreaterThan | DurationGreaterThan => {
            numeric(key, value).is_some_and(|o| o == Ordering::Greater)
        }
        GreaterThanOrEquals | DurationGreaterThanOrEquals => {
            numeric(key, value).is_some_and(|o| o != Ordering::Less)
        }
        LessThan | DurationLessThan => numeric(key, value).is_some_and(|o| o == Ordering::Less),
        LessThanOrEquals | DurationLessThanOrEquals => {
            numeric(key, value).is_some_and(|o| o != Ordering::Greater)
        }
    }
}

/// Both sides as durations when at least one is a duration string (numbers are seconds).
fn durations(key: Operand, value: Operand) -> Option<(f64, f64)> {
    let as_dur = |v: Operand| match v.as_str() {
        Some(s) if s != "0" => Duration::parse(s).map(Duration::seconds),
        _ => None,
    };
    let (k, v) = (as_dur(key), as_dur(value));
    if k.is_none() && v.is_none() {
        return None;
    }
    let or_seconds = |d: Option<f64>, raw: Operand| d.or_else(|| raw.as_f64());
    Some((or_seconds(k, key)?, or_seconds(v, value)?))
}

fn equals(key: Operand, value: Operand) -> bool {
    match key.kind() {
        Kind::Bool(k) => value.kind() == Kind::Bool(k),
        number @ (Kind::I64(_) | Kind::U64(_) | Kind::F64(_)) => {
            let k = number.as_f64().unwrap_or(f64::NAN);
            match value.kind() {
                Kind::Str(s) => s.parse::<f64>().ok() == Some(k),
                other => other.as_f64() == Some(k),
            }
        }
        // A key that cannot start a number is neither a duration nor a
        // quantity; skip both parsers (most keys are plain words).
        Kind::Str(k) if !starts_like_number(k) => {
            value.as_str().is_some_and(|v| wildcard::matches(v, k))
        }
        Kind::Str(k) => {
            if let Some((a, b)) = durations(key, value) {
                return a == b;
            }
            if let Some(kq) = Quantity::parse(k) {
                match value.kind() {
                    Kind::Str(v) => {
                        // Quantities are exact (apimachinery's inf.Dec); a
                        // double is not past 2^53, so plain integers are
                        // compared by their digits (an RSA modulus is 600).
                        if let Some(same) = same_integer(k, v) {
                            return same;
                        }
                        return Quantity::parse(v).is_some_and(|vq| vq.value == kq.value);
                    }
                    other if other.as_f64().is_some() => {
                        return other.as_f64() == Some(kq.value);
                    }
                    _ => {}
                }
            }
            value.as_str().is_some_and(|v| wildcard::matches(v, k))
        }
        Kind::Object(_) | Kind::Array(_) => deep_equal(key, value),
        Kind::Null => false,
    }
}

/// Whether two plain integers (`-?[0-9]+`) are equal, compared exactly;
/// None when either is not one.
fn same_integer(a: &str, b: &str) -> Option<bool> {
    fn digits(s: &str) -> Option<(bool, &str)> {
        let s = s.trim();
        let (negative, body) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let body = body.trim_start_matches('0');
        Some((negative && !body.is_empty(), body))
    }
    Some(digits(a)? == digits(b)?)
}

fn starts_like_number(s: &str) -> bool {
    matches!(
        s.trim_start().bytes().next(),
        Some(b'0'..=b'9' | b'+' | b'-' | b'.')
    )
}

fn numeric(key: Operand, value: Operand) -> Option<Ordering> {
    if let Some((a, b)) = durations(key, value) {
        return a.partial_cmp(&b);
    }
    let value_f64 = |v: Operand| match v.kind() {
        Kind::Str(s) => s.parse::<f64>().ok(),
        other => other.as_f64(),
    };
    match key.kind() {
        Kind::Str(k) => {
            if let Ok(kf) = k.parse::<f64>() {
                return kf.partial_cmp(&value_f64(value)?);
            }
            if let Some(kq) = Quantity::parse(k) {
                let vq = match value.kind() {
                    Kind::Str(v) => Quantity::parse(v)?.value,
                    other => other.as_f64()?,
                };
                return kq.value.partial_cmp(&vq);
            }
            let kv = Version::parse(k)?;
            let vv = Version::parse(value.as_str()?)?;
            Some(kv.cmp(&vv))
        }
        other => other.as_f64()?.partial_cmp(&value_f64(value)?),
    }
}

#[derive(Clone, Copy, PartialEq)]
#[allow(clippy::enum_variant_names)] // Kyverno's operator names
enum SetOp {
    AnyIn,
    AllIn,
    AnyNotIn,
    AllNotIn,
}

impl SetOp {
    fn of(op: Operator) -> Option<SetOp> {
        Some(match op {
            Operator::AnyIn => SetOp::AnyIn,
            Operator::AllIn => SetOp::AllIn,
            Operator::AnyNotIn => SetOp::AnyNotIn,
            Operator::AllNotIn => SetOp::AllNotIn,
            _ => return None,
        })
    }

    /// The operator's verdict, told whether some key is in the values and
    /// whether some key is not (both false: there are no keys).
    fn decide(self, some_in: bool, some_out: bool) -> bool {
        match self {
            SetOp::AnyIn => some_in,
            SetOp::AllIn => !some_out,
            SetOp::AnyNotIn => some_out,
            SetOp::AllNotIn => !some_in,
        }
    }
}

/// A set operator between a compiled walk and a literal, decided as the
/// walk gives its strings one by one ([`Expression::stream_strings`]):
/// no list is built and no member copied. `literal` is the other side:
/// the values when the walk gives the keys (`walk_is_key`), else the
/// keys. `stream` runs the walk, calling its argument with each string.
/// The verdict is [`evaluate_vals`]' on the walk's value; `None` when
/// that needs the value built (a literal that is not strings, a walk
/// that [`Streamed`] does not describe).
///
/// [`Expression::stream_strings`]: crate::jmespath::Expression::stream_strings
pub fn set_op_streamed<'a>(
    op: Operator,
    walk_is_key: bool,
    literal: &'a Value,
    plain_list: bool,
    stream: impl FnOnce(&mut dyn FnMut(&str)) -> Option<Streamed<'a>>,
) -> Option<bool> {
    let set = SetOp::of(op)?;
    let (mut some_in, mut some_out) = (false, false);
    let ended = if walk_is_key {
        // The values: a literal list of strings (a string is a range or
        // a list in JSON text, left to `set_op`).
        let Value::Array(items) = literal else {
            return None;
        };
        if !items.iter().all(Value::is_string) {
            return None;
        }
        let values = Strings::Values(items);
        stream(&mut |k| {
            if some_in && some_out {
                return;
            }
            if in_list(&values, k, plain_list) {
                some_in = true;
            } else {
                some_out = true;
            }
        })?
    } else {
        // The keys: a literal string, or list of strings; each is found
        // or not among the walk's strings. A template value is never a
        // plain list.
        let keys = match literal {
            Value::String(_) => std::slice::from_ref(literal),
            Value::Array(items) if items.len() <= 64 && items.iter().all(Value::is_string) => items,
            _ => return None,
        };
        let mut found = 0u64;
        let ended = stream(&mut |v| {
            for (i, k) in keys.iter().enumerate() {
                let k = k.as_str().unwrap_or_default();
                if found & (1 << i) == 0 && in_list(&Strings::One(Cow::Borrowed(v)), k, false) {
                    found |= 1 << i;
                }
            }
        })?;
        let all = if keys.len() == 64 {
            u64::MAX
        } else {
            (1u64 << keys.len()) - 1
        };
        some_in = found != 0;
        some_out = found != all;
        ended
    };
    Some(match ended {
        // An empty list: no keys, or no values (nothing was found).
        Streamed::Strings | Streamed::Empty => set.decide(some_in, some_out),
        Streamed::Otherwise(other) => {
            let (key, value) = if walk_is_key {
                (other, literal)
            } else {
                (literal, other)
            };
            evaluate_with(
                op,
                Operand::Json(key.into()),
                Operand::Json(value.into()),
                plain_list && walk_is_key,
            )
        }
    })
}

/// Whether key `k` is among `values`: either side may be a wildcard
/// pattern; told that `values` holds none (`plain`), only `k` is checked.
fn in_list(values: &Strings, k: &str, plain: bool) -> bool {
    let k_wild = wildcard::has_wildcard(k);
    values.any(|v| {
        if k_wild || (!plain && wildcard::has_wildcard(v)) {
            wildcard::matches(k, v) || wildcard::matches(v, k)
        } else {
            crate::text::same(k, v)
        }
    })
}

/// Range values `a-b` (inclusive) used with the set operators.
fn in_range(key: &str, range: &str) -> Option<bool> {
    let re_part = |s: &str| Quantity::parse(s).map(|q| q.value);
    let (lo, hi) = split_range(range)?;
    let k = re_part(key)?;
    Some(k >= re_part(lo)? && k <= re_part(hi)?)
}

fn split_range(range: &str) -> Option<(&str, &str)> {
    let start = usize::from(range.starts_with(['-', '+']));
    let idx = range[start..].find('-')? + start;
    let (lo, hi) = (&range[..idx], &range[idx + 1..]);
    (!lo.is_empty()
        && !hi.is_empty()
        && lo.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+'))
    .then_some((lo, hi))
}

/// The members of one side of a set operator as strings, every
/// non-string printed as [`sprint`] does. A list of strings, as lists in
/// conditions nearly always are, is read where it lies, by a loop per
/// representation; any other is printed once rather than once per
/// comparison.
enum Strings<'a> {
    One(Cow<'a, str>),
    Values(&'a [Value]),
    Doc(Json<'a>),
    List(&'a [Val<'a>]),
    Printed(Vec<Cow<'a, str>>),
}

impl<'a> Strings<'a> {
    /// The members of `list`, an array.
    fn of_list(list: Operand<'a>) -> Strings<'a> {
        let all_strings = match list {
            // A policy's literal list: the common case, checked directly.
            Operand::Json(JsonRef::Value(Value::Array(items))) => {
                items.iter().all(Value::is_string)
            }
            _ => list.elements().all(|e| e.as_str().is_some()),
        };
        match list {
            Operand::Json(JsonRef::Value(Value::Array(items))) if all_strings => {
                Strings::Values(items)
            }
            Operand::Json(JsonRef::Doc(j)) if all_strings => Strings::Doc(j),
            Operand::List(items) if all_strings => Strings::List(items),
            _ => Strings::Printed(list.elements().map(sprint).collect()),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Strings::One(_) => false,
            Strings::Values(items) => items.is_empty(),
            Strings::Doc(j) => j.kind() == Kind::Array(0),
            Strings::List(items) => items.is_empty(),
            Strings::Printed(all) => all.is_empty(),
        }
    }

    /// Whether `f` holds for any member.
    fn any(&self, mut f: impl FnMut(&str) -> bool) -> bool {
        match self {
            Strings::One(s) => f(s),
            Strings::Values(items) => items.iter().any(|v| v.as_str().is_some_and(&mut f)),
            Strings::Doc(j) => j.elements().any(|e| e.as_str().is_some_and(&mut f)),
            Strings::List(items) => items
                .iter()
                .any(|v| v.as_json_ref().and_then(View::as_str).is_some_and(&mut f)),
            Strings::Printed(all) => all.iter().any(|s| f(s)),
        }
    }

    fn all(&self, mut f: impl FnMut(&str) -> bool) -> bool {
        !self.any(|s| !f(s))
    }
}

fn set_op(key: Operand, value: Operand, op: SetOp, plain_list: bool) -> bool {
    // Both sides are compared as strings where they lie rather than
    // collected first: a condition runs per rule and per foreach element.
    let keys = match key.kind() {
        Kind::Array(_) => Strings::of_list(key),
        Kind::Null | Kind::Object(_) => return false,
        _ => Strings::One(sprint(key)),
    };
    let decide = |contained: &dyn Fn(&str) -> bool| match op {
        SetOp::AnyIn => keys.any(contained),
        SetOp::AllIn => keys.all(contained),
        SetOp::AnyNotIn => keys.any(|k| !contained(k)),
        SetOp::AllNotIn => !keys.any(contained),
    };
    // Either side may be the wildcard pattern; most hold none, so plain
    // equality decides without the matcher (`in_list`).
    if keys.is_empty() {
        // Decided without looking at the values.
        return decide(&|_| false);
    }
    match value.kind() {
        Kind::Array(_) => {
            let values = Strings::of_list(value);
            decide(&|k| in_list(&values, k, plain_list))
        }
        Kind::Str(s) => {
            // A string value is a range `a-b`, a JSON array (e.g. from a
            // ConfigMap), or else a single-element list.
            if split_range(s).is_some() && keys.all(|k| Quantity::parse(k).is_some()) {
                return decide(&|k| in_range(k, s).unwrap_or(false));
            }
            let parsed = if s.trim_start().starts_with('[') {
                serde_json::from_str::<Vec<Value>>(s).ok()
            } else {
                None
            };
            let values = match &parsed {
                Some(list) => Strings::Printed(
                    list.iter()
                        .map(|v| sprint(Operand::Json(v.into())))
                        .collect(),
                ),
                None => Strings::One(Cow::Borrowed(s)),
            };
            decide(&|k| in_list(&values, k, false))
        }
        _ => false,
    }
}

/// The deprecated In / NotIn: membership of a scalar key (or all keys of a list).
fn in_op(key: Operand, value: Operand, negate: bool) -> bool {
    let member = |k: &str| -> Option<bool> {
        match value.kind() {
            Kind::Array(_) => Some(value.elements().any(|v| {
                let v = sprint(v);
                wildcard::matches(&v, k) || wildcard::matches(k, &v)
            })),
            Kind::Str(s) => {
                if wildcard::matches(s, k) {
                    return Some(true);
                }
                let arr: Vec<String> = serde_json::from_str(s).ok()?;
                Some(arr.iter().any(|v| v == k))
            }
            _ => None,
        }
    };
    let result = match key.kind() {
        Kind::Null | Kind::Object(_) => None,
        Kind::Array(_) => key
            .elements()
            .map(|k| member(&sprint(k)))
            .collect::<Option<Vec<bool>>>()
            .map(|v| v.iter().all(|b| *b)),
        _ => member(&sprint(key)),
    };
    match result {
        Some(found) => found != negate,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_doc::Doc;
    use crate::policy::conditions::is_plain_list;
    use Operator::*;
    use serde_json::json;

    #[test]
    fn operator_table() {
        for (op, key, value, want) in [
            (Equals, json!("abc"), json!("abc"), true),
            (Equals, json!("a.corp.com"), json!("*.corp.com"), true),
            (Equals, json!(true), json!(true), true),
            (Equals, json!(1), json!("1"), true),
            (Equals, json!("1Gi"), json!("1024Mi"), true),
            // Integers past a double's precision (an RSA modulus).
            (Equals, json!("9".repeat(400)), json!("9".repeat(400)), true),
            (
                NotEquals,
                json!("9".repeat(400)),
                json!("8".repeat(400)),
                true,
            ),
            (Equals, json!("007"), json!("7"), true),
            (
                Equals,
                json!("9007199254740993"),
                json!("9007199254740992"),
                false,
            ),
            (Equals, json!("1h"), json!("60m"), true),
            (Equals, json!({"a": 1}), json!({"a": 1}), true),
            (Equals, json!(null), json!(null), false),
            (NotEquals, json!("CREATE"), json!("DELETE"), true),
            (AnyIn, json!(["a", "b"]), json!(["b", "c"]), true),
            (AnyIn, json!("x"), json!(["b", "c"]), false),
            (AnyIn, json!("NET_ADMIN"), json!("NET_*"), true),
            (AllIn, json!(["a", "b"]), json!(["a", "b", "c"]), true),
            (AllIn, json!(["a", "d"]), json!(["a", "b", "c"]), false),
            (AllIn, json!([]), json!(["a"]), true),
            (AnyNotIn, json!(["a", "d"]), json!(["a", "b"]), true),
            (AnyNotIn, json!([]), json!(["a"]), false),
            (AllNotIn, json!(["x", "y"]), json!(["a"]), true),
            (AllNotIn, json!(["x", "a"]), json!(["a"]), false),
            (AnyIn, json!(["a"]), json!("[\"a\", \"b\"]"), true),
            (AnyIn, json!(8080), json!("8000-9000"), true),
            (AnyNotIn, json!([80, 8080]), json!("8000-9000"), true),
            (AllIn, json!([1, 2.5]), json!([2.5, "1", 3]), true),
            (AnyIn, json!(true), json!("true"), true),
            (AllNotIn, json!(["NET_RAW"]), json!(["NET_*", ""]), false),
            (In, json!("a"), json!(["a", "b"]), true),
            (NotIn, json!("z"), json!(["a", "b"]), true),
            (GreaterThan, json!(5), json!(3), true),
            (GreaterThan, json!("5"), json!("3"), true),
            (GreaterThan, json!("2Gi"), json!("1Gi"), true),
            (LessThan, json!("30m"), json!("1h"), true),
            (GreaterThanOrEquals, json!("1.20.0"), json!("1.19.5"), true),
            (LessThanOrEquals, json!(3), json!(3), true),
            (GreaterThan, json!("abc"), json!("abd"), false),
            (DurationGreaterThan, json!("2h"), json!(3600), true),
            (
                AnyIn,
                json!("NET_*"),
                json!(["NET_ADMIN", "SYS_TIME"]),
                true,
            ),
            (AllNotIn, json!(["a*"]), json!(["ab"]), false),
            (AnyNotIn, json!(["a", "b?"]), json!(["a", "bc"]), false),
        ] {
            assert_eq!(evaluate(op, &key, &value), want, "{op:?} {key} {value}");
            // A literal list without wildcards, as the compiler marks it,
            // must give the same answer through the shortcut.
            if is_plain_list(&value) {
                assert_eq!(
                    evaluate_vals(op, &Val::Ref(&key), &Val::Ref(&value), true),
                    want,
                    "plain list: {op:?} {key} {value}"
                );
            }
            // The same operands as the webhook's decoded document holds
            // them, and arrays as the lists a JMESPath projection builds.
            let (key_doc, value_doc) = (as_doc(&key), as_doc(&value));
            let (key_list, value_list) = (as_list(&key), as_list(&value));
            for (form, k, v) in [
                (
                    "document",
                    Val::Doc(key_doc.root()),
                    Val::Doc(value_doc.root()),
                ),
                ("list", key_list.clone(), value_list.clone()),
                ("document key", Val::Doc(key_doc.root()), value_list),
                ("list key", key_list, Val::Doc(value_doc.root())),
            ] {
                assert_eq!(
                    evaluate_vals(op, &k, &v, false),
                    want,
                    "{form}: {op:?} {key} {value}"
                );
            }
        }
    }

    fn as_doc(v: &Value) -> Doc {
        Doc::parse(&v.to_string()).unwrap()
    }

    /// An array as a list of borrowed elements (anything else as itself).
    fn as_list(v: &Value) -> Val<'_> {
        match v {
            Value::Array(items) => Val::List(Box::new(items.iter().map(as_list).collect())),
            other => Val::Ref(other),
        }
    }

    #[test]
    fn lists_of_computed_objects_compare_as_json() {
        // A projection that returns objects (`[*].{a: a}`) builds a list of
        // computed values: compared element by element, printed as Go does.
        let object = json!({"a": ["x", 1]});
        let list = Val::List(Box::new(vec![Val::own(object.clone())]));
        assert!(evaluate_vals(
            Equals,
            &list,
            &Val::own(json!([{"a": ["x", 1]}])),
            false
        ));
        assert!(!evaluate_vals(
            Equals,
            &list,
            &Val::own(json!([{"a": ["x", 2]}])),
            false
        ));
        assert!(evaluate_vals(
            AnyIn,
            &list,
            &Val::own(json!(["map[a:[x 1]]"])),
            false
        ));
    }
}
