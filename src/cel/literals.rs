//! A work-around for the cel crate's (0.13) lexer on string and bytes
//! literals, on negative hexadecimal ints (`-0x55`), and on backquoted field names (`` a.`content-type` ``, which
//! it does not have: each is given to the parser as a placeholder name
//! that [`backquoted_name`] reads back). It reads some of CEL's forms wrong or not at all: `\'` in a
//! double-quoted string keeps its backslash, `\X41` and raw triple-quoted
//! strings are refused, bytes take no escape but `\x` and octal. cel-go's
//! (`parser/unescape.go`) are the rules: this decodes each literal by them
//! and writes it back in the one form the crate reads right, a
//! double-quoted literal whose only escapes are `\"`, `\\` and `\x` (in
//! bytes, `\x` alone).
//!
//! Only a literal that needs it is rewritten (raw, triple-quoted, with a
//! backslash or a control character); one that does not decode by
//! cel-go's rules is left as written, for the parser to refuse. A
//! rewritten literal may change its length, so a parse error after it
//! points a few columns off; that is rare (an error in an expression with
//! such a literal), and the message still quotes the expression.

use super::unary_runs::skip_string;
use std::borrow::Cow;

/// `source` with every literal the crate would misread rewritten;
/// borrowed when there is none.
pub fn canonical_literals(source: &str) -> Cow<'_, str> {
    let bytes = source.as_bytes();
    // Quick exit: nothing to rewrite without a backslash, a raw prefix
    // or a triple quote (control characters come with one of them or
    // inside a triple quote).
    if !source.contains(['\\', '`'])
        && !source.contains("'''")
        && !source.contains("\"\"\"")
        && !source.contains("0x")
        && !source.contains("0X")
    {
        let raw_prefix = bytes
            .windows(2)
            .any(|w| matches!(w[0], b'r' | b'R') && matches!(w[1], b'\'' | b'"'));
        if !raw_prefix {
            return Cow::Borrowed(source);
        }
    }
    let mut out = String::with_capacity(source.len());
    // Copied up to here.
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'`' => i = backquoted(source, i, &mut out, &mut copied),
            b'"' | b'\'' => i = literal(source, i, i, Prefix::default(), &mut out, &mut copied),
            c if c.is_ascii_alphanumeric() || c == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if matches!(bytes.get(i), Some(b'"' | b'\''))
                    && let Some(prefix) = Prefix::of(&source[start..i])
                {
                    i = literal(source, start, i, prefix, &mut out, &mut copied);
                } else if let Some(decimal) = hex_int_in_decimal(&source[start..i]) {
                    out.push_str(&source[copied..start]);
                    out.push_str(&decimal);
                    copied = i;
                }
            }
            _ => i += 1,
        }
    }
    if copied == 0 {
        return Cow::Borrowed(source);
    }
    out.push_str(&source[copied..]);
    Cow::Owned(out)
}

/// A hexadecimal int literal (`0x55`, not `0x55u`) in decimal: the crate
/// reads `-0x55` as the text `-0x55` in base 10 and refuses it, where it
/// reads `-85` right (with the int range checks of decimal literals).
fn hex_int_in_decimal(word: &str) -> Option<String> {
    let digits = word
        .strip_prefix("0x")
        .or_else(|| word.strip_prefix("0X"))?;
    u64::from_str_radix(digits, 16).ok().map(|v| v.to_string())
}

/// The prefix of the identifier a backquoted field name is written as
/// for the parser: `__bq_` and the name's bytes in hex, then `__`
/// ([`backquoted_name`] reads it back).
const BACKQUOTED: &str = "__bq_";

/// The field name of a selection the parser was given as a placeholder
/// for a backquoted name (`` a.`content-type` ``, which the crate's
/// parser does not have), or `None`.
pub fn backquoted_name(field: &str) -> Option<String> {
    let hex = field.strip_prefix(BACKQUOTED)?.strip_suffix("__")?;
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// The backquote at `at`: a field name after a `.` or `.?` (`` a.`b-c` ``, the
/// characters cel-go allows in one) is written as a placeholder
/// identifier into `out`; anything else is left for the parser. Returns
/// where scanning goes on.
fn backquoted(source: &str, at: usize, out: &mut String, copied: &mut usize) -> usize {
    let bytes = source.as_bytes();
    let Some(len) = bytes[at + 1..].iter().position(|&b| b == b'`') else {
        return bytes.len();
    };
    let end = at + 1 + len + 1;
    let name = &source[at + 1..at + 1 + len];
    let before = source[..at].trim_end();
    let after_dot = before.ends_with('.') || before.ends_with(".?");
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_.-/ ".contains(c);
    if after_dot && !name.is_empty() && name.chars().all(allowed) {
        out.push_str(&source[*copied..at]);
        out.push_str(BACKQUOTED);
        for b in name.bytes() {
            out.push_str(&format!("{b:02x}"));
        }
        out.push_str("__");
        *copied = end;
    }
    end
}

#[derive(Default, Clone, Copy)]
struct Prefix {
    raw: bool,
    bytes: bool,
}

impl Prefix {
    /// `r`, `b`, `br`, `rb` in either case; `None` for any other word.
    fn of(word: &str) -> Option<Prefix> {
        let mut prefix = Prefix::default();
        for c in word.chars() {
            match c {
                'r' | 'R' if !prefix.raw => prefix.raw = true,
                'b' | 'B' if !prefix.bytes => prefix.bytes = true,
                _ => return None,
            }
        }
        Some(prefix)
    }
}

/// The literal whose prefix starts at `start` and whose quote is at
/// `quote`: rewritten into `out` when it needs it (with what comes before
/// it since `copied`). Returns where scanning goes on.
fn literal(
    source: &str,
    start: usize,
    quote: usize,
    prefix: Prefix,
    out: &mut String,
    copied: &mut usize,
) -> usize {
    let bytes = source.as_bytes();
    // Not terminated: the lexer drops the quote and reads on after it.
    let Some(end) = skip_string(bytes, quote, prefix.raw) else {
        return quote + 1;
    };
    // As `skip_string` tells a triple quote.
    let q = bytes[quote];
    let triple = bytes.get(quote + 1) == Some(&q) && bytes.get(quote + 2) == Some(&q);
    let open = if triple { 3 } else { 1 };
    let body = &source[quote + open..end - open];
    let needs_rewrite =
        prefix.raw || triple || body.contains('\\') || body.chars().any(|c| c.is_control());
    if !needs_rewrite {
        return end;
    }
    let Ok(value) = decode(body, prefix) else {
        return end;
    };
    out.push_str(&source[*copied..start]);
    if prefix.bytes {
        out.push_str("b\"");
        for b in value {
            match b {
                // The crate's bytes take no escape but `\x` and octal.
                0x20..=0x7e if b != b'"' && b != b'\\' => out.push(b as char),
                _ => out.push_str(&format!("\\x{b:02x}")),
            }
        }
    } else {
        out.push('"');
        let text = String::from_utf8(value).expect("decode gives a string UTF-8");
        for c in text.chars() {
            match c {
                '"' | '\\' => {
                    out.push('\\');
                    out.push(c);
                }
                c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                    out.push_str(&format!("\\x{:02x}", c as u32))
                }
                c => out.push(c),
            }
        }
    }
    out.push('"');
    *copied = end;
    end
}

/// A literal's body decoded by cel-go's rules: raw bytes for a bytes
/// literal, UTF-8 for a string; `Err` when it does not decode.
fn decode(body: &str, prefix: Prefix) -> Result<Vec<u8>, ()> {
    // Line breaks in the source are `\n` in the value.
    let body = body.replace("\r\n", "\n").replace('\r', "\n");
    if prefix.raw {
        return Ok(body.into_bytes());
    }
    let mut out = Vec::with_capacity(body.len());
    let mut chars = body.chars();
    let push_char = |out: &mut Vec<u8>, c: char| {
        let mut buf = [0; 4];
        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            push_char(&mut out, c);
            continue;
        }
        let escape = chars.next().ok_or(())?;
        let simple = match escape {
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'f' => Some('\x0c'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' | '`' | '?' => Some(escape),
            _ => None,
        };
        if let Some(c) = simple {
            push_char(&mut out, c);
            continue;
        }
        let (digits, radix) = match escape {
            'x' | 'X' => (2, 16),
            'u' if !prefix.bytes => (4, 16),
            'U' if !prefix.bytes => (8, 16),
            '0'..='3' => (2, 8),
            _ => return Err(()),
        };
        let mut value: u32 = if radix == 8 {
            escape as u32 - '0' as u32
        } else {
            0
        };
        for _ in 0..digits {
            let d = chars.next().and_then(|d| d.to_digit(radix)).ok_or(())?;
            value = value * radix + d;
        }
        if prefix.bytes {
            // \x and octal are bytes (at most 0xff).
            out.push(value as u8);
        } else {
            push_char(&mut out, char::from_u32(value).ok_or(())?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_rewritten_only_where_needed() {
        assert_eq!(
            backquoted_name("__bq_636f6e74656e742d74797065__").as_deref(),
            Some("content-type")
        );
        assert_eq!(backquoted_name("__bq_6__"), None);
        for (source, want) in [
            // Nothing to do: borrowed as written.
            ("object.a == 'x' && b == \"y\"", None),
            ("'a' + // it's a comment with a quote\n 'b'", None),
            (r#""\'""#, Some(r#""'""#)),
            (r#"'\X41\x42\101\u00e9\U0001F600'"#, Some("\"ABAé😀\"")),
            (r#"r'\d+\.' == "\\d""#, Some(r#""\\d+\\." == "\\d""#)),
            ("'''a'b\n'''", Some("\"a'b\\x0a\"")),
            (
                r#"b'\r\n\xff\377\'\"'"#,
                Some(r#"b"\x0d\x0a\xff\xff'\x22""#),
            ),
            (r#"bR'''\x00'''"#, Some(r#"b"\x5cx00""#)),
            // An escape cel-go refuses stays for the parser to refuse.
            (r#"'\q' + b'\u0041'"#, None),
            // A backquoted field name becomes a placeholder name.
            (
                "a.`content-type` + a . `x/y.z`",
                Some("a.__bq_636f6e74656e742d74797065__ + a . __bq_782f792e7a__"),
            ),
            ("`a` + a.`b!`", None),
            ("a.?`b`", Some("a.?__bq_62__")),
            // A prefix is a whole word: `sub'x'` is not a raw string.
            ("f(r'\\a', br'\\b')", Some(r#"f("\\a", b"\x5cb")"#)),
        ] {
            let got = canonical_literals(source);
            match want {
                None => assert!(matches!(got, Cow::Borrowed(_)), "{source}: {got}"),
                Some(want) => assert_eq!(got, want, "{source}"),
            }
        }
    }
}
