//! cel-go's type conversions (`int()`, `string()`, `duration()`,
//! `timestamp()`, `type()`, ...) and the bit operations, with its errors.

use crate::cel::value_text;
use kube_cel::cel::extractors::This;
use kube_cel::cel::{ExecutionError, FunctionContext, ResolveResult, Value};
use std::sync::Arc;

/// `math.bitAnd`/`bitOr`/`bitXor` as cel-go has them: of two ints or two
/// uints, the same type back.
pub(super) fn bitwise(args: &[Value], op: fn(u64, u64) -> u64) -> ResolveResult {
    match args {
        [Value::Int(a), Value::Int(b)] => Ok(Value::Int(op(*a as u64, *b as u64) as i64)),
        [Value::UInt(a), Value::UInt(b)] => Ok(Value::UInt(op(*a, *b))),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

pub(super) fn bit_not(value: Value) -> ResolveResult {
    match value {
        Value::Int(v) => Ok(Value::Int(!v)),
        Value::UInt(v) => Ok(Value::UInt(!v)),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

/// `math.bitShiftLeft`/`bitShiftRight` as cel-go has them: an int or a
/// uint shifted by an int; a negative shift fails, one past 63 gives 0,
/// and an int shifts right as its unsigned bits (no sign extension).
pub(super) fn shift(args: &[Value], left: bool) -> ResolveResult {
    let name = if left {
        "math.bitShiftLeft"
    } else {
        "math.bitShiftRight"
    };
    let (bits, by) = match args {
        [Value::Int(v), Value::Int(by)] => (*v as u64, *by),
        [Value::UInt(v), Value::Int(by)] => (*v, *by),
        _ => return Err(ExecutionError::NoSuchOverload),
    };
    if by < 0 {
        return Err(ExecutionError::function_error(
            name,
            format!("{name}() negative offset: {by}"),
        ));
    }
    let shifted = match (by > 63, left) {
        (true, _) => 0,
        (false, true) => bits << by,
        (false, false) => bits >> by,
    };
    Ok(match args[0] {
        Value::Int(_) => Value::Int(shifted as i64),
        _ => Value::UInt(shifted),
    })
}

/// `dyn(x)`: a type-checker hint; the interpreter is dynamic already.
pub(super) fn dyn_value(v: Value) -> ResolveResult {
    Ok(v)
}

/// The type names a policy may compare `type(x)` with; each is rewritten
/// at compile time to [`type_value`] of itself.
pub const TYPE_NAMES: &[&str] = &[
    "null_type",
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "type",
    "optional_type",
];

/// The value standing for a CEL type: the interpreter has no type values,
/// so a type is a string no object field can hold by accident.
pub fn type_value(name: &str) -> String {
    format!("{}{name}", value_text::TYPE_MARK)
}

/// `type(x)`: the value of `x`'s type, comparable with a type name.
pub(super) fn type_of(v: Value) -> ResolveResult {
    Ok(Value::String(Arc::new(type_value(value_text::type_name(
        &v,
    )))))
}

/// `string(x)`: the interpreter's conversion, with cel-go's text where the
/// interpreter lacks it or differs: `string(bool)`, a timestamp as RFC 3339
/// in its own offset, a duration in seconds (`"1000000s"`, `"1.5s"`), a
/// double as Go's `%g` (`"1e+21"`).
pub(super) fn string_of(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    match this {
        Value::Bool(b) => Ok(Value::String(Arc::new(b.to_string()))),
        Value::Timestamp(t) => Ok(Value::String(Arc::new(value_text::timestamp(&t)))),
        Value::Duration(d) => Ok(Value::String(Arc::new(value_text::duration(&d)))),
        Value::Float(d) => Ok(Value::String(Arc::new(value_text::double(d)))),
        Value::Bytes(b) => match std::str::from_utf8(&b) {
            Ok(s) => Ok(Value::String(Arc::new(s.to_string()))),
            Err(_) => Err(ftx.error("invalid UTF-8 in bytes, cannot convert to string")),
        },
        other => kube_cel::cel::functions::string(ftx, This(other)),
    }
}

/// 2^63 as a double.
pub(super) const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;

/// `int(x)`: the interpreter's conversion, plus a timestamp's Unix
/// seconds, and a double outside int's range an error (the interpreter
/// saturates at the ends), as the CEL spec has them.
pub(super) fn int_of(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    match this {
        Value::Timestamp(t) => Ok(Value::Int(t.timestamp())),
        // Both ends are 2^63 exactly: i64::MAX is not a double.
        Value::Float(v) if !(v > -TWO_TO_63 && v < TWO_TO_63) => Err(ftx.error("integer overflow")),
        other => kube_cel::cel::functions::int(ftx, This(other)),
    }
}

/// `duration(x)`: a duration, or a string in Go's syntax, strictly (the
/// cel crate accepted trailing text, `4h-x`), with cel-go's error.
pub(super) fn duration_of(This(this): This<Value>) -> ResolveResult {
    let conversion_error = || {
        ExecutionError::function_error(
            "",
            "type conversion error from 'string' to 'google.protobuf.Duration'",
        )
    };
    match this {
        Value::Duration(d) => Ok(Value::Duration(d)),
        Value::String(s) => {
            let ns = duration_nanos(&s).ok_or_else(conversion_error)?;
            Ok(Value::Duration(chrono::Duration::nanoseconds(ns)))
        }
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

/// A duration's text in Go's syntax as nanoseconds, in the range of Go's
/// `time.Duration` (int64), which cel-go's durations have; `None` for
/// anything else. The interpreter's `duration()` and the direct
/// evaluator's read it alike.
pub(crate) fn duration_nanos(text: &str) -> Option<i64> {
    crate::units::duration::Duration::parse(text).and_then(|d| i64::try_from(d.0).ok())
}

/// cel-go's range of timestamps: 0001-01-01T00:00:00Z to
/// 9999-12-31T23:59:59.999999999Z, in Unix seconds.
pub(super) const TIMESTAMP_SECONDS: std::ops::RangeInclusive<i64> =
    -62_135_596_800..=253_402_300_799;

/// Whether `t` is in cel-go's range of timestamps (the years 1 to 9999).
pub(crate) fn timestamp_in_range(t: &chrono::DateTime<chrono::FixedOffset>) -> bool {
    TIMESTAMP_SECONDS.contains(&t.timestamp())
}

/// `timestamp(x)`: an RFC 3339 string, Unix seconds or a timestamp, in
/// cel-go's range of years (1 to 9999), with its error outside it.
pub(super) fn timestamp_of(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    let t = match this {
        Value::Timestamp(t) => t,
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(&s)
            .map_err(|e| ftx.error(format!("timestamp: {e}")))?,
        Value::Int(seconds) => chrono::DateTime::from_timestamp(seconds, 0)
            .ok_or_else(|| ftx.error("timestamp out of range"))?
            .fixed_offset(),
        _ => return Err(ExecutionError::NoSuchOverload),
    };
    if !timestamp_in_range(&t) {
        return Err(ftx.error("timestamp out of range"));
    }
    Ok(Value::Timestamp(t))
}

/// `bytes(x)`: a string's UTF-8, or bytes as they are.
pub(super) fn bytes_of(This(this): This<Value>) -> ResolveResult {
    match this {
        Value::Bytes(b) => Ok(Value::Bytes(b)),
        Value::String(s) => Ok(Value::Bytes(Arc::new(s.as_bytes().to_vec()))),
        _ => Err(ExecutionError::NoSuchOverload),
    }
}

/// `bool(x)`: a bool, or the spellings of one the CEL spec accepts in a
/// string ("true", "t", "1", "TRUE", "True", and the same for false).
pub(super) fn bool_of(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    match this {
        Value::Bool(b) => Ok(Value::Bool(b)),
        Value::String(s) => match s.as_str() {
            "1" | "t" | "true" | "TRUE" | "True" => Ok(Value::Bool(true)),
            "0" | "f" | "false" | "FALSE" | "False" => Ok(Value::Bool(false)),
            other => Err(ftx.error(format!(
                "type conversion error from 'string' to 'bool': {other:?}"
            ))),
        },
        other => Err(ftx.error(format!("cannot convert {other:?} to bool"))),
    }
}
