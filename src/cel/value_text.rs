//! Values as cel-go names and prints them (`type(x)`, `string(x)`, and `%s`
//! in `format`), where its text is Go's and not the cel crate's.

use kube_cel::cel::Value;
use kube_cel::cel::objects::OptionalValue;

/// A double as cel-go converts it to a string: Go's `%g` with the
/// shortest digits that read back as the same double, in exponent form
/// below 1e-4 and from 1e6 (`strconv.FormatFloat(d, 'g', -1, 64)`).
pub(super) fn double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    // Rust's `{:e}` gives the shortest digits: `1.23456789e8`.
    let text = format!("{d:e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..6).contains(&exponent) {
        // Rust's `Display` is the shortest digits without an exponent.
        return d.to_string();
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
}

/// A duration as cel-go converts it to a string: its seconds, in as many
/// digits as they need, and `s`.
pub(super) fn duration(d: &chrono::Duration) -> String {
    let seconds = d.num_seconds() as f64 + f64::from(d.subsec_nanos()) / 1e9;
    format!("{seconds}s")
}

/// A timestamp as cel-go converts it to a string: Go's `time.RFC3339Nano`
/// in the timestamp's own offset (`Z` for UTC), with no trailing zeros.
pub(super) fn timestamp(t: &chrono::DateTime<chrono::FixedOffset>) -> String {
    let mut out = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = t.timestamp_subsec_nanos();
    if nanos > 0 {
        let digits = format!("{nanos:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    if t.offset().local_minus_utc() == 0 {
        out.push('Z');
    } else {
        out.push_str(&t.format("%:z").to_string());
    }
    out
}

/// What marks a string as a CEL type value: the interpreter has no type
/// values, so a type is a string no object field can hold by accident.
pub(super) const TYPE_MARK: &str = "\u{1}type:";

/// The name of the type a string stands for, if it stands for one
/// ([`super::library::type_value`]).
pub(super) fn type_named(s: &str) -> Option<&str> {
    s.strip_prefix(TYPE_MARK)
}

/// cel-go's name of a value's type (`type(x)`, and format's errors). A
/// type value is a marked string ([`super::library::type_value`]).
pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null_type",
        Value::Int(_) => "int",
        Value::UInt(_) => "uint",
        Value::Float(_) => "double",
        Value::Bool(_) => "bool",
        Value::String(s) if type_named(s).is_some() => "type",
        Value::String(_) => "string",
        Value::Bytes(_) => "bytes",
        Value::List(_) => "list",
        Value::Map(_) => "map",
        Value::Duration(_) => "google.protobuf.Duration",
        Value::Timestamp(_) => "google.protobuf.Timestamp",
        _ if <&OptionalValue>::try_from(v).is_ok() => "optional_type",
        _ => "dyn",
    }
}
