//! The engine on the request's two representations: every classic policy
//! of the corpora (`../shared/conformance`, `examples/`) on every resource
//! of its folder, as CREATE, UPDATE and DELETE, evaluated once with the
//! objects as `serde_json::Value`s (as offline runs hold them) and once as
//! decoded `json_doc::Doc`s parsed from their JSON text (as the webhook
//! holds them), must give the same responses: every rule's name, type,
//! status, message and outputs.
//!
//! This is the differential test of the evaluation core's move to
//! documents: matching, preconditions, deny conditions, JMESPath, foreach
//! and patterns read the document where it is. The counts are floors from
//! the run that introduced it.

use corpus::kind;
use gavel::context::NoResolver;
use gavel::engine::{EvalEnv, Request, RuleStatus, evaluate};
use gavel::json_doc::{Doc, Document};
use gavel::policy::CompiledPolicy;
use gavel::policy::load::{LoadedDocument, classify};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

mod corpus;

const MIN_POLICIES: usize = 376;
const MIN_EVALUATIONS: usize = 10_557;
const MIN_RULE_RESPONSES: usize = 9_370;
const MIN_FAILURES: usize = 3_150;

/// The same request with its objects as decoded documents.
fn as_documents(req: &Request) -> Request {
    let decode = |d: &Document| {
        let text = serde_json::to_string(d.value()).unwrap();
        Document::from_doc(Doc::parse(&text).unwrap())
    };
    Request {
        object: decode(&req.object),
        old_object: decode(&req.old_object),
        ..req.clone()
    }
}

#[test]
fn the_engine_reads_documents_as_it_reads_values() {
    let mut by_dir: BTreeMap<PathBuf, (Vec<CompiledPolicy>, Vec<Value>)> = BTreeMap::new();
    for (dir, docs) in corpus::documents_by_folder() {
        let entry = by_dir.entry(dir.clone()).or_default();
        for doc in docs {
            match kind(&doc) {
                "ClusterPolicy" | "Policy" => {
                    if let Ok(LoadedDocument::Policy(p)) = classify("corpus", 0, doc)
                        && let Ok(compiled) = CompiledPolicy::compile(&p)
                    {
                        entry.0.push(compiled);
                    }
                }
                "" | "Test" | "PolicyException" => {}
                _ => entry.1.push(doc),
            }
        }
    }
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let (mut policies, mut evaluations, mut rules, mut failures) = (0, 0, 0, 0);
    let mut differences = Vec::new();
    for (dir, (dir_policies, _)) in &by_dir {
        if dir_policies.is_empty() {
            continue;
        }
        policies += dir_policies.len();
        // A policy's resources are those of its folder and below.
        let resources: Vec<&Value> = by_dir
            .iter()
            .filter(|(d, _)| d.starts_with(dir))
            .flat_map(|(_, (_, r))| r.iter())
            .collect();
        for resource in resources {
            for operation in ["CREATE", "UPDATE", "DELETE"] {
                let on_values = Request::offline(resource, operation, Default::default(), None);
                let on_docs = as_documents(&on_values);
                let want = evaluate(dir_policies, &on_values, &env);
                let got = evaluate(dir_policies, &on_docs, &env);
                evaluations += dir_policies.len();
                for r in want.iter().flat_map(|p| &p.rules) {
                    rules += 1;
                    failures += usize::from(r.status == RuleStatus::Fail);
                }
                let (want, got) = (format!("{want:#?}"), format!("{got:#?}"));
                if want != got {
                    let name = resource.pointer("/metadata/name").unwrap_or(&Value::Null);
                    differences.push(format!(
                        "{} {operation} {name}:\n--- values\n{want}\n--- documents\n{got}",
                        dir.display()
                    ));
                }
            }
        }
    }
    eprintln!(
        "{policies} policies, {evaluations} policy evaluations, {rules} rule responses, \
         {failures} failures"
    );
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences[..differences.len().min(3)].join("\n")
    );
    assert!(policies >= MIN_POLICIES, "{policies} policies");
    assert!(evaluations >= MIN_EVALUATIONS, "{evaluations} evaluations");
    assert!(rules >= MIN_RULE_RESPONSES, "{rules} rule responses");
    assert!(failures >= MIN_FAILURES, "{failures} failures");
}
