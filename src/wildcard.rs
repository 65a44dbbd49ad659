//! Kyverno's wildcard matching (go-wildcard semantics): `*` matches any run of
//! characters, `?` exactly one; there is no escaping.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    // One pass over the pattern finds its stars and any `?`: the scans
    // cost more than the matching on the short keys and values seen here.
    let (mut first_star, mut last_star, mut any_unit) = (None, 0, false);
    for (i, b) in pattern.bytes().enumerate() {
        match b {
            b'*' => {
                first_star.get_or_insert(i);
                last_star = i;
            }
            b'?' => any_unit = true,
            _ => {}
        }
    }
    match (first_star, any_unit) {
        (None, false) => pattern == text,
        (Some(first), false) => match_stars(pattern, text, first, last_star),
        _ if pattern.is_ascii() && text.is_ascii() => {
            match_units(pattern.as_bytes(), text.as_bytes())
        }
        _ => {
            let p: Vec<char> = pattern.chars().collect();
            let t: Vec<char> = text.chars().collect();
            match_units(&p, &t)
        }
    }
}

/// A pattern whose only wildcard is `*`, first at byte `first` and last at
/// `last`: the text must start with what precedes the first star, end with
/// what follows the last, and hold the pieces between in order. Taking
/// each piece at its first place is enough, since stars absorb whatever
/// lies between.
fn match_stars(pattern: &str, text: &str, first: usize, last: usize) -> bool {
    let (prefix, suffix) = (&pattern[..first], &pattern[last + 1..]);
    if text.len() < prefix.len() + suffix.len()
        || !text.starts_with(prefix)
        || !text.ends_with(suffix)
    {
        return false;
    }
    let mut rest = &text[prefix.len()..text.len() - suffix.len()];
    for piece in pattern[first + 1..last.max(first + 1)]
        .split('*')
        .filter(|p| !p.is_empty())
    {
        match rest.find(piece) {
            Some(i) => rest = &rest[i + piece.len()..],
            None => return false,
        }
    }
    true
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
            ("a*a", "a", false),
            ("a*a", "aa", true),
            ("*ab*ab*", "xabyab", true),
            ("*ab*ab*", "xaby", false),
            ("ab*ba", "aba", false),
            ("**", "", true),
            ("a**b", "ab", true),
            ("é*ü", "éxü", true),
            ("*ü", "ü", true),
            ("localhost/*", "localhost/profile", true),
            ("localhost/*", "runtime/default", false),
            (
                "container.apparmor.security.beta.kubernetes.io/*",
                "container.apparmor.security.beta.kubernetes.io/web",
                true,
            ),
        ] {
            assert_eq!(matches(pattern, text), want, "{pattern} ~ {text}");
            // The unit-by-unit matcher is the reference for every shortcut.
            let p: Vec<char> = pattern.chars().collect();
            let t: Vec<char> = text.chars().collect();
            assert_eq!(
                super::match_units(&p, &t),
                want,
                "reference: {pattern} ~ {text}"
            );
        }
    }

    /// Every pattern over `a`, `b`, `*` and every text over `a`, `b` up to
    /// five long: the star-only shortcut agrees with the unit matcher.
    #[test]
    fn stars_agree_with_the_unit_matcher() {
        fn all(alphabet: &[u8], max: usize) -> Vec<String> {
            let mut out = vec![String::new()];
            let mut last = vec![String::new()];
            for _ in 0..max {
                last = last
                    .iter()
                    .flat_map(|s| alphabet.iter().map(move |&c| format!("{s}{}", c as char)))
                    .collect();
                out.extend(last.iter().cloned());
            }
            out
        }
        let texts = all(b"ab", 5);
        for pattern in all(b"ab*", 5).iter().filter(|p| p.contains('*')) {
            for text in &texts {
                let (first, last) = (pattern.find('*').unwrap(), pattern.rfind('*').unwrap());
                assert_eq!(
                    super::match_stars(pattern, text, first, last),
                    super::match_units(pattern.as_bytes(), text.as_bytes()),
                    "{pattern} ~ {text}"
                );
            }
        }
    }
}
