//! Kyverno's wildcard matching (go-wildcard semantics): `*` matches any run of
//! characters, `?` exactly one; there is no escaping.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    if !pattern.contains(['*', '?']) {
        return pattern == text;
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
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
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

pub fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?'])
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
