//! Each expected text is cel-go v0.30's answer in Kubernetes' environment
//! (`ext.Strings(ext.StringsVersion(2))`); `tests/cel_go.rs` asks cel-go
//! itself about these and more.

use super::super::{Activation, NoLookups, Program};
use kube_cel::cel::Value;

fn format(expr: &str) -> Result<String, String> {
    let program = Program::compile(expr).map_err(|e| e.to_string())?;
    match program.eval(&Activation::new(), &NoLookups) {
        Ok(Value::String(s)) => Ok(s.to_string()),
        Ok(other) => Err(format!("not a string: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

#[track_caller]
fn formats(expr: &str, want: &str) {
    assert_eq!(format(expr).as_deref(), Ok(want), "{expr}");
}

#[test]
fn lists_and_maps_print_as_cel_literals() {
    formats(
        r#""%s".format([["abc", 3.14, null, [9, 8, 7, 6], timestamp("2023-02-03T23:31:20Z")]])"#,
        r#"["abc", 3.140000, null, [9, 8, 7, 6], timestamp("2023-02-03T23:31:20Z")]"#,
    );
    formats(
        r#""%s".format([{"key1": b"xyz", "key5": null, "key2": duration("2h"), "key4": true, "key3": 2.71828}])"#,
        r#"{"key1":b"xyz", "key2":duration("7200s"), "key3":2.718280, "key4":true, "key5":null}"#,
    );
    formats(
        r#""%s".format([{1: 2, "a": 3, true: 4, 2u: 5, false: 6}])"#,
        r#"{"a":3, 1:2, 2:5, false:6, true:4}"#,
    );
    formats(
        r#""%s".format([[double("NaN"), double("Infinity"), double("-Infinity"), -0.0, 1e-7]])"#,
        r#"["NaN", "+Inf", "-Inf", -0.000000, 0.000000]"#,
    );
    formats(
        r#""%s".format([["tab	here", "uni é ☃", "ctl \u0001", "q\"\\"]])"#,
        r#"["tab\there", "uni é ☃", "ctl \x01", "q\"\\"]"#,
    );
    formats(
        r#""%s".format([[duration("1.5s"), type(1), int, [[]], {}]])"#,
        r#"[duration("1.5s"), int, int, [[]], {}]"#,
    );
}

#[test]
fn scalars_print_as_cel_go_converts_them_to_strings() {
    formats(r#""%s".format([1.0])"#, "1");
    formats(r#""%s".format([56.8])"#, "56.8");
    formats(r#""%s".format([123456.0])"#, "123456");
    formats(r#""%s".format([1234567.0])"#, "1.234567e+06");
    formats(r#""%s".format([0.0001])"#, "0.0001");
    formats(r#""%s".format([0.00001])"#, "1e-05");
    formats(r#""%s".format([1e21])"#, "1e+21");
    formats(r#""%s".format([-0.0])"#, "-0");
    formats(r#""%s".format([duration("1h45m47s")])"#, "6347s");
    formats(
        r#""%s".format([timestamp("2023-02-03T23:31:20.123+01:00")])"#,
        "2023-02-03T23:31:20.123+01:00",
    );
    formats(r#""%s".format([type("test string")])"#, "string");
    formats(r#""%s, %s".format([true, null])"#, "true, null");
    formats(r#"string(123456789.0)"#, "1.23456789e+08");
    formats(
        r#"string(timestamp("2023-02-03T23:31:20+01:00"))"#,
        "2023-02-03T23:31:20+01:00",
    );
}

#[test]
fn fixed_point_groups_thousands_and_rounds_the_exact_value() {
    formats(r#""%f".format([1234567.891])"#, "1,234,567.891000");
    formats(r#""%.3f".format([-1234567.891])"#, "-1,234,567.891");
    formats(r#""%.0f".format([1000.0])"#, "1,000");
    formats(r#""%.1f".format([999.96])"#, "1,000.0");
    formats(r#""%.0f".format([2.5])"#, "2");
    formats(r#""%.2f".format([2.675])"#, "2.67");
    formats(r#""%.2f".format([0.375])"#, "0.38");
    formats(r#""%.20f".format([0.1])"#, "0.10000000000000000555");
    formats(r#""%.2f".format([-0.001])"#, "-0.00");
    formats(r#""%f".format([-0.0])"#, "0.000000");
    formats(r#""%.3f".format([double("Infinity")])"#, "∞");
    formats(r#""%.3f".format(["-Infinity"])"#, "-∞");
    formats(r#""%f".format([double("NaN")])"#, "NaN");
}

#[test]
fn scientific_reads_its_precision_as_a_width() {
    formats(
        r#""%e".format([1052.032911275])"#,
        "1.052033\u{202f}×\u{202f}10⁰³",
    );
    formats(
        r#""%e".format([0.000123])"#,
        "1.230000\u{202f}×\u{202f}10⁻⁰⁴",
    );
    formats(
        r#""%e".format([1e-100])"#,
        "1.000000\u{202f}×\u{202f}10⁻¹⁰⁰",
    );
    formats(
        r#""%e".format([9.9999999])"#,
        "1.000000\u{202f}×\u{202f}10⁰¹",
    );
    formats(r#""%e".format([-0.0])"#, "0.000000\u{202f}×\u{202f}10⁰⁰");
    formats(
        r#""%.2e".format([1234.5])"#,
        "1.234500\u{202f}×\u{202f}10⁰³",
    );
    formats(
        r#""%.20e".format([1.0])"#,
        "     1.000000\u{202f}×\u{202f}10⁰⁰",
    );
    formats(r#""%e".format(["Infinity"])"#, "     ∞");
    formats(r#""%.8e".format([double("-Infinity")])"#, "      -∞");
    formats(r#""%.3e".format([double("NaN")])"#, "NaN");
}

#[test]
fn integers_in_other_bases_keep_their_sign() {
    formats(
        r#""%x %X %o %b".format([-255, 30, -8, -5])"#,
        "-ff 1E -10 -101",
    );
    formats(r#""%X".format([b"\x01\xab"])"#, "01AB");
    formats(r#""%x".format(["é"])"#, "c3a9");
    formats(r#""%b %b".format([false, uint(64)])"#, "0 1000000");
    formats(r#""%.2x".format([255])"#, "ff");
    formats(r#""%%%s%%".format(["text"])"#, "%text%");
}

#[test]
fn wrong_operands_and_clauses_are_cel_go_errors() {
    let cases = [
        (
            r#""%d".format([1.5])"#,
            "decimal clause can only be used on integers, was given double",
        ),
        (
            r#""%d".format([true])"#,
            "decimal clause can only be used on integers, was given bool",
        ),
        (
            r#""%f".format([2])"#,
            "fixed-point clause can only be used on doubles, was given int",
        ),
        (
            r#""%e".format([3u])"#,
            "scientific clause can only be used on doubles, was given uint",
        ),
        (
            r#""%x".format([0.5])"#,
            "can be formatted as hex, was given double",
        ),
        (
            r#""%o".format([null])"#,
            "octal clause can only be used on integers, was given null_type",
        ),
        (
            r#""%s".format([optional.of(1)])"#,
            "was given optional_type",
        ),
        (r#""%s".format([b"\xff"])"#, "invalid UTF-8 in bytes"),
        (r#""%s %s".format(["a"])"#, "index 1 out of range"),
        (r#""abc %".format(["a"])"#, "unexpected end of string"),
        (
            r#""%10s".format(["a"])"#,
            r#"unrecognized formatting clause "1""#,
        ),
        (
            r#""%E".format([0.5])"#,
            r#"unrecognized formatting clause "E""#,
        ),
        (
            r#""%.3".format([1.5])"#,
            "could not find end of precision specifier",
        ),
        (
            r#""%.f".format([1.5])"#,
            r#"strconv.Atoi: parsing "": invalid syntax"#,
        ),
    ];
    for (expr, want) in cases {
        let got = format(expr);
        assert!(
            got.as_ref().is_err_and(|e| e.contains(want)),
            "{expr}: {got:?}, want an error with {want:?}"
        );
    }
}
