//! The validate patterns on the request's two representations: every
//! pattern of the policy corpora (`../shared/conformance`, `examples/`:
//! `pattern`, each of `anyPattern`, and foreach patterns) on every resource
//! of its policy's folder, evaluated on the resource as a
//! `serde_json::Value` and as a decoded `json_doc::Doc` (parsed from its
//! JSON text, as a request body is), must give the same outcome: pass, or
//! the same kind of failure at the same path with the same message.
//!
//! The counts are floors from the run that introduced the document.

use corpus::kind;
use gavel::json_doc::Doc;
use gavel::pattern::CompiledPattern;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

mod corpus;

const MIN_PATTERNS: usize = 152;
const MIN_EVALUATIONS: usize = 1882;
const MIN_FAILURES: usize = 1236;

/// Every validate pattern under a policy's rules.
fn collect(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                match (k.as_str(), child) {
                    ("pattern", p) => out.push(p.clone()),
                    ("anyPattern", Value::Array(items)) => out.extend(items.iter().cloned()),
                    _ => collect(child, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect(i, out)),
        _ => {}
    }
}

fn outcome(r: Result<(), Box<gavel::pattern::PatternError>>) -> String {
    match r {
        Ok(()) => "pass".into(),
        Err(e) => format!("{:?} at {:?}: {}", e.kind, e.path, e.message()),
    }
}

#[test]
fn patterns_read_documents_as_they_read_values() {
    let mut by_dir: BTreeMap<PathBuf, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for (dir, docs) in corpus::documents_by_folder() {
        for doc in docs {
            let entry = by_dir.entry(dir.clone()).or_default();
            match kind(&doc) {
                "ClusterPolicy" | "Policy" => {
                    collect(doc.get("spec").unwrap_or(&Value::Null), &mut entry.0)
                }
                "" | "Test" | "PolicyException" => {}
                _ => entry.1.push(doc),
            }
        }
    }

    let (mut patterns, mut evaluations, mut failures) = (0, 0, 0);
    let mut differences = Vec::new();
    for (dir, (dir_patterns, _)) in &by_dir {
        // A policy's resources are those of its folder and below.
        let resources: Vec<&Value> = by_dir
            .iter()
            .filter(|(d, _)| d.starts_with(dir))
            .flat_map(|(_, (_, r))| r.iter())
            .collect();
        let docs: Vec<Doc> = resources
            .iter()
            .map(|r| Doc::parse(&serde_json::to_string(r).unwrap()).unwrap())
            .collect();
        for raw in dir_patterns {
            patterns += 1;
            let pattern = CompiledPattern::compile(raw);
            for (value, doc) in resources.iter().zip(&docs) {
                evaluations += 1;
                let on_value = outcome(pattern.validate(*value));
                let on_doc = outcome(pattern.validate(doc.root()));
                if on_value != "pass" {
                    failures += 1;
                }
                if on_value != on_doc {
                    differences.push(format!(
                        "{}: {raw}\n  value: {on_value}\n  doc:   {on_doc}",
                        dir.display()
                    ));
                }
            }
        }
    }
    eprintln!("{patterns} patterns, {evaluations} evaluations, {failures} failures");
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences[..differences.len().min(10)].join("\n")
    );
    assert!(patterns >= MIN_PATTERNS, "{patterns} patterns");
    assert!(evaluations >= MIN_EVALUATIONS, "{evaluations} evaluations");
    assert!(failures >= MIN_FAILURES, "{failures} failures");
}
