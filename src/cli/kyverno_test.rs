//! `gavel test`: discovery of kyverno-test.yaml files, offline evaluation,
//! and result matching and counting exactly as `kyverno test` does
//! (see docs/kyverno-test-semantics.md, from "Discovery and loading" to "Output").
//!
//! The document's inputs are read by `load`, run through the engine by
//! `evaluate`, compared with the expected results by `check`; `report`
//! prints them.

mod check;
mod evaluate;
pub mod file;
mod load;
mod report;

pub use report::run;

use crate::policy::load::{parse_yaml_documents, read_file};
use crate::wildcard;
use check::check_results;
use evaluate::evaluate;
use file::TestDoc;
use load::load_test;
use std::path::{Path, PathBuf};

/// One table row of a test.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub policy: String,
    pub rule: String,
    pub resource: String,
    /// `Pass`, `Fail` or `Skip`, as printed.
    pub result: &'static str,
    pub reason: String,
    pub message: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Skip,
    Fail,
}

/// The outcome of one test document.
#[derive(Debug, Clone, Default)]
pub struct TestOutcome {
    pub path: String,
    pub pass: usize,
    pub fail: usize,
    pub skip: usize,
    pub error: Option<String>,
    /// The error is the test file's own (it does not read or parse), not
    /// its run's: Kyverno's CLI lists such errors before running any test.
    pub invalid: bool,
    pub rows: Vec<Row>,
    pub policies: usize,
    pub resources: usize,
    pub exceptions: usize,
}

impl TestOutcome {
    /// A test passes when it loaded and no row failed.
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.fail == 0
    }
}

/// `--test-case-selector` filters.
#[derive(Debug, Clone)]
pub struct Selector {
    policy: String,
    rule: String,
    resource: String,
}

impl Selector {
    pub fn parse(s: &str) -> Selector {
        let mut sel = Selector {
            policy: "*".into(),
            rule: "*".into(),
            resource: "*".into(),
        };
        for part in s.split(',') {
            match part.split_once('=') {
                Some(("policy", v)) => sel.policy = v.trim().into(),
                Some(("rule", v)) => sel.rule = v.trim().into(),
                Some(("resource", v)) => sel.resource = v.trim().into(),
                _ => {}
            }
        }
        sel
    }

    fn keeps(&self, policy: &str, rule: &str, resources: &[String]) -> bool {
        let ok = |pat: &str, v: &str| v.is_empty() || wildcard::matches(pat, v);
        ok(&self.policy, policy)
            && ok(&self.rule, rule)
            && (self.resource == "*"
                || resources.is_empty()
                || resources
                    .iter()
                    .any(|r| wildcard::matches(&self.resource, r)))
    }
}

impl Default for Selector {
    fn default() -> Self {
        Selector::parse("")
    }
}

/// Finds files named `file_name` under `paths`, in sorted (ReadDir) order.
pub fn discover(paths: &[PathBuf], file_name: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, name, out);
            } else if p.file_name().and_then(|f| f.to_str()) == Some(name) {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, file_name, &mut out);
        } else {
            out.push(p.clone());
        }
    }
    out
}

/// Runs every test document of one file.
/// A test file read: its documents, each a Test or why it is none; an
/// error when the file does not read or parse as YAML.
pub type TestFile = Result<Vec<Result<TestDoc, String>>, String>;

/// Reads and parses a test file without running it.
pub fn read_test_file(path: &Path) -> TestFile {
    let shown = path.display().to_string();
    let text = read_file(path).map_err(|e| e.to_string())?;
    let docs = parse_yaml_documents(&shown, &text).map_err(|e| e.to_string())?;
    Ok(docs
        .iter()
        .map(|d| TestDoc::parse(path, d).map_err(|e| format!("{shown}: {e}")))
        .collect())
}

/// The errors of a test file itself (it does not read or parse, or a
/// document is no valid Test).
pub fn test_file_errors(file: &TestFile) -> Vec<String> {
    match file {
        Ok(docs) => docs
            .iter()
            .filter_map(|d| d.as_ref().err().cloned())
            .collect(),
        Err(e) => vec![e.clone()],
    }
}

pub fn run_test_file(path: &Path, selector: &Selector) -> Vec<TestOutcome> {
    run_read_test_file(path, &read_test_file(path), selector)
}

/// Runs a test file already read: a document that is no Test is an
/// invalid outcome.
pub fn run_read_test_file(path: &Path, file: &TestFile, selector: &Selector) -> Vec<TestOutcome> {
    let invalid = |e: &String| TestOutcome {
        path: path.display().to_string(),
        error: Some(e.clone()),
        invalid: true,
        ..Default::default()
    };
    match file {
        Err(e) => vec![invalid(e)],
        Ok(docs) => docs
            .iter()
            .map(|d| match d {
                Ok(doc) => run_test_doc(path, doc, selector),
                Err(e) => invalid(e),
            })
            .collect(),
    }
}

fn run_test_doc(path: &Path, doc: &TestDoc, selector: &Selector) -> TestOutcome {
    let mut outcome = TestOutcome {
        path: path.display().to_string(),
        ..Default::default()
    };
    let loaded = match load_test(doc) {
        Ok(l) => l,
        Err(e) => {
            outcome.error = Some(e);
            return outcome;
        }
    };
    let evaluated = evaluate(doc, &loaded, None);
    // One more run per operation the results name (Kyverno's CLI).
    let by_operation: std::collections::BTreeMap<&str, Vec<_>> = doc
        .results
        .iter()
        .filter_map(|r| r.operation.as_deref())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|op| (op, evaluate(doc, &loaded, Some(op))))
        .collect();
    outcome.rows = check_results(doc, &loaded, &evaluated, &by_operation, selector);
    outcome.policies = loaded.set.policy_count() + loaded.invalid.len() + loaded.unsupported.len();
    outcome.resources = loaded.resources.len();
    outcome.exceptions = loaded.exceptions;
    for r in &outcome.rows {
        match r.outcome {
            Outcome::Pass => outcome.pass += 1,
            Outcome::Skip => outcome.skip += 1,
            Outcome::Fail => outcome.fail += 1,
        }
    }
    outcome
}
