//! Go `time.Duration` parsing and formatting (`1h30m`, `250ms`, `-1.5s`).

/// A duration in nanoseconds, as Go's `time.Duration`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Duration(pub i128);

const NS: i128 = 1;
const US: i128 = 1_000;
const MS: i128 = 1_000_000;
const SEC: i128 = 1_000_000_000;
const MIN: i128 = 60 * SEC;
const HOUR: i128 = 60 * MIN;

impl Duration {
    /// Parses Go's duration syntax; `None` when `s` is not a duration.
    pub fn parse(s: &str) -> Option<Duration> {
        let (neg, mut rest) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        if rest == "0" {
            return Some(Duration(0));
        }
        if rest.is_empty() {
            return None;
        }
        let mut total: f64 = 0.0;
        while !rest.is_empty() {
            let num_len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            if num_len == 0 {
                return None;
            }
            let num_text = &rest[..num_len];
            if num_text == "." {
                return None;
            }
            let num: f64 = num_text.parse().ok()?;
            rest = &rest[num_len..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(rest.len());
            let unit = match &rest[..unit_len] {
                "ns" => NS,
                "us" | "µs" | "μs" => US,
                "ms" => MS,
                "s" => SEC,
                "m" => MIN,
                "h" => HOUR,
                _ => return None,
            };
            rest = &rest[unit_len..];
            total += num * unit as f64;
        }
        let ns = total.round() as i128;
        Some(Duration(if neg { -ns } else { ns }))
    }

    pub fn from_seconds(s: f64) -> Duration {
        Duration((s * SEC as f64).round() as i128)
    }

    pub fn seconds(self) -> f64 {
        self.0 as f64 / SEC as f64
    }
}

impl std::fmt::Display for Duration {
    /// Go's `Duration.String()`: `1h0m5s`, `1.5s`, `250ms`, `0s`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let neg = self.0 < 0;
        let mut u = self.0.unsigned_abs();
        let sign = if neg { "-" } else { "" };
        if u < SEC as u128 {
            if u == 0 {
                return write!(f, "0s");
            }
            let (unit, scale) = if u < US as u128 {
                ("ns", 1u128)
            } else if u < MS as u128 {
                ("µs", US as u128)
            } else {
                ("ms", MS as u128)
            };
            return write!(f, "{sign}{}{unit}", frac(u, scale));
        }
        let hours = u / HOUR as u128;
        u -= hours * HOUR as u128;
        let mins = u / MIN as u128;
        u -= mins * MIN as u128;
        let secs = frac(u, SEC as u128);
        if hours > 0 {
            write!(f, "{sign}{hours}h{mins}m{secs}s")
        } else if mins > 0 {
            write!(f, "{sign}{mins}m{secs}s")
        } else {
            write!(f, "{sign}{secs}s")
        }
    }
}

/// `value / scale` as a decimal with trailing zeros trimmed.
fn frac(value: u128, scale: u128) -> String {
    let whole = value / scale;
    let rem = value % scale;
    if rem == 0 {
        return whole.to_string();
    }
    let digits = scale.ilog10() as usize;
    let s = format!("{rem:0digits$}");
    format!("{whole}.{}", s.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format() {
        for (text, ns, shown) in [
            ("1h", HOUR, "1h0m0s"),
            ("1h0m5s", HOUR + 5 * SEC, "1h0m5s"),
            ("1.5s", 1_500 * MS, "1.5s"),
            ("250ms", 250 * MS, "250ms"),
            ("-2m", -2 * MIN, "-2m0s"),
            ("0", 0, "0s"),
            ("90m", 90 * MIN, "1h30m0s"),
        ] {
            let d = Duration::parse(text).unwrap();
            assert_eq!(d.0, ns, "{text}");
            assert_eq!(d.to_string(), shown, "{text}");
        }
        for bad in ["", "1", "h", "1x", "abc", "1.2.3s"] {
            assert!(Duration::parse(bad).is_none(), "{bad}");
        }
    }
}
