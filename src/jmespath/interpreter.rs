//! JMESPath evaluation: an [`Ast`] and a JSON value in, a JSON value out.
//!
//! Values are passed as `Cow` so that walking paths through a large request
//! object borrows instead of copying; only computed values are owned.

use super::JmesError;
use super::functions;
use super::parser::{Ast, Cmp};
use serde_json::Value;
use std::borrow::Cow;
use std::cmp::Ordering;

pub type Val<'a> = Cow<'a, Value>;

pub static NULL: Value = Value::Null;

pub fn null<'a>() -> Val<'a> {
    Cow::Borrowed(&NULL)
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

fn field<'a>(v: Val<'a>, key: &str) -> Val<'a> {
    match v {
        Cow::Borrowed(Value::Object(m)) => m.get(key).map(Cow::Borrowed).unwrap_or_else(null),
        Cow::Owned(Value::Object(mut m)) => m.remove(key).map(Cow::Owned).unwrap_or_else(null),
        _ => null(),
    }
}

fn into_elements<'a>(v: Val<'a>) -> Option<Vec<Val<'a>>> {
    match v {
        Cow::Borrowed(Value::Array(a)) => Some(a.iter().map(Cow::Borrowed).collect()),
        Cow::Owned(Value::Array(a)) => Some(a.into_iter().map(Cow::Owned).collect()),
        _ => None,
    }
}

fn into_values<'a>(v: Val<'a>) -> Option<Vec<Val<'a>>> {
    match v {
        Cow::Borrowed(Value::Object(m)) => Some(m.values().map(Cow::Borrowed).collect()),
        Cow::Owned(Value::Object(m)) => Some(m.into_iter().map(|(_, v)| Cow::Owned(v)).collect()),
        _ => None,
    }
}

fn collect(items: Vec<Val<'_>>) -> Value {
    Value::Array(items.into_iter().map(Cow::into_owned).collect())
}

/// Evaluates `ast` against `cur`.
pub fn eval<'a>(ast: &Ast, cur: Val<'a>) -> Result<Val<'a>, JmesError> {
    Ok(match ast {
        Ast::Identity | Ast::Current => cur,
        Ast::Field(k) => field(cur, k),
        Ast::Subexpression(l, r) | Ast::IndexExpression(l, r) => {
            let left = eval(l, cur)?;
            eval(r, left)?
        }
        Ast::Index(i) => match into_elements(cur) {
            Some(mut items) => {
                let len = items.len() as i64;
                let idx = if *i < 0 { len + i } else { *i };
                if idx < 0 || idx >= len {
                    null()
                } else {
                    items.swap_remove(idx as usize)
                }
            }
            None => null(),
        },
        Ast::Slice(start, stop, step) => match into_elements(cur) {
            Some(items) => Cow::Owned(collect(slice(items, *start, *stop, *step))),
            None => null(),
        },
        Ast::Projection(l, r) => match into_elements(eval(l, cur)?) {
            Some(items) => project(items, r),
            None => null(),
        },
        Ast::ValueProjection(l, r) => match into_values(eval(l, cur)?) {
            Some(items) => project(items, r),
            None => null(),
        },
        Ast::FilterProjection(l, r, cond) => {
            let base = eval(l, cur)?;
            match into_elements(base) {
                Some(items) => {
                    let mut out = Vec::new();
                    for item in items {
                        if is_truthy(eval(cond, item.clone())?.as_ref()) {
                            // kyverno-compat: an element whose right-hand side fails is dropped.
                            let Ok(v) = eval(r, item) else { continue };
                            if !v.is_null() {
                                out.push(v);
                            }
                        }
                    }
                    Cow::Owned(collect(out))
                }
                None => null(),
            }
        }
        Ast::Flatten(inner) => {
            let base = eval(inner, cur)?;
            match into_elements(base) {
                Some(items) => {
                    let mut out = Vec::with_capacity(items.len());
                    for item in items {
                        match item.into_owned() {
                            Value::Array(inner) => out.extend(inner),
                            other => out.push(other),
                        }
                    }
                    Cow::Owned(Value::Array(out))
                }
                None => null(),
            }
        }
        Ast::Literal(v) => Cow::Owned(v.clone()),
        Ast::MultiSelectList(items) => {
            if cur.is_null() {
                return Ok(null());
            }
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(eval(item, cur.clone())?.into_owned());
            }
            Cow::Owned(Value::Array(out))
        }
        Ast::MultiSelectHash(pairs) => {
            if cur.is_null() {
                return Ok(null());
            }
            let mut out = serde_json::Map::new();
            for (k, item) in pairs {
                out.insert(k.clone(), eval(item, cur.clone())?.into_owned());
            }
            Cow::Owned(Value::Object(out))
        }
        Ast::Comparator(op, l, r) => {
            let left = eval(l, cur.clone())?;
            let right = eval(r, cur)?;
            Cow::Owned(compare(*op, &left, &right))
        }
        Ast::Or(l, r) => {
            let left = eval(l, cur.clone())?;
            if is_truthy(&left) {
                left
            } else {
                eval(r, cur)?
            }
        }
        Ast::And(l, r) => {
            let left = eval(l, cur.clone())?;
            if is_truthy(&left) {
                eval(r, cur)?
            } else {
                left
            }
        }
        Ast::Not(inner) => Cow::Owned(Value::Bool(!is_truthy(eval(inner, cur)?.as_ref()))),
        Ast::Pipe(l, r) => {
            let left = eval(l, cur)?;
            eval(r, left)?
        }
        Ast::Function(name, args) => Cow::Owned(functions::call(name, args, cur)?),
        Ast::ExpRef(_) => {
            return Err(JmesError::Runtime(
                "expression reference outside a function argument".into(),
            ));
        }
    })
}

/// Evaluates `rhs` on each item, keeping the non-null results.
fn project<'a>(items: Vec<Val<'a>>, rhs: &Ast) -> Val<'a> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        // kyverno-compat: an element whose right-hand side fails is dropped.
        let Ok(v) = eval(rhs, item) else { continue };
        if !v.is_null() {
            out.push(v);
        }
    }
    Cow::Owned(collect(out))
}

fn compare(op: Cmp, l: &Value, r: &Value) -> Value {
    match op {
        Cmp::Eq => Value::Bool(json_equal(l, r)),
        Cmp::Ne => Value::Bool(!json_equal(l, r)),
        _ => match (l.as_f64(), r.as_f64()) {
            (Some(a), Some(b)) => {
                let ord = a.partial_cmp(&b).unwrap_or(Ordering::Equal);
                Value::Bool(match op {
                    Cmp::Lt => ord == Ordering::Less,
                    Cmp::Le => ord != Ordering::Greater,
                    Cmp::Gt => ord == Ordering::Greater,
                    _ => ord != Ordering::Less,
                })
            }
            _ => Value::Null,
        },
    }
}

/// Deep equality with numbers compared by value (1 == 1.0), as Go's float64 decoding does.
pub fn json_equal(l: &Value, r: &Value) -> bool {
    match (l, r) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, v)| b.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => l == r,
    }
}

fn slice(
    items: Vec<Val<'_>>,
    start: Option<i64>,
    stop: Option<i64>,
    step: Option<i64>,
) -> Vec<Val<'_>> {
    let len = items.len() as i64;
    let step = step.unwrap_or(1);
    let norm = |v: i64, low: i64, high: i64| {
        if v < 0 {
            (v + len).max(low)
        } else {
            v.min(high)
        }
    };
    let (start, stop) = if step > 0 {
        (
            norm(start.unwrap_or(0), 0, len),
            norm(stop.unwrap_or(len), 0, len),
        )
    } else {
        (
            start.map(|s| norm(s, -1, len - 1)).unwrap_or(len - 1),
            stop.map(|s| norm(s, -1, len - 1)).unwrap_or(-1),
        )
    };
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0 && i < stop) || (step < 0 && i > stop) {
        out.push(items[i as usize].clone());
        i += step;
    }
    out
}

/// If `ast` is a plain field path (`a.b[0].c`) and it runs into a key that
/// `root` lacks, names that key. Kyverno's JMESPath reports such lookups as
/// `Unknown key "<key>" in path` instead of returning null.
pub fn missing_key(ast: &Ast, root: &Value) -> Option<String> {
    fn walk<'v>(ast: &Ast, cur: &'v Value) -> Result<&'v Value, String> {
        match ast {
            Ast::Field(k) => match cur {
                Value::Object(m) => m.get(k).ok_or_else(|| k.clone()),
                _ => Ok(&NULL),
            },
            Ast::Subexpression(l, r) | Ast::IndexExpression(l, r) => {
                let left = walk(l, cur)?;
                walk(r, left)
            }
            Ast::Index(i) => Ok(match cur {
                Value::Array(a) => {
                    let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                    a.get(idx as usize).unwrap_or(&NULL)
                }
                _ => &NULL,
            }),
            _ => Err(String::new()),
        }
    }
    match walk(ast, root) {
        Err(k) if !k.is_empty() => Some(k),
        _ => None,
    }
}
