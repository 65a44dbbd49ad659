//! JMESPath evaluation: an [`Ast`] and a JSON value in, a JSON value out.
//!
//! Values are passed as [`Val`] so that walking paths through a large request
//! object borrows instead of copying; only computed values are owned.

use super::JmesError;
use super::functions;
use super::parser::{Ast, Cmp};
use super::value::{Eval, NULL, Val, boolean, null, view_equal};
use super::walk::path;
use crate::json_doc::{Json, JsonRef, Kind, View};
use serde_json::Value;
use std::cmp::Ordering;

fn array_len(j: Json) -> usize {
    match j.kind() {
        Kind::Array(len) => len as usize,
        _ => 0,
    }
}

/// Evaluates `ast` against `cur`.
pub fn eval<'a>(ast: &'a Ast, cur: Val<'a>) -> Eval<'a> {
    Ok(match ast {
        Ast::Identity | Ast::Current => cur,
        Ast::Field(k) => cur.field(k),
        Ast::FieldPath(keys) => {
            let mut cur = cur;
            for (i, k) in keys.iter().enumerate() {
                // Borrowed JSON from here on: walk the values, not a Val
                // per step.
                match cur {
                    Val::Ref(v) => return Ok(Val::Ref(path(v, &keys[i..]).unwrap_or(&NULL))),
                    Val::Doc(j) => return Ok(path(j, &keys[i..]).map_or_else(null, Val::Doc)),
                    _ => {}
                }
                cur = cur.field(k.as_str());
            }
            cur
        }
        Ast::Subexpression(l, r) | Ast::IndexExpression(l, r) => {
            // kyverno-compat: Kyverno's JMESPath ends a subexpression at a
            // key its map lacks (NotFound, null wherever it is tolerated):
            // a function after it (`resources.keys(@)`) is not called.
            let probe = matches!(**r, Ast::Function(..)).then(|| cur.clone());
            let left = eval(l, cur)?;
            if let Some(cur) = probe
                && left.is_null()
                && missing_key(l, cur).is_some()
            {
                return Ok(null());
            }
            eval(r, left)?
        }
        Ast::Index(i) => match cur.into_elements() {
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
        Ast::Slice(start, stop, step) => match cur.into_elements() {
            Some(items) => Val::list(slice(items, *start, *stop, *step)),
            None => null(),
        },
        // kyverno-compat (Kyverno's go-jmespath fork): a flatten, a filter
        // or a value projection whose left side fails is null; a
        // projection's left side and every right-hand side may fail only
        // with an unknown key (the element is dropped), any other error is
        // the expression's.
        Ast::Projection(l, r) => match &**l {
            // `list[]...`: flattened and projected in one pass.
            Ast::Flatten(inner) => match eval(inner, cur) {
                Ok(list) => flatten_project(list, r)?,
                Err(_) => null(),
            },
            _ => match unknown_key_is_null(eval(l, cur))?.into_elements() {
                Some(items) => project(items, r)?,
                None => null(),
            },
        },
        Ast::ValueProjection(l, r) => match eval(l, cur).ok().and_then(Val::into_values) {
            Some(items) => project(items, r)?,
            None => null(),
        },
        Ast::FilterProjection(l, r, cond) => match eval(l, cur).ok().and_then(Val::into_elements) {
            Some(items) => {
                let mut out = Vec::new();
                for item in items {
                    if unknown_key_is_null(eval(cond, item.clone()))?.truthy() {
                        let v = unknown_key_is_null(eval(r, item))?;
                        if !v.is_null() {
                            out.push(v);
                        }
                    }
                }
                Val::list(out)
            }
            None => null(),
        },
        Ast::Flatten(inner) => match eval(inner, cur).ok().and_then(Val::into_elements) {
            Some(items) => flatten(items),
            None => null(),
        },
        Ast::Literal(v) => Val::Ref(v),
        Ast::MultiSelectList(items) => {
            if cur.is_null() {
                return Ok(null());
            }
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(eval(item, cur.clone())?);
            }
            Val::list(out)
        }
        Ast::MultiSelectHash(pairs) => {
            if cur.is_null() {
                return Ok(null());
            }
            let mut out = serde_json::Map::new();
            for (k, item) in pairs {
                out.insert(k.clone(), eval(item, cur.clone())?.into_owned());
            }
            Val::own(Value::Object(out))
        }
        Ast::Comparator(op, l, r) => {
            let left = eval(l, cur.clone())?;
            let right = eval(r, cur)?;
            // JSON of either representation is compared where it is; a
            // list or a scope is made JSON first.
            match (left.as_json_ref(), right.as_json_ref()) {
                (Some(a), Some(b)) => compare(*op, a, b),
                _ => compare(
                    *op,
                    JsonRef::Value(&left.into_cow()),
                    JsonRef::Value(&right.into_cow()),
                ),
            }
        }
        Ast::Or(l, r) => {
            let left = eval(l, cur.clone())?;
            if left.truthy() { left } else { eval(r, cur)? }
        }
        Ast::And(l, r) => {
            let left = eval(l, cur.clone())?;
            if left.truthy() { eval(r, cur)? } else { left }
        }
        Ast::Not(inner) => boolean(!eval(inner, cur)?.truthy()),
        Ast::Pipe(l, r) => {
            let left = eval(l, cur)?;
            eval(r, left)?
        }
        Ast::Function(name, args) => Val::own(functions::call(name, args, cur, eval)?),
        Ast::ExpRef(_) => {
            return Err(Box::new(JmesError::Runtime(
                "expression reference outside a function argument".into(),
            )));
        }
    })
}

/// `items` with the elements that are lists replaced by their elements.
fn flatten(items: Vec<Val<'_>>) -> Val<'_> {
    if !items.iter().any(Val::is_array) {
        return Val::list(items);
    }
    let len = |v: &Val| match v {
        Val::Ref(Value::Array(a)) => a.len(),
        Val::Doc(j) if j.is_array() => array_len(*j),
        Val::List(l) => l.len(),
        Val::Own(v) => v.as_array().map_or(1, Vec::len),
        _ => 1,
    };
    let mut out = Vec::with_capacity(items.iter().map(len).sum());
    for item in items {
        splice(item, |v| out.push(v));
    }
    Val::list(out)
}

/// Calls `f` with each element of `item` when it is an array, else with
/// `item` itself: one step of a flatten.
fn splice<'a>(item: Val<'a>, mut f: impl FnMut(Val<'a>)) {
    match item {
        // Borrowed lists are the common case: no intermediate vector.
        Val::Ref(Value::Array(a)) => a.iter().map(Val::Ref).for_each(f),
        Val::Doc(j) if j.is_array() => j.elements().map(Val::Doc).for_each(f),
        Val::List(l) => l.into_iter().for_each(f),
        other if other.is_array() => other
            .into_elements()
            .unwrap_or_default()
            .into_iter()
            .for_each(f),
        other => f(other),
    }
}

/// `project(flatten(list), rhs)` without the flattened list in between:
/// `rhs` is evaluated on each element of each array element of `list` and
/// on each other element, keeping the non-null results.
fn flatten_project<'a>(list: Val<'a>, rhs: &'a Ast) -> Eval<'a> {
    let identity = matches!(rhs, Ast::Identity | Ast::Current);
    if identity && let Some(flat) = already_flat(&list) {
        return Ok(flat);
    }
    let mut out = Vec::new();
    let mut failure = None;
    let mut take = |item: Val<'a>| {
        if failure.is_some() {
            return;
        }
        let v = if identity {
            item
        } else {
            match unknown_key_is_null(eval(rhs, item)) {
                Ok(v) => v,
                Err(e) => {
                    failure = Some(e);
                    return;
                }
            }
        };
        if !v.is_null() {
            out.push(v);
        }
    };
    match list {
        // Borrowed lists are the common case: no vector of the elements.
        Val::Ref(Value::Array(items)) => {
            for item in items {
                splice(Val::Ref(item), &mut take);
            }
        }
        Val::Doc(j) if j.is_array() => {
            for item in j.elements() {
                splice(Val::Doc(item), &mut take);
            }
        }
        other => match other.into_elements() {
            Some(items) => items.into_iter().for_each(|item| splice(item, &mut take)),
            None => return Ok(null()),
        },
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(Val::list(out)),
    }
}

/// The borrowed array that `list[]` equals: `list` itself when none of its
/// elements is an array or null, or the one such array in a list whose other
/// items are null (`spec.[initContainers, containers][]` with one of them
/// set). Policies flatten lists of scalars or of containers far more often
/// than nested lists, and this keeps their results borrowed.
fn already_flat<'a>(list: &Val<'a>) -> Option<Val<'a>> {
    fn flat<'a, V: View<'a>>(v: V) -> Option<V> {
        (v.is_array() && v.elements().all(|i| !(i.is_null() || i.is_array()))).then_some(v)
    }
    let one = |item: &Val<'a>| match item {
        Val::Ref(v) => flat(*v).map(Val::Ref),
        Val::Doc(j) => flat(*j).map(Val::Doc),
        _ => None,
    };
    match list {
        Val::List(items) => {
            let mut found = None;
            for item in items.iter() {
                if item.is_null() {
                    continue;
                }
                if found.is_some() {
                    return None;
                }
                found = Some(one(item)?);
            }
            found
        }
        other => one(other),
    }
}

/// Evaluates `rhs` on each item, keeping the non-null results.
fn project<'a>(mut items: Vec<Val<'a>>, rhs: &'a Ast) -> Eval<'a> {
    if matches!(rhs, Ast::Identity | Ast::Current) {
        // `list[]` projects onto the elements themselves: keep the vector.
        items.retain(|v| !v.is_null());
        return Ok(Val::list(items));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let v = unknown_key_is_null(eval(rhs, item))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(Val::list(out))
}

/// An unknown key as null, as Kyverno's projections take it; any other
/// error stays.
fn unknown_key_is_null(result: Eval<'_>) -> Eval<'_> {
    match result {
        Err(e) if matches!(*e, JmesError::NotFound(_)) => Ok(null()),
        other => other,
    }
}

fn compare<'a>(op: Cmp, l: JsonRef, r: JsonRef) -> Val<'a> {
    match op {
        Cmp::Eq => boolean(view_equal(l, r)),
        Cmp::Ne => boolean(!view_equal(l, r)),
        _ => match (l.kind().as_f64(), r.kind().as_f64()) {
            (Some(a), Some(b)) => {
                let ord = a.partial_cmp(&b).unwrap_or(Ordering::Equal);
                boolean(match op {
                    Cmp::Lt => ord == Ordering::Less,
                    Cmp::Le => ord != Ordering::Greater,
                    Cmp::Gt => ord == Ordering::Greater,
                    _ => ord != Ordering::Less,
                })
            }
            _ => null(),
        },
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
pub fn missing_key(ast: &Ast, root: Val) -> Option<String> {
    fn step<'v>(k: &str, cur: Val<'v>) -> Result<Val<'v>, String> {
        match cur {
            Val::Ref(Value::Object(m)) => m.get(k).map(Val::Ref).ok_or_else(|| k.to_string()),
            Val::Doc(j) if j.is_object() => j.get(k).map(Val::Doc).ok_or_else(|| k.to_string()),
            Val::Scope(s) => s.field(k).ok_or_else(|| k.to_string()),
            Val::Lazy(r) => r.field(k).ok_or_else(|| k.to_string()),
            _ => Ok(null()),
        }
    }
    fn walk<'v>(ast: &Ast, cur: Val<'v>) -> Result<Val<'v>, String> {
        match ast {
            Ast::Field(k) => step(k, cur),
            Ast::FieldPath(keys) => keys.iter().try_fold(cur, |cur, k| step(k.as_str(), cur)),
            Ast::Subexpression(l, r) | Ast::IndexExpression(l, r) => {
                let left = walk(l, cur)?;
                walk(r, left)
            }
            Ast::Index(i) => Ok(match cur {
                Val::Ref(Value::Array(a)) => {
                    let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                    a.get(idx as usize).map(Val::Ref).unwrap_or_else(null)
                }
                Val::Doc(j) if j.is_array() => {
                    let len = array_len(j) as i64;
                    let idx = if *i < 0 { len + i } else { *i };
                    usize::try_from(idx)
                        .ok()
                        .and_then(|idx| View::at(j, idx))
                        .map_or_else(null, Val::Doc)
                }
                _ => null(),
            }),
            _ => Err(String::new()),
        }
    }
    match walk(ast, root) {
        Err(k) if !k.is_empty() => Some(k),
        _ => None,
    }
}
