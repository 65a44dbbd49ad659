//! The strings extension's search and slicing functions as cel-go has them
//! (`ext/strings.go`, the version Kubernetes enables): `indexOf`,
//! `lastIndexOf`, `replace`, `split` and `substring`, with their argument
//! checks. kube-cel's take an argument of the wrong type for its default
//! (`'42'.split('2', '1')`, which cel-go has no overload for) and split on
//! `""` with empty ends (cel-go: into characters).
//!
//! An offset past the end is not an error (`'abc'.indexOf('a', 30)` is -1),
//! as in cel-go v0.29 and v0.30, which Kubernetes and Kyverno build with;
//! google/cel-spec's file expects the error of a later cel-go
//! (`tests/data/cel-spec/kubernetes-answers.txt`).
//!
//! Indexes count characters (Unicode scalar values), as cel-go's runes.

use kube_cel::cel::extractors::{Arguments, This};
use kube_cel::cel::{ExecutionError, FunctionContext, ResolveResult, Value};
use std::sync::Arc;

fn out_of_range(ftx: &FunctionContext, index: i64) -> ExecutionError {
    ftx.error(format!("index out of range: {index}"))
}

/// What `indexOf` and `lastIndexOf` search: a list for an item (the
/// Kubernetes lists library), or a string for a text from an offset.
enum Search<'v> {
    Item(&'v [Value], &'v Value),
    Text(&'v str, &'v str, Option<i64>),
}

impl<'v> Search<'v> {
    fn of(this: &'v Value, args: &'v [Value]) -> Result<Search<'v>, ExecutionError> {
        Ok(match (this, args) {
            (Value::List(items), [item]) => Search::Item(items, item),
            (Value::String(s), [Value::String(sub)]) => Search::Text(s, sub, None),
            (Value::String(s), [Value::String(sub), Value::Int(offset)]) => {
                Search::Text(s, sub, Some(*offset))
            }
            _ => return Err(ExecutionError::NoSuchOverload),
        })
    }
}

fn found(index: Option<usize>) -> ResolveResult {
    Ok(Value::Int(index.map_or(-1, |i| i as i64)))
}

/// `s.indexOf(sub[, offset])`, or a list's `indexOf(item)`.
pub(super) fn index_of(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let (s, sub, offset) = match Search::of(&this, &args)? {
        Search::Item(items, item) => return found(items.iter().position(|v| v == item)),
        Search::Text(s, sub, offset) => (s, sub, offset.unwrap_or(0)),
    };
    if offset < 0 {
        return Err(out_of_range(ftx, offset));
    }
    let chars: Vec<char> = s.chars().collect();
    let sub: Vec<char> = sub.chars().collect();
    let length = chars.len() as i64;
    if sub.is_empty() {
        return Ok(Value::Int(offset.min(length)));
    }
    found((offset.min(length) as usize..chars.len()).find(|&i| chars[i..].starts_with(&sub)))
}

/// `s.lastIndexOf(sub[, offset])`, or a list's `lastIndexOf(item)`.
pub(super) fn last_index_of(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let (s, sub, offset) = match Search::of(&this, &args)? {
        Search::Item(items, item) => return found(items.iter().rposition(|v| v == item)),
        Search::Text(s, sub, offset) => (s, sub, offset),
    };
    let chars: Vec<char> = s.chars().collect();
    let sub: Vec<char> = sub.chars().collect();
    let length = chars.len() as i64;
    let given = offset.is_some();
    let offset = match offset {
        Some(offset) if offset < 0 => return Err(out_of_range(ftx, offset)),
        Some(offset) => offset,
        None => length,
    };
    if sub.is_empty() {
        return Ok(Value::Int(offset.min(length)));
    }
    // cel-go: an offset at or past the end finds nothing
    // (`'abc'.lastIndexOf('c', 3)` is -1), and no offset is the last
    // character's.
    if given && offset >= length || sub.len() > chars.len() {
        return Ok(Value::Int(-1));
    }
    let last_start = (offset.min(length - sub.len() as i64)) as usize;
    found(
        (0..=last_start)
            .rev()
            .find(|&i| chars[i..].starts_with(&sub)),
    )
}

/// `s.replace(old, new[, n])`: the first `n` (all when negative), as Go's
/// `strings.Replace`.
pub(super) fn replace(This(this): This<Arc<String>>, Arguments(args): Arguments) -> ResolveResult {
    let replaced = match args.as_slice() {
        [Value::String(old), Value::String(new)] => this.replace(old.as_str(), new),
        [Value::String(old), Value::String(new), Value::Int(n)] => match usize::try_from(*n) {
            Ok(n) => this.replacen(old.as_str(), new, n),
            Err(_) => this.replace(old.as_str(), new),
        },
        _ => return Err(ExecutionError::NoSuchOverload),
    };
    Ok(Value::String(Arc::new(replaced)))
}

/// `s.split(separator[, n])`: at most `n` parts (all when negative, none
/// when zero), as Go's `strings.SplitN`; an empty separator splits between
/// characters.
pub(super) fn split(This(this): This<Arc<String>>, Arguments(args): Arguments) -> ResolveResult {
    let (separator, limit) = match args.as_slice() {
        [Value::String(separator)] => (separator, None),
        [Value::String(separator), Value::Int(n)] => (separator, Some(*n)),
        _ => return Err(ExecutionError::NoSuchOverload),
    };
    let limit = match limit {
        Some(0) => return Ok(Value::List(Arc::new(Vec::new()))),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => usize::MAX,
    };
    let text = |s: &str| Value::String(Arc::new(s.to_string()));
    let parts: Vec<Value> = if separator.is_empty() {
        let mut parts: Vec<Value> = Vec::new();
        let mut rest = this.as_str();
        while let Some(c) = rest.chars().next() {
            if parts.len() + 1 == limit {
                break;
            }
            parts.push(text(&rest[..c.len_utf8()]));
            rest = &rest[c.len_utf8()..];
        }
        if !rest.is_empty() {
            parts.push(text(rest));
        }
        parts
    } else {
        this.splitn(limit, separator.as_str()).map(text).collect()
    };
    Ok(Value::List(Arc::new(parts)))
}

/// `s.substring(start[, end])`, by character.
pub(super) fn substring(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let length = this.chars().count() as i64;
    let (start, end) = match args.as_slice() {
        [Value::Int(start)] => (*start, length),
        [Value::Int(start), Value::Int(end)] => (*start, *end),
        _ => return Err(ExecutionError::NoSuchOverload),
    };
    if start < 0 || start > length {
        return Err(out_of_range(ftx, start));
    }
    if end < 0 || end > length {
        return Err(out_of_range(ftx, end));
    }
    if start > end {
        return Err(ftx.error(format!(
            "invalid substring range. start: {start}, end: {end}"
        )));
    }
    let text: String = this
        .chars()
        .skip(start as usize)
        .take((end - start) as usize)
        .collect();
    Ok(Value::String(Arc::new(text)))
}
