//! Kyverno's arithmetic: `add`, `subtract`, `multiply`, `divide` and
//! `modulo` over numbers, Kubernetes quantities and durations, and
//! `round`.

use super::{Args, R, err, type_name, want_num};
use crate::jmespath::JmesError;
use crate::jmespath::value::number;
use crate::units::{Duration, Quantity};
use serde_json::Value;

pub(super) fn operation(args: &Args) -> R {
    args.check(2)?;
    arithmetic(args.name, args.v(0), args.v(1))
}

pub(super) fn round(args: &Args) -> R {
    args.check(2)?;
    let x = want_num(args.name, args.v(0))?;
    let digits = want_num(args.name, args.v(1))?;
    if digits < 0.0 || digits.fract() != 0.0 {
        return err("round(): digits must be a non-negative integer");
    }
    let scale = 10f64.powi(digits as i32);
    Ok(number((x * scale).round() / scale))
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

pub(super) fn arithmetic(name: &str, a: &Value, b: &Value) -> R {
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
