//! Value heads: the start of a denial's message, fixed when the policy is
//! compiled, rendered once into JSON-escaped text so that a request writes
//! only the rest of the message. A head applies only where writing it
//! afresh would give the same bytes.

use super::push_value;
use super::style::{has_single_quote, verbatim_ascii};
use super::writer::Writer;
use crate::admission::json_text::{JsonText, JsonWriter};

/// The start of a block mapping value, rendered ahead of time for the JSON
/// sink. A denial's values are rule messages that begin with text fixed
/// when the policy is compiled (`validation error: <message>. rule
/// <name>`); rendering that part once per policy set leaves only the rest
/// (the path that failed) to write per request. What [`push_value_headed`]
/// writes is byte for byte what [`push_value`] writes.
#[derive(Debug, Clone)]
pub struct ValueHead {
    text: Box<str>,
    /// The value's column and its folded lines' indent.
    column: usize,
    indent: usize,
    rendered: JsonText,
    /// The column after `rendered`.
    end: usize,
    /// `rendered` is the whole value (the value is `text`), or the start of
    /// a single-quoted value that goes on past `text`.
    whole: bool,
}

impl ValueHead {
    /// The value `text` exactly, starting at `column`.
    pub fn whole(text: &str, column: usize, indent: usize) -> ValueHead {
        let mut out = JsonWriter::default();
        let end = push_value(&mut out, text, column, indent);
        ValueHead {
            text: text.into(),
            column,
            indent,
            rendered: out.finish(),
            end,
            whole: true,
        }
    }

    /// The start of any value that is `text` followed by printable ASCII
    /// other than a single quote. `None` unless every such value is written
    /// single-quoted, the same up to the end of `text`:
    /// - `: ` in `text` rules out the plain style and its space a number or
    ///   a bool; printable ASCII after it adds no break or special
    ///   character, so the style stays single-quoted;
    /// - a fold happens at a space, decided by the columns before it and the
    ///   characters on either side; `text` ends in something other than a
    ///   space, so what follows cannot change a fold inside it.
    pub fn quoted_start(text: &str, column: usize, indent: usize) -> Option<ValueHead> {
        let bytes = text.as_bytes();
        if !verbatim_ascii(bytes)
            || has_single_quote(bytes)
            || !text.contains(": ")
            || bytes.last().is_none_or(|&b| b == b' ')
        {
            return None;
        }
        // Written with a stand-in for the rest, which ends the text with
        // the stand-in and the closing quote.
        let mut out = JsonWriter::default();
        let end = push_value(&mut out, &[text, "x"].concat(), column, indent);
        let rendered = out.finish().strip_suffix("x'")?;
        Some(ValueHead {
            text: text.into(),
            column,
            indent,
            rendered,
            end: end - 2,
            whole: false,
        })
    }

    /// Whether this head applies to `s` (at its own column).
    #[cfg(test)]
    pub(in crate::admission) fn starts(&self, s: &str) -> bool {
        self.write(&mut JsonWriter::default(), s, self.column, self.indent)
            .is_some()
    }

    /// Writes `s` starting at `column` when this head applies to it;
    /// returns the column after it.
    pub(super) fn write(
        &self,
        out: &mut JsonWriter,
        s: &str,
        column: usize,
        indent: usize,
    ) -> Option<usize> {
        if (column, indent) != (self.column, self.indent) {
            return None;
        }
        if self.whole {
            if s != &*self.text {
                return None;
            }
            out.escaped(&self.rendered);
            return Some(self.end);
        }
        let rest = s.strip_prefix(&*self.text)?.as_bytes();
        if rest.is_empty() {
            return None;
        }
        // One pass over the rest: whether it is printable ASCII with no
        // single quote, and whether JSON escapes something in it.
        let (other, escapes) = rest.iter().fold((false, false), |(other, escapes), &b| {
            (
                other | (b.wrapping_sub(0x20) >= 0x5f) | (b == b'\''),
                escapes | (b == b'"') | (b == b'\\'),
            )
        });
        if other {
            return None;
        }
        out.escaped(&self.rendered);
        let mut w = Writer {
            out,
            column: self.end,
            indent,
            allow_breaks: true,
        };
        w.ascii_words(s, self.text.len(), true, escapes);
        w.out.verbatim("'");
        Some(w.column + 1)
    }
}

/// [`push_value`] into the JSON sink, copying the rendering of the first
/// of `heads` that applies to `s`.
pub fn push_value_headed(
    out: &mut JsonWriter,
    s: &str,
    column: usize,
    indent: usize,
    heads: &[ValueHead],
) -> usize {
    heads
        .iter()
        .find_map(|h| h.write(out, s, column, indent))
        .unwrap_or_else(|| push_value(out, s, column, indent))
}
