//! Timestamps and durations: their conversions, arithmetic and order, with
//! cel-go's ranges. A duration is Go's `time.Duration` (int64 nanoseconds,
//! about 292 years either way), a timestamp lies in the years 1 to 9999,
//! and an operation whose result falls outside is an error. The
//! interpreter's wider `chrono` types answered there (a timestamp minus
//! one 9,998 years before it), and it has no `duration + timestamp`.
//!
//! The values stay the interpreter's ([`Val::Foreign`]): a function this
//! module lacks (`getFullYear`) hands the expression over as before.

use super::value::{Fail, Time, Val};
use crate::cel::library::{duration_nanos, timestamp_in_range};
use chrono::{DateTime, FixedOffset};
use kube_cel::cel::Value as CelValue;
use std::sync::Arc;

/// A timestamp as a value; cel-go's error outside its range.
pub fn timestamp(t: DateTime<FixedOffset>) -> Result<Val<'static>, Fail> {
    if !timestamp_in_range(&t) {
        return Err(Fail::error("timestamp out of range"));
    }
    Ok(Val::Foreign(Arc::new(CelValue::Timestamp(t))))
}

/// A duration of `nanos` as a value.
pub fn duration(nanos: i64) -> Val<'static> {
    Val::Foreign(Arc::new(CelValue::Duration(chrono::Duration::nanoseconds(
        nanos,
    ))))
}

fn overflow() -> Fail {
    Fail::error("integer overflow")
}

/// `t + nanos`, in range.
fn shifted(t: DateTime<FixedOffset>, nanos: i64) -> Result<Val<'static>, Fail> {
    let t = t
        .checked_add_signed(chrono::Duration::nanoseconds(nanos))
        .ok_or_else(|| Fail::error("timestamp out of range"))?;
    timestamp(t)
}

/// Nanoseconds since the Unix epoch (a timestamp's range fits an i128).
fn nanos_since_epoch(t: &DateTime<FixedOffset>) -> i128 {
    i128::from(t.timestamp()) * 1_000_000_000 + i128::from(t.timestamp_subsec_nanos())
}

/// `l + r` of times: `None` when neither pairing is one (the caller's
/// other cases, or the interpreter's).
pub fn add(l: &Val, r: &Val) -> Option<Result<Val<'static>, Fail>> {
    Some(match (l.time()?, r.time()?) {
        (Time::Span(a), Time::Span(b)) => a.checked_add(b).map(duration).ok_or_else(overflow),
        (Time::At(t), Time::Span(d)) | (Time::Span(d), Time::At(t)) => shifted(t, d),
        (Time::At(_), Time::At(_)) => return None,
    })
}

/// `l - r` of times, as [`add`].
pub fn sub(l: &Val, r: &Val) -> Option<Result<Val<'static>, Fail>> {
    Some(match (l.time()?, r.time()?) {
        (Time::Span(a), Time::Span(b)) => a.checked_sub(b).map(duration).ok_or_else(overflow),
        (Time::At(t), Time::Span(d)) => d
            .checked_neg()
            .ok_or_else(overflow)
            .and_then(|d| shifted(t, d)),
        (Time::At(a), Time::At(b)) => i64::try_from(nanos_since_epoch(&a) - nanos_since_epoch(&b))
            .map(duration)
            .map_err(|_| overflow()),
        (Time::Span(_), Time::At(_)) => return None,
    })
}

/// `timestamp(x)`: an RFC 3339 string, Unix seconds, or a timestamp. A
/// string that does not parse is the interpreter's to report (its words).
pub fn timestamp_of(v: &Val) -> Result<Val<'static>, Fail> {
    match v {
        Val::Str(s) => {
            let t = DateTime::parse_from_rfc3339(s.as_str()).map_err(|_| Fail::Interpreter)?;
            timestamp(t)
        }
        Val::Int(seconds) => {
            let t = DateTime::from_timestamp(*seconds, 0)
                .ok_or_else(|| Fail::error("timestamp out of range"))?;
            timestamp(t.fixed_offset())
        }
        Val::Foreign(f) if matches!(**f, CelValue::Timestamp(_)) => Ok(Val::Foreign(f.clone())),
        _ => Err(Fail::Interpreter),
    }
}

/// `duration(x)`: a string in Go's syntax, or a duration.
pub fn duration_of(v: &Val) -> Result<Val<'static>, Fail> {
    match v {
        Val::Str(s) => duration_nanos(s.as_str())
            .map(duration)
            .ok_or(Fail::Interpreter),
        Val::Foreign(f) if matches!(**f, CelValue::Duration(_)) => Ok(Val::Foreign(f.clone())),
        _ => Err(Fail::Interpreter),
    }
}

/// `string(x)` of a timestamp or duration, as cel-go prints them.
pub fn text_of(v: &Val) -> Option<String> {
    match v {
        Val::Foreign(f) => match &**f {
            CelValue::Timestamp(t) => Some(crate::cel::value_text::timestamp(t)),
            CelValue::Duration(d) => Some(crate::cel::value_text::duration(d)),
            _ => None,
        },
        _ => None,
    }
}

/// `int(x)` of a timestamp: its Unix seconds.
pub fn seconds_of(v: &Val) -> Option<i64> {
    match v.time()? {
        Time::At(t) => Some(t.timestamp()),
        Time::Span(_) => None,
    }
}
