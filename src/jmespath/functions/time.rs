//! Kyverno's time functions over RFC 3339 times and Go durations:
//! `time_now`, `time_since`, `time_add`, `time_parse` (Go layouts),
//! `time_to_cron`, `time_utc`, `time_diff`, comparisons and truncation.

use super::{Args, R, want_str};
use crate::jmespath::JmesError;
use crate::units::Duration;
use crate::units::time::Instant;
use serde_json::Value;

pub(super) fn now(args: &Args) -> R {
    args.check(0)?;
    Ok(Value::String(Instant::now().to_string()))
}

pub(super) fn since(args: &Args) -> R {
    args.check(3)?;
    let layout = want_str(args.name, args.v(0))?;
    let parse = |t: &str| {
        if layout.is_empty() {
            Instant::parse_rfc3339(t)
        } else {
            Instant::parse_layout(layout, t)
        }
    };
    let t1 = parse(want_str(args.name, args.v(1))?)
        .ok_or_else(|| JmesError::Runtime(format!("time_since(): cannot parse {}", args.v(1))))?;
    let t2 = match want_str(args.name, args.v(2))? {
        "" => Instant::now(),
        t => parse(t)
            .ok_or_else(|| JmesError::Runtime(format!("time_since(): cannot parse {t:?}")))?,
    };
    Ok(Value::String(t2.since(t1).to_string()))
}

pub(super) fn add(args: &Args) -> R {
    args.check(2)?;
    let d = Duration::parse(want_str(args.name, args.v(1))?)
        .ok_or_else(|| JmesError::Runtime("time_add(): invalid duration".into()))?;
    Ok(Value::String(
        rfc3339(args.name, args.v(0))?.plus(d).to_string(),
    ))
}

pub(super) fn parse(args: &Args) -> R {
    args.check(2)?;
    let (layout, value) = (
        want_str(args.name, args.v(0))?,
        want_str(args.name, args.v(1))?,
    );
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

pub(super) fn to_cron(args: &Args) -> R {
    args.check(1)?;
    Ok(Value::String(rfc3339(args.name, args.v(0))?.to_cron()))
}

pub(super) fn utc(args: &Args) -> R {
    args.check(1)?;
    Ok(Value::String(
        rfc3339(args.name, args.v(0))?.utc().to_string(),
    ))
}

pub(super) fn diff(args: &Args) -> R {
    args.check(2)?;
    Ok(Value::String(
        rfc3339(args.name, args.v(1))?
            .since(rfc3339(args.name, args.v(0))?)
            .to_string(),
    ))
}

pub(super) fn before_or_after(args: &Args) -> R {
    args.check(2)?;
    let (a, b) = (
        rfc3339(args.name, args.v(0))?,
        rfc3339(args.name, args.v(1))?,
    );
    Ok(Value::Bool(if args.name == "time_before" {
        a.nanos < b.nanos
    } else {
        a.nanos > b.nanos
    }))
}

pub(super) fn between(args: &Args) -> R {
    args.check(3)?;
    let (t, start, end) = (
        rfc3339(args.name, args.v(0))?,
        rfc3339(args.name, args.v(1))?,
        rfc3339(args.name, args.v(2))?,
    );
    Ok(Value::Bool(start.nanos < t.nanos && t.nanos < end.nanos))
}

pub(super) fn truncate(args: &Args) -> R {
    args.check(2)?;
    let d = Duration::parse(want_str(args.name, args.v(1))?)
        .ok_or_else(|| JmesError::Runtime("time_truncate(): invalid duration".into()))?;
    Ok(Value::String(
        rfc3339(args.name, args.v(0))?.truncate(d).to_string(),
    ))
}

fn rfc3339(name: &str, v: &Value) -> Result<Instant, JmesError> {
    let s = want_str(name, v)?;
    Instant::parse_rfc3339(s)
        .ok_or_else(|| JmesError::Runtime(format!("{name}(): {s:?} is not an RFC 3339 time")))
}
