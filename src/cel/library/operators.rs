//! The functions the compile-time rewrite calls instead of the interpreter's
//! operators: equality and `in` as cel-go answers them, field selection and
//! `has()`, optional selection (`a.?b`, `a[?k]`), logical operators that
//! absorb errors, and the cost tick of comprehensions.

use super::*;
use crate::cel::values::{opt_none, opt_of};
use kube_cel::cel::extractors::This;
use kube_cel::cel::objects::{Key, OptionalValue};
use kube_cel::cel::{ExecutionError, FunctionContext, ResolveResult, Value};
use std::sync::Arc;

/// `==`: the value's equality, which compares numbers across types.
pub(super) fn equal(a: Value, b: Value) -> ResolveResult {
    Ok(Value::Bool(a == b))
}

pub(super) fn not_equal(a: Value, b: Value) -> ResolveResult {
    Ok(Value::Bool(a != b))
}

/// `x in container`: a list element equal to `x` (numbers across types),
/// or a map key `x` stands for (an integer of any numeric type).
pub(super) fn contained_in(ftx: &FunctionContext, item: Value, container: Value) -> ResolveResult {
    match container {
        Value::List(items) => Ok(Value::Bool(items.contains(&item))),
        Value::Map(map) => {
            let has = |k: Key| map.map.contains_key(&k);
            let found = match item {
                Value::String(s) => has(Key::String(s)),
                Value::Bool(b) => has(Key::Bool(b)),
                Value::Int(i) => {
                    has(Key::Int(i)) || u64::try_from(i).is_ok_and(|u| has(Key::Uint(u)))
                }
                Value::UInt(u) => {
                    has(Key::Uint(u)) || i64::try_from(u).is_ok_and(|i| has(Key::Int(i)))
                }
                Value::Float(f) if f.fract() == 0.0 && f.abs() < TWO_TO_63 => {
                    has(Key::Int(f as i64)) || (f >= 0.0 && has(Key::Uint(f as u64)))
                }
                Value::Float(_) => false,
                other => {
                    return Err(ftx.error(format!("unsupported map key type {}", other.type_of())));
                }
            };
            Ok(Value::Bool(found))
        }
        other => Err(ftx.error(format!("no such overload: in {}", other.type_of()))),
    }
}

pub(super) fn tick(v: Value, weight: i64) -> ResolveResult {
    let left = STATE.with_borrow_mut(|s| {
        s.budget -= weight;
        s.budget
    });
    if left < 0 {
        return Err(ExecutionError::function_error(
            "cost",
            "operation cancelled: actual cost limit exceeded",
        ));
    }
    Ok(v)
}

/// cel-go's field selection (on unstructured JSON, as Kubernetes and
/// Kyverno bind objects): a map's entry or `no such key`; a list's is an
/// index error; anything else has no fields.
pub(super) fn select_field(operand: Value, field: Arc<String>) -> ResolveResult {
    // A field of an optional is optional, as in cel-go: `optional.of(m).c`
    // is `m.?c`, and a field of none is none.
    match optional_inner(&operand) {
        Some(None) => return Ok(opt_none()),
        Some(Some(Value::Map(m))) => {
            return Ok(match m.map.get(&Key::String(field)) {
                Some(v) => opt_of(v.clone()),
                None => opt_none(),
            });
        }
        Some(Some(other)) => return select_field(other, field),
        None => {}
    }
    match &operand {
        Value::Map(m) => match m.map.get(&Key::String(field.clone())) {
            Some(v) => Ok(v.clone()),
            None => Err(ExecutionError::NoSuchKey(field)),
        },
        Value::List(_) => Err(string_index_on_list()),
        _ => Err(ExecutionError::NoSuchKey(field)),
    }
}

/// cel-go's `has()`: whether a map has the key; an index error on a list;
/// false on anything else.
pub(super) fn has_field(operand: Value, field: Arc<String>) -> ResolveResult {
    match optional_inner(&operand) {
        Some(None) => return Ok(Value::Bool(false)),
        Some(Some(inner)) => return has_field(inner, field),
        None => {}
    }
    match &operand {
        Value::Map(m) => Ok(Value::Bool(m.map.contains_key(&Key::String(field)))),
        Value::List(_) => Err(string_index_on_list()),
        _ => Ok(Value::Bool(false)),
    }
}

/// `-x`: see [`NEGATE`].
pub(super) fn negate(ftx: &FunctionContext, v: Value) -> ResolveResult {
    match v {
        Value::Int(i) => i
            .checked_neg()
            .map(Value::Int)
            .ok_or_else(|| ftx.error("integer overflow")),
        Value::Float(d) => Ok(Value::Float(-d)),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

/// A list or map as it is; anything else is cel-go's error for a
/// comprehension over it (the interpreter's is no such overload).
pub(super) fn iterable(range: Value) -> ResolveResult {
    let go_type = match &range {
        Value::List(_) | Value::Map(_) => return Ok(range),
        Value::Null => "types.Null",
        Value::Bool(_) => "types.Bool",
        Value::Int(_) => "types.Int",
        Value::UInt(_) => "types.Uint",
        Value::Float(_) => "types.Double",
        Value::String(_) => "types.String",
        Value::Bytes(_) => "types.Bytes",
        Value::Duration(_) => "types.Duration",
        Value::Timestamp(_) => "types.Timestamp",
        v if optional_inner(v).is_some() => "*types.Optional",
        _ => return Err(ExecutionError::NoSuchOverload),
    };
    Err(ExecutionError::function_error(
        "",
        format!("got '{go_type}', expected iterable type"),
    ))
}

pub(super) fn pairs(range: Value) -> ResolveResult {
    let pair = |a: Value, b: &Value| Value::List(Arc::new(vec![a, b.clone()]));
    Ok(Value::List(Arc::new(match iterable(range)? {
        Value::List(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| pair(Value::Int(i as i64), item))
            .collect(),
        Value::Map(map) => map
            .map
            .iter()
            .map(|(key, value)| pair(key.clone().into(), value))
            .collect(),
        _ => return Err(ExecutionError::NoSuchOverload),
    })))
}

pub(super) fn map_of_pairs(pairs: Value) -> ResolveResult {
    let Value::List(pairs) = pairs else {
        return Err(ExecutionError::NoSuchOverload);
    };
    let mut map = std::collections::HashMap::with_capacity(pairs.len());
    for pair in pairs.iter() {
        let Value::List(pair) = pair else {
            return Err(ExecutionError::NoSuchOverload);
        };
        let [key, value] = pair.as_slice() else {
            return Err(ExecutionError::NoSuchOverload);
        };
        let key: Key = key
            .clone()
            .try_into()
            .map_err(|_| ExecutionError::NoSuchOverload)?;
        map.insert(key, value.clone());
    }
    Ok(Value::Map(kube_cel::cel::objects::Map {
        map: Arc::new(map),
    }))
}

/// cel-go's error for a field or string key of a list.
pub(in super::super) fn string_index_on_list() -> ExecutionError {
    ExecutionError::function_error("", "unsupported index type 'string' in list")
}

pub(super) fn logical_and(ftx: &FunctionContext) -> ResolveResult {
    logical(ftx, false)
}

pub(super) fn logical_or(ftx: &FunctionContext) -> ResolveResult {
    logical(ftx, true)
}

/// cel-go's `&&` (`decisive` false) and `||` (`decisive` true): the
/// decisive value of either operand is the answer, whatever the other
/// gives; otherwise the first operand that is not a bool is the error (its
/// own, or no such overload).
pub(super) fn logical(ftx: &FunctionContext, decisive: bool) -> ResolveResult {
    let [left, right] = ftx.args else {
        return Err(ExecutionError::invalid_argument_count(2, ftx.args.len()));
    };
    let left = Value::resolve(left, ftx.ptx);
    if matches!(left, Ok(Value::Bool(b)) if b == decisive) {
        return Ok(Value::Bool(decisive));
    }
    let right = Value::resolve(right, ftx.ptx);
    match (left, right) {
        (_, Ok(Value::Bool(b))) if b == decisive => Ok(Value::Bool(decisive)),
        (Ok(Value::Bool(_)), Ok(Value::Bool(_))) => Ok(Value::Bool(!decisive)),
        (Err(e), _) | (Ok(Value::Bool(_)), Err(e)) => Err(e),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

pub(super) fn or_value(This(this): This<Value>, other: Value) -> ResolveResult {
    Ok(match optional_inner(&this) {
        Some(Some(v)) => v,
        Some(None) => other,
        None => this,
    })
}

pub(super) fn has_value(This(this): This<Value>) -> ResolveResult {
    Ok(Value::Bool(!matches!(optional_inner(&this), Some(None))))
}

pub(super) fn value_of(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    match optional_inner(&this) {
        Some(Some(v)) => Ok(v),
        Some(None) => Err(ftx.error("optional.none() dereference")),
        None => Ok(this),
    }
}

pub(super) fn optional_inner(v: &Value) -> Option<Option<Value>> {
    <&OptionalValue>::try_from(v)
        .ok()
        .map(|o| o.value().cloned())
}

/// `a.?f`: an optional of the field, none when it is absent.
pub(super) fn opt_select(operand: Value, field: Arc<String>) -> ResolveResult {
    let target = match optional_inner(&operand) {
        Some(None) => return Ok(opt_none()),
        Some(Some(v)) => v,
        None => operand,
    };
    match &target {
        Value::Map(m) => Ok(match m.map.get(&Key::String(field)) {
            Some(v) => opt_of(v.clone()),
            None => opt_none(),
        }),
        Value::List(_) => Err(string_index_on_list()),
        // cel-go: a value that is not a map or list has no fields.
        _ => Ok(opt_none()),
    }
}

/// `a[?k]`: an optional of the entry, none when it is absent.
pub(super) fn opt_index(ftx: &FunctionContext, operand: Value, key: Value) -> ResolveResult {
    let target = match optional_inner(&operand) {
        Some(None) => return Ok(opt_none()),
        Some(Some(v)) => v,
        None => operand,
    };
    match (&target, &key) {
        (Value::Map(m), _) => {
            let k = match key {
                Value::String(s) => Key::String(s),
                Value::Int(i) => Key::Int(i),
                Value::UInt(u) => Key::Uint(u),
                Value::Bool(b) => Key::Bool(b),
                other => return Err(ftx.error(format!("unsupported key type {}", other.type_of()))),
            };
            Ok(m.map.get(&k).cloned().map_or_else(opt_none, opt_of))
        }
        (Value::List(l), Value::Int(i)) => Ok(usize::try_from(*i)
            .ok()
            .and_then(|i| l.get(i))
            .cloned()
            .map_or_else(opt_none, opt_of)),
        (Value::List(_), Value::String(_)) => Err(string_index_on_list()),
        (Value::Null, _) => Ok(opt_none()),
        (other, _) => Err(ftx.error(format!(
            "no such overload: optional index on {}",
            other.type_of()
        ))),
    }
}
