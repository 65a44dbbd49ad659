//! The functions the direct evaluator implements: the ones Kyverno's and
//! Kubernetes' policies call on nearly every object (size, string tests,
//! optionals, conversions, split/join/indexOf), and Kyverno's image
//! library, which image policies call on every image. Any other function leaves
//! the expression to the interpreter at compile time; an argument type a
//! function here does not handle hands the evaluation over at run time
//! ([`Fail::Interpreter`]), so both give the same answers.

use super::time;
use super::value::{Fail, List, MapVal, Str, Val, equals, put_entry};
use crate::cel::library::type_value;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Func {
    Size,
    Contains,
    StartsWith,
    EndsWith,
    Matches,
    OrValue,
    HasValue,
    Value,
    OptionalOf,
    OptionalNone,
    Dyn,
    String,
    Int,
    Type,
    LowerAscii,
    UpperAscii,
    Trim,
    Split,
    Join,
    IndexOf,
    /// `image(ref)`: a map of the reference's parts, as the interpreter's
    /// library builds it.
    Image,
    IsImage,
    /// `<image>.registry()`, `.repository()`, ...: the part of that name.
    ImagePart(&'static str),
    ContainsDigest,
    /// `transformMap`'s result: its `[key, value]` pairs as a map.
    MapOfPairs,
    Timestamp,
    Duration,
}

impl Func {
    /// The function called `name` with `argc` arguments, counting a
    /// method's receiver.
    pub fn named(name: &str, method: bool, argc: usize) -> Option<Func> {
        Some(match (name, method, argc) {
            ("size", _, 1) => Func::Size,
            ("contains", true, 2) => Func::Contains,
            ("startsWith", true, 2) => Func::StartsWith,
            ("endsWith", true, 2) => Func::EndsWith,
            ("matches", _, 2) => Func::Matches,
            ("orValue", true, 2) => Func::OrValue,
            ("hasValue", true, 1) => Func::HasValue,
            ("value", true, 1) => Func::Value,
            ("dyn", false, 1) => Func::Dyn,
            ("string", false, 1) => Func::String,
            ("int", false, 1) => Func::Int,
            ("timestamp", false, 1) => Func::Timestamp,
            ("duration", false, 1) => Func::Duration,
            ("type", false, 1) => Func::Type,
            ("lowerAscii", true, 1) => Func::LowerAscii,
            ("upperAscii", true, 1) => Func::UpperAscii,
            ("trim", true, 1) => Func::Trim,
            ("split", true, 2) => Func::Split,
            ("join", true, 1 | 2) => Func::Join,
            ("indexOf", true, 2) => Func::IndexOf,
            ("image", false, 1) => Func::Image,
            ("isImage", false, 1) => Func::IsImage,
            ("registry", true, 1) => Func::ImagePart("registry"),
            ("repository", true, 1) => Func::ImagePart("repository"),
            ("identifier", true, 1) => Func::ImagePart("identifier"),
            ("tag", true, 1) => Func::ImagePart("tag"),
            ("digest", true, 1) => Func::ImagePart("digest"),
            ("containsDigest", true, 1) => Func::ContainsDigest,
            (crate::cel::library::MAP_OF_PAIRS, false, 1) => Func::MapOfPairs,
            _ => return None,
        })
    }

    /// `prefix.name(...)` as one function name (`optional.of`).
    pub fn qualified(prefix: &str, name: &str, argc: usize) -> Option<Func> {
        Some(match (prefix, name, argc) {
            ("optional", "of", 1) => Func::OptionalOf,
            ("optional", "none", 0) => Func::OptionalNone,
            _ => return None,
        })
    }
}

fn text<'v>(v: &'v Val) -> Result<&'v str, Fail> {
    match v {
        Val::Str(s) => Ok(s.as_str()),
        _ => Err(Fail::Interpreter),
    }
}

/// Takes the argument at `i` (functions consume their arguments).
fn take<'a>(args: &mut [Val<'a>], i: usize) -> Val<'a> {
    std::mem::replace(&mut args[i], Val::Null)
}

pub fn call<'a>(func: Func, args: &mut [Val<'a>]) -> Result<Val<'a>, Fail> {
    // Timestamps and durations are converted and printed here
    // ([`time`]); any other function of a foreign value is the
    // interpreter's.
    let converts_time = matches!(
        func,
        Func::Timestamp | Func::Duration | Func::String | Func::Int | Func::Type | Func::Dyn
    );
    if !converts_time && args.iter().any(|a| matches!(a, Val::Foreign(_))) {
        return Err(Fail::Interpreter);
    }
    Ok(match func {
        Func::Size => Val::Int(match &args[0] {
            Val::Str(s) => s.as_str().chars().count(),
            Val::Bytes(b) => b.len(),
            Val::List(l) => l.len(),
            Val::Map(m) => m.len(),
            _ => return Err(Fail::Interpreter),
        } as i64),
        Func::Contains => match &args[0] {
            Val::Str(s) => Val::Bool(s.as_str().contains(text(&args[1])?)),
            _ => return Err(Fail::Interpreter),
        },
        Func::StartsWith => Val::Bool(text(&args[0])?.starts_with(text(&args[1])?)),
        Func::EndsWith => Val::Bool(text(&args[0])?.ends_with(text(&args[1])?)),
        Func::Matches => {
            let re = regex::Regex::new(text(&args[1])?).map_err(|_| Fail::Interpreter)?;
            Val::Bool(re.is_match(text(&args[0])?))
        }
        // kyverno-compat: Kyverno's policies call orValue/hasValue/value on
        // plain values too and expect the value itself (as the
        // interpreter's library does).
        Func::OrValue => {
            let other = take(args, 1);
            take(args, 0).through_optional().unwrap_or(other)
        }
        Func::HasValue => Val::Bool(!matches!(args[0], Val::Optional(None))),
        Func::Value => take(args, 0).through_optional().ok_or(Fail::Interpreter)?,
        Func::OptionalOf => Val::Optional(Some(Arc::new(take(args, 0)))),
        Func::OptionalNone => Val::Optional(None),
        Func::Dyn => take(args, 0),
        Func::String => match &args[0] {
            Val::Str(_) => take(args, 0),
            Val::Int(i) => Val::string(i.to_string()),
            Val::Uint(u) => Val::string(u.to_string()),
            Val::Bool(b) => Val::string(b.to_string()),
            other => Val::string(time::text_of(other).ok_or(Fail::Interpreter)?),
        },
        Func::Int => match &args[0] {
            Val::Int(i) => Val::Int(*i),
            Val::Uint(u) => Val::Int(i64::try_from(*u).map_err(|_| Fail::Interpreter)?),
            Val::Str(s) => Val::Int(s.as_str().parse().map_err(|_| Fail::Interpreter)?),
            other => Val::Int(time::seconds_of(other).ok_or(Fail::Interpreter)?),
        },
        Func::Timestamp => time::timestamp_of(&args[0])?,
        Func::Duration => time::duration_of(&args[0])?,
        Func::Type => {
            let name = match &args[0] {
                Val::Str(s) if crate::cel::value_text::type_named(s.as_str()).is_some() => "type",
                other => other.type_name(),
            };
            Val::string(type_value(name))
        }
        Func::LowerAscii => Val::string(text(&args[0])?.to_ascii_lowercase()),
        Func::UpperAscii => Val::string(text(&args[0])?.to_ascii_uppercase()),
        Func::Trim => match &args[0] {
            Val::Str(Str::Borrowed(s)) => Val::Str(Str::Borrowed(s.trim())),
            Val::Str(s) => Val::string(s.as_str().trim()),
            _ => return Err(Fail::Interpreter),
        },
        Func::Split => {
            let sep = text(&args[1])?;
            // Go splits on "" between characters; Rust adds empty ends.
            if sep.is_empty() {
                return Err(Fail::Interpreter);
            }
            match &args[0] {
                Val::Str(Str::Borrowed(s)) => {
                    Val::list(s.split(sep).map(|p| Val::Str(Str::Borrowed(p))).collect())
                }
                Val::Str(s) => Val::list(s.as_str().split(sep).map(Val::string).collect()),
                _ => return Err(Fail::Interpreter),
            }
        }
        Func::Join => {
            let sep = match args.get(1) {
                Some(v) => text(v)?,
                None => "",
            };
            let Val::List(items) = &args[0] else {
                return Err(Fail::Interpreter);
            };
            let mut out = String::new();
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                match &item {
                    Val::Str(s) => out.push_str(s.as_str()),
                    // cel-go's join takes a list of strings only.
                    Val::Foreign(_) => return Err(Fail::Interpreter),
                    _ => return Err(Fail::error("no such overload")),
                }
            }
            Val::string(out)
        }
        Func::IndexOf => match &args[0] {
            Val::Str(s) => {
                let (s, needle) = (s.as_str(), text(&args[1])?);
                // In characters, as CEL counts them.
                Val::Int(match s.find(needle) {
                    Some(byte) => s[..byte].chars().count() as i64,
                    None => -1,
                })
            }
            Val::List(items) => {
                let mut found = -1;
                for (i, item) in items.iter().enumerate() {
                    match equals(&item, &args[1]) {
                        Some(true) => {
                            found = i as i64;
                            break;
                        }
                        Some(false) => {}
                        None => return Err(Fail::Interpreter),
                    }
                }
                Val::Int(found)
            }
            _ => return Err(Fail::Interpreter),
        },
        // A reference that does not parse is the interpreter's error (its
        // words).
        Func::Image => {
            let r = crate::cel::image_ref::parse(text(&args[0])?).map_err(|_| Fail::Interpreter)?;
            let part = |k: &'static str, v: &str| (Val::Str(Str::Borrowed(k)), Val::string(v));
            Val::Map(MapVal::Owned(Arc::new(vec![
                part("image", &r.image),
                part("registry", &r.registry),
                part("repository", &r.repository),
                part("identifier", r.identifier()),
                part("tag", &r.tag),
                part("digest", &r.digest),
            ])))
        }
        Func::IsImage => Val::Bool(crate::cel::image_ref::parse(text(&args[0])?).is_ok()),
        Func::ImagePart(part) => match &args[0] {
            Val::Map(m) => m.get_str(part).ok_or(Fail::Interpreter)?,
            _ => return Err(Fail::Interpreter),
        },
        Func::ContainsDigest => match &args[0] {
            Val::Map(m) => match m.get_str("digest").ok_or(Fail::Interpreter)? {
                Val::Str(d) => Val::Bool(!d.as_str().is_empty()),
                _ => return Err(Fail::Interpreter),
            },
            _ => return Err(Fail::Interpreter),
        },
        Func::MapOfPairs => {
            let Val::List(pairs) = &args[0] else {
                return Err(Fail::Interpreter);
            };
            let mut entries = Vec::with_capacity(pairs.len());
            for pair in pairs.iter() {
                let Val::List(pair) = pair else {
                    return Err(Fail::Interpreter);
                };
                let (Some(key), Some(value), 2) = (pair.get(0), pair.get(1), pair.len()) else {
                    return Err(Fail::Interpreter);
                };
                if !key.is_map_key() {
                    return Err(Fail::Interpreter);
                }
                put_entry(&mut entries, key, value);
            }
            Val::Map(MapVal::Owned(Arc::new(entries)))
        }
    })
}

/// `x in container`: list membership or map key presence.
pub fn contained<'a>(item: &Val<'a>, container: &Val<'a>) -> Result<bool, Fail> {
    match container {
        // Read in place: a copy of each item (a constant list's strings)
        // counted its shared text up and down.
        Val::List(List::Owned(items)) => any_equal(items.iter(), item),
        Val::List(items) => any_equal(items.iter(), item),
        Val::Map(m) => match item {
            Val::Str(s) => Ok(m.get_str(s.as_str()).is_some()),
            _ => match m {
                MapVal::Value(_) | MapVal::Doc(_) => Ok(false),
                MapVal::Owned(_) => m
                    .get(item)
                    .map(|v| v.is_some())
                    .map_err(|_| Fail::Interpreter),
            },
        },
        Val::Foreign(_) => Err(Fail::Interpreter),
        _ => Err(Fail::Interpreter),
    }
}

/// Whether one of `items` equals `item`; an incomparable pair is the
/// interpreter's.
fn any_equal<'a, V: std::borrow::Borrow<Val<'a>>>(
    items: impl Iterator<Item = V>,
    item: &Val<'a>,
) -> Result<bool, Fail> {
    for v in items {
        match equals(v.borrow(), item) {
            Some(true) => return Ok(true),
            Some(false) => {}
            None => return Err(Fail::Interpreter),
        }
    }
    Ok(false)
}

/// Lists concatenated; the left one is extended in place when nothing
/// else holds it.
pub fn concat<'a>(left: List<'a>, right: &List<'a>) -> List<'a> {
    // `containers + initContainers.orValue([])`: a list and nothing is the
    // list as it is (a document's array stays one), with no copy.
    if right.is_empty() {
        return left;
    }
    if left.is_empty() {
        return right.clone();
    }
    let mut items = match left {
        List::Owned(items) => items,
        List::Value(_) | List::Doc(_) => Arc::new(left.iter().collect()),
    };
    let target = Arc::make_mut(&mut items);
    target.reserve(right.len());
    target.extend(right.iter());
    List::Owned(items)
}
