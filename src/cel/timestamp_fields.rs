//! A timestamp's calendar and clock fields (`getFullYear`, `getMonth`,
//! `getDayOfYear`, `getDayOfMonth`, `getDate`, `getDayOfWeek`, `getHours`,
//! `getMinutes`, `getSeconds`, `getMilliseconds`), as cel-go reads them:
//! in UTC, or in the time zone the argument names
//! (`getHours('America/New_York')`, `getHours('+05:30')`).
//!
//! The cel crate reads them in the offset the timestamp was written with
//! (`timestamp('2023-01-01T10:00:00+05:00').getHours()` is 10 there, 5 in
//! cel-go) and takes no time zone. Zone names come from the IANA database
//! bundled into the binary (jiff's `tzdb-bundle-always`), so a name
//! resolves the same on every image; cel-go reads the machine's
//! (`time.LoadLocation`), and `Local` is its machine's zone, which for a
//! container is UTC, as here.
//!
//! A duration's `getHours`, `getMinutes`, `getSeconds` and
//! `getMilliseconds` stay the cel crate's.

use chrono::{DateTime, Datelike, FixedOffset, Timelike};
use kube_cel::cel::extractors::{Arguments, This};
use kube_cel::cel::functions::time as crate_time;
use kube_cel::cel::{ExecutionError, FunctionContext, ResolveResult, Value};

/// One field of a timestamp.
#[derive(Clone, Copy)]
pub(super) enum Field {
    FullYear,
    /// 0-11.
    Month,
    /// 0-365.
    DayOfYear,
    /// 0-30.
    DayOfMonth,
    /// 1-31.
    Date,
    /// 0 (Sunday) to 6.
    DayOfWeek,
    Hours,
    Minutes,
    Seconds,
    Milliseconds,
}

impl Field {
    pub(super) const ALL: [(&'static str, Field); 10] = [
        ("getFullYear", Field::FullYear),
        ("getMonth", Field::Month),
        ("getDayOfYear", Field::DayOfYear),
        ("getDayOfMonth", Field::DayOfMonth),
        ("getDate", Field::Date),
        ("getDayOfWeek", Field::DayOfWeek),
        ("getHours", Field::Hours),
        ("getMinutes", Field::Minutes),
        ("getSeconds", Field::Seconds),
        ("getMilliseconds", Field::Milliseconds),
    ];

    fn of(self, t: &DateTime<FixedOffset>) -> i64 {
        i64::from(match self {
            Field::FullYear => t.year(),
            Field::Month => t.month0() as i32,
            Field::DayOfYear => t.ordinal0() as i32,
            Field::DayOfMonth => t.day0() as i32,
            Field::Date => t.day() as i32,
            Field::DayOfWeek => t.weekday().num_days_from_sunday() as i32,
            Field::Hours => t.hour() as i32,
            Field::Minutes => t.minute() as i32,
            Field::Seconds => t.second() as i32,
            Field::Milliseconds => (t.timestamp_subsec_millis() % 1000) as i32,
        })
    }

    /// The function for this field.
    pub(super) fn function(
        self,
    ) -> impl Fn(&FunctionContext, This<Value>, Arguments) -> ResolveResult + Send + Sync + 'static
    {
        move |ftx: &FunctionContext, This(this): This<Value>, Arguments(args): Arguments| match (
            this,
            args.as_slice(),
        ) {
            (Value::Timestamp(t), []) => Ok(Value::Int(self.of(&t.with_timezone(&UTC)))),
            (Value::Timestamp(t), [Value::String(zone)]) => {
                let offset = offset_in(zone, &t).map_err(|e| ftx.error(e))?;
                Ok(Value::Int(self.of(&t.with_timezone(&offset))))
            }
            (duration @ Value::Duration(_), []) => match self {
                Field::Hours => crate_time::get_hours(This(duration)),
                Field::Minutes => crate_time::get_minutes(This(duration)),
                Field::Seconds => crate_time::get_seconds(This(duration)),
                Field::Milliseconds => crate_time::get_milliseconds(This(duration)),
                _ => Err(ExecutionError::NoSuchOverload),
            },
            _ => Err(ExecutionError::NoSuchOverload),
        }
    }
}

const UTC: FixedOffset = match FixedOffset::east_opt(0) {
    Some(utc) => utc,
    None => unreachable!(),
};

/// The offset from UTC of the zone `zone` names at the instant `t`, as
/// cel-go reads the name: with a `:`, a numeric offset (`+05:30`,
/// `-02:30`, `02:00`); else a zone of the IANA database (`UTC`,
/// `Australia/Sydney`), with Go's error for an unknown one.
fn offset_in(zone: &str, t: &DateTime<FixedOffset>) -> Result<FixedOffset, String> {
    if let Some((hours, minutes)) = zone.split_once(':') {
        let number = |s: &str| {
            go_atoi(s).ok_or_else(|| format!("strconv.Atoi: parsing {s:?}: invalid syntax"))
        };
        let (hours, minutes) = (number(hours)?, number(minutes)?);
        // cel-go: the minutes take the sign of the text, not of the hours
        // (`-00:30` is half an hour west).
        let total = if zone.starts_with('-') {
            hours * 60 - minutes
        } else {
            hours * 60 + minutes
        };
        return i32::try_from(total * 60)
            .ok()
            .and_then(FixedOffset::east_opt)
            .ok_or_else(|| format!("time zone offset out of range: {zone}"));
    }
    if zone.is_empty() || zone == "UTC" || zone == "Local" {
        return Ok(UTC);
    }
    let tz = jiff::tz::TimeZone::get(zone).map_err(|_| format!("unknown time zone {zone}"))?;
    let instant = jiff::Timestamp::new(t.timestamp(), 0)
        .map_err(|_| format!("timestamp out of range for time zone {zone}"))?;
    let seconds = tz.to_offset(instant).seconds();
    FixedOffset::east_opt(seconds).ok_or_else(|| format!("time zone offset out of range: {zone}"))
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits.
fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}
