//! Semantic versions and blang/semver range expressions, as used by
//! Kyverno's `semver_compare` and the ordering condition operators.

use std::cmp::Ordering;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<String>,
}

impl Version {
    /// Strict `MAJOR.MINOR.PATCH[-pre][+build]`.
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.trim();
        let s = s.split_once('+').map_or(s, |(v, _)| v);
        let (core, pre) = match s.split_once('-') {
            Some((c, p)) => (c, p.split('.').map(str::to_string).collect()),
            None => (s, Vec::new()),
        };
        let mut parts = core.split('.');
        let num = |p: Option<&str>| -> Option<u64> {
            let p = p?;
            if p.is_empty()
                || (p.len() > 1 && p.starts_with('0'))
                || !p.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            p.parse().ok()
        };
        let v = Version {
            major: num(parts.next())?,
            minor: num(parts.next())?,
            patch: num(parts.next())?,
            pre,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(v)
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Version {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(o.major, o.minor, o.patch))
            .then_with(|| match (self.pre.is_empty(), o.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&o.pre) {
                        let ord = match (a.parse::<u64>(), b.parse::<u64>()) {
                            (Ok(x), Ok(y)) => x.cmp(&y),
                            (Ok(_), Err(_)) => Ordering::Less,
                            (Err(_), Ok(_)) => Ordering::Greater,
                            _ => a.cmp(b),
                        };
                        if ord != Ordering::Equal {
                            return ord;
                        }
                    }
                    self.pre.len().cmp(&o.pre.len())
                }
            })
    }
}

/// Whether `version` satisfies `range` (`>=1.2.0 <2.0.0 || 3.x`).
pub fn matches(version: &str, range: &str) -> Result<bool, String> {
    let v = Version::parse(version).unwrap_or(Version {
        major: 0,
        minor: 0,
        patch: 0,
        pre: vec![],
    });
    for alternative in range.split("||") {
        let mut all = true;
        let mut any_part = false;
        for part in alternative.split_whitespace() {
            any_part = true;
            if !part_matches(&v, part)? {
                all = false;
            }
        }
        if !any_part {
            return Err(format!("invalid semver range {range:?}"));
        }
        if all {
            return Ok(true);
        }
    }
    Ok(false)
}

fn part_matches(v: &Version, part: &str) -> Result<bool, String> {
    let ops = [">=", "<=", "!=", "==", ">", "<", "=", "!"];
    let (op, rest) = ops
        .iter()
        .find_map(|op| part.strip_prefix(op).map(|r| (*op, r)))
        .unwrap_or(("=", part));
    let bad = || format!("invalid semver range part {part:?}");
    // Wildcards: 1.x, 1.2.x, x
    let fields: Vec<&str> = rest.split('.').collect();
    let wildcard_at = fields
        .iter()
        .position(|f| *f == "x" || *f == "X" || *f == "*");
    if let Some(pos) = wildcard_at {
        let nums: Vec<u64> = fields[..pos]
            .iter()
            .map(|f| f.parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        let lower = Version {
            major: *nums.first().unwrap_or(&0),
            minor: *nums.get(1).unwrap_or(&0),
            patch: 0,
            pre: vec![],
        };
        let upper = match pos {
            0 => None,
            1 => Some(Version {
                major: lower.major + 1,
                minor: 0,
                patch: 0,
                pre: vec![],
            }),
            _ => Some(Version {
                major: lower.major,
                minor: lower.minor + 1,
                patch: 0,
                pre: vec![],
            }),
        };
        let within = *v >= lower && upper.as_ref().is_none_or(|u| v < u);
        return Ok(match op {
            "=" | "==" => within,
            "!=" | "!" => !within,
            ">" => upper.as_ref().is_some_and(|u| v >= u),
            ">=" => *v >= lower,
            "<" => *v < lower,
            "<=" => upper.as_ref().is_none_or(|u| v < u),
            _ => return Err(bad()),
        });
    }
    let target = Version::parse(rest).ok_or_else(bad)?;
    Ok(match op {
        "=" | "==" => *v == target,
        "!=" | "!" => *v != target,
        ">" => *v > target,
        ">=" => *v >= target,
        "<" => *v < target,
        _ => *v <= target,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        for (v, r, want) in [
            ("1.2.3", ">1.0.0", true),
            ("1.2.3", ">=1.2.3 <2.0.0", true),
            ("2.0.0", ">=1.2.3 <2.0.0", false),
            ("2.0.0", "<1.0.0 || >=2.0.0", true),
            ("1.5.0", "1.x", true),
            ("2.5.0", "1.x", false),
            ("1.0.0-alpha", "<1.0.0", true),
            ("1.2.3", "!1.2.3", false),
        ] {
            assert_eq!(matches(v, r), Ok(want), "{v} {r}");
        }
    }
}
