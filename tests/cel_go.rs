//! gavel's CEL against cel-go's as Kubernetes and Kyverno run it: the
//! oracle in `tests/cel-go` (cel-go at the version Kyverno pins, with the
//! extensions at the versions the API server enables and the ones Kyverno
//! adds), built once into a cache outside the repository.
//!
//! Every google/cel-spec test `tests/cel_spec.rs` runs, and the cases
//! below, must answer as cel-go does, the same value, or an error (for
//! `format`, with the same message), but for gavel's known failures and
//! [`KNOWN_DISAGREEMENTS`]. Not compared: the tests the spec runs without
//! its type checker (Kubernetes always checks: `1 == 1.0` does not compile
//! there), and `reverse`, which Kubernetes' strings extension (version 2)
//! lacks and gavel serves. The strings extension is where the spec's file
//! and Kubernetes part ways (the file follows the extension at version 4
//! and later, and a later cel-go's range checks). Each test
//! `tests/data/cel-spec/kubernetes-answers.txt` lists must be one where
//! cel-go itself answers otherwise than the spec's file.

use crate::cel_spec::{Expected, bindings, expected, for_each_test, listed, run, skip_reason};
use gavel::cel::Program;
use gavel::cel::values::cel_to_json;
use kube_cel::cel::Value as CelValue;
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};

/// Expressions beyond the spec's, each a difference between the strings
/// extension's versions, a corner of Go's printing or of time zones.
const CASES: &[&str] = &[
    r#""%s".format([["abc", 3.14, null, [9, 8, 7, 6], timestamp("2023-02-03T23:31:20.123Z")]])"#,
    r#""%s".format([{1: 2, "a": 3, true: 4, 2u: 5, false: 6, "b": {"x": [1.5]}}])"#,
    r#""%s".format([[double("NaN"), double("Infinity"), double("-Infinity"), -0.0, 1e-7, 1e21]])"#,
    r#""%s".format([["tab	here", "uni é ☃", "ctl \u0001", "q\"\\", b"q\"x"]])"#,
    r#""%s".format([[duration("1.5s"), duration("-90m"), type(1), int, [[]], {}]])"#,
    r#""%s %s %s %s %s".format([1.0, 56.8, 123456.0, 1234567.0, 0.00001])"#,
    r#""%s %s %s".format([1e21, -0.0, 2.0e-7])"#,
    r#""%s".format([timestamp("2023-02-03T23:31:20.123+01:00")])"#,
    r#""%s".format([timestamp("2023-02-03T23:31:20.000000001-05:30")])"#,
    r#"string(timestamp("2023-02-03T23:31:20+01:00"))"#,
    r#"string(123456789.0) + " " + string(1e-5) + " " + string(-2.5)"#,
    r#""%f|%.3f|%.0f|%.1f".format([1234567.891, -1234567.891, 1000.0, 999.96])"#,
    r#""%.0f %.0f %.0f %.2f %.2f %.2f".format([2.5, 3.5, 0.5, 2.675, 0.375, 1.015])"#,
    r#""%.20f|%.2f|%f|%f".format([0.1, -0.001, -0.0, 5e-324])"#,
    r#""%f|%.3f|%f|%.2f".format([double("NaN"), double("Infinity"), "-Infinity", 1e22])"#,
    r#""%e|%e|%e|%e".format([1052.032911275, 0.000123, 1e-100, 1e100])"#,
    r#""%e|%e|%e|%.2e".format([9.9999999, -0.0, -5.5, 1234.5])"#,
    r#""%.20e|%e|%.8e|%.3e".format([1.0, "Infinity", double("-Infinity"), double("NaN")])"#,
    r#""%e %e %e".format([1.0000005, 1.0000015, 1.0000025])"#,
    r#""%x %X %o %b %d".format([-255, 30, -8, -5, -9223372036854775808])"#,
    r#""%X %x %b %b %.2x %o".format([b"\x01\xab", "é", false, uint(64), 255, 18446744073709551615u])"#,
    r#""%d".format([1.5])"#,
    r#""%d".format([true])"#,
    r#""%f".format([2])"#,
    r#""%e".format([3u])"#,
    r#""%x".format([0.5])"#,
    r#""%b".format(["abc"])"#,
    r#""%o".format([null])"#,
    r#""%s".format([optional.of(1)])"#,
    r#""%s".format([b"\xff"])"#,
    r#""%s".format([[b"\xff"]])"#,
    r#""%s %s".format(["a"])"#,
    r#""%s".format(["a", "b"])"#,
    r#""abc %".format(["a"])"#,
    r#""%".format([])"#,
    r#""%10s".format(["a"])"#,
    r#""%E".format([0.5])"#,
    r#""%é".format([1])"#,
    r#""%.3".format([1.5])"#,
    r#""%.".format([1.5])"#,
    r#""%.f".format([1.5])"#,
    r#""%.101f".format([1.5])"#,
    "timestamp('2023-01-01T10:00:00+05:00').getHours()",
    "timestamp('2023-07-01T12:00:00Z').getHours('America/New_York')",
    "timestamp('2023-01-01T12:00:00Z').getHours('America/New_York')",
    "timestamp('2023-01-01T00:30:00Z').getDayOfWeek('-01:00')",
    "timestamp('2023-12-31T23:30:00Z').getFullYear('+01:00')",
    "timestamp('2023-12-31T23:30:00Z').getDayOfYear('+01:00')",
    "timestamp('2023-01-01T00:00:00Z').getMinutes('Asia/Kathmandu')",
    "timestamp('2023-01-01T00:00:00Z').getHours('Nowhere/City')",
    "timestamp('2023-01-01T00:00:00Z').getHours('x:00')",
    "timestamp('2023-01-01T00:00:00Z').getHours('-00:30')",
    "timestamp('2023-01-01T00:00:00Z').getMinutes('-00:30')",
    "timestamp('2023-01-01T00:00:00.123Z').getMilliseconds('UTC')",
    "timestamp('2023-01-01T00:00:00Z').getHours('')",
    "duration('3h30m').getMinutes()",
    "'abc'.indexOf('c', 3)",
    "'abc'.lastIndexOf('c', 2)",
    "'abc'.lastIndexOf('c')",
    "'abc'.indexOf('', 4)",
    "'abc'.indexOf('', -1)",
    "'ümlaut'.indexOf('l', 1)",
    "'abc'.lastIndexOf('', 10)",
    "'abc'.lastIndexOf('c', 3)",
    "'abc'.lastIndexOf('bc', 1)",
    "'abc'.lastIndexOf('abcd')",
    "'abc'.substring(2, 1)",
    "'abc'.substring(5, 1)",
    "'abc'.substring(-1, 5)",
    "'abc'.substring(1, 5)",
    "'a,b,c'.split(',', -1)",
    "'a,b,c'.split(',', 2)",
    "'abc'.split('', 2)",
    "''.split('').size()",
    "''.split(',').size()",
    "'abc'.replace('', '-')",
    "'aaa'.replace('a', 'b', -2)",
    "'aaa'.replace('a', 'b', 0)",
];

/// cel-go's answers to `requests` (`{"expr", "vars"}`), in order.
fn ask(requests: &[Value]) -> Vec<Value> {
    let mut child = Command::new(crate::support::tools::cel_go_oracle())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the cel-go oracle");
    let mut input = String::new();
    for r in requests {
        input.push_str(&r.to_string());
        input.push('\n');
    }
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "the cel-go oracle failed");
    let answers: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), requests.len(), "one answer per expression");
    answers
}

/// One expression to put to both: its id, source and variables.
struct Case {
    id: String,
    expr: String,
    vars: Vec<(String, CelValue)>,
    /// The spec's expectation, for its own tests.
    spec: Option<Expected>,
}

fn json_of(value: &CelValue) -> Option<Value> {
    match value {
        CelValue::String(s) => Some(json!(s.as_str())),
        CelValue::Int(i) => Some(json!(i)),
        CelValue::Float(d) => Some(json!(d)),
        CelValue::Bool(b) => Some(json!(b)),
        _ => None,
    }
}

/// Two JSON values the same, numbers by value (cel-go's JSON has no
/// integers).
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        // Within a few units in the last place: serde_json reads numbers
        // faster than exactly.
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-15 * x.abs().max(y.abs()),
            _ => false,
        },
        // cel-go's JSON writes an integer beyond 2^53 as a string.
        (Value::Number(x), Value::String(y)) | (Value::String(y), Value::Number(x)) => {
            (x.is_i64() || x.is_u64()) && x.to_string() == *y
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// How a value compares with cel-go's answer: `None` when cel-go's answer
/// is one this runner does not read.
fn value_agrees(value: &CelValue, cel_go: &Value) -> Option<bool> {
    if let Some(s) = cel_go.get("string") {
        return Some(matches!(value, CelValue::String(v) if s.as_str() == Some(v.as_str())));
    }
    // What JSON does not hold, as Go's `%v` prints it: a type by its name
    // (gavel's type values are marked strings), a double's infinities.
    if let Some(printed) = cel_go.get("value").and_then(Value::as_str) {
        return match value {
            CelValue::String(s) => Some(s.strip_prefix("\u{1}type:") == Some(printed)),
            CelValue::Float(d) if d.is_infinite() => {
                Some(printed == if *d > 0.0 { "+Inf" } else { "-Inf" })
            }
            _ => None,
        };
    }
    let want = cel_go.get("json")?;
    Some(cel_to_json(value).is_ok_and(|got| same_json(&got, want)))
}

/// Whether gavel's outcome is cel-go's answer: the same value, or both an
/// error (for `format`, with the same message).
fn agrees(expr: &str, gavel: &Result<CelValue, String>, cel_go: &Value) -> Option<bool> {
    match (gavel, cel_go.get("error")) {
        (Err(e), Some(m)) => {
            Some(!expr.contains(".format(") || m.as_str().is_some_and(|m| e.contains(m)))
        }
        (Err(_), None) => Some(false),
        (Ok(_), Some(_)) => Some(false),
        (Ok(v), None) => value_agrees(v, cel_go),
    }
}

/// Whether cel-go's answer is what the spec's file expects.
fn spec_agrees(spec: &Expected, cel_go: &Value) -> bool {
    match spec {
        Expected::Error => cel_go.get("error").is_some(),
        Expected::Value(_) if cel_go.get("error").is_some() => false,
        Expected::Value(v) => value_agrees(v, cel_go).unwrap_or(true),
    }
}

/// Where gavel answers otherwise than cel-go and the spec's file accepts
/// gavel's answer (each must still disagree): (test, why).
const KNOWN_DISAGREEMENTS: &[(&str, &str)] = &[];

/// Every test of the spec's files this runner reads, and [`CASES`].
#[test]
fn cel_spec_answers_as_kubernetes_cel_go() {
    let mut cases = Vec::new();
    let mut unchecked = 0;
    for file in crate::cel_spec::FILES {
        for_each_test(file, |id, test| {
            if skip_reason(test).is_some() {
                return;
            }
            let (Ok(vars), Ok(spec)) = (bindings(test), expected(test)) else {
                return;
            };
            // The spec runs these without its type checker; Kubernetes
            // always checks (`1 == 1.0` does not compile there).
            if vars.iter().any(|(_, v)| json_of(v).is_none()) || test.flag("disable_check") {
                unchecked += 1;
                return;
            }
            cases.push(Case {
                id,
                expr: test.text("expr").unwrap_or_default(),
                vars,
                spec: Some(spec),
            });
        });
    }
    let from_spec = cases.len();
    cases.extend(CASES.iter().map(|expr| Case {
        id: expr.to_string(),
        expr: expr.to_string(),
        vars: Vec::new(),
        spec: None,
    }));
    let requests: Vec<Value> = cases
        .iter()
        .map(|c| {
            let vars: serde_json::Map<String, Value> = c
                .vars
                .iter()
                .filter_map(|(name, v)| Some((name.clone(), json_of(v)?)))
                .collect();
            json!({"expr": c.expr, "vars": vars})
        })
        .collect();
    let answers = ask(&requests);

    let kubernetes = listed("kubernetes-answers.txt");
    // gavel's known failures disagree with cel-go too; they are counted.
    let known = listed("known-failures.txt");
    let mut known_disagreements = 0;
    let mut disagreements = Vec::new();
    let mut unread = 0;
    let mut still_disagree = Vec::new();
    let mut agreed = Vec::new();
    let mut later_functions = Vec::new();
    let mut spec_differs = Vec::new();
    for (case, answer) in cases.iter().zip(&answers) {
        let gavel = Program::compile(&case.expr)
            .map_err(|e| e.to_string())
            .and_then(|p| run(&p, &case.vars));
        // A function of a later strings extension (`reverse`, version 3),
        // which gavel serves and Kubernetes' version 2 does not declare.
        if case.id.starts_with("string_ext/reverse/") {
            later_functions.push(case.id.clone());
            continue;
        }
        match agrees(&case.expr, &gavel, answer) {
            Some(true) => agreed.push(case.id.clone()),
            Some(false) if known.contains(&case.id) => known_disagreements += 1,
            Some(false) if KNOWN_DISAGREEMENTS.iter().any(|(id, _)| *id == case.id) => {
                still_disagree.push(case.id.clone())
            }
            Some(false) => disagreements.push(format!(
                "{}\n    gavel:  {gavel:?}\n    cel-go: {answer}",
                case.id
            )),
            None => unread += 1,
        }
        if let Some(spec) = &case.spec
            && !spec_agrees(spec, answer)
        {
            spec_differs.push(case.id.clone());
        }
    }
    eprintln!(
        "cel-go: {} expressions ({from_spec} of cel-spec's tests), {} disagree besides \
         {known_disagreements} known failures; not compared: {unread} values this runner does \
         not read, {unchecked} tests the \
         spec runs unchecked, {} using `reverse` (a later strings extension); cel-go answers {} \
         of the spec's tests otherwise than the spec",
        cases.len(),
        disagreements.len(),
        later_functions.len(),
        spec_differs.len()
    );
    assert!(
        disagreements.is_empty(),
        "gavel and cel-go answer {} expressions differently:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    assert!(
        later_functions
            .iter()
            .all(|id| id.starts_with("string_ext/reverse/")),
        "only `reverse` is beyond Kubernetes' strings extension: {later_functions:?}"
    );
    assert!(from_spec > 1400, "only {from_spec} of the spec's tests ran");
    assert!(
        unread == 0,
        "{unread} answers were not compared: read cel-go's values"
    );
    // A known failure where gavel answers as cel-go, against the spec, is
    // an answer as Kubernetes gives it.
    let as_kubernetes: Vec<&String> = agreed
        .iter()
        .filter(|id| known.contains(*id) && spec_differs.contains(id))
        .collect();
    assert!(
        as_kubernetes.is_empty(),
        "gavel answers these known failures as cel-go does: move them to \
         kubernetes-answers.txt: {as_kubernetes:?}"
    );
    let agree_now: Vec<&str> = KNOWN_DISAGREEMENTS
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| !still_disagree.iter().any(|d| d == id))
        .collect();
    assert!(
        agree_now.is_empty(),
        "these agree with cel-go now; take them out of KNOWN_DISAGREEMENTS: {agree_now:?}"
    );
    let listed_wrongly: Vec<&String> = kubernetes
        .iter()
        .filter(|id| !spec_differs.contains(id))
        .collect();
    assert!(
        listed_wrongly.is_empty(),
        "kubernetes-answers.txt lists tests cel-go answers as the spec does: {listed_wrongly:?}"
    );
}
