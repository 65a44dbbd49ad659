//! What `gavel test` prints: per test document the loading line, the
//! counts and the results table, then the summary; with `--output json`
//! the tables go to stderr and one JSON document to stdout.

use super::{
    Outcome, Row, Selector, discover, read_test_file, run_read_test_file, test_file_errors,
};
use crate::cli::{OutputFormat, TestArgs};
use serde_json::{Value, json};
use std::io::{IsTerminal, Write};

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn print_table(out: &mut dyn Write, rows: &[&Row], detailed: bool) -> std::io::Result<()> {
    let mut header = vec!["ID", "POLICY", "RULE", "RESOURCE", "RESULT", "REASON"];
    if detailed {
        header.push("MESSAGE");
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut c = vec![
                (i + 1).to_string(),
                r.policy.clone(),
                r.rule.clone(),
                r.resource.clone(),
                r.result.into(),
                r.reason.clone(),
            ];
            if detailed {
                c.push(r.message.clone());
            }
            c
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            cells
                .iter()
                .map(|c| c[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cols: &[String]| {
        cols.iter()
            .enumerate()
            .map(|(i, c)| format!(" {:w$} ", c, w = widths[i]))
            .collect::<Vec<_>>()
            .join("│")
    };
    let sep = widths
        .iter()
        .map(|w| "─".repeat(w + 2))
        .collect::<Vec<_>>()
        .join("┼");
    writeln!(
        out,
        "{}",
        line(&header.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    )?;
    writeln!(out, "{sep}")?;
    for c in &cells {
        writeln!(out, "{}", line(c))?;
    }
    Ok(())
}

/// `gavel test`.
pub fn run(args: &TestArgs) -> anyhow::Result<i32> {
    let selector = Selector::parse(&args.test_case_selector);
    let files = discover(&args.paths, &args.file_name);
    let json_mode = args.output == OutputFormat::Json;
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let progress = json_mode && stderr.is_terminal();
    let mut human: Box<dyn Write> = if json_mode {
        Box::new(stderr.lock())
    } else {
        Box::new(stdout.lock())
    };
    // As Kyverno's CLI: a test file that does not load stops everything
    // before any test runs, and so does a test whose run fails; neither
    // prints a summary.
    let abort = |human: &mut dyn Write, error: String| -> anyhow::Result<i32> {
        writeln!(human, "Error: {error}")?;
        if json_mode {
            println!("{}", json!({ "error": error }));
        }
        Ok(1)
    };
    // Every file read once, up front; the run uses what was read.
    let read: Vec<_> = files.iter().map(|f| (f, read_test_file(f))).collect();
    let invalid: Vec<(&std::path::PathBuf, Vec<String>)> = read
        .iter()
        .map(|(f, file)| (*f, test_file_errors(file)))
        .filter(|(_, errors)| !errors.is_empty())
        .collect();
    if !invalid.is_empty() {
        writeln!(human, "\nTest errors:")?;
        let mut count = 0;
        for (file, errors) in &invalid {
            for e in errors {
                writeln!(human, "  Path: {}\n    Error: {e}", file.display())?;
                count += 1;
            }
        }
        return abort(
            &mut *human,
            format!("found {count} errors after loading tests"),
        );
    }
    let mut outcomes = Vec::new();
    let (mut pass, mut fail, mut skip) = (0, 0, 0);
    for (n, (path, file)) in read.iter().enumerate() {
        if progress {
            eprint!("\r[{}/{}] {}", n + 1, read.len(), path.display());
        }
        for o in run_read_test_file(path, file, &selector) {
            writeln!(human, "Loading test  ( {} ) ...", o.path)?;
            if let Some(e) = &o.error {
                if progress {
                    eprintln!();
                }
                return abort(&mut *human, format!("failed to run test ({e})"));
            } else {
                writeln!(
                    human,
                    "  Applying {} to {} with {} ...\n  Checking results ...",
                    plural(o.policies, "policy", "policies"),
                    plural(o.resources, "resource", "resources"),
                    plural(o.exceptions, "exception", "exceptions"),
                )?;
                let rows: Vec<&Row> = o
                    .rows
                    .iter()
                    .filter(|r| !args.fail_only || r.outcome == Outcome::Fail)
                    .collect();
                if !rows.is_empty() {
                    print_table(&mut *human, &rows, args.detailed_results)?;
                }
            }
            pass += o.pass;
            fail += o.fail + usize::from(o.error.is_some());
            skip += o.skip;
            outcomes.push(o);
        }
    }
    if progress {
        eprintln!();
    }
    if args.fail_only {
        writeln!(
            human,
            "Test Summary: {fail} out of {} tests failed",
            pass + skip + fail
        )?;
    } else {
        writeln!(
            human,
            "Test Summary: {} tests passed and {fail} tests failed",
            pass + skip
        )?;
    }
    drop(human);
    if json_mode {
        let tests: Vec<Value> = outcomes
            .iter()
            .map(|o| json!({"path": o.path, "pass": o.pass, "fail": o.fail, "skip": o.skip, "error": o.error}))
            .collect();
        let doc = json!({"summary": {"pass": pass, "fail": fail, "skip": skip}, "tests": tests});
        println!("{doc}");
    }
    Ok(if fail > 0 { 1 } else { 0 })
}
