//! Kyverno's string functions, and its matching functions: regular
//! expressions (with Go's replacement template syntax), `*`/`?`
//! wildcards, label selectors and semver ranges.

use super::{Args, R, err, str_or_num, want_num, want_obj, want_str};
use crate::jmespath::JmesError;
use crate::jmespath::value::json_equal;
use serde_json::Value;
use std::cmp::Ordering;

pub(super) fn compare(args: &Args) -> R {
    args.check(2)?;
    let (a, b) = (
        want_str(args.name, args.v(0))?,
        want_str(args.name, args.v(1))?,
    );
    Ok(Value::from(match a.cmp(b) {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }))
}

pub(super) fn equal_fold(args: &Args) -> R {
    args.check(2)?;
    Ok(Value::Bool(
        want_str(args.name, args.v(0))?.to_lowercase()
            == want_str(args.name, args.v(1))?.to_lowercase(),
    ))
}

pub(super) fn replace(args: &Args) -> R {
    args.check(4)?;
    let (s, old, new) = (
        want_str(args.name, args.v(0))?,
        want_str(args.name, args.v(1))?,
        want_str(args.name, args.v(2))?,
    );
    let count = want_num(args.name, args.v(3))?;
    Ok(Value::String(if count < 0.0 {
        s.replace(old, new)
    } else {
        s.replacen(old, new, count as usize)
    }))
}

pub(super) fn replace_all(args: &Args) -> R {
    args.check(3)?;
    Ok(Value::String(want_str(args.name, args.v(0))?.replace(
        want_str(args.name, args.v(1))?,
        want_str(args.name, args.v(2))?,
    )))
}

pub(super) fn to_upper(args: &Args) -> R {
    args.check(1)?;
    Ok(Value::String(
        want_str(args.name, args.v(0))?.to_uppercase(),
    ))
}

pub(super) fn to_lower(args: &Args) -> R {
    args.check(1)?;
    Ok(Value::String(
        want_str(args.name, args.v(0))?.to_lowercase(),
    ))
}

pub(super) fn trim(args: &Args) -> R {
    args.check(2)?;
    let cutset: Vec<char> = want_str(args.name, args.v(1))?.chars().collect();
    Ok(Value::String(
        want_str(args.name, args.v(0))?
            .trim_matches(|c| cutset.contains(&c))
            .to_string(),
    ))
}

pub(super) fn trim_prefix(args: &Args) -> R {
    args.check(2)?;
    let s = want_str(args.name, args.v(0))?;
    Ok(Value::String(
        s.strip_prefix(want_str(args.name, args.v(1))?)
            .unwrap_or(s)
            .to_string(),
    ))
}

pub(super) fn split(args: &Args) -> R {
    args.check(2)?;
    let (s, sep) = (
        want_str(args.name, args.v(0))?,
        want_str(args.name, args.v(1))?,
    );
    let parts: Vec<Value> = if sep.is_empty() {
        s.chars().map(|c| Value::String(c.to_string())).collect()
    } else {
        s.split(sep).map(|p| Value::String(p.to_string())).collect()
    };
    Ok(Value::Array(parts))
}

pub(super) fn truncate(args: &Args) -> R {
    args.check(2)?;
    let s = want_str(args.name, args.v(0))?;
    let n = want_num(args.name, args.v(1))?;
    Ok(Value::String(if n <= 0.0 {
        String::new()
    } else {
        s.chars().take(n as usize).collect()
    }))
}

pub(super) fn path_canonicalize(args: &Args) -> R {
    args.check(1)?;
    Ok(Value::String(clean_path(want_str(args.name, args.v(0))?)))
}

pub(super) fn regex_match(args: &Args) -> R {
    args.check(2)?;
    let re = regex(want_str(args.name, args.v(0))?)?;
    Ok(Value::Bool(re.is_match(&str_or_num(args.name, args.v(1))?)))
}

pub(super) fn regex_replace_all(args: &Args) -> R {
    args.check(3)?;
    let re = regex(want_str(args.name, args.v(0))?)?;
    let src = str_or_num(args.name, args.v(1))?;
    let repl = str_or_num(args.name, args.v(2))?;
    Ok(Value::String(if args.name == "regex_replace_all" {
        re.replace_all(&src, go_expand_template(&repl).as_str())
            .into_owned()
    } else {
        re.replace_all(&src, regex::NoExpand(&repl)).into_owned()
    }))
}

pub(super) fn pattern_match(args: &Args) -> R {
    args.check(2)?;
    Ok(Value::Bool(crate::wildcard::matches(
        want_str(args.name, args.v(0))?,
        &str_or_num(args.name, args.v(1))?,
    )))
}

pub(super) fn label_match(args: &Args) -> R {
    args.check(2)?;
    let (sel, labels) = (
        want_obj(args.name, args.v(0))?,
        want_obj(args.name, args.v(1))?,
    );
    Ok(Value::Bool(sel.iter().all(|(k, val)| {
        labels.get(k).is_some_and(|l| json_equal(l, val))
    })))
}

pub(super) fn to_boolean(args: &Args) -> R {
    args.check(1)?;
    match want_str(args.name, args.v(0))?.to_lowercase().as_str() {
        "true" => Ok(Value::Bool(true)),
        "false" => Ok(Value::Bool(false)),
        other => err(format!(
            "to_boolean(): cannot convert {other:?} to a boolean"
        )),
    }
}

pub(super) fn semver_compare(args: &Args) -> R {
    args.check(2)?;
    crate::units::semver::matches(
        want_str(args.name, args.v(0))?,
        want_str(args.name, args.v(1))?,
    )
    .map(Value::Bool)
    .map_err(JmesError::Runtime)
}
fn regex(pattern: &str) -> Result<regex::Regex, JmesError> {
    regex::Regex::new(pattern)
        .map_err(|e| JmesError::Runtime(format!("invalid regular expression: {e}")))
}

/// Go's `Regexp.Expand` template syntax (`$1`, `${name}`) is the same as the
/// regex crate's except that a name ends at the first non-word character.
fn go_expand_template(t: &str) -> String {
    let mut out = String::with_capacity(t.len());
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' {
            match chars.peek() {
                Some(d) if d.is_ascii_alphanumeric() || *d == '_' => {
                    let mut name = String::new();
                    while let Some(d) = chars.peek() {
                        if d.is_ascii_alphanumeric() || *d == '_' {
                            name.push(*d);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    out.push_str(&format!("${{{name}}}"));
                }
                _ => out.push('$'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn clean_path(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}
