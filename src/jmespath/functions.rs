//! JMESPath functions: the standard library plus Kyverno's custom functions
//! (strings, regex, wildcard, arithmetic with quantities and durations,
//! encoding, semver, and data shaping). Unknown functions are errors.
//!
//! This file owns the dispatch from a function's name to its family, the
//! arity and argument type checks, and Go's rendering of values; each
//! family is a file below: `standard` (JMESPath's own), `strings`,
//! `arithmetic`, `encoding`, `shaping` and `time` (Kyverno's).

mod arithmetic;
mod certificates;
mod encoding;
mod generated;
mod shaping;
mod standard;
mod strings;
mod time;

use super::JmesError;
use super::parser::Ast;
use super::value::{Eval, Val};
use crate::json_doc::{Kind, View};
use serde_json::{Map, Value};
use std::borrow::Cow;

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

/// Go's `fmt.Sprint` of a decoded JSON value (numbers are float64 in Go),
/// in either representation.
pub fn go_sprint<'r>(v: impl View<'r>) -> String {
    let mut out = String::new();
    write_go_sprint(v, &mut out);
    out
}

/// [`go_sprint`], appended to `out` (nested values print into one buffer).
pub fn write_go_sprint<'r>(v: impl View<'r>, out: &mut String) {
    use std::fmt::Write;
    match v.kind() {
        Kind::Null => out.push_str("<nil>"),
        Kind::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        Kind::Str(s) => out.push_str(s),
        Kind::Array(_) => {
            out.push('[');
            for (i, e) in v.elements().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_go_sprint(e, out);
            }
            out.push(']');
        }
        // Go prints a map's keys sorted; `entries` gives them so.
        Kind::Object(_) => {
            out.push_str("map[");
            for (i, (k, e)) in v.entries().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_go_sprint(e, out);
            }
            out.push(']');
        }
        number => {
            let f = number.as_f64().unwrap_or(0.0);
            let _ = if f.fract() == 0.0 && f.abs() < 1e21 {
                write!(out, "{}", f as i128)
            } else {
                write!(out, "{f}")
            };
        }
    }
}

/// How a function evaluates its arguments: the interpreter's `eval`,
/// handed in so that the functions do not import the interpreter that
/// calls them.
pub type Evaluate = for<'a> fn(&'a Ast, Val<'a>) -> Eval<'a>;

/// The evaluated arguments of one call, and the function's name for its
/// error messages.
struct Args<'a> {
    name: &'a str,
    args: &'a [Ast],
    vals: Vec<Cow<'a, Value>>,
}

impl Args<'_> {
    /// Fails unless the call has `want` arguments.
    fn check(&self, want: usize) -> Result<(), JmesError> {
        arity(self.name, self.args, want)
    }

    /// The value of argument `i`.
    fn v(&self, i: usize) -> &Value {
        &self.vals[i]
    }
}

/// Calls function `name` with unevaluated `args` against the current node.
pub fn call<'a>(name: &str, args: &'a [Ast], cur: Val<'a>, eval: Evaluate) -> R {
    // Functions that take expression references evaluate them per element.
    match name {
        "sort_by" | "max_by" | "min_by" | "map" => {
            return standard::call_with_expref(name, args, cur, eval);
        }
        _ => {}
    }
    let mut vals: Vec<Cow<'a, Value>> = Vec::with_capacity(args.len());
    for a in args {
        if let Ast::ExpRef(_) = a {
            return err(format!("{name}() does not take an expression reference"));
        }
        let v = eval(a, cur.clone()).map_err(|e| *e)?;
        // A function that reads only the shape of a document's value
        // answers where it lies: the value is not turned into JSON.
        if let (Val::Doc(j), [_]) = (&v, args)
            && let Some(result) = standard::shape_of_doc(name, *j)
        {
            return result;
        }
        vals.push(v.into_cow());
    }
    let args = Args { name, args, vals };
    match name {
        // ---- JMESPath standard library ----
        "abs" => standard::abs(&args),
        "avg" => standard::avg(&args),
        "ceil" => standard::ceil(&args),
        "floor" => standard::floor(&args),
        "contains" => standard::contains(&args),
        "ends_with" => standard::ends_with(&args),
        "starts_with" => standard::starts_with(&args),
        "join" => standard::join(&args),
        "keys" => standard::keys(&args),
        "values" => standard::values(&args),
        "length" => standard::length(&args),
        "max" | "min" => standard::max_or_min(&args),
        "merge" => standard::merge(&args),
        "not_null" => standard::not_null(&args),
        "reverse" => standard::reverse(&args),
        "sort" => standard::sort(&args),
        "sum" => standard::sum(&args),
        "to_array" => standard::to_array(&args),
        "to_string" => standard::to_string(&args),
        "to_number" => standard::to_number(&args),
        "type" => standard::type_of(&args),
        // ---- Kyverno: strings ----
        "compare" => strings::compare(&args),
        "equal_fold" => strings::equal_fold(&args),
        "replace" => strings::replace(&args),
        "replace_all" => strings::replace_all(&args),
        "to_upper" => strings::to_upper(&args),
        "to_lower" => strings::to_lower(&args),
        "trim" => strings::trim(&args),
        "trim_prefix" => strings::trim_prefix(&args),
        "split" => strings::split(&args),
        "truncate" => strings::truncate(&args),
        "path_canonicalize" => strings::path_canonicalize(&args),
        // ---- Kyverno: regex, wildcards, labels and semver ----
        "regex_match" => strings::regex_match(&args),
        "regex_replace_all" | "regex_replace_all_literal" => strings::regex_replace_all(&args),
        "pattern_match" => strings::pattern_match(&args),
        "label_match" => strings::label_match(&args),
        "to_boolean" => strings::to_boolean(&args),
        "semver_compare" => strings::semver_compare(&args),
        // ---- Kyverno: arithmetic ----
        "add" | "subtract" | "multiply" | "divide" | "modulo" => arithmetic::operation(&args),
        "round" => arithmetic::round(&args),
        // ---- Kyverno: encoding and parsing ----
        "base64_decode" => encoding::base64_decode(&args),
        "base64_encode" => encoding::base64_encode(&args),
        "parse_json" => encoding::parse_json(&args),
        "parse_yaml" => encoding::parse_yaml(&args),
        "x509_decode" => certificates::x509_decode(&args),
        "image_normalize" => generated::image_normalize(&args),
        "random" => generated::random(&args),
        // ---- Kyverno: data shaping ----
        "lookup" => shaping::lookup(&args),
        "items" => shaping::items(&args),
        "object_from_lists" => shaping::object_from_lists(&args),
        // ---- Kyverno: hashes (hex digests) ----
        "md5" | "sha1" | "sha256" => encoding::digest(&args),
        // ---- Kyverno: time ----
        "time_now" | "time_now_utc" => time::now(&args),
        "time_since" => time::since(&args),
        "time_add" => time::add(&args),
        "time_parse" => time::parse(&args),
        "time_to_cron" => time::to_cron(&args),
        "time_utc" => time::utc(&args),
        "time_diff" => time::diff(&args),
        "time_before" | "time_after" => time::before_or_after(&args),
        "time_between" => time::between(&args),
        "time_truncate" => time::truncate(&args),
        _ => err(format!("unsupported: JMESPath function {name}()")),
    }
}
