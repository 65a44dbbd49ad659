//! Scalar patterns (docs/kyverno-semantics.md#scalar-patterns): `a | b`,
//! `>=1 & <10`, ranges `1-10` / `1!-10`, `!value`, wildcards, quantities and
//! durations. Compiled once: operators split and operands parsed at policy
//! compile time.

use crate::json_doc::{Kind, View};
use crate::units::{Duration, Quantity};
use crate::wildcard;
use serde_json::Value;
use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Equal,
    NotEqual,
    More,
    MoreEqual,
    Less,
    LessEqual,
}

/// A right-hand side: a number with an optional unit, or a string.
#[derive(Debug, Clone)]
struct Operand {
    text: String,
    /// Whether `text` holds `*` or `?`; without, a string compares by equality.
    wildcard: bool,
    numeric: bool,
    duration: Option<Duration>,
    quantity: Option<Quantity>,
}

impl Operand {
    fn new(text: &str) -> Operand {
        let text = text.trim().to_string();
        let numeric = text.starts_with(|c: char| c.is_ascii_digit());
        Operand {
            duration: if numeric {
                Duration::parse(&text)
            } else {
                None
            },
            quantity: if numeric {
                Quantity::parse(&text)
            } else {
                None
            },
            numeric,
            wildcard: wildcard::has_wildcard(&text),
            text,
        }
    }
}

#[derive(Debug, Clone)]
enum Atom {
    Compare(Op, Operand),
    Range {
        negated: bool,
        lo: Operand,
        hi: Operand,
    },
}

#[derive(Debug, Clone)]
pub struct StringPattern {
    raw: String,
    /// OR over alternatives, AND within one; each atom keeps its raw text for
    /// the exact-equality shortcut.
    alternatives: Vec<Vec<(String, Atom)>>,
}

/// A compiled scalar pattern.
#[derive(Debug, Clone)]
pub enum Scalar {
    Bool(bool),
    Number(f64),
    Null,
    /// A map pattern compared with a scalar position: only checks for a map.
    Object,
    /// Arrays are not scalar patterns: never match.
    Array,
    Str(StringPattern),
}

impl Scalar {
    pub fn compile(v: &Value) -> Scalar {
        match v {
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Number(n) => Scalar::Number(n.as_f64().unwrap_or(f64::NAN)),
            Value::Null => Scalar::Null,
            Value::Object(_) => Scalar::Object,
            Value::Array(_) => Scalar::Array,
            Value::String(s) => Scalar::Str(StringPattern::compile(s)),
        }
    }

    /// `pattern.Validate` in Kyverno.
    #[inline]
    pub fn matches<'r>(&self, value: impl View<'r>) -> bool {
        self.matches_kind(value.kind())
    }

    // Out of line, as in the builds measured with callgrind
    // (`evaluate/pss17`): the merged pattern walk is recursive, and what
    // is inlined into it is paid in the frame of every call.
    #[inline(never)]
    fn matches_kind(&self, value: Kind) -> bool {
        match self {
            Scalar::Bool(p) => value == Kind::Bool(*p),
            Scalar::Number(p) => match value {
                Kind::Str(s) => s.parse::<f64>().ok() == Some(*p),
                number => number.as_f64() == Some(*p),
            },
            Scalar::Null => match value {
                Kind::Null => true,
                Kind::Str(s) => s.is_empty(),
                Kind::Bool(b) => !b,
                number => number.as_f64() == Some(0.0),
            },
            Scalar::Object => matches!(value, Kind::Object(_)),
            Scalar::Array => false,
            Scalar::Str(p) => p.matches(value),
        }
    }
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

impl Atom {
    fn compile(atom: &str) -> Atom {
        let (op, operand) = if let Some(r) = atom.strip_prefix(">=") {
            (Op::MoreEqual, r)
        } else if let Some(r) = atom.strip_prefix("<=") {
            (Op::LessEqual, r)
        } else if let Some(r) = atom.strip_prefix('>') {
            (Op::More, r)
        } else if let Some(r) = atom.strip_prefix('<') {
            (Op::Less, r)
        } else if let Some(r) = atom
            .strip_prefix('!')
            .filter(|_| parse_range(atom).is_none())
        {
            (Op::NotEqual, r)
        } else {
            (Op::Equal, atom)
        };
        if op == Op::Equal
            && let Some((negated, lo, hi)) = parse_range(atom)
        {
            return Atom::Range {
                negated,
                lo: Operand::new(lo),
                hi: Operand::new(hi),
            };
        }
        Atom::Compare(op, Operand::new(operand))
    }

    fn matches(&self, value: Kind) -> bool {
        match self {
            Atom::Compare(op, operand) => compare(value, operand, *op),
            Atom::Range {
                negated: false,
                lo,
                hi,
            } => compare(value, lo, Op::MoreEqual) && compare(value, hi, Op::LessEqual),
            Atom::Range {
                negated: true,
                lo,
                hi,
            } => compare(value, lo, Op::Less) || compare(value, hi, Op::More),
        }
    }
}

impl StringPattern {
    pub fn compile(raw: &str) -> StringPattern {
        StringPattern {
            raw: raw.to_string(),
            alternatives: raw
                .split('|')
                .map(|alt| {
                    alt.trim()
                        .split('&')
                        .map(|a| (a.trim().to_string(), Atom::compile(a.trim())))
                        .collect()
                })
                .collect(),
        }
    }

    fn matches(&self, value: Kind) -> bool {
        if value.as_str() == Some(self.raw.as_str()) {
            return true;
        }
        self.alternatives.iter().any(|alt| {
            alt.iter()
                .all(|(raw, atom)| value.as_str() == Some(raw.as_str()) || atom.matches(value))
        })
    }
}

fn compare(value: Kind, operand: &Operand, op: Op) -> bool {
    if operand.numeric {
        number_compare(value, operand, op)
    } else {
        string_compare(value, operand, op)
    }
}

/// Go's `%E` formatting, used when a number meets a wildcard pattern.
fn go_float_e(f: f64) -> String {
    if f == 0.0 {
        return "0E+00".into();
    }
    let s = format!("{f:E}");
    let (mant, exp) = s.split_once('E').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    format!("{mant}E{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

fn string_compare(value: Kind, operand: &Operand, op: Op) -> bool {
    if op != Op::Equal && op != Op::NotEqual {
        return false;
    }
    let pattern = operand.text.as_str();
    let matched = match value {
        Kind::Str(s) if !operand.wildcard => pattern == s,
        Kind::Bool(b) if !operand.wildcard => pattern == if b { "true" } else { "false" },
        Kind::Str(s) => wildcard::matches(pattern, s),
        Kind::Bool(b) => wildcard::matches(pattern, if b { "true" } else { "false" }),
        Kind::I64(_) | Kind::U64(_) | Kind::F64(_) => {
            wildcard::matches(pattern, &go_float_e(value.as_f64().unwrap_or(0.0)))
        }
        Kind::Null | Kind::Array(_) | Kind::Object(_) => return false,
    };
    if op == Op::NotEqual {
        !matched
    } else {
        matched
    }
}

fn number_compare(value: Kind, operand: &Operand, op: Op) -> bool {
    let owned;
    let text = match value {
        Kind::Null => "0",
        // An integer prints exactly as `%.6f` and such text never parses
        // as a duration (no unit), so compare it as a quantity directly.
        Kind::I64(_) | Kind::U64(_) => {
            let Some(p) = operand.quantity else {
                return string_compare(value, operand, op);
            };
            return order_holds(value.as_f64().unwrap_or(0.0).partial_cmp(&p.value), op);
        }
        Kind::F64(f) => {
            owned = format!("{f:.6}");
            owned.as_str()
        }
        Kind::Str(s) => s,
        Kind::Bool(_) => return string_compare(value, operand, op),
        Kind::Array(_) | Kind::Object(_) => return false,
    };
    let ord = if let (Some(p), Some(v)) = (operand.duration, Duration::parse(text)) {
        v.0.partial_cmp(&p.0)
    } else if let (Some(p), Some(v)) = (operand.quantity, Quantity::parse(text)) {
        v.value.partial_cmp(&p.value)
    } else {
        return string_compare(value, operand, op);
    };
    order_holds(ord, op)
}

fn order_holds(ord: Option<Ordering>, op: Op) -> bool {
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
