//! `<string>.format(<list>)` as Kubernetes and Kyverno answer it.
//!
//! Both enable cel-go's strings extension at version 2
//! (`k8s.io/apiserver/pkg/cel/environment/base.go`, unchanged through
//! v0.37), whose `format` is cel-go's first formatter (`ext/formatting.go`,
//! the same in cel-go v0.29 and v0.30), in the `en_US` locale:
//! - `%s` of a list or map prints each item as a CEL literal: strings
//!   quoted (`["a", 3.140000]`), doubles with six decimals, timestamps and
//!   durations as `timestamp("...")` and `duration("...")`, map entries
//!   as `key:value` sorted by the key's text;
//! - `%f` groups thousands (`1,234.500000`), prints infinity as `∞` and
//!   drops the sign of zero; `%e` prints `1.052033 × 10⁰³` and reads its
//!   precision as a width (cel-go passes `%6e` to the printer);
//! - `%d`, `%f` and `%e` take only ints, doubles and doubles respectively.
//!
//! The google/cel-spec conformance file follows the strings extension at
//! version 4 and later (`[abc, 3.14]`, `%d` of a double); its format tests
//! that Kubernetes answers otherwise are listed in
//! `tests/data/cel-spec/kubernetes-answers.txt`, and `tests/cel_go.rs`
//! holds this module to cel-go itself, built at the version Kyverno pins.
//!
//! kube-cel's `format` follows the version 4 texts, so this replaces it.

use super::value_text;
use kube_cel::cel::extractors::{Arguments, This};
use kube_cel::cel::objects::Key;
use kube_cel::cel::{ExecutionError, FunctionContext, ResolveResult, Value};
use std::fmt::Write;
use std::sync::Arc;

/// The default precision of `%f` (and the width of `%e`), as cel-go's.
const DEFAULT_PRECISION: usize = 6;

/// The largest precision Go's `fmt` reads (`fmt.tooLarge`).
const MAX_PRECISION: usize = 1_000_000;

/// `<string>.format(<list>)`.
pub(super) fn format(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let (Value::String(template), [Value::List(items)]) = (&this, args.as_slice()) else {
        return Err(ExecutionError::NoSuchOverload);
    };
    interpolate(template, items)
        .map(|s| Value::String(Arc::new(s)))
        .map_err(|e| ftx.error(e))
}

/// A template's parts, as [`walk`] reads them.
enum Part<'t> {
    /// Plain text (`%%` is given as `%`).
    Text(&'t str),
    /// A clause and the index of the item it takes.
    Clause(usize, Clause),
}

/// Where cel-go finds an item missing: at run time before a template that
/// ends after its `%`; in its compile-time check, whose items never run
/// out, after.
#[derive(Clone, Copy, PartialEq)]
enum Order {
    RunTime,
    Checker,
}

/// cel-go's `parseFormatString`: the template byte by byte, `%%` a
/// percent sign, each other `%` the next of `items` items by the clause
/// after it. Returns how many clauses there are.
fn walk<'t>(
    template: &'t str,
    items: usize,
    order: Order,
    mut part: impl FnMut(Part<'t>) -> Result<(), String>,
) -> Result<usize, String> {
    let bytes = template.as_bytes();
    let mut next_item = 0;
    let mut i = 0;
    while i < bytes.len() {
        let Some(at) = template[i..].find('%').map(|at| i + at) else {
            part(Part::Text(&template[i..]))?;
            break;
        };
        part(Part::Text(&template[i..at]))?;
        if bytes.get(at + 1) == Some(&b'%') {
            part(Part::Text("%"))?;
            i = at + 2;
            continue;
        }
        let missing = next_item >= items;
        if missing && order == Order::RunTime {
            return Err(format!("index {next_item} out of range"));
        }
        if at + 1 >= bytes.len() {
            return Err("unexpected end of string".into());
        }
        if missing {
            return Err(format!("index {next_item} out of range"));
        }
        let (read, clause) = Clause::parse(&bytes[at + 1..])
            .map_err(|e| format!("could not parse formatting clause: {e}"))?;
        part(Part::Clause(next_item, clause))?;
        i = at + 1 + read;
        next_item += 1;
    }
    Ok(next_item)
}

fn interpolate(template: &str, items: &[Value]) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    walk(template, items.len(), Order::RunTime, |part| {
        match part {
            Part::Text(text) => out.push_str(text),
            Part::Clause(item, clause) => out.push_str(
                &clause
                    .apply(&items[item])
                    .map_err(|e| format!("error during formatting: {e}"))?,
            ),
        }
        Ok(())
    })?;
    Ok(out)
}

/// The compile-time check of a constant template given `items` items:
/// cel-go's reason it would fail whatever the items are, or too many of
/// them (which only this check finds: at run time extra items are
/// ignored).
pub(super) fn check_constant(template: &str, items: usize) -> Result<(), String> {
    let clauses = walk(template, items, Order::Checker, |_| Ok(()))?;
    if clauses < items {
        return Err(format!(
            "too many arguments supplied to string.format (expected {clauses}, got {items})"
        ));
    }
    Ok(())
}

/// One formatting clause: its verb and precision.
struct Clause {
    verb: u8,
    precision: Option<usize>,
}

impl Clause {
    /// The clause at the start of `rest` (after its `%`) and the bytes it
    /// takes, or cel-go's reason it is not one.
    fn parse(rest: &[u8]) -> Result<(usize, Clause), String> {
        let mut i = 0;
        let mut precision = None;
        if rest[0] == b'.' {
            i = 1;
            while i < rest.len() && rest[i].is_ascii_digit() {
                i += 1;
            }
            if i >= rest.len() {
                return Err(
                    "error while parsing precision: could not find end of precision specifier"
                        .into(),
                );
            }
            let digits = std::str::from_utf8(&rest[1..i]).unwrap_or_default();
            let parsed = digits.parse::<usize>().ok().filter(|p| *p <= MAX_PRECISION);
            match parsed {
                Some(p) => precision = Some(p),
                None if digits.is_empty() => {
                    return Err(
                        "error while parsing precision: error while converting precision \
                                to integer: strconv.Atoi: parsing \"\": invalid syntax"
                            .into(),
                    );
                }
                None => {
                    return Err(format!(
                        "unsupported: precision {digits} (above {MAX_PRECISION})"
                    ));
                }
            }
        }
        let verb = rest[i];
        match verb {
            b's' | b'd' | b'f' | b'e' | b'b' | b'x' | b'X' | b'o' => {
                Ok((i + 1, Clause { verb, precision }))
            }
            // Go reads the byte as a rune: the first byte of a multi-byte
            // character names a Latin-1 letter.
            other => Err(format!(
                "unrecognized formatting clause \"{}\"",
                other as char
            )),
        }
    }

    fn apply(&self, item: &Value) -> Result<String, String> {
        let precision = self.precision.unwrap_or(DEFAULT_PRECISION);
        match self.verb {
            b's' => string_text(item),
            b'd' => match item {
                Value::Int(i) => Ok(i.to_string()),
                Value::UInt(u) => Ok(u.to_string()),
                other => Err(format!(
                    "decimal clause can only be used on integers, was given {}",
                    value_text::type_name(other)
                )),
            },
            b'f' => double_operand(item)
                .map(|d| fixed_point(d, precision))
                .ok_or_else(|| {
                    format!(
                        "fixed-point clause can only be used on doubles, was given {}",
                        value_text::type_name(item)
                    )
                }),
            b'e' => double_operand(item)
                .map(|d| pad_left(scientific(d), precision))
                .ok_or_else(|| {
                    format!(
                        "scientific clause can only be used on doubles, was given {}",
                        value_text::type_name(item)
                    )
                }),
            b'b' => match item {
                Value::Int(i) => Ok(signed(*i, |u| format!("{u:b}"))),
                Value::UInt(u) => Ok(format!("{u:b}")),
                Value::Bool(b) => Ok(if *b { "1" } else { "0" }.into()),
                other => Err(format!(
                    "only integers and bools can be formatted as binary, was given {}",
                    value_text::type_name(other)
                )),
            },
            b'o' => match item {
                Value::Int(i) => Ok(signed(*i, |u| format!("{u:o}"))),
                Value::UInt(u) => Ok(format!("{u:o}")),
                other => Err(format!(
                    "octal clause can only be used on integers, was given {}",
                    value_text::type_name(other)
                )),
            },
            upper_or_lower => {
                let upper = upper_or_lower == b'X';
                let hex = |u: u64| {
                    if upper {
                        format!("{u:X}")
                    } else {
                        format!("{u:x}")
                    }
                };
                match item {
                    Value::Int(i) => Ok(signed(*i, hex)),
                    Value::UInt(u) => Ok(hex(*u)),
                    Value::String(s) if !is_type(s) => Ok(hex_bytes(s.as_bytes(), upper)),
                    Value::Bytes(b) => Ok(hex_bytes(b, upper)),
                    other => Err(format!(
                        "only integers, byte buffers, and strings can be formatted as hex, was \
                         given {}",
                        value_text::type_name(other)
                    )),
                }
            }
        }
    }
}

/// A signed integer as Go's `fmt` prints it in another base: the sign,
/// then the magnitude.
fn signed(i: i64, digits: impl Fn(u64) -> String) -> String {
    let magnitude = digits(i.unsigned_abs());
    if i < 0 {
        format!("-{magnitude}")
    } else {
        magnitude
    }
}

fn hex_bytes(bytes: &[u8], upper: bool) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = if upper {
            write!(out, "{b:02X}")
        } else {
            write!(out, "{b:02x}")
        };
    }
    out
}

/// What `%f` and `%e` take: a double, or the strings that name the
/// doubles with no digits.
fn double_operand(item: &Value) -> Option<f64> {
    match item {
        Value::Float(d) => Some(*d),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// `%.Nf` in `en_US` (golang.org/x/text's printer): thousands grouped,
/// `∞`, and no sign on zero.
fn fixed_point(d: f64, precision: usize) -> String {
    if let Some(special) = non_finite(d) {
        return special.into();
    }
    // Rust's fixed-point formatting rounds the exact binary value, ties to
    // even, as Go's does.
    let digits = format!("{:.*}", precision, d.abs());
    let (whole, fraction) = digits
        .split_once('.')
        .map_or((digits.as_str(), None), |(w, f)| (w, Some(f)));
    let mut out = String::with_capacity(digits.len() + whole.len() / 3 + 1);
    if d < 0.0 {
        out.push('-');
    }
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(fraction) = fraction {
        out.push('.');
        out.push_str(fraction);
    }
    out
}

/// `%e` in `en_US`: six decimals whatever the clause's precision, and a
/// power of ten written with superscripts (`1.052033 × 10⁰³`).
fn scientific(d: f64) -> String {
    if let Some(special) = non_finite(d) {
        return special.into();
    }
    let text = format!("{:.6e}", if d == 0.0 { 0.0 } else { d });
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let mut out = format!("{mantissa}\u{202f}×\u{202f}10");
    if exponent < 0 {
        out.push('⁻');
    }
    for digit in format!("{:02}", exponent.unsigned_abs()).bytes() {
        out.push(SUPERSCRIPTS[usize::from(digit - b'0')]);
    }
    out
}

const SUPERSCRIPTS: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];

fn non_finite(d: f64) -> Option<&'static str> {
    if d.is_nan() {
        Some("NaN")
    } else if d.is_infinite() {
        Some(if d > 0.0 { "∞" } else { "-∞" })
    } else {
        None
    }
}

/// `text` right-aligned in `width` characters.
fn pad_left(text: String, width: usize) -> String {
    let length = text.chars().count();
    if length >= width {
        return text;
    }
    format!("{}{text}", " ".repeat(width - length))
}

/// `%s`: cel-go's `FormatString`.
fn string_text(item: &Value) -> Result<String, String> {
    match item {
        Value::List(items) => list_literal(items),
        Value::Map(map) => map_literal(&map.map),
        Value::Int(i) => Ok(i.to_string()),
        Value::UInt(u) => Ok(u.to_string()),
        Value::Float(d) => Ok(value_text::double(*d)),
        Value::Bool(b) => Ok(b.to_string()),
        Value::String(s) => Ok(value_text::type_named(s).unwrap_or(s).to_string()),
        Value::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|_| {
            "could not convert argument \"invalid UTF-8 in bytes, cannot convert to string\" to \
             string"
                .into()
        }),
        Value::Timestamp(t) => Ok(value_text::timestamp(t)),
        Value::Duration(d) => Ok(value_text::duration(d)),
        Value::Null => Ok("null".into()),
        other => Err(format!(
            "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, \
             types, durations, and timestamps, was given {}",
            value_text::type_name(other)
        )),
    }
}

/// A list's item or a map's value inside `%s` (cel-go's `clauseForType`
/// and `quoteForCEL`): as a CEL literal.
fn literal(item: &Value) -> Result<String, String> {
    Ok(match item {
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::String(s) if is_type(s) => string_text(item)?,
        Value::String(s) => go_quote(s),
        Value::Bytes(_) => format!("b{}", go_quote(&string_text(item)?)),
        Value::Bool(_) | Value::Null => string_text(item)?,
        Value::Timestamp(t) => format!("timestamp({})", go_quote(&value_text::timestamp(t))),
        Value::Duration(d) => format!("duration({})", go_quote(&value_text::duration(d))),
        Value::List(items) => list_literal(items)?,
        Value::Map(map) => map_literal(&map.map)?,
        // Go's `%.6f`: `+Inf`, `-Inf` and `NaN`, quoted.
        Value::Float(d) if d.is_nan() => "\"NaN\"".into(),
        Value::Float(d) if d.is_infinite() => if *d > 0.0 { "\"+Inf\"" } else { "\"-Inf\"" }.into(),
        Value::Float(d) => format!("{d:.6}"),
        // cel-go's run-time text; for a list literal its compile-time check
        // names the string clause instead ("string clause can only be used
        // on ..."), from the type checker's types, which gavel does not
        // have.
        other => {
            return Err(format!(
                "no formatting function for {}",
                value_text::type_name(other)
            ));
        }
    })
}

fn list_literal(items: &[Value]) -> Result<String, String> {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&literal(item)?);
    }
    out.push(']');
    Ok(out)
}

/// `{key:value, ...}`, sorted by the key's text (so `"b"` comes before
/// `1`: the quote sorts first).
fn map_literal(map: &std::collections::HashMap<Key, Value>) -> Result<String, String> {
    let mut entries = Vec::with_capacity(map.len());
    for (key, value) in map {
        let key = match key {
            Key::String(s) => go_quote(s),
            Key::Bool(b) => b.to_string(),
            Key::Int(i) => i.to_string(),
            Key::Uint(u) => u.to_string(),
        };
        entries.push((key, literal(value)?));
    }
    entries.sort();
    let mut out = String::from("{");
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{key}:{value}");
    }
    out.push('}');
    Ok(out)
}

fn is_type(s: &str) -> bool {
    value_text::type_named(s).is_some()
}

/// Go's `strconv.Quote`: `"` and `\` escaped, control characters and the
/// characters Go does not print as `\x`, `\u` or `\U` escapes. Go's test
/// of printability is `unicode.IsPrint`; here it is approximated by
/// Rust's control and white space classes and the format characters
/// (unassigned code points, which Go escapes, are kept).
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c == ' ' || !(c.is_control() || c.is_whitespace() || is_format_char(c)) => {
                out.push(c)
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// Unicode's format characters (category Cf) that text may carry.
fn is_format_char(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}' | '\u{6dd}' | '\u{70f}' | '\u{180e}'
        | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

#[cfg(test)]
mod tests;
