//! JMESPath's standard library functions, with Kyverno's changes to them
//! (`sum` adds quantities and durations and rejects an empty list), and
//! the functions that take an expression reference (`sort_by`, `max_by`,
//! `min_by`, `map`).

use super::arithmetic::arithmetic;
use super::{Args, Evaluate, R, arity, err, type_name, want_arr, want_num, want_obj, want_str};
use crate::jmespath::JmesError;
use crate::jmespath::parser::Ast;
use crate::jmespath::value::{Val, json_equal, number};
use crate::json_doc::{Json, Kind, View};
use serde_json::{Map, Value};
use std::cmp::Ordering;

pub(super) fn abs(args: &Args) -> R {
    args.check(1)?;
    Ok(number(want_num(args.name, args.v(0))?.abs()))
}

pub(super) fn avg(args: &Args) -> R {
    args.check(1)?;
    let a = want_arr(args.name, args.v(0))?;
    if a.is_empty() {
        return Ok(Value::Null);
    }
    let mut sum = 0.0;
    for x in a {
        sum += want_num(args.name, x)?;
    }
    Ok(number(sum / a.len() as f64))
}

pub(super) fn ceil(args: &Args) -> R {
    args.check(1)?;
    Ok(number(want_num(args.name, args.v(0))?.ceil()))
}

pub(super) fn floor(args: &Args) -> R {
    args.check(1)?;
    Ok(number(want_num(args.name, args.v(0))?.floor()))
}

pub(super) fn contains(args: &Args) -> R {
    args.check(2)?;
    match args.v(0) {
        Value::Array(a) => Ok(Value::Bool(a.iter().any(|x| json_equal(x, args.v(1))))),
        Value::String(s) => match args.v(1) {
            Value::String(sub) => Ok(Value::Bool(s.contains(sub.as_str()))),
            _ => Ok(Value::Bool(false)),
        },
        other => err(format!(
            "invalid type for contains(): expected array or string, got {}",
            type_name(other)
        )),
    }
}

pub(super) fn ends_with(args: &Args) -> R {
    args.check(2)?;
    Ok(Value::Bool(
        want_str(args.name, args.v(0))?.ends_with(want_str(args.name, args.v(1))?),
    ))
}

pub(super) fn starts_with(args: &Args) -> R {
    args.check(2)?;
    Ok(Value::Bool(
        want_str(args.name, args.v(0))?.starts_with(want_str(args.name, args.v(1))?),
    ))
}

pub(super) fn join(args: &Args) -> R {
    args.check(2)?;
    let sep = want_str(args.name, args.v(0))?;
    let parts: Result<Vec<&str>, _> = want_arr(args.name, args.v(1))?
        .iter()
        .map(|x| want_str(args.name, x))
        .collect();
    Ok(Value::String(parts?.join(sep)))
}

pub(super) fn keys(args: &Args) -> R {
    args.check(1)?;
    want_obj(args.name, args.v(0))?;
    Ok(keys_of(args.v(0)))
}

/// The keys of an object (none for any other value), sorted as a
/// `serde_json::Map` holds them.
fn keys_of<'r>(v: impl View<'r>) -> Value {
    Value::Array(
        v.entries()
            .map(|(k, _)| Value::String(k.to_string()))
            .collect(),
    )
}

/// `length()` of a string (in characters), an array or an object.
fn length_of<'r>(v: impl View<'r>) -> Option<usize> {
    match v.kind() {
        Kind::Str(s) => Some(s.chars().count()),
        Kind::Array(n) | Kind::Object(n) => Some(n as usize),
        _ => None,
    }
}

/// `keys` and `length` of a decoded document's value, which read only its
/// shape; None for other functions and for the wrong types (whose errors
/// the JSON form words).
pub(super) fn shape_of_doc(name: &str, j: Json) -> Option<R> {
    match name {
        "keys" if j.is_object() => Some(Ok(keys_of(j))),
        "length" => length_of(j).map(|len| Ok(Value::from(len))),
        _ => None,
    }
}

pub(super) fn values(args: &Args) -> R {
    args.check(1)?;
    Ok(Value::Array(
        want_obj(args.name, args.v(0))?.values().cloned().collect(),
    ))
}

pub(super) fn length(args: &Args) -> R {
    args.check(1)?;
    match length_of(args.v(0)) {
        Some(len) => Ok(Value::from(len)),
        None => err(format!(
            "invalid type for length(): got {}",
            type_name(args.v(0))
        )),
    }
}

pub(super) fn max_or_min(args: &Args) -> R {
    args.check(1)?;
    let a = want_arr(args.name, args.v(0))?;
    let mut best: Option<&Value> = None;
    for x in a {
        let better = match best {
            None => true,
            Some(b) => {
                let ord = order(args.name, x, b)?;
                if args.name == "max" {
                    ord == Ordering::Greater
                } else {
                    ord == Ordering::Less
                }
            }
        };
        if better {
            best = Some(x);
        }
    }
    Ok(best.cloned().unwrap_or(Value::Null))
}

pub(super) fn merge(args: &Args) -> R {
    let mut out = Map::new();
    for x in &args.vals {
        for (k, val) in want_obj(args.name, x)? {
            out.insert(k.clone(), val.clone());
        }
    }
    Ok(Value::Object(out))
}

pub(super) fn not_null(args: &Args) -> R {
    Ok(args
        .vals
        .iter()
        .find(|x| !x.is_null())
        .map(|x| x.clone().into_owned())
        .unwrap_or(Value::Null))
}

pub(super) fn reverse(args: &Args) -> R {
    args.check(1)?;
    match args.v(0) {
        Value::String(s) => Ok(Value::String(s.chars().rev().collect())),
        Value::Array(a) => Ok(Value::Array(a.iter().rev().cloned().collect())),
        other => err(format!(
            "invalid type for reverse(): got {}",
            type_name(other)
        )),
    }
}

pub(super) fn sort(args: &Args) -> R {
    args.check(1)?;
    let mut a = want_arr(args.name, args.v(0))?.clone();
    let mut failure = None;
    a.sort_by(|x, y| {
        order(args.name, x, y).unwrap_or_else(|e| {
            failure = Some(e);
            Ordering::Equal
        })
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(Value::Array(a)),
    }
}

pub(super) fn sum(args: &Args) -> R {
    args.check(1)?;
    let a = want_arr(args.name, args.v(0))?;
    if a.is_empty() {
        // kyverno-compat: Kyverno's sum replaces the standard one and rejects empty input.
        return err("sum(): at least one element is required");
    }
    let mut acc = a[0].clone();
    for x in &a[1..] {
        acc = arithmetic("add", &acc, x)?;
    }
    Ok(acc)
}

pub(super) fn to_array(args: &Args) -> R {
    args.check(1)?;
    Ok(match args.v(0) {
        Value::Array(_) => args.v(0).clone(),
        other => Value::Array(vec![other.clone()]),
    })
}

pub(super) fn to_string(args: &Args) -> R {
    args.check(1)?;
    Ok(match args.v(0) {
        Value::String(_) => args.v(0).clone(),
        other => Value::String(serde_json::to_string(other).unwrap_or_default()),
    })
}

pub(super) fn to_number(args: &Args) -> R {
    args.check(1)?;
    Ok(match args.v(0) {
        Value::Number(_) => args.v(0).clone(),
        Value::String(s) => s.trim().parse::<f64>().map(number).unwrap_or(Value::Null),
        _ => Value::Null,
    })
}

pub(super) fn type_of(args: &Args) -> R {
    args.check(1)?;
    Ok(Value::String(type_name(args.v(0)).into()))
}
pub(super) fn call_with_expref(name: &str, args: &[Ast], cur: Val<'_>, eval: Evaluate) -> R {
    arity(name, args, 2)?;
    let (expr, list_arg) = if name == "map" {
        (&args[0], &args[1])
    } else {
        (&args[1], &args[0])
    };
    let Ast::ExpRef(expr) = expr else {
        return err(format!("{name}() expects an expression reference (&expr)"));
    };
    let list = eval(list_arg, cur).map_err(|e| *e)?.into_owned();
    let items = want_arr(name, &list)?;
    let keyed: Vec<(Value, &Value)> = items
        .iter()
        .map(|x| {
            eval(expr, Val::Ref(x))
                .map(|k| (k.into_owned(), x))
                .map_err(|e| *e)
        })
        .collect::<Result<_, _>>()?;
    match name {
        "map" => Ok(Value::Array(keyed.into_iter().map(|(k, _)| k).collect())),
        "sort_by" => {
            let mut keyed = keyed;
            let mut failure = None;
            keyed.sort_by(|a, b| {
                order(name, &a.0, &b.0).unwrap_or_else(|e| {
                    failure = Some(e);
                    Ordering::Equal
                })
            });
            match failure {
                Some(e) => Err(e),
                None => Ok(Value::Array(
                    keyed.into_iter().map(|(_, x)| x.clone()).collect(),
                )),
            }
        }
        _ => {
            let mut best: Option<&(Value, &Value)> = None;
            for pair in &keyed {
                let better = match best {
                    None => true,
                    Some(b) => {
                        let ord = order(name, &pair.0, &b.0)?;
                        if name == "max_by" {
                            ord == Ordering::Greater
                        } else {
                            ord == Ordering::Less
                        }
                    }
                };
                if better {
                    best = Some(pair);
                }
            }
            Ok(best.map(|(_, x)| (*x).clone()).unwrap_or(Value::Null))
        }
    }
}

fn order(name: &str, a: &Value, b: &Value) -> Result<Ordering, JmesError> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => Ok(x
            .as_f64()
            .partial_cmp(&y.as_f64())
            .unwrap_or(Ordering::Equal)),
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        _ => err(format!(
            "{name}(): values must all be numbers or all be strings"
        )),
    }
}
