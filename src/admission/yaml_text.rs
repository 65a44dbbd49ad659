//! Scalars written as Go's `yaml.Marshal` (go-yaml v2, which Kyverno's
//! denial message goes through) writes them: the same choice of plain,
//! single-quoted or double-quoted style, and the same folding of long
//! values at the first space past column 80, continued on a line indented
//! by the value's indent. Users grep and parse these messages, so the text
//! matches Kyverno's byte for byte rather than approximately.

use super::json_text::{JsonText, JsonWriter};

/// go-yaml's preferred line width.
const BEST_WIDTH: usize = 80;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
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
    pub(super) fn starts(&self, s: &str) -> bool {
        self.write(&mut JsonWriter::default(), s, self.column, self.indent)
            .is_some()
    }

    /// Writes `s` starting at `column` when this head applies to it;
    /// returns the column after it.
    fn write(&self, out: &mut JsonWriter, s: &str, column: usize, indent: usize) -> Option<usize> {
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

/// A name (letters, digits, `-`, `.`, `_`, `/`, starting with a letter)
/// that go-yaml would not read as a bool or null: it writes it plain. The
/// other checks of [`style`] cannot trigger on these characters.
fn is_plain_name(s: &str) -> bool {
    /// The bytes of a name, as a table: a branch per byte costs more.
    const NAME_BYTES: [bool; 256] = {
        let mut table = [false; 256];
        let mut b = 0;
        while b < 256 {
            let c = b as u8;
            table[b] = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'/');
            b += 1;
        }
        table
    };
    let bytes = s.as_bytes();
    bytes.first().is_some_and(u8::is_ascii_alphabetic)
        && bytes
            .iter()
            .fold(true, |ok, &b| ok & NAME_BYTES[usize::from(b)])
        && !resolves_to_non_string(s)
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t')
}

fn is_printable(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\x20'..='\x7e' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
        && c != '\u{feff}'
}

/// The character at byte `i` and its width; `s[i..]` starts a character.
fn char_at(s: &str, i: usize) -> (char, usize) {
    let b = s.as_bytes()[i];
    if b < 0x80 {
        return (b as char, 1);
    }
    let c = s[i..].chars().next().expect("i starts a character");
    (c, c.len_utf8())
}

/// The style go-yaml picks for a string value in block context.
#[cfg(test)]
fn style(s: &str) -> Style {
    style_and_ascii(s).0
}

/// What one pass over a value's bytes tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ascii {
    /// Not printable ASCII: a tab, a break, a control or a non-ASCII character.
    No,
    /// Printable ASCII with a quote or a backslash, which JSON escapes.
    Printable,
    /// Printable ASCII with nothing JSON escapes: the usual message.
    Verbatim,
}

/// [`style`], and what the bytes of `s` are. Works on bytes: the message
/// text is ASCII almost always, and only the rare non-ASCII character is
/// decoded.
fn style_and_ascii(s: &str) -> (Style, Ascii) {
    let bytes = s.as_bytes();
    let ascii = if verbatim_ascii(bytes) {
        Ascii::Verbatim
    } else if printable_ascii(bytes) {
        Ascii::Printable
    } else {
        Ascii::No
    };
    if resolves_to_non_string(s) {
        return (Style::DoubleQuoted, ascii);
    }
    let block_indicators = s.starts_with("---") || s.starts_with("...");
    // Printable ASCII without tabs, the usual message: the same rules in
    // one tight pass over the bytes.
    if ascii != Ascii::No
        && let Some(plain) = ascii_plain_allowed(bytes)
    {
        let style = if plain && !block_indicators {
            Style::Plain
        } else {
            Style::SingleQuoted
        };
        return (style, ascii);
    }
    (style_walk(s), ascii)
}

/// [`style`] for any text, a character at a time.
fn style_walk(s: &str) -> Style {
    let bytes = s.as_bytes();
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let (mut leading_space, mut leading_break) = (false, false);
    let (mut trailing_space, mut trailing_break) = (false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut line_breaks, mut special) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;
    let mut i = 0;
    while i < bytes.len() {
        let (c, width) = char_at(s, i);
        let last = i + width == bytes.len();
        let followed_by_whitespace = last || {
            let (n, _) = char_at(s, i + width);
            is_blank(n) || is_break(n)
        };
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) {
            special = true;
        }
        if c == ' ' {
            leading_space |= i == 0;
            trailing_space |= last;
            break_space |= previous_break;
            (previous_space, previous_break) = (true, false);
        } else if is_break(c) {
            line_breaks = true;
            leading_break |= i == 0;
            trailing_break |= last;
            space_break |= previous_space;
            (previous_space, previous_break) = (false, true);
        } else {
            (previous_space, previous_break) = (false, false);
        }
        preceded_by_whitespace = is_blank(c) || is_break(c);
        i += width;
    }
    let single_quoted_allowed = !(break_space || space_break || special);
    let plain_blocked = leading_space
        || leading_break
        || trailing_space
        || trailing_break
        || line_breaks
        || block_indicators;
    let plain_allowed = single_quoted_allowed && !plain_blocked;
    if plain_allowed {
        Style::Plain
    } else if single_quoted_allowed {
        Style::SingleQuoted
    } else {
        Style::DoubleQuoted
    }
}

/// Whether every byte is printable ASCII other than a quote and a
/// backslash: nothing in it is escaped in YAML's plain or single-quoted
/// styles, nor in JSON. One fold, so that it vectorizes.
fn verbatim_ascii(bytes: &[u8]) -> bool {
    bytes.iter().fold(true, |ok, &b| {
        ok & (b.wrapping_sub(0x20) < 0x5f) & (b != b'"') & (b != b'\\')
    })
}

/// Whether every byte is printable ASCII (no tabs, no breaks). Written as
/// a fold so that it vectorizes.
fn printable_ascii(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .fold(true, |ok, &b| ok & (b.wrapping_sub(0x20) < 0x5f))
}

/// Whether some byte is a single quote; a fold, like [`printable_ascii`].
fn has_single_quote(bytes: &[u8]) -> bool {
    bytes.iter().fold(false, |quote, &b| quote | (b == b'\''))
}

/// For printable ASCII without tabs (checked by the caller; `None` when
/// empty): whether go-yaml would write it plain, leaving out the
/// `---`/`...` prefixes that [`style`] checks.
fn ascii_plain_allowed(bytes: &[u8]) -> Option<bool> {
    let first = *bytes.first()?;
    let indicator_first = matches!(
        first,
        b'#' | b','
            | b'['
            | b']'
            | b'{'
            | b'}'
            | b'&'
            | b'*'
            | b'!'
            | b'|'
            | b'>'
            | b'\''
            | b'"'
            | b'%'
            | b'@'
            | b'`'
            | b' '
    ) || (matches!(first, b'?' | b':' | b'-')
        && bytes.get(1).is_none_or(|&b| b == b' '));
    if indicator_first || bytes[bytes.len() - 1] == b' ' {
        return Some(false);
    }
    // `: ` or a final `:`, and ` #`, past the first character.
    let indicator = memchr::memchr2_iter(b':', b'#', &bytes[1..]).any(|i| {
        let i = i + 1;
        if bytes[i] == b':' {
            bytes.get(i + 1).is_none_or(|&n| n == b' ')
        } else {
            bytes[i - 1] == b' '
        }
    });
    Some(!indicator)
}

/// Whether go-yaml v2 would read `s`, written plain, as something other
/// than a string (null, a YAML 1.1 bool, a number), so it must quote it.
fn resolves_to_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
        ".NaN", ".NAN",
    ];
    if s.len() <= 6 && WORDS.contains(&s) {
        return true;
    }
    let first = s.as_bytes()[0];
    if !(first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'.')) {
        return false;
    }
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    let unsigned = plain.trim_start_matches(['+', '-']);
    let radix = |prefix: &str, radix: u32| {
        unsigned
            .strip_prefix(prefix)
            .is_some_and(|d| !d.is_empty() && u64::from_str_radix(d, radix).is_ok())
    };
    !unsigned.is_empty()
        && (unsigned.bytes().all(|b| b.is_ascii_digit())
            || radix("0x", 16)
            || radix("0b", 2)
            || (plain.parse::<f64>().is_ok() && !unsigned.starts_with(['i', 'I', 'n', 'N'])))
}

struct Writer<'a, S: Sink> {
    out: &'a mut S,
    column: usize,
    indent: usize,
    allow_breaks: bool,
}

impl<S: Sink> Writer<'_, S> {
    fn write(&mut self, s: &str) {
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
    fn ascii_words(&mut self, s: &str, start: usize, quoted: bool, escape: bool) {
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

    fn plain(&mut self, s: &str) {
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

    fn single_quoted(&mut self, s: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn value(key: &str, s: &str) -> String {
        let mut out = format!("  {key}: ");
        push_value(&mut out, s, key.chars().count() + 4, 4);
        out
    }

    /// `count` texts of 1 to `max_len` pieces drawn from `alphabet` by an
    /// xorshift generator seeded with `seed`: the same texts on every run.
    fn random_texts(seed: u64, count: usize, max_len: usize, alphabet: &[&str]) -> Vec<String> {
        let mut seed = seed;
        (0..count)
            .map(|n| {
                (0..1 + n % max_len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        alphabet[(seed % alphabet.len() as u64) as usize]
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn picks_go_yaml_styles() {
        assert_eq!(style("plain words"), Style::Plain);
        assert_eq!(style("validation error: it's bad"), Style::SingleQuoted);
        assert_eq!(style("-leading dash is fine"), Style::Plain);
        assert_eq!(style("- a list marker is not"), Style::SingleQuoted);
        assert_eq!(style("ends with a colon:"), Style::SingleQuoted);
        assert_eq!(style("a#b is fine, a #b is not"), Style::SingleQuoted);
        assert_eq!(style("tabs\tare plain"), Style::Plain);
        assert_eq!(style("two\nlines"), Style::SingleQuoted);
        assert_eq!(style("bell\x07"), Style::DoubleQuoted);
        assert_eq!(style("true"), Style::DoubleQuoted);
        assert_eq!(style("yes"), Style::DoubleQuoted);
        assert_eq!(style("1.5"), Style::DoubleQuoted);
        assert_eq!(style("0x1F"), Style::DoubleQuoted);
        assert_eq!(style(""), Style::DoubleQuoted);
        assert_eq!(style("1.5 cores"), Style::Plain);
        assert_eq!(style("infinity"), Style::Plain);
        assert_eq!(style(" leading space"), Style::SingleQuoted);
        assert_eq!(style("trailing space "), Style::SingleQuoted);
        assert_eq!(style("- "), Style::SingleQuoted);
        assert_eq!(style("-"), Style::SingleQuoted);
        assert_eq!(style("a:b"), Style::Plain);
        assert_eq!(style("a:\tb"), Style::SingleQuoted);
        assert_eq!(style("a\t#b"), Style::SingleQuoted);
        assert_eq!(style("...dots"), Style::SingleQuoted);
        assert_eq!(style("né: x"), Style::SingleQuoted);
        assert_eq!(style("né x"), Style::Plain);
    }

    #[test]
    fn folds_like_kyverno_denials() {
        // As Kyverno prints a denial (go-yaml v2 through sigs.k8s.io/yaml).
        assert_eq!(
            value(
                "check-required-labels-james-1",
                "validation error: Required labels (app, version, environment) must be present. rule check-required-labels-james-1 failed at path /metadata/labels/environment/"
            ),
            "  check-required-labels-james-1: 'validation error: Required labels (app, version,\n    environment) must be present. rule check-required-labels-james-1 failed at path\n    /metadata/labels/environment/'"
        );
        assert_eq!(
            value(
                "autogen-check-for-labels",
                "validation error: The label `app.kubernetes.io/name` is required. Rule autogen-check-for-labels failed at path /spec/template/metadata/labels/app.kubernetes.io/name/"
            ),
            "  autogen-check-for-labels: 'validation error: The label `app.kubernetes.io/name`\n    is required. Rule autogen-check-for-labels failed at path /spec/template/metadata/labels/app.kubernetes.io/name/'"
        );
        // Short values stay on one line; quotes double inside single quotes.
        assert_eq!(value("r", "it's: short"), "  r: 'it''s: short'");
    }

    #[test]
    fn folds_plain_and_double_quoted_values() {
        let long = "word ".repeat(30);
        let long = long.trim_end();
        let plain = value("rule", long);
        assert!(plain.lines().count() > 1, "{plain}");
        assert!(plain.lines().skip(1).all(|l| l.starts_with("    word")));
        let double = value("rule", &format!("{long}\x07"));
        assert!(double.starts_with("  rule: \"word"), "{double}");
        assert!(double.ends_with("word\\a\""), "{double}");
        assert!(double.lines().count() > 1);
    }

    /// The ASCII fast paths agree with the character walk on many strings
    /// made of the characters that matter.
    #[test]
    fn ascii_fast_paths_match_the_walk() {
        let alphabet = ["a", " ", ":", "#", "'", "-", "?", "b"];
        for text in random_texts(0x2545_f491_4f6c_dd1d, 20_000, 130, &alphabet) {
            let fast = style(&text);
            if fast == Style::DoubleQuoted {
                continue;
            }
            assert_eq!(fast, style_walk(&text), "{text:?}");
            for column in [0, 40, 79, 81] {
                let (mut a, mut b) = (String::new(), String::new());
                let mut w = Writer {
                    out: &mut a,
                    column,
                    indent: 4,
                    allow_breaks: true,
                };
                w.write(&text);
                let end_a = w.column;
                let mut w = Writer {
                    out: &mut b,
                    column,
                    indent: 4,
                    allow_breaks: true,
                };
                match fast {
                    Style::Plain => w.plain(&text),
                    _ => w.single_quoted(&text),
                }
                let end_b = w.column;
                assert_eq!((a, end_a), (b, end_b), "{text:?} at {column}");
            }
        }
    }

    /// Written into a JSON string body, every style gives exactly the YAML
    /// text escaped, folds and columns included.
    #[test]
    fn json_sink_writes_the_text_escaped() {
        let alphabet = [
            "a", " ", ":", "'", "\"", "\\", "\n", "\t", "\r", "\u{7}", "é", "日", "b", "#",
        ];
        let mut texts: Vec<String> = vec![
            "plain words".into(),
            "validation error: it's \"quoted\" and C:\\path".into(),
            "true".into(),
            "x".repeat(200),
        ];
        texts.extend(random_texts(0x5851_f42d_4c95_7f2d, 5_000, 120, &alphabet));
        for text in &texts {
            for column in [0, 79, 81] {
                let mut yaml = String::new();
                let yaml_end = push_key(&mut yaml, text, column);
                let yaml_end = push_value(&mut yaml, text, yaml_end, 4);
                let mut json = JsonWriter::default();
                let json_end = push_key(&mut json, text, column);
                let json_end = push_value(&mut json, text, json_end, 4);
                assert_eq!(json_end, yaml_end, "{text:?} at {column}");
                assert_eq!(json.finish().unescape(), yaml, "{text:?} at {column}");
            }
        }
    }

    /// A value started from a prerendered head is written exactly as in
    /// full, whatever follows the head; and the heads do apply to the
    /// usual message (a sentence, a colon, a path with no space).
    #[test]
    fn value_heads_write_what_the_writer_writes() {
        let head_alphabet = [
            "word ", "a", ": ", " ", "x.", "b", "#", "-", "'", "\"", "\t", "é",
        ];
        let tail_alphabet = [
            " failed at path ",
            "/spec/",
            "0",
            " ",
            "/",
            ":",
            "#",
            "\"",
            "\\",
            "'",
            "\n",
            "日",
        ];
        let mut heads = random_texts(0x2545_f491_4f6c_dd1d, 200, 40, &head_alphabet);
        // And as many shaped like a message, which a quoted head can start.
        let message_alphabet = &head_alphabet[..8];
        heads.extend(
            random_texts(0x6a09_e667_f3bc_c908, 200, 30, message_alphabet)
                .into_iter()
                .map(|h| [h.as_str(), ": ", h.as_str(), "z"].concat()),
        );
        let failed = "validation error: Privileged mode is disallowed. The fields spec.containers[*].securityContext.privileged must be unset or set to `false`. rule privileged-containers";
        heads.push(failed.into());
        // The longest head of a failed pattern ends at the path's first `/`.
        heads.push([failed, " failed at path /"].concat());
        let tails = random_texts(0x9e37_79b9_7f4a_7c15, 60, 12, &tail_alphabet);
        let mut started = 0;
        for head in &heads {
            for column in [2, 30, 79, 90] {
                let quoted = ValueHead::quoted_start(head, column, 4);
                let whole = ValueHead::whole(head, column, 4);
                let candidates: Vec<ValueHead> = quoted.iter().cloned().chain([whole]).collect();
                for tail in std::iter::once("").chain(tails.iter().map(String::as_str)) {
                    let text = [head, tail].concat();
                    let mut full = JsonWriter::default();
                    let full_end = push_value(&mut full, &text, column, 4);
                    let mut headed = JsonWriter::default();
                    let headed_end = push_value_headed(&mut headed, &text, column, 4, &candidates);
                    assert_eq!(
                        headed.finish(),
                        full.finish(),
                        "{head:?} + {tail:?} at {column}"
                    );
                    assert_eq!(headed_end, full_end, "{head:?} + {tail:?} at {column}");
                    if let Some(q) = &quoted {
                        started += usize::from(
                            q.write(&mut JsonWriter::default(), &text, column, 4)
                                .is_some(),
                        );
                    }
                }
                // Made for one column, a head is not used at another.
                let mut elsewhere = JsonWriter::default();
                assert!(
                    candidates[0]
                        .write(&mut elsewhere, head, column + 1, 4)
                        .is_none()
                );
            }
        }
        assert!(started > 5_000, "quoted heads applied {started} times");
        let usual = heads.last().unwrap();
        assert!(ValueHead::quoted_start(usual, 25, 4).is_some());
    }

    /// The shortcut for names writes keys as the writer does.
    #[test]
    fn plain_names_match_the_writer() {
        let mut names: Vec<String> = [
            "disallow-capabilities",
            "team-a/require-labels",
            "autogen-cronjob-check_1",
            "Rule.Name",
            "y",
            "no",
            "On",
            "NULL",
            "nullable",
            "true-ish",
            "x1.5",
            "e5",
            "1abc",
            "-x",
            ".inf",
            "",
        ]
        .map(String::from)
        .to_vec();
        let alphabet = ["a", "y", "N", "o", "0", "-", ".", "_", "/", " ", ":"];
        names.extend(random_texts(0x9e37_79b9_7f4a_7c15, 5_000, 9, &alphabet));
        for name in &names {
            let mut fast = String::new();
            let fast_end = push_key(&mut fast, name, 2);
            let mut slow = String::new();
            let mut w = Writer {
                out: &mut slow,
                column: 2,
                indent: 0,
                allow_breaks: false,
            };
            w.write(name);
            let slow_end = w.column;
            assert_eq!((fast, fast_end), (slow, slow_end), "{name:?}");
        }
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        // 74 two-byte characters end at column 79, so the first space does
        // not fold (counting bytes, it would).
        let wide = format!("{} tail end", "é".repeat(74));
        let folded = value("r", &wide);
        assert_eq!(folded, format!("  r: {} tail\n    end", "é".repeat(74)));
    }

    #[test]
    fn line_breaks_in_quoted_values() {
        assert_eq!(value("r", "a: b\nc"), "  r: 'a: b\n\n    c'");
    }
}
