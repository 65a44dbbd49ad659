//! JMESPath functions: the standard library plus Kyverno's custom functions
//! (strings, regex, wildcard, arithmetic with quantities and durations,
//! encoding, semver, and data shaping). Unknown functions are errors.

use super::JmesError;
use super::parser::Ast;
use super::value::{Eval, Val, json_equal, number};
use crate::units::time::Instant;
use crate::units::{Duration, Quantity};
use base64::Engine as _;
use serde_json::{Map, Value};
use sha2::Digest as _;
use std::borrow::Cow;
use std::cmp::Ordering;

type R = Result<Value, JmesError>;

fn err<T>(msg: impl Into<String>) -> Result<T, JmesError> {
    Err(JmesError::Runtime(msg.into()))
}

fn arity(name: &str, args: &[Ast], n: usize) -> Result<(), JmesError> {
    if args.len() != n {
        return err(format!(
            "{name}() takes {n} argument(s), got {}",
            args.len()
        ));
    }
    Ok(())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn want_str<'v>(name: &str, v: &'v Value) -> Result<&'v str, JmesError> {
    v.as_str().ok_or_else(|| {
        JmesError::Runtime(format!(
            "invalid type for {name}(): expected string, got {}",
            type_name(v)
        ))
    })
}

fn want_num(name: &str, v: &Value) -> Result<f64, JmesError> {
    v.as_f64().ok_or_else(|| {
        JmesError::Runtime(format!(
            "invalid type for {name}(): expected number, got {}",
            type_name(v)
        ))
    })
}

fn want_arr<'v>(name: &str, v: &'v Value) -> Result<&'v Vec<Value>, JmesError> {
    v.as_array().ok_or_else(|| {
        JmesError::Runtime(format!(
            "invalid type for {name}(): expected array, got {}",
            type_name(v)
        ))
    })
}

fn want_obj<'v>(name: &str, v: &'v Value) -> Result<&'v Map<String, Value>, JmesError> {
    v.as_object().ok_or_else(|| {
        JmesError::Runtime(format!(
            "invalid type for {name}(): expected object, got {}",
            type_name(v)
        ))
    })
}

/// A string or a number rendered as Go's `fmt.Sprint` would.
fn str_or_num(name: &str, v: &Value) -> Result<String, JmesError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(_) => Ok(go_sprint(v)),
        _ => err(format!(
            "invalid type for {name}(): expected string or number, got {}",
            type_name(v)
        )),
    }
}

/// Go's `fmt.Sprint` of a decoded JSON value (numbers are float64 in Go).
pub fn go_sprint(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 1e21 {
                format!("{}", f as i128)
            } else {
                format!("{f}")
            }
        }
        Value::String(s) => s.clone(),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(go_sprint).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(m) => {
            let mut keys: Vec<_> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", go_sprint(&m[*k])))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Calls function `name` with unevaluated `args` against the current node.
/// How a function evaluates its arguments: the interpreter's `eval`,
/// handed in so that the functions do not import the interpreter that
/// calls them.
pub type Evaluate = for<'a> fn(&'a Ast, Val<'a>) -> Eval<'a>;

pub fn call<'a>(name: &str, args: &'a [Ast], cur: Val<'a>, eval: Evaluate) -> R {
    // Functions that take expression references evaluate them per element.
    match name {
        "sort_by" | "max_by" | "min_by" | "map" => {
            return call_with_expref(name, args, cur, eval);
        }
        _ => {}
    }
    let mut vals: Vec<Cow<'a, Value>> = Vec::with_capacity(args.len());
    for a in args {
        if let Ast::ExpRef(_) = a {
            return err(format!("{name}() does not take an expression reference"));
        }
        vals.push(eval(a, cur.clone()).map_err(|e| *e)?.into_cow());
    }
    let n = args.len();
    let check = |want: usize| arity(name, args, want);
    let v = |i: usize| -> &Value { &vals[i] };
    match name {
        // ---- JMESPath standard library ----
        "abs" => {
            check(1)?;
            Ok(number(want_num(name, v(0))?.abs()))
        }
        "avg" => {
            check(1)?;
            let a = want_arr(name, v(0))?;
            if a.is_empty() {
                return Ok(Value::Null);
            }
            let mut sum = 0.0;
            for x in a {
                sum += want_num(name, x)?;
            }
            Ok(number(sum / a.len() as f64))
        }
        "ceil" => {
            check(1)?;
            Ok(number(want_num(name, v(0))?.ceil()))
        }
        "floor" => {
            check(1)?;
            Ok(number(want_num(name, v(0))?.floor()))
        }
        "contains" => {
            check(2)?;
            match v(0) {
                Value::Array(a) => Ok(Value::Bool(a.iter().any(|x| json_equal(x, v(1))))),
                Value::String(s) => match v(1) {
                    Value::String(sub) => Ok(Value::Bool(s.contains(sub.as_str()))),
                    _ => Ok(Value::Bool(false)),
                },
                other => err(format!(
                    "invalid type for contains(): expected array or string, got {}",
                    type_name(other)
                )),
            }
        }
        "ends_with" => {
            check(2)?;
            Ok(Value::Bool(
                want_str(name, v(0))?.ends_with(want_str(name, v(1))?),
            ))
        }
        "starts_with" => {
            check(2)?;
            Ok(Value::Bool(
                want_str(name, v(0))?.starts_with(want_str(name, v(1))?),
            ))
        }
        "join" => {
            check(2)?;
            let sep = want_str(name, v(0))?;
            let parts: Result<Vec<&str>, _> = want_arr(name, v(1))?
                .iter()
                .map(|x| want_str(name, x))
                .collect();
            Ok(Value::String(parts?.join(sep)))
        }
        "keys" => {
            check(1)?;
            Ok(Value::Array(
                want_obj(name, v(0))?
                    .keys()
                    .map(|k| Value::String(k.clone()))
                    .collect(),
            ))
        }
        "values" => {
            check(1)?;
            Ok(Value::Array(
                want_obj(name, v(0))?.values().cloned().collect(),
            ))
        }
        "length" => {
            check(1)?;
            let len = match v(0) {
                Value::String(s) => s.chars().count(),
                Value::Array(a) => a.len(),
                Value::Object(o) => o.len(),
                other => {
                    return err(format!(
                        "invalid type for length(): got {}",
                        type_name(other)
                    ));
                }
            };
            Ok(Value::from(len))
        }
        "max" | "min" => {
            check(1)?;
            let a = want_arr(name, v(0))?;
            let mut best: Option<&Value> = None;
            for x in a {
                let better = match best {
                    None => true,
                    Some(b) => {
                        let ord = order(name, x, b)?;
                        if name == "max" {
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
        "merge" => {
            let mut out = Map::new();
            for x in &vals {
                for (k, val) in want_obj(name, x)? {
                    out.insert(k.clone(), val.clone());
                }
            }
            Ok(Value::Object(out))
        }
        "not_null" => Ok(vals
            .iter()
            .find(|x| !x.is_null())
            .map(|x| x.clone().into_owned())
            .unwrap_or(Value::Null)),
        "reverse" => {
            check(1)?;
            match v(0) {
                Value::String(s) => Ok(Value::String(s.chars().rev().collect())),
                Value::Array(a) => Ok(Value::Array(a.iter().rev().cloned().collect())),
                other => err(format!(
                    "invalid type for reverse(): got {}",
                    type_name(other)
                )),
            }
        }
        "sort" => {
            check(1)?;
            let mut a = want_arr(name, v(0))?.clone();
            let mut failure = None;
            a.sort_by(|x, y| {
                order(name, x, y).unwrap_or_else(|e| {
                    failure = Some(e);
                    Ordering::Equal
                })
            });
            match failure {
                Some(e) => Err(e),
                None => Ok(Value::Array(a)),
            }
        }
        "sum" => {
            check(1)?;
            let a = want_arr(name, v(0))?;
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
        "to_array" => {
            check(1)?;
            Ok(match v(0) {
                Value::Array(_) => v(0).clone(),
                other => Value::Array(vec![other.clone()]),
            })
        }
        "to_string" => {
            check(1)?;
            Ok(match v(0) {
                Value::String(_) => v(0).clone(),
                other => Value::String(serde_json::to_string(other).unwrap_or_default()),
            })
        }
        "to_number" => {
            check(1)?;
            Ok(match v(0) {
                Value::Number(_) => v(0).clone(),
                Value::String(s) => s.trim().parse::<f64>().map(number).unwrap_or(Value::Null),
                _ => Value::Null,
            })
        }
        "type" => {
            check(1)?;
            Ok(Value::String(type_name(v(0)).into()))
        }
        // ---- Kyverno: strings ----
        "compare" => {
            check(2)?;
            let (a, b) = (want_str(name, v(0))?, want_str(name, v(1))?);
            Ok(Value::from(match a.cmp(b) {
                Ordering::Less => -1,
                Ordering::Equal => 0,
                Ordering::Greater => 1,
            }))
        }
        "equal_fold" => {
            check(2)?;
            Ok(Value::Bool(
                want_str(name, v(0))?.to_lowercase() == want_str(name, v(1))?.to_lowercase(),
            ))
        }
        "replace" => {
            check(4)?;
            let (s, old, new) = (
                want_str(name, v(0))?,
                want_str(name, v(1))?,
                want_str(name, v(2))?,
            );
            let count = want_num(name, v(3))?;
            Ok(Value::String(if count < 0.0 {
                s.replace(old, new)
            } else {
                s.replacen(old, new, count as usize)
            }))
        }
        "replace_all" => {
            check(3)?;
            Ok(Value::String(
                want_str(name, v(0))?.replace(want_str(name, v(1))?, want_str(name, v(2))?),
            ))
        }
        "to_upper" => {
            check(1)?;
            Ok(Value::String(want_str(name, v(0))?.to_uppercase()))
        }
        "to_lower" => {
            check(1)?;
            Ok(Value::String(want_str(name, v(0))?.to_lowercase()))
        }
        "trim" => {
            check(2)?;
            let cutset: Vec<char> = want_str(name, v(1))?.chars().collect();
            Ok(Value::String(
                want_str(name, v(0))?
                    .trim_matches(|c| cutset.contains(&c))
                    .to_string(),
            ))
        }
        "trim_prefix" => {
            check(2)?;
            let s = want_str(name, v(0))?;
            Ok(Value::String(
                s.strip_prefix(want_str(name, v(1))?)
                    .unwrap_or(s)
                    .to_string(),
            ))
        }
        "split" => {
            check(2)?;
            let (s, sep) = (want_str(name, v(0))?, want_str(name, v(1))?);
            let parts: Vec<Value> = if sep.is_empty() {
                s.chars().map(|c| Value::String(c.to_string())).collect()
            } else {
                s.split(sep).map(|p| Value::String(p.to_string())).collect()
            };
            Ok(Value::Array(parts))
        }
        "truncate" => {
            check(2)?;
            let s = want_str(name, v(0))?;
            let n = want_num(name, v(1))?;
            Ok(Value::String(if n <= 0.0 {
                String::new()
            } else {
                s.chars().take(n as usize).collect()
            }))
        }
        "path_canonicalize" => {
            check(1)?;
            Ok(Value::String(clean_path(want_str(name, v(0))?)))
        }
        // ---- Kyverno: regex and wildcards ----
        "regex_match" => {
            check(2)?;
            let re = regex(want_str(name, v(0))?)?;
            Ok(Value::Bool(re.is_match(&str_or_num(name, v(1))?)))
        }
        "regex_replace_all" | "regex_replace_all_literal" => {
            check(3)?;
            let re = regex(want_str(name, v(0))?)?;
            let src = str_or_num(name, v(1))?;
            let repl = str_or_num(name, v(2))?;
            Ok(Value::String(if name == "regex_replace_all" {
                re.replace_all(&src, go_expand_template(&repl).as_str())
                    .into_owned()
            } else {
                re.replace_all(&src, regex::NoExpand(&repl)).into_owned()
            }))
        }
        "pattern_match" => {
            check(2)?;
            Ok(Value::Bool(crate::wildcard::matches(
                want_str(name, v(0))?,
                &str_or_num(name, v(1))?,
            )))
        }
        "label_match" => {
            check(2)?;
            let (sel, labels) = (want_obj(name, v(0))?, want_obj(name, v(1))?);
            Ok(Value::Bool(sel.iter().all(|(k, val)| {
                labels.get(k).is_some_and(|l| json_equal(l, val))
            })))
        }
        "to_boolean" => {
            check(1)?;
            match want_str(name, v(0))?.to_lowercase().as_str() {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                other => err(format!(
                    "to_boolean(): cannot convert {other:?} to a boolean"
                )),
            }
        }
        // ---- Kyverno: arithmetic ----
        "add" | "subtract" | "multiply" | "divide" | "modulo" => {
            check(2)?;
            arithmetic(name, v(0), v(1))
        }
        "round" => {
            check(2)?;
            let x = want_num(name, v(0))?;
            let digits = want_num(name, v(1))?;
            if digits < 0.0 || digits.fract() != 0.0 {
                return err("round(): digits must be a non-negative integer");
            }
            let scale = 10f64.powi(digits as i32);
            Ok(number((x * scale).round() / scale))
        }
        // ---- Kyverno: encoding and parsing ----
        "base64_decode" => {
            check(1)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(want_str(name, v(0))?)
                .map_err(|e| JmesError::Runtime(format!("base64_decode(): {e}")))?;
            Ok(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        }
        "base64_encode" => {
            check(1)?;
            Ok(Value::String(
                base64::engine::general_purpose::STANDARD.encode(want_str(name, v(0))?),
            ))
        }
        "parse_json" => {
            check(1)?;
            serde_json::from_str(want_str(name, v(0))?)
                .map_err(|e| JmesError::Runtime(format!("parse_json(): {e}")))
        }
        "parse_yaml" => {
            check(1)?;
            serde_saphyr::from_str::<Value>(want_str(name, v(0))?)
                .map_err(|e| JmesError::Runtime(format!("parse_yaml(): {e}")))
        }
        // ---- Kyverno: data shaping ----
        "lookup" => {
            check(2)?;
            match (v(0), v(1)) {
                (Value::Object(m), Value::String(k)) => {
                    Ok(m.get(k).cloned().unwrap_or(Value::Null))
                }
                (Value::Array(a), Value::Number(n)) => {
                    let f = n.as_f64().unwrap_or(-1.0);
                    if f.fract() != 0.0 {
                        return err("lookup(): index must be an integer");
                    }
                    Ok(if f < 0.0 {
                        Value::Null
                    } else {
                        a.get(f as usize).cloned().unwrap_or(Value::Null)
                    })
                }
                (c, k) => err(format!(
                    "lookup(): cannot look up {} in {}",
                    type_name(k),
                    type_name(c)
                )),
            }
        }
        "items" => {
            check(3)?;
            let (kn, vn) = (want_str(name, v(1))?, want_str(name, v(2))?);
            let pair = |k: Value, val: Value| {
                let mut m = Map::new();
                m.insert(kn.to_string(), k);
                m.insert(vn.to_string(), val);
                Value::Object(m)
            };
            match v(0) {
                Value::Object(m) => {
                    let mut keys: Vec<&String> = m.keys().collect();
                    keys.sort();
                    Ok(Value::Array(
                        keys.into_iter()
                            .map(|k| pair(Value::String(k.clone()), m[k].clone()))
                            .collect(),
                    ))
                }
                Value::Array(a) => Ok(Value::Array(
                    a.iter()
                        .enumerate()
                        .map(|(i, x)| pair(Value::from(i), x.clone()))
                        .collect(),
                )),
                other => err(format!(
                    "invalid type for items(): got {}",
                    type_name(other)
                )),
            }
        }
        "object_from_lists" => {
            check(2)?;
            let (keys, values) = (want_arr(name, v(0))?, want_arr(name, v(1))?);
            let mut m = Map::new();
            for (i, k) in keys.iter().enumerate() {
                m.insert(go_sprint(k), values.get(i).cloned().unwrap_or(Value::Null));
            }
            Ok(Value::Object(m))
        }
        "semver_compare" => {
            check(2)?;
            crate::units::semver::matches(want_str(name, v(0))?, want_str(name, v(1))?)
                .map(Value::Bool)
                .map_err(JmesError::Runtime)
        }
        // ---- Kyverno: hashes (hex digests) ----
        "md5" | "sha1" | "sha256" => {
            check(1)?;
            let input = want_str(name, v(0))?.as_bytes();
            let digest: Vec<u8> = match name {
                "md5" => md5::Md5::digest(input).to_vec(),
                "sha1" => sha1::Sha1::digest(input).to_vec(),
                _ => sha2::Sha256::digest(input).to_vec(),
            };
            Ok(Value::String(
                digest.iter().map(|b| format!("{b:02x}")).collect(),
            ))
        }
        // ---- Kyverno: time ----
        "time_now" | "time_now_utc" => {
            check(0)?;
            Ok(Value::String(Instant::now().to_string()))
        }
        "time_since" => {
            check(3)?;
            let layout = want_str(name, v(0))?;
            let parse = |t: &str| {
                if layout.is_empty() {
                    Instant::parse_rfc3339(t)
                } else {
                    Instant::parse_layout(layout, t)
                }
            };
            let t1 = parse(want_str(name, v(1))?).ok_or_else(|| {
                JmesError::Runtime(format!("time_since(): cannot parse {}", v(1)))
            })?;
            let t2 = match want_str(name, v(2))? {
                "" => Instant::now(),
                t => parse(t).ok_or_else(|| {
                    JmesError::Runtime(format!("time_since(): cannot parse {t:?}"))
                })?,
            };
            Ok(Value::String(t2.since(t1).to_string()))
        }
        "time_add" => {
            check(2)?;
            let d = Duration::parse(want_str(name, v(1))?)
                .ok_or_else(|| JmesError::Runtime("time_add(): invalid duration".into()))?;
            Ok(Value::String(rfc3339(name, v(0))?.plus(d).to_string()))
        }
        "time_parse" => {
            check(2)?;
            let (layout, value) = (want_str(name, v(0))?, want_str(name, v(1))?);
            let t = if layout.parse::<i64>().is_ok() {
                value.parse::<i64>().ok().map(Instant::from_unix_seconds)
            } else {
                Instant::parse_layout(layout, value)
            };
            t.map(|t| Value::String(t.to_string())).ok_or_else(|| {
                JmesError::Runtime(format!(
                    "time_parse(): {value:?} does not match layout {layout:?}"
                ))
            })
        }
        "time_to_cron" => {
            check(1)?;
            Ok(Value::String(rfc3339(name, v(0))?.to_cron()))
        }
        "time_utc" => {
            check(1)?;
            Ok(Value::String(rfc3339(name, v(0))?.utc().to_string()))
        }
        "time_diff" => {
            check(2)?;
            Ok(Value::String(
                rfc3339(name, v(1))?.since(rfc3339(name, v(0))?).to_string(),
            ))
        }
        "time_before" | "time_after" => {
            check(2)?;
            let (a, b) = (rfc3339(name, v(0))?, rfc3339(name, v(1))?);
            Ok(Value::Bool(if name == "time_before" {
                a.nanos < b.nanos
            } else {
                a.nanos > b.nanos
            }))
        }
        "time_between" => {
            check(3)?;
            let (t, start, end) = (
                rfc3339(name, v(0))?,
                rfc3339(name, v(1))?,
                rfc3339(name, v(2))?,
            );
            Ok(Value::Bool(start.nanos < t.nanos && t.nanos < end.nanos))
        }
        "time_truncate" => {
            check(2)?;
            let d = Duration::parse(want_str(name, v(1))?)
                .ok_or_else(|| JmesError::Runtime("time_truncate(): invalid duration".into()))?;
            Ok(Value::String(rfc3339(name, v(0))?.truncate(d).to_string()))
        }
        _ => {
            let _ = n;
            err(format!("unsupported: JMESPath function {name}()"))
        }
    }
}

fn rfc3339(name: &str, v: &Value) -> Result<Instant, JmesError> {
    let s = want_str(name, v)?;
    Instant::parse_rfc3339(s)
        .ok_or_else(|| JmesError::Runtime(format!("{name}(): {s:?} is not an RFC 3339 time")))
}

fn call_with_expref(name: &str, args: &[Ast], cur: Val<'_>, eval: Evaluate) -> R {
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

/// An operand of Kyverno's arithmetic functions.
#[derive(Debug, Clone, Copy)]
enum Operand {
    Number(f64),
    Quantity(Quantity),
    Duration(Duration),
}

fn operand(name: &str, v: &Value) -> Result<Operand, JmesError> {
    match v {
        Value::Number(n) => Ok(Operand::Number(n.as_f64().unwrap_or(0.0))),
        // kyverno-compat: strings are tried as a quantity first, then as a duration.
        Value::String(s) => {
            if let Some(q) = Quantity::parse(s) {
                Ok(Operand::Quantity(q))
            } else if let Some(d) = Duration::parse(s) {
                Ok(Operand::Duration(d))
            } else {
                err(format!(
                    "{name}(): {s:?} is neither a number, a quantity nor a duration"
                ))
            }
        }
        other => err(format!(
            "invalid type for {name}(): got {}",
            type_name(other)
        )),
    }
}

fn arithmetic(name: &str, a: &Value, b: &Value) -> R {
    use Operand::{Duration as D, Number, Quantity as Q};
    let (x, y) = (operand(name, a)?, operand(name, b)?);
    let q = |q: Quantity| Value::String(q.to_string());
    let d = |ns: f64| Value::String(Duration(ns.round() as i128).to_string());
    let mismatch = || err(format!("{name}(): cannot combine {x:?} and {y:?}"));
    let nonzero = |v: f64| {
        if v == 0.0 {
            err(format!("{name}(): division by zero"))
        } else {
            Ok(v)
        }
    };
    match name {
        "add" | "subtract" => {
            let sign = if name == "add" { 1.0 } else { -1.0 };
            match (x, y) {
                (Number(a), Number(b)) => Ok(number(a + sign * b)),
                (Q(a), Q(b)) => Ok(q(a.with_value(a.value + sign * b.value))),
                (Q(a), Number(b)) => Ok(q(a.with_value(a.value + sign * b))),
                (Number(a), Q(b)) => Ok(q(b.with_value(a + sign * b.value))),
                (D(a), D(b)) => Ok(d(a.0 as f64 + sign * b.0 as f64)),
                (D(a), Number(b)) => Ok(d(a.0 as f64 + sign * b * 1e9)),
                (Number(a), D(b)) => Ok(d(a * 1e9 + sign * b.0 as f64)),
                _ => mismatch(),
            }
        }
        "multiply" => match (x, y) {
            (Number(a), Number(b)) => Ok(number(a * b)),
            (Q(a), Number(b)) | (Number(b), Q(a)) => Ok(q(a.with_value(a.value * b))),
            (D(a), Number(b)) | (Number(b), D(a)) => Ok(d(a.0 as f64 * b)),
            _ => mismatch(),
        },
        "divide" => match (x, y) {
            (Number(a), Number(b)) => Ok(number(a / nonzero(b)?)),
            (Q(a), Q(b)) => Ok(number(a.value / nonzero(b.value)?)),
            (Q(a), Number(b)) => Ok(q(a.with_value(a.value / nonzero(b)?))),
            (D(a), D(b)) => Ok(number(a.0 as f64 / nonzero(b.0 as f64)?)),
            (D(a), Number(b)) => Ok(d(a.0 as f64 / nonzero(b)?)),
            _ => mismatch(),
        },
        _ => {
            let int = |v: f64| {
                if v.fract() != 0.0 {
                    err(format!("{name}(): operands must be integers"))
                } else {
                    Ok(v)
                }
            };
            match (x, y) {
                (Number(a), Number(b)) => Ok(number(int(a)? % nonzero(int(b)?)?)),
                (Q(a), Q(b)) => Ok(q(a.with_value(int(a.value)? % nonzero(int(b.value)?)?))),
                (D(a), D(b)) => Ok(d((a.0 % b.0.max(1)) as f64)),
                _ => mismatch(),
            }
        }
    }
}
