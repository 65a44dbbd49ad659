use super::style::{Style, style, style_walk};
use super::writer::Writer;
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
