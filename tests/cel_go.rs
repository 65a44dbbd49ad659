//! gavel's CEL against cel-go's as Kubernetes and Kyverno run it: the
//! oracle in `tests/cel-go` (cel-go at the version Kyverno pins, with the
//! strings extension at the version the API server enables), built once
//! into a cache outside the repository.
//!
//! The strings extension is where google/cel-spec's file and Kubernetes
//! part ways (the file follows the extension at version 4 and later, and a
//! later cel-go's range checks): every expression of its `string_ext` and
//! `timestamps` tests, and the cases below, must answer as cel-go does, the
//! same value, or an error (for `format`, with the same message), but for
//! gavel's known failures. Each test
//! `tests/data/cel-spec/kubernetes-answers.txt` lists must be one where
//! cel-go itself answers otherwise than the spec's file.

use crate::cel_spec::{Expected, bindings, expected, for_each_test, listed, run, skip_reason};
use gavel::cel::Program;
use gavel::cel::values::cel_to_json;
use kube_cel::cel::Value as CelValue;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
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

/// The oracle, built from `tests/cel-go` when its sources change.
fn oracle() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cel-go");
    let mut stamp = std::hash::DefaultHasher::new();
    for file in ["go.mod", "go.sum", "main.go"] {
        let text = std::fs::read(source.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        std::hash::Hash::hash(&text, &mut stamp);
    }
    let cache = std::env::var_os("GAVEL_BENCH_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/gavel-bench")
        });
    let binary = cache.join(format!(
        "cel-go-oracle-{:016x}",
        std::hash::Hasher::finish(&stamp)
    ));
    if !binary.exists() {
        std::fs::create_dir_all(&cache).unwrap();
        // Built beside and renamed into place, so that a concurrent run never
        // starts a half-written one.
        let staging = binary.with_extension(format!("staging-{}", std::process::id()));
        let status = Command::new("go")
            .args(["build", "-o"])
            .arg(&staging)
            .arg(".")
            .current_dir(&source)
            .status()
            .expect("go on PATH");
        assert!(status.success(), "building the cel-go oracle: {status}");
        std::fs::rename(&staging, &binary).unwrap();
    }
    binary
}

/// cel-go's answers to `requests` (`{"expr", "vars"}`), in order.
fn ask(requests: &[Value]) -> Vec<Value> {
    let mut child = Command::new(oracle())
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
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
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
/// is one this runner does not read (a timestamp, a duration, bytes).
fn value_agrees(value: &CelValue, cel_go: &Value) -> Option<bool> {
    if let Some(s) = cel_go.get("string") {
        return Some(matches!(value, CelValue::String(v) if s.as_str() == Some(v.as_str())));
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

/// Every test of the spec's strings extension and timestamps files, and
/// [`CASES`].
#[test]
fn strings_and_timestamps_answer_as_kubernetes_cel_go() {
    let mut cases = Vec::new();
    for file in ["string_ext", "timestamps"] {
        for_each_test(file, |id, test| {
            if skip_reason(test).is_some() {
                return;
            }
            let (Ok(vars), Ok(spec)) = (bindings(test), expected(test)) else {
                return;
            };
            if vars.iter().any(|(_, v)| json_of(v).is_none()) {
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
    let mut later_functions = Vec::new();
    let mut spec_differs = Vec::new();
    for (case, answer) in cases.iter().zip(&answers) {
        let gavel = Program::compile(&case.expr)
            .map_err(|e| e.to_string())
            .and_then(|p| run(&p, &case.vars));
        // A function of a later strings extension (`reverse`, version 3),
        // which gavel serves and Kubernetes' version 2 does not declare.
        let beyond = gavel.is_ok()
            && answer["error"]
                .as_str()
                .is_some_and(|m| m.starts_with("undeclared reference to"));
        if beyond {
            later_functions.push(case.id.clone());
            continue;
        }
        match agrees(&case.expr, &gavel, answer) {
            Some(true) => {}
            Some(false) if known.contains(&case.id) => known_disagreements += 1,
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
        "cel-go: {} expressions ({from_spec} of cel-spec's string_ext and timestamps tests), {} \
         disagree besides {known_disagreements} known failures, \
         {unread} not compared (a value this runner does not read), {} use a function \
         Kubernetes' strings extension lacks ({later_functions:?}); cel-go answers {} of the \
         spec's tests otherwise than the spec",
        cases.len(),
        disagreements.len(),
        later_functions.len(),
        spec_differs.len()
    );
    assert!(
        later_functions
            .iter()
            .all(|id| id.starts_with("string_ext/reverse/")),
        "only `reverse` is beyond Kubernetes' strings extension: {later_functions:?}"
    );
    assert!(
        from_spec > 200,
        "only {from_spec} of the spec's string_ext tests ran"
    );
    assert!(
        unread <= 2,
        "{unread} answers were not compared: read cel-go's values"
    );
    assert!(
        disagreements.is_empty(),
        "gavel and cel-go answer {} expressions differently:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    let listed_wrongly: Vec<&String> = kubernetes
        .iter()
        .filter(|id| id.starts_with("string_ext/") && !spec_differs.contains(id))
        .collect();
    assert!(
        listed_wrongly.is_empty(),
        "kubernetes-answers.txt lists tests cel-go answers as the spec does: {listed_wrongly:?}"
    );
}
