//! Instants for Kyverno's time functions: RFC 3339 and Go reference-layout
//! parsing, RFC 3339 formatting, calendar arithmetic in UTC or a fixed offset.

use super::Duration;

const NANOS: i128 = 1_000_000_000;

/// An instant: nanoseconds since the Unix epoch, and the UTC offset it was written with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Instant {
    pub nanos: i128,
    pub offset_secs: i32,
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

#[derive(Default)]
struct Fields {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    nanos: i64,
    offset: i32,
    pm: Option<bool>,
}

impl Instant {
    pub fn now() -> Instant {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Instant {
            nanos: d.as_nanos() as i128,
            offset_secs: 0,
        }
    }

    pub fn from_unix_seconds(s: i64) -> Instant {
        Instant {
            nanos: s as i128 * NANOS,
            offset_secs: 0,
        }
    }

    pub fn parse_rfc3339(s: &str) -> Option<Instant> {
        Instant::parse_layout("2006-01-02T15:04:05.999999999Z07:00", s)
    }

    /// Parses `value` with a Go reference layout (`2006-01-02T15:04:05Z07:00`).
    pub fn parse_layout(layout: &str, value: &str) -> Option<Instant> {
        let mut f = Fields {
            year: 1,
            month: 1,
            day: 1,
            ..Default::default()
        };
        let (mut l, mut v) = (layout, value);
        let num = |v: &mut &str, min: usize, max: usize| -> Option<i64> {
            let len = v.bytes().take(max).take_while(u8::is_ascii_digit).count();
            if len < min {
                return None;
            }
            let n = v[..len].parse().ok()?;
            *v = &v[len..];
            Some(n)
        };
        while !l.is_empty() {
            let tokens: [(&str, u8); 25] = [
                ("January", 1),
                ("Jan", 2),
                ("Monday", 3),
                ("Mon", 4),
                ("2006", 5),
                ("Z07:00", 6),
                ("-07:00", 7),
                ("Z0700", 8),
                ("-0700", 9),
                ("MST", 10),
                ("01", 11),
                ("02", 12),
                ("_2", 13),
                ("15", 14),
                ("03", 15),
                ("04", 16),
                ("05", 17),
                ("06", 18),
                ("PM", 19),
                ("pm", 20),
                (".000", 21),
                (".999", 22),
                ("1", 23),
                ("2", 24),
                ("3", 25),
            ];
            let Some((tok, id)) = tokens.iter().find(|(t, _)| l.starts_with(t)).copied() else {
                let c = l.chars().next()?;
                if !v.starts_with(c) {
                    return None;
                }
                l = &l[c.len_utf8()..];
                v = &v[c.len_utf8()..];
                continue;
            };
            l = &l[tok.len()..];
            match id {
                1 | 2 => {
                    let names = MONTHS.iter().enumerate();
                    let (i, name) = names.clone().find(|(_, m)| {
                        if id == 1 {
                            v.starts_with(**m)
                        } else {
                            v.starts_with(&m[..3])
                        }
                    })?;
                    f.month = i as i64 + 1;
                    v = &v[if id == 1 { name.len() } else { 3 }..];
                }
                3 | 4 => {
                    let day = DAYS.iter().find(|d| {
                        if id == 3 {
                            v.starts_with(**d)
                        } else {
                            v.starts_with(&d[..3])
                        }
                    })?;
                    v = &v[if id == 3 { day.len() } else { 3 }..];
                }
                5 => f.year = num(&mut v, 4, 4)?,
                18 => f.year = 2000 + num(&mut v, 2, 2)?,
                6..=9 => {
                    if (id == 6 || id == 8) && v.starts_with('Z') {
                        v = &v[1..];
                        continue;
                    }
                    let sign = match v.as_bytes().first()? {
                        b'+' => 1,
                        b'-' => -1,
                        _ => return None,
                    };
                    v = &v[1..];
                    let h = num(&mut v, 2, 2)?;
                    if id == 6 || id == 7 {
                        v = v.strip_prefix(':')?;
                    }
                    let m = num(&mut v, 2, 2)?;
                    f.offset = sign * (h * 3600 + m * 60) as i32;
                }
                10 => {
                    let len = v.bytes().take_while(u8::is_ascii_uppercase).count();
                    v = &v[len..];
                }
                11 | 23 => f.month = num(&mut v, if id == 11 { 2 } else { 1 }, 2)?,
                12 | 24 => f.day = num(&mut v, if id == 12 { 2 } else { 1 }, 2)?,
                13 => {
                    v = v.trim_start_matches(' ');
                    f.day = num(&mut v, 1, 2)?;
                }
                14 => f.hour = num(&mut v, 2, 2)?,
                15 => f.hour = num(&mut v, 2, 2)?,
                25 => f.hour = num(&mut v, 1, 2)?,
                16 => f.minute = num(&mut v, 2, 2)?,
                17 => f.second = num(&mut v, 2, 2)?,
                19 | 20 => {
                    let up = v.get(..2)?.to_ascii_uppercase();
                    f.pm = Some(up == "PM");
                    v = &v[2..];
                }
                _ => {
                    // Fractional seconds: `.000` requires them, `.999` makes them optional.
                    l = l.trim_start_matches(['0', '9']);
                    if let Some(rest) = v.strip_prefix('.') {
                        let len = rest.bytes().take_while(u8::is_ascii_digit).count();
                        let digits = &rest[..len];
                        let padded = format!("{digits:0<9}");
                        f.nanos = padded[..9].parse().ok()?;
                        v = &rest[len..];
                    } else if id == 21 {
                        return None;
                    }
                }
            }
        }
        if !v.is_empty() {
            return None;
        }
        if let Some(pm) = f.pm {
            f.hour = f.hour % 12 + if pm { 12 } else { 0 };
        }
        if !(1..=12).contains(&f.month)
            || !(1..=31).contains(&f.day)
            || f.hour > 23
            || f.minute > 59
            || f.second > 60
        {
            return None;
        }
        let days = days_from_civil(f.year, f.month, f.day);
        let secs = days * 86400 + f.hour * 3600 + f.minute * 60 + f.second - f.offset as i64;
        Some(Instant {
            nanos: secs as i128 * NANOS + f.nanos as i128,
            offset_secs: f.offset,
        })
    }

    pub fn utc(self) -> Instant {
        Instant {
            offset_secs: 0,
            ..self
        }
    }

    pub fn plus(self, d: Duration) -> Instant {
        Instant {
            nanos: self.nanos + d.0,
            ..self
        }
    }

    pub fn since(self, earlier: Instant) -> Duration {
        Duration(self.nanos - earlier.nanos)
    }

    /// Rounds down to a multiple of `d` since the zero time, as Go's `Truncate`.
    pub fn truncate(self, d: Duration) -> Instant {
        if d.0 <= 0 {
            return self;
        }
        // Go measures from year 1; 62135596800 s separate it from the Unix epoch.
        let from_zero = self.nanos + 62_135_596_800 * NANOS;
        Instant {
            nanos: self.nanos - from_zero.rem_euclid(d.0),
            ..self
        }
    }

    fn local_fields(self) -> (i64, i64, i64, i64, i64, i64, i64, i64) {
        let local = self.nanos + self.offset_secs as i128 * NANOS;
        let secs = local.div_euclid(NANOS) as i64;
        let nanos = local.rem_euclid(NANOS) as i64;
        let days = secs.div_euclid(86400);
        let rem = secs.rem_euclid(86400);
        let (y, m, d) = civil_from_days(days);
        let weekday = (days + 4).rem_euclid(7);
        (
            y,
            m,
            d,
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            nanos,
            weekday,
        )
    }

    /// `"<minute> <hour> <day> <month> <weekday>"` in UTC.
    pub fn to_cron(self) -> String {
        let (_, m, d, h, min, _, _, wd) = self.utc().local_fields();
        format!("{min} {h} {d} {m} {wd}")
    }
}

impl std::fmt::Display for Instant {
    /// RFC 3339 with nanoseconds trimmed, as Go's `time.RFC3339` output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (y, m, d, h, min, s, _, _) = self.local_fields();
        write!(f, "{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}")?;
        if self.offset_secs == 0 {
            write!(f, "Z")
        } else {
            let sign = if self.offset_secs < 0 { '-' } else { '+' };
            let o = self.offset_secs.abs();
            write!(f, "{sign}{:02}:{:02}", o / 3600, o % 3600 / 60)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format() {
        let t = Instant::parse_rfc3339("2020-05-01T03:15:12-07:00").unwrap();
        assert_eq!(t.to_string(), "2020-05-01T03:15:12-07:00");
        assert_eq!(t.utc().to_string(), "2020-05-01T10:15:12Z");
        let u = Instant::parse_rfc3339("2020-05-01T10:15:12.5Z").unwrap();
        assert_eq!(u.since(t).to_string(), "500ms");
        assert_eq!(
            Instant::parse_layout("2006-01-02", "2021-03-04")
                .unwrap()
                .to_string(),
            "2021-03-04T00:00:00Z"
        );
        assert_eq!(
            Instant::parse_layout("Jan 2, 2006 at 3:04pm (MST)", "Feb 3, 2013 at 7:54pm (PST)")
                .unwrap()
                .to_string(),
            "2013-02-03T19:54:00Z"
        );
        assert_eq!(Instant::from_unix_seconds(0).to_cron(), "0 0 1 1 4");
        assert!(Instant::parse_rfc3339("not a time").is_none());
        let tr = Instant::parse_rfc3339("2021-01-01T10:37:12Z")
            .unwrap()
            .truncate(Duration::parse("1h").unwrap());
        assert_eq!(tr.to_string(), "2021-01-01T10:00:00Z");
    }
}
