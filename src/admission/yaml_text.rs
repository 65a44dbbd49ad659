//! Scalars written as Go's `yaml.Marshal` (go-yaml v2, which Kyverno's
//! denial message goes through) writes them: the same choice of plain,
//! single-quoted or double-quoted style, and the same folding of long
//! values at the first space past column 80, continued on a line indented
//! by the value's indent. Users grep and parse these messages, so the text
//! matches Kyverno's byte for byte rather than approximately.
//!
//! `style` decides how a scalar is written, `writer` writes it, and `head`
//! keeps the prerendered starts of a denial's messages.

mod head;
mod style;
mod writer;

pub use head::{ValueHead, push_value_headed};

use super::json_text::JsonWriter;
use style::is_plain_name;
use writer::Writer;

/// Where the YAML goes: a plain string, or the body of a JSON string being
/// built (a denial), which then needs no second pass to escape it.
pub trait Sink {
    /// Whether text must be checked for characters to escape.
    const ESCAPES: bool;
    /// Text that may hold characters to escape.
    fn text(&mut self, s: &str);
    /// Text known to hold none: printable ASCII without a quote or a
    /// backslash.
    fn verbatim(&mut self, s: &str);
    fn line_feed(&mut self);

    fn spaces(&mut self, n: usize) {
        match SPACES.get(..n) {
            Some(spaces) => self.verbatim(spaces),
            None => (0..n).for_each(|_| self.verbatim(" ")),
        }
    }

    /// A line feed and `indent` spaces: a folded line's continuation.
    fn line_feed_indent(&mut self, indent: usize) {
        self.line_feed();
        self.spaces(indent);
    }
}

/// Indents up to this long are written as one piece.
const SPACES: &str = "                ";

impl Sink for String {
    const ESCAPES: bool = false;

    fn text(&mut self, s: &str) {
        self.push_str(s);
    }

    fn verbatim(&mut self, s: &str) {
        self.push_str(s);
    }

    fn line_feed(&mut self) {
        self.push('\n');
    }
}

impl Sink for JsonWriter {
    const ESCAPES: bool = true;

    fn text(&mut self, s: &str) {
        JsonWriter::text(self, s);
    }

    fn verbatim(&mut self, s: &str) {
        JsonWriter::verbatim(self, s);
    }

    fn line_feed(&mut self) {
        JsonWriter::line_feed(self);
    }

    /// One piece for the usual indent: a denial folds every 80 columns.
    fn line_feed_indent(&mut self, indent: usize) {
        const LINE: &str = "\\n                ";
        match LINE.get(..2 + indent) {
            // Escaped already (`\\n`): verbatim's check would refuse the backslash.
            Some(line) => self.escaped_str(line),
            None => {
                JsonWriter::line_feed(self);
                self.spaces(indent);
            }
        }
    }
}

/// Appends `s` as a block mapping value. `column` is where the value
/// starts (after `key: `); folded lines are indented by `indent`.
/// Returns the column after the value.
pub fn push_value(out: &mut impl Sink, s: &str, column: usize, indent: usize) -> usize {
    let mut w = Writer {
        out,
        column,
        indent,
        allow_breaks: true,
    };
    w.write(s);
    w.column
}

/// Appends `s` as a mapping key (never folded). Returns the column after it.
pub fn push_key(out: &mut impl Sink, s: &str, column: usize) -> usize {
    // Policy and rule names, the keys of a denial, are names: plain, and
    // nothing in them is escaped in JSON either.
    if is_plain_name(s) {
        out.verbatim(s);
        return column + s.len();
    }
    let mut w = Writer {
        out,
        column,
        indent: 0,
        allow_breaks: false,
    };
    w.write(s);
    w.column
}

#[cfg(test)]
mod tests;
