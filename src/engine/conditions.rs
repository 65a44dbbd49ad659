//! Condition operators (§3.9) for deny, preconditions and exception
//! conditions. Keys and values arrive with variables already substituted.

use crate::jmespath::json_equal;
use crate::policy::conditions::Operator;
use crate::units::semver::Version;
use crate::units::{Duration, Quantity};
use crate::wildcard;
use serde_json::Value;
use std::borrow::Cow;
use std::cmp::Ordering;

/// Go's `fmt.Sprint` of a decoded JSON value.
pub fn sprint(v: &Value) -> String {
    crate::jmespath::go_sprint(v)
}

/// [`sprint`], borrowing strings (the common case in set operators).
fn sprint_cow(v: &Value) -> Cow<'_, str> {
    match v {
        Value::String(s) => Cow::Borrowed(s),
        other => Cow::Owned(sprint(other)),
    }
}

/// Evaluates `key <operator> value`.
pub fn evaluate(op: Operator, key: &Value, value: &Value) -> bool {
    evaluate_with(op, key, value, false)
}

/// [`evaluate`], told whether `value` passed [`is_plain_list`]: the
/// policy's literal lists are checked once, when compiled.
pub fn evaluate_with(op: Operator, key: &Value, value: &Value, plain_list: bool) -> bool {
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
fn durations(key: &Value, value: &Value) -> Option<(f64, f64)> {
    let as_dur = |v: &Value| match v {
        Value::String(s) if s != "0" => Duration::parse(s).map(Duration::seconds),
        _ => None,
    };
    let (k, v) = (as_dur(key), as_dur(value));
    if k.is_none() && v.is_none() {
        return None;
    }
    let or_seconds = |d: Option<f64>, raw: &Value| d.or_else(|| raw.as_f64());
    Some((or_seconds(k, key)?, or_seconds(v, value)?))
}

fn equals(key: &Value, value: &Value) -> bool {
    match key {
        Value::Bool(k) => value.as_bool() == Some(*k),
        Value::Number(k) => {
            let k = k.as_f64().unwrap_or(f64::NAN);
            match value {
                Value::Number(v) => v.as_f64() == Some(k),
                Value::String(s) => s.parse::<f64>().ok() == Some(k),
                _ => false,
            }
        }
        // A key that cannot start a number is neither a duration nor a
        // quantity; skip both parsers (most keys are plain words).
        Value::String(k) if !starts_like_number(k) => match value {
            Value::String(v) => wildcard::matches(v, k),
            _ => false,
        },
        Value::String(k) => {
            if let Some((a, b)) = durations(key, value) {
                return a == b;
            }
            if let Some(kq) = Quantity::parse(k) {
                if let Value::String(v) = value {
                    // Quantities are exact (apimachinery's inf.Dec); a
                    // double is not past 2^53, so plain integers are
                    // compared by their digits (an RSA modulus is 600).
                    if let Some(same) = same_integer(k, v) {
                        return same;
                    }
                    return Quantity::parse(v).is_some_and(|vq| vq.value == kq.value);
                }
                if let Value::Number(n) = value {
                    return n.as_f64() == Some(kq.value);
                }
            }
            match value {
                Value::String(v) => wildcard::matches(v, k),
                _ => false,
            }
        }
        Value::Object(_) | Value::Array(_) => json_equal(key, value),
        Value::Null => false,
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

fn numeric(key: &Value, value: &Value) -> Option<Ordering> {
    if let Some((a, b)) = durations(key, value) {
        return a.partial_cmp(&b);
    }
    let value_f64 = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse::<f64>().ok(),
        _ => None,
    };
    match key {
        Value::Number(k) => k.as_f64()?.partial_cmp(&value_f64(value)?),
        Value::String(k) => {
            if let Ok(kf) = k.parse::<f64>() {
                return kf.partial_cmp(&value_f64(value)?);
            }
            if let Some(kq) = Quantity::parse(k) {
                let vq = match value {
                    Value::String(v) => Quantity::parse(v)?.value,
                    Value::Number(n) => n.as_f64()?,
                    _ => return None,
                };
                return kq.value.partial_cmp(&vq);
            }
            let kv = Version::parse(k)?;
            let vv = Version::parse(value.as_str()?)?;
            Some(kv.cmp(&vv))
        }
        _ => None,
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

/// `values` with every non-string printed as [`sprint`] does, so that a
/// list is printed once rather than once per comparison; borrowed when it
/// holds only strings, as lists in conditions nearly always do.
fn as_strings(values: &[Value]) -> Cow<'_, [Value]> {
    if values.iter().all(Value::is_string) {
        Cow::Borrowed(values)
    } else {
        Cow::Owned(
            values
                .iter()
                .map(|v| Value::String(sprint_cow(v).into_owned()))
                .collect(),
        )
    }
}

/// The strings of a list made by [`as_strings`].
fn strs(values: &[Value]) -> impl Iterator<Item = &str> {
    values.iter().filter_map(Value::as_str)
}

fn set_op(key: &Value, value: &Value, op: SetOp, plain_list: bool) -> bool {
    // Both sides are compared as strings where they lie rather than
    // collected first: a condition runs per rule and per foreach element.
    let keys = match key {
        Value::Array(a) => as_strings(a),
        Value::String(_) | Value::Number(_) | Value::Bool(_) => {
            as_strings(std::slice::from_ref(key))
        }
        _ => return false,
    };
    let decide = |contained: &dyn Fn(&str) -> bool| {
        let mut keys = strs(&keys);
        match op {
            SetOp::AnyIn => keys.any(contained),
            SetOp::AllIn => keys.all(contained),
            SetOp::AnyNotIn => keys.any(|k| !contained(k)),
            SetOp::AllNotIn => !keys.any(contained),
        }
    };
    // Either side may be the wildcard pattern; most hold none, so plain
    // equality decides without the matcher.
    let in_list = |values: &[Value], k: &str, plain: bool| {
        let k_wild = wildcard::has_wildcard(k);
        strs(values).any(|v| {
            if k_wild || (!plain && wildcard::has_wildcard(v)) {
                wildcard::matches(k, v) || wildcard::matches(v, k)
            } else {
                k == v
            }
        })
    };
    if keys.is_empty() {
        // Decided without looking at the values.
        return decide(&|_| false);
    }
    match value {
        Value::Array(a) => {
            let values = as_strings(a);
            decide(&|k| in_list(&values, k, plain_list))
        }
        Value::String(s) => {
            // A string value is a range `a-b`, a JSON array (e.g. from a
            // ConfigMap), or else a single-element list.
            if split_range(s).is_some() && strs(&keys).all(|k| Quantity::parse(k).is_some()) {
                return decide(&|k| in_range(k, s).unwrap_or(false));
            }
            let parsed = if s.trim_start().starts_with('[') {
                serde_json::from_str::<Vec<Value>>(s).ok()
            } else {
                None
            };
            let values = as_strings(parsed.as_deref().unwrap_or(std::slice::from_ref(value)));
            decide(&|k| in_list(&values, k, false))
        }
        _ => false,
    }
}

/// The deprecated In / NotIn: membership of a scalar key (or all keys of a list).
fn in_op(key: &Value, value: &Value, negate: bool) -> bool {
    let member = |k: &str| -> Option<bool> {
        match value {
            Value::Array(a) => Some(a.iter().any(|v| {
                let v = sprint(v);
                wildcard::matches(&v, k) || wildcard::matches(k, &v)
            })),
            Value::String(s) => {
                if wildcard::matches(s, k) {
                    return Some(true);
                }
                let arr: Vec<String> = serde_json::from_str(s).ok()?;
                Some(arr.iter().any(|v| v == k))
            }
            _ => None,
        }
    };
    let result = match key {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => member(&sprint(key)),
        Value::Array(a) => a
            .iter()
            .map(|k| member(&sprint(k)))
            .collect::<Option<Vec<bool>>>()
            .map(|v| v.iter().all(|b| *b)),
        _ => None,
    };
    match result {
        Some(found) => found != negate,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
                    evaluate_with(op, &key, &value, true),
                    want,
                    "plain list: {op:?} {key} {value}"
                );
            }
        }
    }
}
