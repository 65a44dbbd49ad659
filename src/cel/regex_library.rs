//! cel-go's regex extension (`ext.Regex`, version 1, in Kyverno's CEL
//! environment): `regex.replace(target, pattern, replacement[, count])`,
//! `regex.extract(target, pattern)` and `regex.extractAll(target,
//! pattern)`. A replacement names groups as `\1` ... `\9` and writes a
//! backslash as `\\`, as cel-go's `replaceStrValidator` reads it.

use super::values::{opt_none, opt_of};
use kube_cel::cel::extractors::Arguments;
use kube_cel::cel::{Context, ExecutionError, FunctionContext, ResolveResult, Value};
use regex::Regex;
use std::sync::Arc;

pub(super) fn register(ctx: &mut Context) {
    ctx.add_function("regex.replace", replace);
    ctx.add_function("regex.extract", extract);
    ctx.add_function("regex.extractAll", extract_all);
}

fn compile(ftx: &FunctionContext, pattern: &str) -> Result<Regex, ExecutionError> {
    Regex::new(pattern).map_err(|e| ftx.error(format!("given regex is invalid: {e}")))
}

fn text(ftx: &FunctionContext, args: &[Value], i: usize) -> Result<Arc<String>, ExecutionError> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(ftx.error(format!("no such overload for {}", ftx.name))),
    }
}

fn replace(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    let target = text(ftx, &args, 0)?;
    let re = compile(ftx, &text(ftx, &args, 1)?)?;
    let replacement = text(ftx, &args, 2)?;
    // A negative count replaces every match.
    let count = match args.get(3) {
        None => None,
        Some(Value::Int(n)) if *n < 0 => None,
        Some(Value::Int(n)) => Some(*n as usize),
        Some(_) => return Err(ftx.error("no such overload for regex.replace")),
    };
    let mut out = String::with_capacity(target.len());
    let mut last = 0;
    for caps in re.captures_iter(&target).take(count.unwrap_or(usize::MAX)) {
        let whole = caps.get(0).expect("group 0 of a match");
        out.push_str(&target[last..whole.start()]);
        expand(&replacement, &caps, re.captures_len() - 1, &mut out).map_err(|e| ftx.error(e))?;
        last = whole.end();
    }
    out.push_str(&target[last..]);
    Ok(Value::String(Arc::new(out)))
}

/// Writes `replacement` with its group references for one match.
fn expand(
    replacement: &str,
    caps: &regex::Captures,
    groups: usize,
    out: &mut String,
) -> Result<(), String> {
    let mut chars = replacement.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(next) = chars.next() else {
            return Err(format!(
                "invalid replacement string: '{replacement}' \\ not allowed at end"
            ));
        };
        if next == '\\' {
            out.push('\\');
            continue;
        }
        let Some(group) = next.to_digit(10).map(|d| d as usize) else {
            return Err(format!(
                "invalid replacement string: '{replacement}' \\ must be followed by a digit or \\"
            ));
        };
        if group > groups {
            return Err(format!(
                "replacement string references group {group} but regex has only {groups} group(s)"
            ));
        }
        if let Some(m) = caps.get(group) {
            out.push_str(m.as_str());
        }
    }
    Ok(())
}

/// At most one capturing group: its text (none when it is empty), else the
/// whole match.
fn one_group(ftx: &FunctionContext, re: &Regex, pattern: &str) -> Result<bool, ExecutionError> {
    match re.captures_len() - 1 {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(ftx.error(format!(
            "regular expression has more than one capturing group: {pattern:?}"
        ))),
    }
}

fn extract(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    let target = text(ftx, &args, 0)?;
    let pattern = text(ftx, &args, 1)?;
    let re = compile(ftx, &pattern)?;
    let grouped = one_group(ftx, &re, &pattern)?;
    let found = re.captures(&target).and_then(|caps| {
        let m = caps.get(usize::from(grouped))?;
        (!grouped || !m.as_str().is_empty()).then(|| m.as_str().to_string())
    });
    Ok(found.map_or_else(opt_none, |s| opt_of(Value::String(Arc::new(s)))))
}

fn extract_all(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    let target = text(ftx, &args, 0)?;
    let pattern = text(ftx, &args, 1)?;
    let re = compile(ftx, &pattern)?;
    let grouped = one_group(ftx, &re, &pattern)?;
    let found: Vec<Value> = re
        .captures_iter(&target)
        .filter_map(|caps| {
            let m = caps.get(usize::from(grouped))?;
            (!grouped || !m.as_str().is_empty()).then(|| Value::String(Arc::new(m.as_str().into())))
        })
        .collect();
    Ok(Value::List(Arc::new(found)))
}

#[cfg(test)]
mod tests {
    use crate::cel::{Activation, NoLookups, Program};
    use serde_json::json;

    fn eval(source: &str) -> Result<serde_json::Value, String> {
        let program = Program::compile(source).unwrap();
        program
            .eval(&Activation::new(), &NoLookups)
            .map_err(|e| e.to_string())
            .and_then(|v| crate::cel::values::cel_to_json(&v))
    }

    /// cel-go's own examples (ext/regex.go) and Kyverno's
    /// (pkg/cel/compiler/compiler_test.go).
    #[test]
    fn as_cel_go_documents_them() {
        for (source, want) in [
            (
                r#"regex.replace("hello world hello", "hello", "hi")"#,
                json!("hi world hi"),
            ),
            (
                r#"regex.replace("foo bar", "(fo)o (ba)r", r'\2 \1')"#,
                json!("ba fo"),
            ),
            (r#"regex.replace('banana', 'a', 'x', 0)"#, json!("banana")),
            (r#"regex.replace('banana', 'a', 'x', 1)"#, json!("bxnana")),
            (r#"regex.replace('banana', 'ana', 'x', -12)"#, json!("bxna")),
            (
                r#"regex.replace('123-456', '(\\d+)-(\\d+)', '\\2-\\1')"#,
                json!("456-123"),
            ),
            (
                r#"regex.replace("docker.io/nginx", "^docker\\.io/(.*)", r'my.io/\1')"#,
                json!("my.io/nginx"),
            ),
            (r#"regex.replace('a', 'a', '\\\\')"#, json!("\\")),
            (
                r#"regex.extract('item-A, item-B', 'item-(\\w+)')"#,
                json!("A"),
            ),
            (
                r#"regex.extract('HELLO', 'hello').hasValue()"#,
                json!(false),
            ),
            (
                r#"regex.extract('testuser@testdomain', '(.*)@')"#,
                json!("testuser"),
            ),
            (
                r#"regex.extractAll('id:123, id:456', 'id:\\d+')"#,
                json!(["id:123", "id:456"]),
            ),
            (r#"regex.extractAll('id:123, id:456', 'assa')"#, json!([])),
            (
                r#"regex.extractAll('testuser@testdomain', '(.*)@')"#,
                json!(["testuser"]),
            ),
        ] {
            assert_eq!(eval(source), Ok(want), "{source}");
        }
    }

    #[test]
    fn bad_patterns_and_replacements_are_errors() {
        for (source, want) in [
            (r#"regex.replace('a', '(', 'b')"#, "given regex is invalid"),
            (r#"regex.replace('a', 'a', '\\')"#, "not allowed at end"),
            (
                r#"regex.replace('a', 'a', '\\x')"#,
                "must be followed by a digit",
            ),
            (
                r#"regex.replace('a', '(a)', '\\2')"#,
                "references group 2 but regex has only 1",
            ),
            (
                r#"regex.extract('ab', '(a)(b)')"#,
                "more than one capturing group",
            ),
        ] {
            let e = eval(source).unwrap_err();
            assert!(e.contains(want), "{source}: {e}");
        }
    }
}
