//! Text escaped for the inside of a JSON string, as serde_json escapes it.
//!
//! A denial is kilobytes of YAML. [`JsonText`] lets the writer of that text
//! produce it escaped in one pass, so the response copies it instead of
//! building it first and escaping it after.

/// Text already escaped for the inside of a JSON string (no quotes around it).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct JsonText(String);

impl JsonText {
    /// Escapes `text`.
    pub fn escape(text: &str) -> JsonText {
        let mut out = String::with_capacity(text.len() + 2);
        escape_into(text, |part| out.push_str(part));
        JsonText(out)
    }

    pub fn as_escaped(&self) -> &str {
        &self.0
    }

    /// This text without its escaped end `suffix`, if it ends so.
    pub fn strip_suffix(&self, suffix: &str) -> Option<JsonText> {
        self.0.strip_suffix(suffix).map(|t| JsonText(t.to_owned()))
    }

    /// The text itself.
    #[cfg(test)]
    pub(crate) fn unescape(&self) -> String {
        serde_json::from_str(&["\"", &self.0, "\""].concat())
            .expect("JsonText holds a valid JSON string body")
    }
}

/// Builds a [`JsonText`] piece by piece: text that may need escaping,
/// text the caller knows needs none, and line feeds.
#[derive(Debug, Default)]
pub struct JsonWriter {
    out: String,
}

impl JsonWriter {
    pub fn with_capacity(capacity: usize) -> JsonWriter {
        JsonWriter {
            out: String::with_capacity(capacity),
        }
    }

    /// Appends `s`, escaped.
    pub fn text(&mut self, s: &str) {
        escape_into(s, |part| self.out.push_str(part));
    }

    /// Appends `s`, which the caller has checked holds nothing to escape
    /// (see [`needs_escape`]).
    pub fn verbatim(&mut self, s: &str) {
        debug_assert!(!needs_escape(s.as_bytes()), "{s:?} needs escaping");
        self.out.push_str(s);
    }

    pub fn line_feed(&mut self) {
        self.out.push_str("\\n");
    }

    /// Appends a piece of JSON string text the caller wrote escaped.
    pub fn escaped_str(&mut self, s: &str) {
        self.out.push_str(s);
    }

    /// Appends text already escaped.
    pub fn escaped(&mut self, text: &JsonText) {
        self.out.push_str(&text.0);
    }

    pub fn finish(self) -> JsonText {
        JsonText(self.out)
    }
}

/// Whether some byte of `bytes` must be escaped in a JSON string: a quote, a
/// backslash or a control character. A fold, so that it vectorizes.
pub fn needs_escape(bytes: &[u8]) -> bool {
    bytes.iter().fold(false, |any, &b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

/// Calls `put` with the pieces of `s` escaped: runs of text that need
/// nothing, and the escape of each character that does. Eight bytes are
/// checked at a time.
pub fn escape_into(s: &str, mut put: impl FnMut(&str)) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // The high bit of a byte is set where `x` has a byte below 0x20, a
    // quote or a backslash. Bytes >= 0x80 (UTF-8) are never flagged. A
    // borrow can flag a byte above a real hit, never below one, so the
    // lowest flag is exact.
    let escapes = |x: u64| {
        let zeros = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
        (x.wrapping_sub(ONES * 0x20) & !x & HIGHS)
            | zeros(x ^ (ONES * u64::from(b'"')))
            | zeros(x ^ (ONES * u64::from(b'\\')))
    };
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(chunk) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
            match escapes(word) {
                0 => {
                    i += 8;
                    continue;
                }
                flags => i += flags.trailing_zeros() as usize / 8,
            }
        }
        // Every byte escaped is ASCII, so `start` and `i` are character
        // boundaries.
        let escape = match bytes[i] {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            b if b < 0x20 => {
                put(&s[start..i]);
                put(&format!("\\u{b:04x}"));
                i += 1;
                start = i;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        put(&s[start..i]);
        put(escape);
        i += 1;
        start = i;
    }
    put(&s[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_serde_json() {
        let mut cases: Vec<String> = vec![
            String::new(),
            "plain".into(),
            "quote \" backslash \\ newline \n tab \t cr \r".into(),
            "\u{1} \u{8} \u{c} \u{1f} \u{7f} é ü 日本 🎉".into(),
            "policy:\n  rule: 'a \"quoted\" C:\\path'\n\n".repeat(40),
        ];
        // Every control and special character at every offset within a chunk.
        for c in (0u8..0x80).map(char::from) {
            for offset in 0..9 {
                cases.push(format!("{}{c}{}", "x".repeat(offset), "y".repeat(9)));
            }
        }
        for s in cases {
            let want = serde_json::to_string(&s).unwrap();
            let text = JsonText::escape(&s);
            assert_eq!(format!("\"{}\"", text.as_escaped()), want, "{s:?}");
            assert_eq!(text.unescape(), s);
            assert_eq!(
                needs_escape(s.as_bytes()),
                want.len() != s.len() + 2,
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_writer_joins_its_pieces() {
        let mut w = JsonWriter::with_capacity(8);
        w.verbatim("a: ");
        w.text("\"b\"");
        w.line_feed();
        assert_eq!(w.finish().unescape(), "a: \"b\"\n");
    }
}
