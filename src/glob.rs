//! Globs as `github.com/gobwas/glob` compiles them with no separators,
//! which is how Kyverno compiles `matchImageReferences[].glob`: `*` (and
//! `**`) matches any run of characters, `/` included; `?` one character;
//! `[abc]`, `[a-z]`, `[!abc]` one character of (or not of) a class;
//! `{a,b}` one of the alternatives, each a glob itself; `\` makes the next
//! character literal.
//!
//! A glob is translated once into an anchored regular expression (the
//! `regex` crate, already in the tree): the translation is a few lines,
//! and the crate's matcher is linear in the text, where a backtracking
//! glob matcher is not on patterns like `*a*a*a*b`.

use regex::Regex;

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    source: String,
    regex: Regex,
}

impl Glob {
    /// Compiles `pattern`; a class or an alternative left open, an empty
    /// class or a trailing `\` is an error, as gobwas reports it.
    pub fn compile(pattern: &str) -> Result<Glob, String> {
        let mut out = String::from("(?s)^(?:");
        let mut chars = pattern.chars().peekable();
        // How many `{` are open: a `,` separates alternatives only inside.
        let mut depth = 0usize;
        while let Some(c) = chars.next() {
            match c {
                '*' => {
                    while chars.peek() == Some(&'*') {
                        chars.next();
                    }
                    out.push_str(".*");
                }
                '?' => out.push('.'),
                '\\' => match chars.next() {
                    Some(next) => push_literal(&mut out, next),
                    None => return Err(format!("unexpected end of input in glob {pattern:?}")),
                },
                '[' => {
                    let mut class = Vec::new();
                    let mut negated = false;
                    if chars.peek() == Some(&'!') {
                        chars.next();
                        negated = true;
                    }
                    loop {
                        match chars.next() {
                            None => {
                                return Err(format!(
                                    "unexpected end of input in glob {pattern:?}: unclosed '['"
                                ));
                            }
                            Some(']') => break,
                            Some(c) => class.push(c),
                        }
                    }
                    if class.is_empty() {
                        return Err(format!("empty character class in glob {pattern:?}"));
                    }
                    out.push('[');
                    if negated {
                        out.push('^');
                    }
                    let mut i = 0;
                    while i < class.len() {
                        if i + 2 < class.len() && class[i + 1] == '-' {
                            let (lo, hi) = (class[i], class[i + 2]);
                            if lo > hi {
                                return Err(format!("invalid range {lo}-{hi} in glob {pattern:?}"));
                            }
                            push_class_char(&mut out, lo);
                            out.push('-');
                            push_class_char(&mut out, hi);
                            i += 3;
                        } else {
                            push_class_char(&mut out, class[i]);
                            i += 1;
                        }
                    }
                    out.push(']');
                }
                '{' => {
                    depth += 1;
                    out.push_str("(?:");
                }
                ',' if depth > 0 => out.push('|'),
                '}' if depth > 0 => {
                    depth -= 1;
                    out.push(')');
                }
                other => push_literal(&mut out, other),
            }
        }
        if depth > 0 {
            return Err(format!(
                "unexpected end of input in glob {pattern:?}: unclosed '{{'"
            ));
        }
        out.push_str(")$");
        let regex = Regex::new(&out).map_err(|e| format!("invalid glob {pattern:?}: {e}"))?;
        Ok(Glob {
            source: pattern.to_string(),
            regex,
        })
    }

    pub fn matches(&self, text: &str) -> bool {
        self.regex.is_match(text)
    }

    pub fn source(&self) -> &str {
        &self.source
    }
}

fn push_literal(out: &mut String, c: char) {
    let mut buffer = [0u8; 4];
    out.push_str(&regex::escape(c.encode_utf8(&mut buffer)));
}

fn push_class_char(out: &mut String, c: char) {
    if matches!(c, '\\' | ']' | '[' | '^' | '-' | '&' | '~') {
        out.push('\\');
    }
    out.push(c);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_gobwas_without_separators() {
        let cases = [
            (
                "ghcr.io/*",
                "ghcr.io/kyverno/test-verify-image:signed",
                true,
            ),
            ("ghcr.io/*", "docker.io/nginx", false),
            ("*", "", true),
            (
                "docker.io/library/nginx:*",
                "docker.io/library/nginx:1.25",
                true,
            ),
            ("nginx:1.2?", "nginx:1.25", true),
            ("nginx:1.2?", "nginx:1.2", false),
            ("registry-[0-9].corp/*", "registry-7.corp/app", true),
            ("registry-[0-9].corp/*", "registry-x.corp/app", false),
            ("registry-[!0-9].corp/*", "registry-x.corp/app", true),
            ("{ghcr.io,quay.io}/*", "quay.io/org/app:1", true),
            ("{ghcr.io,quay.io}/*", "gcr.io/org/app:1", false),
            ("{ghcr.io/{a,b},quay.io}/*", "ghcr.io/b/app", true),
            ("a,b", "a,b", true),
            ("a\\*b", "a*b", true),
            ("a\\*b", "axb", false),
            ("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false),
            ("reg.io/app.v1", "reg.io/appxv1", false),
        ];
        for (pattern, text, want) in cases {
            let glob = Glob::compile(pattern).unwrap();
            assert_eq!(glob.matches(text), want, "{pattern} on {text}");
        }
    }

    #[test]
    fn malformed_globs_are_errors() {
        for pattern in ["ghcr.io/[a-", "{a,b", "x[]", "x\\", "[z-a]"] {
            assert!(Glob::compile(pattern).is_err(), "{pattern}");
        }
    }
}
