//! A work-around for the cel crate's (0.13) parser on repeated unary
//! operators: for an even run (`!!x`, `--x`) it applies the operator once
//! instead of not at all, so `!!true` is false. cel-go drops an even run
//! and applies an odd one once; this does the same to the source before it
//! is parsed, blanking the cancelled operators with spaces so that error
//! positions stay where they were. cel 0.15 fixes the parser, but kube-cel,
//! which gavel takes the Kubernetes libraries from, requires 0.13.

use std::borrow::Cow;

/// `source` with each run of two or more unary `!` or `-` reduced to its
/// parity (one operator or none); borrowed when there is no such run.
pub fn cancel_unary_runs(source: &str) -> Cow<'_, str> {
    let bytes = source.as_bytes();
    // Quick exit: no two unary operators can follow each other.
    if !has_candidate(bytes) {
        return Cow::Borrowed(source);
    }
    let mut out: Vec<u8> = bytes.to_vec();
    let mut i = 0;
    // Whether the last token ends an operand (an identifier, a literal, a
    // closing bracket): a `-` after one is the binary minus.
    let mut after_operand = false;
    let mut changed = false;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => i += 1,
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' | b'\'' => match skip_string(bytes, i, false) {
                Some(end) => {
                    i = end;
                    after_operand = true;
                }
                // CEL's lexer drops the quote of a string that does not
                // end and reads on after it: so does this.
                None => {
                    i += 1;
                    after_operand = false;
                }
            },
            b'!' if bytes.get(i + 1) == Some(&b'=') => {
                i += 2;
                after_operand = false;
            }
            b'!' | b'-' if b == b'!' || !after_operand => {
                // A run of unary operators of one kind, spaces between.
                let mut at = Vec::new();
                let mut j = i;
                while j < bytes.len() {
                    match bytes[j] {
                        c if c == b && !(b == b'!' && bytes.get(j + 1) == Some(&b'=')) => {
                            at.push(j);
                            j += 1;
                        }
                        b' ' | b'\t' | b'\n' | b'\r' => j += 1,
                        _ => break,
                    }
                }
                if at.len() >= 2 {
                    let keep = at.len() % 2;
                    for &k in &at[..at.len() - keep] {
                        out[k] = b' ';
                    }
                    changed = true;
                }
                i = at.last().map_or(i + 1, |&k| k + 1);
                after_operand = false;
            }
            _ if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' && after_operand => {
                // An identifier or number, or a string prefix (r"", b'').
                let start = i;
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.')
                {
                    i += 1;
                }
                let word = &bytes[start..i];
                if i < bytes.len()
                    && (bytes[i] == b'"' || bytes[i] == b'\'')
                    && word.len() <= 2
                    && word.iter().all(|c| b"rRbB".contains(c))
                {
                    let raw = word.iter().any(|c| *c == b'r' || *c == b'R');
                    if let Some(end) = skip_string(bytes, i, raw) {
                        i = end;
                    }
                }
                after_operand = true;
            }
            b')' | b']' | b'}' | b'`' => {
                i += 1;
                after_operand = true;
            }
            _ => {
                i += 1;
                after_operand = false;
            }
        }
    }
    if !changed {
        return Cow::Borrowed(source);
    }
    // Only ASCII operators were replaced by ASCII spaces.
    Cow::Owned(String::from_utf8(out).unwrap_or_else(|_| source.to_string()))
}

/// Whether two `!` or two `-` follow each other with only spaces between.
fn has_candidate(bytes: &[u8]) -> bool {
    let mut last: Option<u8> = None;
    for &b in bytes {
        match b {
            b'!' | b'-' => {
                if last == Some(b) {
                    return true;
                }
                last = Some(b);
            }
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => last = None,
        }
    }
    false
}

/// The index after the string literal whose opening quote is at `start`;
/// `None` when it does not end (CEL.g4: a string in single quotes stops at
/// a line break, `\n` or `\r`, and an escape must not be one).
pub(super) fn skip_string(bytes: &[u8], start: usize, raw: bool) -> Option<usize> {
    let quote = bytes[start];
    let triple = bytes.get(start + 1) == Some(&quote) && bytes.get(start + 2) == Some(&quote);
    let mut i = start + if triple { 3 } else { 1 };
    let line_break = |b: u8| b == b'\n' || b == b'\r';
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\\' && !raw {
            if !triple && bytes.get(i + 1).copied().is_some_and(line_break) {
                return None;
            }
            i += 2;
            continue;
        }
        if b == quote {
            if !triple {
                return Some(i + 1);
            }
            if bytes.get(i + 1) == Some(&quote) && bytes.get(i + 2) == Some(&quote) {
                return Some(i + 3);
            }
        }
        if line_break(b) && !triple {
            return None;
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::cancel_unary_runs;

    #[test]
    fn even_runs_cancel_and_odd_runs_keep_one() {
        assert_eq!(cancel_unary_runs("!!true"), "  true");
        assert_eq!(cancel_unary_runs("!!!true"), "  !true");
        assert_eq!(cancel_unary_runs("--19"), "  19");
        assert_eq!(cancel_unary_runs("- - -19"), "    -19");
        assert_eq!(cancel_unary_runs("a - -b"), "a - -b");
        assert_eq!(cancel_unary_runs("a - - -b"), "a -    b");
        assert_eq!(cancel_unary_runs("f(!!x, y)"), "f(  x, y)");
    }

    #[test]
    fn operators_inside_strings_comments_and_inequalities_stay() {
        for source in [
            "'!!' == x",
            "\"--\" + r'!!'",
            "'''a\n!!'''",
            "x != !y",
            "a - b",
            "x[0]--1",
            "a // !!b\n",
            "!x",
            "-1",
        ] {
            assert_eq!(cancel_unary_runs(source), source, "{source}");
        }
    }

    #[test]
    fn a_string_that_does_not_end_leaves_the_rest_to_the_code() {
        // CEL's lexer drops the quote and reads the rest as code, where
        // the runs are operators (fuzz/regressions/cel: a quote ended by
        // a carriage return hid 2 KB of runs, 4.7 s to 123 s to parse).
        assert_eq!(cancel_unary_runs("a\"b - --c\r, --d"), "a\"b -   c\r,   d");
        assert_eq!(cancel_unary_runs("'x\\\n!!y"), "'x\\\n  y");
        assert_eq!(cancel_unary_runs("'!!"), "'  ");
        // Strings that end keep their runs.
        assert_eq!(cancel_unary_runs("'--' + '''!!\n'''"), "'--' + '''!!\n'''");
    }
}
