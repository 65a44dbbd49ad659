//! Validate patterns (§3.4-3.6): a resource and a pattern in, pass or a
//! [`PatternError`] out. Anchors: conditional `()`, equality `=()`,
//! existence `^()`, negation `X()`, global `<()`; string patterns with
//! operators, ranges, wildcards, quantities and durations.

use crate::units::{Duration, Quantity};
use crate::wildcard;
use serde_json::{Map, Value};
use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Condition,
    Global,
    Equality,
    Existence,
    Negation,
    AddIfNotPresent,
}

/// Splits `<mod>(<key>)` into its anchor and key.
pub fn parse_anchor(key: &str) -> Option<(Anchor, &str)> {
    let k = key.trim();
    let (anchor, rest) = match k.as_bytes().first()? {
        b'(' => (Anchor::Condition, k),
        b'<' => (Anchor::Global, &k[1..]),
        b'=' => (Anchor::Equality, &k[1..]),
        b'^' => (Anchor::Existence, &k[1..]),
        b'X' => (Anchor::Negation, &k[1..]),
        b'+' => (Anchor::AddIfNotPresent, &k[1..]),
        _ => return None,
    };
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    (!inner.is_empty()).then_some((anchor, inner))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A real mismatch: the rule fails.
    Fail,
    /// A conditional or global anchor did not hold: the rule does not apply.
    Skip,
    /// A negation anchor matched: a hard failure even under other anchors.
    Negation,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PatternError {
    pub kind: ErrorKind,
    /// Path of the failing element (`/spec/containers/0/image/`); empty when none.
    pub path: String,
    pub message: String,
}

impl PatternError {
    fn fail(path: &Path, message: String) -> PatternError {
        PatternError {
            kind: ErrorKind::Fail,
            path: path.to_string(),
            message,
        }
    }
}

type Res = Result<(), PatternError>;

#[derive(Clone, Copy)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// The path to the element being checked, as a stack of segments that is
/// rendered (`/spec/containers/0/image/`) only when an error needs it.
#[derive(Clone, Copy)]
struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Option<Seg<'a>>,
}

impl<'a> Path<'a> {
    const ROOT: Path<'static> = Path {
        parent: None,
        seg: None,
    };

    fn key(&'a self, k: &'a str) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Some(Seg::Key(k)),
        }
    }

    fn index(&'a self, i: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Some(Seg::Index(i)),
        }
    }
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.parent {
            Some(p) => write!(f, "{p}")?,
            None => write!(f, "/")?,
        }
        match self.seg {
            Some(Seg::Key(k)) => write!(f, "{k}/"),
            Some(Seg::Index(i)) => write!(f, "{i}/"),
            None => Ok(()),
        }
    }
}

/// Validates `resource` against `pattern`.
pub fn validate(resource: &Value, pattern: &Value) -> Res {
    element(resource, pattern, &Path::ROOT)
}

fn element(resource: &Value, pattern: &Value, path: &Path) -> Res {
    match pattern {
        Value::Object(p) => match resource {
            Value::Object(r) => map(r, p, path),
            _ => Err(PatternError::fail(
                path,
                format!(
                    "pattern and resource have different structures: expected object, found {}",
                    type_name(resource)
                ),
            )),
        },
        Value::Array(p) => match resource {
            Value::Array(r) => array(r, p, path),
            _ => Err(PatternError::fail(
                path,
                "resource does not satisfy the expected overlay pattern".to_string(),
            )),
        },
        _ => match resource {
            Value::Array(items) => {
                for item in items {
                    if !scalar(item, pattern) {
                        return Err(PatternError::fail(
                            path,
                            format!(
                                "resource value '{}' does not match '{}'",
                                show(resource),
                                show(pattern)
                            ),
                        ));
                    }
                }
                Ok(())
            }
            _ => {
                if scalar(resource, pattern) {
                    Ok(())
                } else {
                    Err(PatternError::fail(
                        path,
                        format!(
                            "value '{}' does not match '{}'",
                            show(resource),
                            show(pattern)
                        ),
                    ))
                }
            }
        },
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".into(),
        other => other.to_string(),
    }
}

fn has_anchors(v: &Value) -> bool {
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, x)| parse_anchor(k).is_some() || has_anchors(x)),
        Value::Array(a) => a.iter().any(has_anchors),
        _ => false,
    }
}

/// The entry whose key is `name`, possibly anchored (`=(name)`, `(name)`, ...).
fn anchored_entry<'p>(m: &'p Map<String, Value>, name: &str) -> Option<(&'p String, &'p Value)> {
    m.iter()
        .find(|(k, _)| parse_anchor(k).map_or(k.as_str(), |(_, inner)| inner) == name)
}

/// Expands wildcard keys under `metadata.labels` / `metadata.annotations`
/// to the resource's matching keys (anchors kept).
fn expand_metadata_wildcards(
    resource: &Map<String, Value>,
    pattern: &Map<String, Value>,
) -> Option<Map<String, Value>> {
    let (meta_key, pmeta) = anchored_entry(pattern, "metadata")?;
    let pmeta = pmeta.as_object()?;
    let rmeta = resource.get("metadata").and_then(Value::as_object);
    let mut changed = false;
    let mut new_meta = pmeta.clone();
    for field in ["labels", "annotations"] {
        // The field itself may be anchored, e.g. `=(annotations)`.
        let found = pmeta
            .iter()
            .find(|(k, _)| parse_anchor(k).map_or(k.as_str(), |(_, inner)| inner) == field);
        let Some((pkey, Some(pfield))) = found.map(|(k, v)| (k.clone(), v.as_object())) else {
            continue;
        };
        if !pfield.keys().any(|k| wildcard::has_wildcard(k)) {
            continue;
        }
        let actual = rmeta.and_then(|m| m.get(field)).and_then(Value::as_object);
        let mut expanded = Map::new();
        for (k, v) in pfield {
            let (anchor_wrap, bare) = match parse_anchor(k) {
                Some((_, inner)) => (Some(k.replacen(inner, "{}", 1)), inner),
                None => (None, k.as_str()),
            };
            if !wildcard::has_wildcard(bare) {
                expanded.insert(k.clone(), v.clone());
                continue;
            }
            let mut any = false;
            for ak in actual.into_iter().flat_map(|a| a.keys()) {
                if wildcard::matches(bare, ak) {
                    any = true;
                    let nk = match &anchor_wrap {
                        Some(w) => w.replacen("{}", ak, 1),
                        None => ak.clone(),
                    };
                    expanded.insert(nk, v.clone());
                }
            }
            if !any {
                expanded.insert(k.clone(), v.clone());
            }
        }
        new_meta.insert(pkey, Value::Object(expanded));
        changed = true;
    }
    if !changed {
        return None;
    }
    let mut p = pattern.clone();
    p.insert(meta_key.clone(), Value::Object(new_meta));
    Some(p)
}

fn map(resource: &Map<String, Value>, pattern: &Map<String, Value>, path: &Path) -> Res {
    let expanded = expand_metadata_wildcards(resource, pattern);
    let pattern = expanded.as_ref().unwrap_or(pattern);
    let mut anchored: Vec<(&String, Anchor, &str, &Value)> = Vec::new();
    let mut plain: Vec<(&String, &Value)> = Vec::new();
    for (k, v) in pattern {
        match parse_anchor(k) {
            Some((a, inner)) => anchored.push((k, a, inner, v)),
            None => plain.push((k, v)),
        }
    }
    anchored.sort_by(|a, b| a.0.cmp(b.0));
    for (_, anchor, key, pat) in anchored {
        anchor_element(anchor, key, pat, resource, path)?;
    }
    // kyverno-compat: plain keys whose patterns carry anchors go first.
    if plain.len() > 1 {
        // Decide anchors once per key, not once per comparison.
        let mut keyed: Vec<(bool, &String, &Value)> = plain
            .iter()
            .map(|(k, v)| (has_anchors(v), *k, *v))
            .collect();
        keyed.sort_by(|a, b| match (a.0, b.0) {
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            (true, true) => b.1.cmp(a.1),
            _ => a.1.cmp(b.1),
        });
        plain = keyed.into_iter().map(|(_, k, v)| (k, v)).collect();
    }
    for (key, pat) in plain {
        let child_path = path.key(key);
        let actual = resource.get(key.as_str());
        if pat.as_str() == Some("*") {
            if actual.is_none_or(Value::is_null) {
                return Err(PatternError::fail(path, format!("{key} not found")));
            }
            continue;
        }
        element(actual.unwrap_or(&Value::Null), pat, &child_path)?;
    }
    Ok(())
}

fn anchor_element(
    anchor: Anchor,
    key: &str,
    pat: &Value,
    resource: &Map<String, Value>,
    path: &Path,
) -> Res {
    let child_path = path.key(key);
    let actual = resource.get(key);
    match anchor {
        Anchor::Condition | Anchor::Global => {
            let kind = ErrorKind::Skip;
            match actual {
                Some(v) => element(v, pat, &child_path).map_err(|e| {
                    let tag = if anchor == Anchor::Global {
                        "global anchor"
                    } else {
                        "conditional anchor"
                    };
                    // A negation failure inside a condition stays a hard failure.
                    if e.kind == ErrorKind::Negation {
                        e
                    } else {
                        PatternError {
                            kind,
                            path: e.path,
                            message: format!("{tag} mismatch: {}", e.message),
                        }
                    }
                }),
                None => Err(PatternError {
                    kind,
                    path: child_path.to_string(),
                    message: "conditional anchor key doesn't exist in the resource".into(),
                }),
            }
        }
        Anchor::Equality => match actual {
            Some(v) => element(v, pat, &child_path),
            None => Ok(()),
        },
        Anchor::Negation => match actual {
            Some(_) => Err(PatternError {
                kind: ErrorKind::Negation,
                path: child_path.to_string(),
                message: format!("{child_path} is not allowed"),
            }),
            None => Ok(()),
        },
        Anchor::Existence => match actual {
            None => Ok(()),
            Some(Value::Array(items)) => {
                let Value::Array(pats) = pat else {
                    return Err(PatternError::fail(
                        &child_path,
                        "invalid pattern: existence anchor pattern must be a list".into(),
                    ));
                };
                for p in pats {
                    if !p.is_object() {
                        return Err(PatternError::fail(
                            &child_path,
                            "invalid pattern: existence anchor list entries must be maps".into(),
                        ));
                    }
                    let found = items
                        .iter()
                        .enumerate()
                        .any(|(i, item)| element(item, p, &child_path.index(i)).is_ok());
                    if !found {
                        return Err(PatternError::fail(
                            &child_path,
                            "existence anchor validation failed".to_string(),
                        ));
                    }
                }
                Ok(())
            }
            Some(other) => Err(PatternError::fail(
                &child_path,
                format!(
                    "invalid resource type {}: existence ^ () anchor can be used only on list/array type resource",
                    type_name(other)
                ),
            )),
        },
        Anchor::AddIfNotPresent => Ok(()),
    }
}

fn array(resource: &[Value], pattern: &[Value], path: &Path) -> Res {
    let Some(first) = pattern.first() else {
        return Err(PatternError::fail(path, "pattern array empty".into()));
    };
    match first {
        Value::Object(_) => {
            let mut applied = 0;
            let mut skipped: Option<PatternError> = None;
            for (i, item) in resource.iter().enumerate() {
                match element(item, first, &path.index(i)) {
                    Ok(()) => applied += 1,
                    Err(e) if e.kind == ErrorKind::Skip => skipped = skipped.or(Some(e)),
                    Err(e) => return Err(e),
                }
            }
            match skipped {
                Some(e) if applied == 0 => Err(PatternError {
                    kind: ErrorKind::Skip,
                    path: path.to_string(),
                    message: e.message,
                }),
                _ => Ok(()),
            }
        }
        Value::Array(_) => {
            if resource.len() < pattern.len() {
                return Err(PatternError::fail(
                    path,
                    format!(
                        "validate Array failed, array length mismatch, resource Array len is {} and pattern Array len is {}",
                        resource.len(),
                        pattern.len()
                    ),
                ));
            }
            for (i, p) in pattern.iter().enumerate() {
                element(&resource[i], p, &path.index(i))?;
            }
            Ok(())
        }
        scalar_pattern => {
            for item in resource {
                if !scalar(item, scalar_pattern) {
                    return Err(PatternError::fail(
                        path,
                        format!(
                            "resource value '{}' does not match '{}'",
                            show(item),
                            show(scalar_pattern)
                        ),
                    ));
                }
            }
            Ok(())
        }
    }
}

/// Scalar pattern vs a value (`pattern.Validate` in Kyverno).
pub fn scalar(value: &Value, pattern: &Value) -> bool {
    match pattern {
        Value::Bool(p) => value.as_bool() == Some(*p),
        Value::Number(p) => {
            let p = p.as_f64().unwrap_or(f64::NAN);
            match value {
                Value::Number(v) => v.as_f64() == Some(p),
                Value::String(s) => s.parse::<f64>().ok() == Some(p),
                _ => false,
            }
        }
        Value::Null => match value {
            Value::Null => true,
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::String(s) => s.is_empty(),
            Value::Bool(b) => !b,
            _ => false,
        },
        Value::Object(_) => value.is_object(),
        Value::Array(_) => false,
        Value::String(p) => string_pattern(value, p),
    }
}

fn string_pattern(value: &Value, pattern: &str) -> bool {
    if value.as_str() == Some(pattern) {
        return true;
    }
    pattern.split('|').any(|alt| {
        alt.trim()
            .split('&')
            .all(|atom| atom_matches(value, atom.trim()))
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Equal,
    NotEqual,
    More,
    MoreEqual,
    Less,
    LessEqual,
}

fn is_range_endpoint(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let digits = s.chars().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return false;
    }
    let rest = &s[digits..];
    let rest = match rest.strip_prefix('.') {
        Some(r) => {
            let d = r.chars().take_while(|c| c.is_ascii_digit()).count();
            if d == 0 {
                return false;
            }
            &r[d..]
        }
        None => rest,
    };
    rest.chars().all(|c| c.is_ascii_alphabetic())
}

/// `a-b` / `a!-b` ranges; endpoints are numbers with an optional unit.
fn parse_range(p: &str) -> Option<(bool, &str, &str)> {
    for (sep, negated) in [("!-", true), ("-", false)] {
        let start = usize::from(p.starts_with(['-', '+']));
        if let Some(idx) = p[start..].find(sep).map(|i| i + start) {
            let (lo, hi) = (&p[..idx], &p[idx + sep.len()..]);
            if is_range_endpoint(lo) && is_range_endpoint(hi) {
                return Some((negated, lo, hi));
            }
        }
    }
    None
}

fn atom_matches(value: &Value, atom: &str) -> bool {
    if value.as_str() == Some(atom) {
        return true;
    }
    let (op, operand) = if let Some(r) = atom.strip_prefix(">=") {
        (Op::MoreEqual, r)
    } else if let Some(r) = atom.strip_prefix("<=") {
        (Op::LessEqual, r)
    } else if let Some(r) = atom.strip_prefix('>') {
        (Op::More, r)
    } else if let Some(r) = atom.strip_prefix('<') {
        (Op::Less, r)
    } else if let Some(r) = atom.strip_prefix('!') {
        if !r.starts_with('-') || parse_range(atom).is_none() {
            (Op::NotEqual, r)
        } else {
            (Op::Equal, atom)
        }
    } else {
        (Op::Equal, atom)
    };
    if op == Op::Equal {
        if let Some((negated, lo, hi)) = parse_range(atom) {
            let within =
                atom_matches(value, &format!(">={lo}")) && atom_matches(value, &format!("<={hi}"));
            return if negated {
                atom_matches(value, &format!("<{lo}")) || atom_matches(value, &format!(">{hi}"))
            } else {
                within
            };
        }
    }
    let operand = operand.trim();
    let starts_numeric = operand.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && operand
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .len()
            < operand.len();
    if !starts_numeric {
        return string_compare(value, operand, op);
    }
    number_compare(value, operand, op)
}

/// Go's `%E`-less float formatting used for wildcard comparison of numbers.
fn go_float_e(f: f64) -> String {
    if f == 0.0 {
        return "0E+00".into();
    }
    let s = format!("{f:E}");
    let (mant, exp) = s.split_once('E').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    format!("{mant}E{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

fn string_compare(value: &Value, pattern: &str, op: Op) -> bool {
    if op != Op::Equal && op != Op::NotEqual {
        return false;
    }
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => go_float_e(n.as_f64().unwrap_or(0.0)),
        Value::Bool(b) => b.to_string(),
        _ => return false,
    };
    let m = wildcard::matches(pattern, &text);
    if op == Op::NotEqual { !m } else { m }
}

fn number_compare(value: &Value, pattern: &str, op: Op) -> bool {
    let text = match value {
        Value::Null => "0".to_string(),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            format!("{f:.6}")
        }
        Value::String(s) => s.clone(),
        Value::Bool(_) => return string_compare(value, pattern, op),
        _ => return false,
    };
    let ord = if let (Some(p), Some(v)) = (Duration::parse(pattern), Duration::parse(&text)) {
        v.0.partial_cmp(&p.0)
    } else if let (Some(p), Some(v)) = (Quantity::parse(pattern), Quantity::parse(&text)) {
        v.value.partial_cmp(&p.value)
    } else {
        return string_compare(value, pattern, op);
    };
    let Some(ord) = ord else { return false };
    match op {
        Op::Equal => ord == Ordering::Equal,
        Op::NotEqual => ord != Ordering::Equal,
        Op::More => ord == Ordering::Greater,
        Op::MoreEqual => ord != Ordering::Less,
        Op::Less => ord == Ordering::Less,
        Op::LessEqual => ord != Ordering::Greater,
    }
}

#[cfg(test)]
mod tests;
