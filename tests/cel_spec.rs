//! google/cel-spec's conformance tests (`tests/simple/testdata`), the files
//! of the CEL that Kubernetes and Kyverno enable: the base language,
//! optionals, the strings, math, encoders and bindings extensions and
//! two-variable comprehensions. The data is vendored in
//! `tests/data/cel-spec` (see its README for the commit).
//!
//! Each test's expression is compiled and evaluated as gavel serves it (the
//! direct evaluator, handing over to the interpreter), and again by the
//! interpreter alone. Tests that need protocol buffer messages, a
//! container, unknowns or the type checker's deduced types are skipped and
//! counted. Every failure must be listed in `known-failures.txt` with its
//! reason, or in `kubernetes-answers.txt` where the CEL Kubernetes enables
//! answers otherwise than the spec's file (checked against cel-go itself in
//! `tests/cel_go.rs`), and every listed test must still fail: a fix removes
//! its line, so the pass count only goes up.

use gavel::cel::{Activation, NoLookups, Program};
use kube_cel::cel::Value as CelValue;
use kube_cel::cel::objects::{Key, Map};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The vendored files, in the order they are reported.
pub(crate) const FILES: &[&str] = &[
    "basic",
    "comparisons",
    "conversions",
    "integer_math",
    "fp_math",
    "lists",
    "logic",
    "macros",
    "macros2",
    "string",
    "string_ext",
    "optionals",
    "fields",
    "timestamps",
    "parse",
    "plumbing",
    "math_ext",
    "encoders_ext",
    "bindings_ext",
];

pub(crate) fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cel-spec")
}

/// A textproto message: its fields in order (a repeated field repeats).
#[derive(Debug, Clone, Default)]
pub(crate) struct Message(Vec<(String, Field)>);

#[derive(Debug, Clone)]
pub(crate) enum Field {
    Message(Message),
    /// A string literal's bytes (escapes resolved; adjacent literals joined).
    Text(Vec<u8>),
    /// A number, an enum value or a bool, as written.
    Word(String),
    List(Vec<Field>),
}

impl Message {
    /// Every value of a field (`f: [a, b]` is `f: a f: b`).
    fn all<'m>(&'m self, name: &str) -> impl Iterator<Item = &'m Field> + 'm {
        let name = name.to_string();
        self.0
            .iter()
            .filter(move |(n, _)| *n == name)
            .flat_map(|(_, f)| match f {
                Field::List(items) => items.iter().collect::<Vec<_>>(),
                one => vec![one],
            })
    }

    fn get(&self, name: &str) -> Option<&Field> {
        self.all(name).next()
    }

    fn message(&self, name: &str) -> Option<&Message> {
        match self.get(name)? {
            Field::Message(m) => Some(m),
            _ => None,
        }
    }

    pub(crate) fn text(&self, name: &str) -> Option<String> {
        match self.get(name)? {
            Field::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
            _ => None,
        }
    }

    pub(crate) fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some(Field::Word(w)) if w == "true")
    }
}

/// A reader of the protocol buffer text format, as much of it as the
/// conformance files use.
struct TextProto<'s> {
    src: &'s [u8],
    at: usize,
}

impl<'s> TextProto<'s> {
    fn parse(src: &'s str) -> Result<Message, String> {
        let mut p = TextProto {
            src: src.as_bytes(),
            at: 0,
        };
        let m = p.fields(None)?;
        Ok(m)
    }

    fn error<T>(&self, what: &str) -> Result<T, String> {
        let line = self.src[..self.at.min(self.src.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        Err(format!("line {line}: {what}"))
    }

    fn skip_space(&mut self) {
        while let Some(&b) = self.src.get(self.at) {
            if b == b'#' {
                while self.src.get(self.at).is_some_and(|&b| b != b'\n') {
                    self.at += 1;
                }
            } else if b.is_ascii_whitespace() {
                self.at += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.src.get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn fields(&mut self, close: Option<u8>) -> Result<Message, String> {
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None if close.is_none() => return Ok(Message(out)),
                None => return self.error("unclosed message"),
                Some(b) if Some(b) == close => {
                    self.at += 1;
                    return Ok(Message(out));
                }
                _ => {}
            }
            let name = self.name()?;
            let colon = self.eat(b':');
            let value = match self.peek() {
                Some(b'{') | Some(b'<') => self.value()?,
                _ if !colon => return self.error("expected ':' or a message"),
                _ => self.value()?,
            };
            out.push((name, value));
            // Fields may be separated by ',' or ';'.
            if !self.eat(b',') {
                self.eat(b';');
            }
        }
    }

    /// A field name, or an extension or Any type URL in brackets.
    fn name(&mut self) -> Result<String, String> {
        if self.eat(b'[') {
            let start = self.at;
            while self.src.get(self.at).is_some_and(|&b| b != b']') {
                self.at += 1;
            }
            let name = String::from_utf8_lossy(&self.src[start..self.at]).into_owned();
            self.at += 1;
            return Ok(format!("[{name}]"));
        }
        let word = self.word();
        if word.is_empty() {
            return self.error("expected a field name");
        }
        Ok(word)
    }

    fn word(&mut self) -> String {
        self.skip_space();
        let start = self.at;
        while self
            .src
            .get(self.at)
            .is_some_and(|&b| b.is_ascii_alphanumeric() || b"_.+-".contains(&b))
        {
            self.at += 1;
        }
        String::from_utf8_lossy(&self.src[start..self.at]).into_owned()
    }

    fn value(&mut self) -> Result<Field, String> {
        match self.peek() {
            Some(b'{') => {
                self.at += 1;
                Ok(Field::Message(self.fields(Some(b'}'))?))
            }
            Some(b'<') => {
                self.at += 1;
                Ok(Field::Message(self.fields(Some(b'>'))?))
            }
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                while !self.eat(b']') {
                    items.push(self.value()?);
                    self.eat(b',');
                }
                Ok(Field::List(items))
            }
            Some(b'"') | Some(b'\'') => {
                let mut bytes = Vec::new();
                while let Some(q @ (b'"' | b'\'')) = self.peek() {
                    self.at += 1;
                    self.string(q, &mut bytes)?;
                }
                Ok(Field::Text(bytes))
            }
            Some(_) => {
                let word = self.word();
                if word.is_empty() {
                    return self.error("expected a value");
                }
                Ok(Field::Word(word))
            }
            None => self.error("expected a value"),
        }
    }

    /// The rest of a quoted literal, its C-style escapes resolved.
    fn string(&mut self, quote: u8, out: &mut Vec<u8>) -> Result<(), String> {
        loop {
            let Some(&b) = self.src.get(self.at) else {
                return self.error("unclosed string");
            };
            self.at += 1;
            if b == quote {
                return Ok(());
            }
            if b != b'\\' {
                out.push(b);
                continue;
            }
            let Some(&e) = self.src.get(self.at) else {
                return self.error("unclosed string");
            };
            self.at += 1;
            match e {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'r' => out.push(b'\r'),
                b'a' => out.push(7),
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'v' => out.push(11),
                b'0'..=b'7' => {
                    let mut n = u32::from(e - b'0');
                    for _ in 0..2 {
                        match self.src.get(self.at) {
                            Some(&d @ b'0'..=b'7') => {
                                n = n * 8 + u32::from(d - b'0');
                                self.at += 1;
                            }
                            _ => break,
                        }
                    }
                    out.push(n as u8);
                }
                b'x' | b'X' => {
                    let digits = self.hex_digits(2);
                    out.push(u8::from_str_radix(&digits, 16).map_err(|e| e.to_string())?);
                }
                b'u' | b'U' => {
                    let digits = self.hex_digits(if e == b'u' { 4 } else { 8 });
                    let code = u32::from_str_radix(&digits, 16).map_err(|e| e.to_string())?;
                    let c = char::from_u32(code).ok_or("an escape that is no character")?;
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
                other => out.push(other),
            }
        }
    }

    fn hex_digits(&mut self, max: usize) -> String {
        let start = self.at;
        while self.at - start < max && self.src.get(self.at).is_some_and(u8::is_ascii_hexdigit) {
            self.at += 1;
        }
        String::from_utf8_lossy(&self.src[start..self.at]).into_owned()
    }
}

/// A `cel.expr.Value` as a CEL value; `Err` names what it needs that
/// these tests do not bind (a message, an enum).
fn to_cel(value: &Message) -> Result<CelValue, String> {
    let Some((kind, field)) = value.0.first() else {
        return Err("an empty value".into());
    };
    let word = || match field {
        Field::Word(w) => Ok(w.as_str()),
        other => Err(format!("{kind}: {other:?}")),
    };
    let bytes = || match field {
        Field::Text(t) => Ok(t.clone()),
        other => Err(format!("{kind}: {other:?}")),
    };
    Ok(match kind.as_str() {
        "null_value" => CelValue::Null,
        "bool_value" => CelValue::Bool(word()? == "true"),
        "int64_value" => CelValue::Int(word()?.parse().map_err(|e| format!("{e}"))?),
        "uint64_value" => CelValue::UInt(word()?.parse().map_err(|e| format!("{e}"))?),
        "double_value" => CelValue::Float(parse_double(word()?)?),
        "string_value" => CelValue::String(Arc::new(
            String::from_utf8(bytes()?).map_err(|e| e.to_string())?,
        )),
        "bytes_value" => CelValue::Bytes(Arc::new(bytes()?)),
        "type_value" => CelValue::String(Arc::new(format!(
            "\u{1}type:{}",
            String::from_utf8_lossy(&bytes()?)
        ))),
        "list_value" => {
            let Field::Message(list) = field else {
                return Err("list_value".into());
            };
            let items = list
                .all("values")
                .map(|v| match v {
                    Field::Message(m) => to_cel(m),
                    other => Err(format!("list item {other:?}")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            CelValue::List(Arc::new(items))
        }
        "map_value" => {
            let Field::Message(map) = field else {
                return Err("map_value".into());
            };
            let mut entries = HashMap::new();
            for entry in map.all("entries") {
                let Field::Message(entry) = entry else {
                    return Err("map entry".into());
                };
                let key = to_cel(entry.message("key").ok_or("map key")?)?;
                let key = match key {
                    CelValue::Int(i) => Key::Int(i),
                    CelValue::UInt(u) => Key::Uint(u),
                    CelValue::Bool(b) => Key::Bool(b),
                    CelValue::String(s) => Key::String(s),
                    other => return Err(format!("map key {other:?}")),
                };
                entries.insert(key, to_cel(entry.message("value").ok_or("map value")?)?);
            }
            CelValue::Map(Map {
                map: Arc::new(entries),
            })
        }
        other => return Err(format!("unsupported expected value: {other}")),
    })
}

fn parse_double(word: &str) -> Result<f64, String> {
    match word {
        "inf" | "infinity" => Ok(f64::INFINITY),
        "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
        "nan" => Ok(f64::NAN),
        w => w.parse().map_err(|e| format!("{w}: {e}")),
    }
}

/// Equal as the conformance runner compares: same type, same value, NaN
/// equal to NaN.
fn same(a: &CelValue, b: &CelValue) -> bool {
    match (a, b) {
        (CelValue::Float(x), CelValue::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
        (CelValue::List(x), CelValue::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(a, b)| same(a, b))
        }
        (CelValue::Map(x), CelValue::Map(y)) => {
            x.map.len() == y.map.len()
                && x.map
                    .iter()
                    .all(|(k, v)| y.map.get(k).is_some_and(|w| same(v, w)))
        }
        (CelValue::Int(x), CelValue::Int(y)) => x == y,
        (CelValue::UInt(x), CelValue::UInt(y)) => x == y,
        (CelValue::String(x), CelValue::String(y)) => x == y,
        (CelValue::Bytes(x), CelValue::Bytes(y)) => x == y,
        (CelValue::Bool(x), CelValue::Bool(y)) => x == y,
        (CelValue::Null, CelValue::Null) => true,
        (CelValue::Duration(x), CelValue::Duration(y)) => x == y,
        (CelValue::Timestamp(x), CelValue::Timestamp(y)) => x == y,
        _ => false,
    }
}

/// What a test expects.
pub(crate) enum Expected {
    Value(CelValue),
    Error,
}

/// Why a test is not run.
pub(crate) fn skip_reason(test: &Message) -> Option<String> {
    let expr = test.text("expr").unwrap_or_default();
    if test.get("container").is_some() {
        return Some("a container".into());
    }
    if test.flag("disable_macros") {
        return Some("macros disabled".into());
    }
    if test.flag("check_only") || test.get("typed_result").is_some() {
        return Some("the type checker's result".into());
    }
    if test.get("unknown").is_some() || test.get("any_unknowns").is_some() {
        return Some("unknowns".into());
    }
    // Protocol buffer messages and well-known wrapper types: Kubernetes
    // CEL has objects from JSON, no messages.
    if [
        "google.protobuf.",
        "TestAllTypes",
        "NestedTestAllTypes",
        "proto2",
        "proto3",
    ]
    .iter()
    .any(|m| expr.contains(m))
    {
        return Some("protocol buffer messages".into());
    }
    if format!("{test:?}").contains("object_value") {
        return Some("protocol buffer messages".into());
    }
    if expected(test).and_then(|_| bindings(test)).is_err() {
        return Some("a value this runner does not represent".into());
    }
    None
}

pub(crate) fn expected(test: &Message) -> Result<Expected, String> {
    if test.get("eval_error").is_some() || test.get("any_eval_errors").is_some() {
        return Ok(Expected::Error);
    }
    match test.message("value") {
        Some(v) => Ok(Expected::Value(to_cel(v)?)),
        // No result matcher: the spec's default is `true`.
        None => Ok(Expected::Value(CelValue::Bool(true))),
    }
}

pub(crate) fn bindings(test: &Message) -> Result<Vec<(String, CelValue)>, String> {
    let mut out = Vec::new();
    for b in test.all("bindings") {
        let Field::Message(b) = b else {
            return Err("bindings".into());
        };
        let name = b.text("key").ok_or("binding key")?;
        let value = b
            .message("value")
            .and_then(|v| v.message("value"))
            .ok_or("a binding that is not a value")?;
        out.push((name, to_cel(value)?));
    }
    Ok(out)
}

/// The outcome of one evaluation, for the report.
pub(crate) fn run(program: &Program, vars: &[(String, CelValue)]) -> Result<CelValue, String> {
    let mut activation = Activation::new();
    for (name, value) in vars {
        activation
            .set(name, value.clone())
            .map_err(|e| e.to_string())?;
    }
    program
        .eval(&activation, &NoLookups)
        .map_err(|e| e.to_string())
}

fn check(got: &Result<CelValue, String>, want: &Expected) -> bool {
    match (got, want) {
        (Ok(v), Expected::Value(w)) => same(v, w),
        (Err(_), Expected::Error) => true,
        _ => false,
    }
}

#[derive(Default)]
struct Counts {
    run: usize,
    passed: usize,
    interpreter_passed: usize,
    skipped: BTreeMap<String, usize>,
}

/// One test's result as gavel serves it: `Ok(())` or why it failed.
fn evaluate(test: &Message, counts: &mut Counts) -> Result<(), String> {
    let expr = test.text("expr").ok_or("no expr")?;
    let want = expected(test)?;
    let vars = bindings(test)?;
    counts.run += 1;
    let compiled = std::panic::catch_unwind(|| Program::compile(&expr))
        .map_err(|_| "compiling panicked".to_string())?;
    let program = match compiled {
        Ok(p) => p,
        Err(e) => {
            return if matches!(want, Expected::Error) {
                counts.passed += 1;
                counts.interpreter_passed += 1;
                Ok(())
            } else {
                Err(format!("compile error: {e}"))
            };
        }
    };
    let interpreted =
        std::panic::catch_unwind(AssertUnwindSafe(|| run(&program.interpreted_only(), &vars)));
    if interpreted.as_ref().is_ok_and(|got| check(got, &want)) {
        counts.interpreter_passed += 1;
    }
    let served = std::panic::catch_unwind(AssertUnwindSafe(|| run(&program, &vars)))
        .map_err(|_| "evaluation panicked".to_string())?;
    if check(&served, &want) {
        counts.passed += 1;
        return Ok(());
    }
    let want = match want {
        Expected::Value(v) => format!("{v:?}"),
        Expected::Error => "an error".into(),
    };
    Err(format!("got {served:?}, want {want}"))
}

/// Calls `f` with the id (`file/section/name`) and message of every
/// test of a vendored file.
pub(crate) fn for_each_test(file: &str, mut f: impl FnMut(String, &Message)) {
    let text = std::fs::read_to_string(data().join(format!("{file}.textproto")))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    let parsed = TextProto::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    for section in parsed.all("section") {
        let Field::Message(section) = section else {
            panic!("{file}: a section that is not a message");
        };
        let section_name = section.text("name").unwrap_or_default();
        for test in section.all("test") {
            let Field::Message(test) = test else {
                panic!("{file}: a test that is not a message");
            };
            let id = format!(
                "{file}/{section_name}/{}",
                test.text("name").unwrap_or_default()
            );
            f(id, test);
        }
    }
}

/// The test ids a list file names, one per line (`#` starts a comment).
pub(crate) fn listed(file: &str) -> BTreeSet<String> {
    std::fs::read_to_string(data().join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn cel_spec_conformance() {
    let known = listed("known-failures.txt");
    // Where the spec's file and the CEL Kubernetes enables part ways: gavel
    // answers as Kubernetes (`tests/cel_go.rs` holds it to cel-go there).
    let kubernetes = listed("kubernetes-answers.txt");
    // The crate's panics are caught and counted; keep their messages out
    // of the report.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures: BTreeMap<String, String> = BTreeMap::new();
    let mut total = Counts::default();
    let mut lines = Vec::new();
    for file in FILES {
        let mut counts = Counts::default();
        for_each_test(file, |id, test| {
            if let Some(reason) = skip_reason(test) {
                *counts.skipped.entry(reason).or_default() += 1;
                return;
            }
            if let Err(why) = evaluate(test, &mut counts) {
                failures.insert(id, why);
            }
        });
        let skipped: usize = counts.skipped.values().sum();
        lines.push(format!(
            "{file:>14}: {:>3} of {:>3} pass ({:>3} interpreter alone), {skipped:>3} skipped",
            counts.passed, counts.run, counts.interpreter_passed
        ));
        total.run += counts.run;
        total.passed += counts.passed;
        total.interpreter_passed += counts.interpreter_passed;
        for (reason, n) in counts.skipped {
            *total.skipped.entry(reason).or_default() += n;
        }
    }
    std::panic::set_hook(hook);
    for line in &lines {
        eprintln!("cel-spec {line}");
    }
    eprintln!(
        "cel-spec: {} of {} pass ({} interpreter alone); skipped: {:?}",
        total.passed, total.run, total.interpreter_passed, total.skipped
    );
    let as_kubernetes = kubernetes
        .iter()
        .filter(|id| failures.contains_key(*id))
        .count();
    eprintln!(
        "cel-spec: {as_kubernetes} of the failures answer as Kubernetes' CEL does \
         (kubernetes-answers.txt), {} are known failures",
        failures.len() - as_kubernetes
    );
    let new: Vec<String> = failures
        .iter()
        .filter(|(id, _)| !known.contains(*id) && !kubernetes.contains(*id))
        .map(|(id, why)| format!("{id}: {why}"))
        .collect();
    let fixed: Vec<&String> = known
        .iter()
        .chain(&kubernetes)
        .filter(|id| !failures.contains_key(*id))
        .collect();
    assert!(
        new.is_empty(),
        "{} cel-spec tests fail that known-failures.txt does not list:\n{}",
        new.len(),
        new.join("\n")
    );
    assert!(
        fixed.is_empty(),
        "these cel-spec tests pass now; take them out of known-failures.txt or \
         kubernetes-answers.txt:\n{}",
        fixed
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// gavel's type checker ([`gavel::cel::type_check`]) on the same tests:
/// it must find nothing wrong with an expression the spec type-checks
/// and evaluates to a value (its bindings are of unknown type, as a
/// policy's `request` or `params`). The tests the spec runs without its
/// checker (`disable_check`, mostly mixed-type operands) are counted,
/// with how many of them this checker refuses.
#[test]
fn cel_spec_type_check_finds_nothing_in_checked_tests() {
    use gavel::cel::type_check::{Environment, check_source};
    let env = Environment::default();
    let (mut checked, mut unchecked, mut refused) = (0, 0, 0);
    let mut wrong = Vec::new();
    for file in FILES {
        for_each_test(file, |id, test| {
            let expr = test.text("expr").unwrap_or_default();
            if skip_reason(test).is_some() {
                return;
            }
            let Ok((_, issues)) = check_source(&expr, &env) else {
                return;
            };
            if test.flag("disable_check") {
                unchecked += 1;
                refused += usize::from(!issues.is_empty());
            } else if matches!(expected(test), Ok(Expected::Value(_))) {
                checked += 1;
                if !issues.is_empty() {
                    wrong.push(format!("{id}: {expr}: {issues:?}"));
                }
            }
        });
    }
    eprintln!(
        "cel-spec type check: {checked} checked tests, {} with an issue; {unchecked} unchecked tests, {refused} refused",
        wrong.len()
    );
    assert!(checked > 1000, "only {checked} checked tests ran");
    assert!(
        wrong.is_empty(),
        "the type checker refuses expressions the spec checks:\n{}",
        wrong.join("\n")
    );
}
