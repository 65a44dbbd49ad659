//! Writing a scalar in the style go-yaml picked: plain and single-quoted
//! text folded at the first space past column 80 onto a line indented by
//! the value's indent, single quotes doubled, double-quoted text escaped.
//! Columns count characters, as go-yaml's do.

use super::Sink;
use super::style::{
    Ascii, Style, char_at, has_single_quote, is_break, is_printable, style_and_ascii,
};

/// go-yaml's preferred line width.
const BEST_WIDTH: usize = 80;

pub(super) struct Writer<'a, S: Sink> {
    pub(super) out: &'a mut S,
    pub(super) column: usize,
    pub(super) indent: usize,
    pub(super) allow_breaks: bool,
}

impl<S: Sink> Writer<'_, S> {
    pub(super) fn write(&mut self, s: &str) {
        let (style, ascii) = style_and_ascii(s);
        let escape = S::ESCAPES && ascii != Ascii::Verbatim;
        match style {
            Style::Plain if ascii != Ascii::No => self.ascii_words(s, 0, false, escape),
            Style::SingleQuoted if ascii != Ascii::No && !has_single_quote(s.as_bytes()) => {
                self.out.verbatim("'");
                self.column += 1;
                self.ascii_words(s, 0, true, escape);
                self.out.verbatim("'");
                self.column += 1;
            }
            Style::Plain => self.plain(s),
            Style::SingleQuoted => self.single_quoted(s),
            Style::DoubleQuoted => self.double_quoted(s),
        }
    }

    /// Plain or single-quoted printable ASCII with no quote in it: a
    /// column per byte, so the text is copied a line at a time, looking
    /// only at the spaces past column 80 where a fold can happen.
    /// Writing starts at byte `start` (a [`ValueHead`] wrote what is
    /// before it). `escape`: the sink escapes and the text written holds a
    /// quote or a backslash.
    pub(super) fn ascii_words(&mut self, s: &str, start: usize, quoted: bool, escape: bool) {
        let bytes = s.as_bytes();
        let mut pos = start;
        loop {
            // The column at byte j is self.column + (j - pos); a fold needs
            // it past BEST_WIDTH.
            let from = pos + (BEST_WIDTH + 1).saturating_sub(self.column);
            // The first space past the column is a few bytes away: a plain
            // scan, with none of memchr's setup per line.
            let fold = (self.allow_breaks && from < bytes.len())
                .then(|| {
                    (from..bytes.len())
                        .filter(|&j| bytes[j] == b' ')
                        .find(|&j| {
                            let previous_space = j > 0 && bytes[j - 1] == b' ';
                            let next_space = bytes.get(j + 1) == Some(&b' ');
                            // Quoted scalars never fold at their first or last character.
                            let inside = !quoted || (j > 0 && j + 1 < bytes.len());
                            !previous_space && !next_space && inside
                        })
                })
                .flatten();
            match fold {
                Some(j) => {
                    self.ascii(&s[pos..j], escape);
                    self.column += j - pos;
                    self.write_indent();
                    pos = j + 1;
                }
                None => {
                    self.ascii(&s[pos..], escape);
                    self.column += bytes.len() - pos;
                    return;
                }
            }
        }
    }

    fn ascii(&mut self, s: &str, escape: bool) {
        if escape {
            self.out.text(s);
        } else {
            self.out.verbatim(s);
        }
    }

    fn put(&mut self, c: char) {
        self.out.text(c.encode_utf8(&mut [0; 4]));
        self.column += 1;
    }

    /// A line break and the continuation indent.
    fn write_indent(&mut self) {
        self.out.line_feed_indent(self.indent);
        self.column = self.indent;
    }

    /// Appends a run of characters with no space, break or quote in it.
    fn run(&mut self, run: &str) {
        self.out.text(run);
        self.column += run.bytes().filter(|b| b & 0xc0 != 0x80).count();
    }

    /// Where the run starting at `i` ends: at a space, a line break, a
    /// single quote (when `quote`), or the end.
    fn run_end(s: &str, mut i: usize, quote: bool) -> usize {
        let bytes = s.as_bytes();
        while i < bytes.len() {
            match bytes[i] {
                b' ' | b'\r' | b'\n' => break,
                b'\'' if quote => break,
                // NEL (C2 85), LS and PS (E2 80 A8/A9), matched as bytes.
                0xc2 if bytes.get(i + 1) == Some(&0x85) => break,
                0xe2 if bytes.get(i + 1) == Some(&0x80)
                    && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9)) =>
                {
                    break;
                }
                _ => i += 1,
            }
        }
        i
    }

    pub(super) fn plain(&mut self, s: &str) {
        let bytes = s.as_bytes();
        let mut spaces = false;
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b' ' {
                let next_space = bytes.get(i + 1) == Some(&b' ');
                if self.allow_breaks && !spaces && self.column > BEST_WIDTH && !next_space {
                    self.write_indent();
                } else {
                    self.put(' ');
                }
                spaces = true;
                i += 1;
            } else {
                // Plain scalars hold no line breaks (style() saw to it).
                let end = match Self::run_end(s, i, false) {
                    end if end > i => end,
                    _ => i + char_at(s, i).1,
                };
                self.run(&s[i..end]);
                spaces = false;
                i = end;
            }
        }
    }

    pub(super) fn single_quoted(&mut self, s: &str) {
        self.put('\'');
        let bytes = s.as_bytes();
        let (mut spaces, mut breaks) = (false, false);
        let mut i = 0;
        while i < bytes.len() {
            let (c, width) = char_at(s, i);
            if c == ' ' {
                let next_space = bytes.get(i + 1) == Some(&b' ');
                if self.allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i + 1 < bytes.len()
                    && !next_space
                {
                    self.write_indent();
                } else {
                    self.put(' ');
                }
                spaces = true;
                i += 1;
            } else if is_break(c) {
                // A line break in a quoted scalar is written twice (the
                // first only ends the line), then the text resumes indented.
                if c == '\n' {
                    if !breaks {
                        self.out.line_feed();
                    }
                    self.out.line_feed();
                } else {
                    self.out.text(c.encode_utf8(&mut [0; 4]));
                }
                self.column = 0;
                breaks = true;
                i += width;
            } else {
                if breaks {
                    self.write_indent_after_break();
                }
                if c == '\'' {
                    self.out.verbatim("''");
                    self.column += 2;
                    i += 1;
                } else {
                    let end = Self::run_end(s, i, true);
                    self.run(&s[i..end]);
                    i = end;
                }
                spaces = false;
                breaks = false;
            }
        }
        if breaks {
            self.write_indent_after_break();
        }
        self.put('\'');
    }

    /// The indent at the start of a line that a break already began.
    fn write_indent_after_break(&mut self) {
        self.out.spaces(self.indent);
        self.column = self.indent;
    }

    fn double_quoted(&mut self, s: &str) {
        self.put('"');
        let mut spaces = false;
        let count = s.chars().count();
        let mut chars = s.chars().enumerate().peekable();
        while let Some((i, c)) = chars.next() {
            if !is_printable(c) || is_break(c) || c == '"' || c == '\\' || c == '\u{feff}' {
                self.put('\\');
                match c {
                    '\0' => self.put('0'),
                    '\x07' => self.put('a'),
                    '\x08' => self.put('b'),
                    '\t' => self.put('t'),
                    '\n' => self.put('n'),
                    '\x0b' => self.put('v'),
                    '\x0c' => self.put('f'),
                    '\r' => self.put('r'),
                    '\x1b' => self.put('e'),
                    '"' => self.put('"'),
                    '\\' => self.put('\\'),
                    '\u{85}' => self.put('N'),
                    '\u{a0}' => self.put('_'),
                    '\u{2028}' => self.put('L'),
                    '\u{2029}' => self.put('P'),
                    c => {
                        let code = c as u32;
                        let escaped = if code <= 0xff {
                            format!("x{code:02X}")
                        } else if code <= 0xffff {
                            format!("u{code:04X}")
                        } else {
                            format!("U{code:08X}")
                        };
                        for e in escaped.chars() {
                            self.put(e);
                        }
                    }
                }
                spaces = false;
            } else if c == ' ' {
                if self.allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i + 1 < count
                {
                    self.write_indent();
                    if chars.peek().is_some_and(|&(_, n)| n == ' ') {
                        self.put('\\');
                    }
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                self.put(c);
                spaces = false;
            }
        }
        self.put('"');
    }
}
