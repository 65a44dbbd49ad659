//! Kyverno's wildcard matching (go-wildcard semantics): `*` matches any run of
//! characters, `?` exactly one; there is no escaping.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    if !has_wildcard(pattern) {
        return pattern == text;
    }
    if pattern.is_ascii() && text.is_ascii() {
        return match_units(pattern.as_bytes(), text.as_bytes());
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    match_units(&p, &t)
}

/// Iterative `*`/`?` matching with single-star backtracking.
fn match_units<T: PartialEq + Copy + From<u8>>(p: &[T], t: &[T]) -> bool {
    let (star_unit, any_unit) = (T::from(b'*'), T::from(b'?'));
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == any_unit || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == star_unit {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == star_unit {
        pi += 1;
    }
    pi == p.len()
}

pub fn has_wildcard(s: &str) -> bool {
    // A byte scan: `str::contains` with a char set is several times slower
    // on the short strings this sees, and it runs for every comparison.
    s.bytes().any(|b| b == b'*' || b == b'?')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn table() {
        for (pattern, text, want) in [
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("a*", "abc", true),
            ("*c", "abc", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("?*", "", false),
            ("?*", "x", true),
            ("*.corp.com", "a.corp.com", true),
            ("*.corp.com", "corp.com", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("Pod", "Pod", true),
            ("Pod", "pod", false),
        ] {
            assert_eq!(matches(pattern, text), want, "{pattern} ~ {text}");
        }
    }
}
