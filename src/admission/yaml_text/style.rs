//! The style go-yaml v2 picks for a scalar (its emitter's analysis):
//! plain, single-quoted or double-quoted, from the characters of the text
//! and from whether the text written plain would read back as something
//! other than a string. Printable ASCII, the usual message, is decided in
//! one pass over its bytes; anything else a character at a time.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
}

/// A name (letters, digits, `-`, `.`, `_`, `/`, starting with a letter)
/// that go-yaml would not read as a bool or null: it writes it plain. The
/// other checks of [`style`] cannot trigger on these characters.
pub(super) fn is_plain_name(s: &str) -> bool {
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

pub(super) fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t')
}

pub(super) fn is_printable(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\x20'..='\x7e' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
        && c != '\u{feff}'
}

/// The character at byte `i` and its width; `s[i..]` starts a character.
pub(super) fn char_at(s: &str, i: usize) -> (char, usize) {
    let b = s.as_bytes()[i];
    if b < 0x80 {
        return (b as char, 1);
    }
    let c = s[i..].chars().next().expect("i starts a character");
    (c, c.len_utf8())
}

/// What one pass over a value's bytes tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ascii {
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
pub(super) fn style_and_ascii(s: &str) -> (Style, Ascii) {
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
pub(super) fn style_walk(s: &str) -> Style {
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
pub(super) fn verbatim_ascii(bytes: &[u8]) -> bool {
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
pub(super) fn has_single_quote(bytes: &[u8]) -> bool {
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

/// The style go-yaml picks for a string value in block context.
#[cfg(test)]
pub(super) fn style(s: &str) -> Style {
    style_and_ascii(s).0
}
