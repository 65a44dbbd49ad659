//! The direct CEL evaluator against the cel crate's interpreter: every CEL
//! expression of the policy corpora (`../shared/conformance`, `examples/`)
//! on every resource of its policy's folder, evaluated both ways, must give
//! the same value or the same error; and the same again with the object
//! held as a decoded document (as the webhook holds it) instead of a
//! `serde_json::Value`.
//!
//! The counts are floors (they only go up): how many expressions the
//! direct evaluator compiles, and how many evaluations it answers without
//! handing over to the interpreter.

use corpus::kind;
use gavel::cel::values::cel_to_json;
use gavel::cel::{CelError, NoLookups, Program};
use gavel::engine::Request;
use gavel::engine::cel::{CelRequest, bind_variables};
use gavel::json_doc::{Doc, Document};
use gavel::policy::cel_policy::CompiledNamed;
use kube_cel::cel::Value as CelValue;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::corpus;

/// Floors, from the run that introduced the direct evaluator.
const MIN_EXPRESSIONS: usize = 598;
const MIN_COMPILED_PERCENT: usize = 95;
const MIN_EVALUATIONS: usize = 9228;
/// Most of the rest are errors (a Pod policy's expression on the folder's
/// other resources), which the interpreter words.
const MIN_ANSWERED_PERCENT: usize = 67;

const POLICY_KINDS: &[&str] = &[
    "ValidatingPolicy",
    "NamespacedValidatingPolicy",
    "MutatingPolicy",
    "NamespacedMutatingPolicy",
    "GeneratingPolicy",
    "NamespacedGeneratingPolicy",
    "DeletingPolicy",
    "NamespacedDeletingPolicy",
    "ImageValidatingPolicy",
    "ValidatingAdmissionPolicy",
    "MutatingAdmissionPolicy",
    "ClusterPolicy",
    "Policy",
    "PolicyException",
];

/// A policy's CEL: its variables (name, expression) in order, and every
/// other expression.
#[derive(Default)]
struct PolicyCel {
    variables: Vec<(String, String)>,
    expressions: Vec<String>,
}

fn collect(v: &Value, out: &mut PolicyCel) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                match (k.as_str(), child) {
                    ("variables", Value::Array(items)) => {
                        for item in items {
                            if let (Some(name), Some(expr)) = (
                                item.get("name").and_then(Value::as_str),
                                item.get("expression").and_then(Value::as_str),
                            ) {
                                out.variables.push((name.into(), expr.into()));
                            }
                        }
                    }
                    (
                        "expression" | "messageExpression" | "valueExpression" | "condition",
                        Value::String(s),
                    ) => out.expressions.push(s.clone()),
                    _ => collect(child, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect(i, out)),
        _ => {}
    }
}

fn outcome(r: Result<CelValue, CelError>) -> String {
    match r {
        Ok(v) => match cel_to_json(&v) {
            Ok(j) => format!("ok {j}"),
            Err(_) => format!("ok {v:?}"),
        },
        // A map's entries print in hash order, which differs run to run.
        Err(e) => {
            let e = e.to_string();
            format!("error {}", e.split("Map {").next().unwrap_or(&e))
        }
    }
}

#[test]
fn direct_evaluator_agrees_with_the_interpreter_on_the_corpora() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Policies and resources by folder: a policy's resources are those in
    // its folder and below.
    let mut by_dir: BTreeMap<PathBuf, (Vec<PolicyCel>, Vec<Value>)> = BTreeMap::new();
    for (dir, docs) in corpus::documents_by_folder() {
        for doc in docs {
            if POLICY_KINDS.contains(&kind(&doc)) {
                let mut cel = PolicyCel::default();
                collect(doc.get("spec").unwrap_or(&Value::Null), &mut cel);
                if !cel.expressions.is_empty() || !cel.variables.is_empty() {
                    by_dir.entry(dir.clone()).or_default().0.push(cel);
                }
            } else if doc.get("apiVersion").is_some()
                && doc.get("metadata").is_some()
                // The CLI's own documents, not resources.
                && !["Test", "Context", "Values"].contains(&kind(&doc))
            {
                // Stored under the folder and each of its ancestors, so a
                // policy finds the resources of its `.kyverno-test`.
                let mut d = Some(dir.as_path());
                while let Some(p) = d {
                    by_dir
                        .entry(p.to_path_buf())
                        .or_default()
                        .1
                        .push(doc.clone());
                    d = p.parent().filter(|p| p.starts_with(root.parent().unwrap()));
                }
            }
        }
    }

    let (mut expressions, mut compiled, mut evaluations, mut answered) = (0, 0, 0, 0);
    let mut disagreements = Vec::new();
    for (dir, (policies, resources)) in &by_dir {
        for policy in policies {
            let compile = |e: &str| Program::compile(e).ok();
            let variables: Vec<CompiledNamed> = policy
                .variables
                .iter()
                .filter_map(|(name, e)| {
                    Some(CompiledNamed {
                        name: name.clone(),
                        program: compile(e)?,
                    })
                })
                .collect();
            let interpreted: Vec<CompiledNamed> = variables
                .iter()
                .map(|v| CompiledNamed {
                    name: v.name.clone(),
                    program: v.program.interpreted_only(),
                })
                .collect();
            let programs: Vec<Program> = policy
                .expressions
                .iter()
                .filter_map(|e| compile(e))
                .chain(variables.iter().map(|v| v.program.clone()))
                .collect();
            expressions += programs.len();
            compiled += programs.iter().filter(|p| p.is_direct()).count();
            for resource in resources {
                let req = Request::offline(resource, "CREATE", Default::default(), None);
                let input = CelRequest::of(&req);
                let base = input.activation();
                let direct_vars = bind_variables(&base, &variables, &NoLookups);
                let interpreted_vars = bind_variables(&base, &interpreted, &NoLookups);
                // The same request as the webhook holds it: the object a
                // document decoded from its JSON text.
                let text = serde_json::to_string(resource).unwrap();
                let doc_req = Request {
                    object: Document::from_doc(Doc::parse(&text).unwrap()),
                    ..req.clone()
                };
                let doc_input = CelRequest::of(&doc_req);
                let doc_base = doc_input.activation();
                let doc_vars = bind_variables(&doc_base, &variables, &NoLookups);
                for p in &programs {
                    evaluations += 1;
                    if matches!(p.eval_direct(&direct_vars), Ok(Some(_))) {
                        answered += 1;
                    }
                    let case = || {
                        format!(
                            "{}: {:?} on {}/{}",
                            dir.display(),
                            p.source(),
                            kind(resource),
                            resource
                                .pointer("/metadata/name")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                        )
                    };
                    let direct = outcome(p.eval(&direct_vars, &NoLookups));
                    let on_document = outcome(p.eval(&doc_vars, &NoLookups));
                    if direct != on_document && !p.source().contains("time.now") {
                        disagreements.push(format!(
                            "{} as a document:\n  value:    {direct}\n  document: {on_document}",
                            case()
                        ));
                    }
                    let interpreter =
                        outcome(p.interpreted_only().eval(&interpreted_vars, &NoLookups));
                    // `time.now()` differs between two evaluations. When
                    // both fail, the direct evaluator names a missing key
                    // as cel-go does (the first one cel-go meets); the cel
                    // crate may meet another error first, or hide the
                    // argument's error of a global function behind
                    // "Missing argument or target".
                    let hidden_argument_error = direct.starts_with("error no such key: ")
                        && interpreter.starts_with("error ");
                    if direct != interpreter
                        && !p.source().contains("time.now")
                        && !hidden_argument_error
                    {
                        disagreements.push(format!(
                            "{}:\n  direct:      {direct}\n  interpreter: {interpreter}",
                            case()
                        ));
                    }
                }
            }
        }
    }
    eprintln!(
        "cel direct: {expressions} expressions, {compiled} compiled directly ({}%); \
         {evaluations} evaluations, {answered} answered directly ({}%); {} disagreements",
        compiled * 100 / expressions.max(1),
        answered * 100 / evaluations.max(1),
        disagreements.len()
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements[..disagreements.len().min(20)].join("\n")
    );
    assert!(expressions >= MIN_EXPRESSIONS, "{expressions} expressions");
    assert!(evaluations >= MIN_EVALUATIONS, "{evaluations} evaluations");
    assert!(
        compiled * 100 / expressions >= MIN_COMPILED_PERCENT,
        "{compiled} of {expressions} compiled directly"
    );
    assert!(
        answered * 100 / evaluations >= MIN_ANSWERED_PERCENT,
        "{answered} of {evaluations} answered directly"
    );
}

/// The CEL forms of the Pod Security controls (`validate.cel` rules and
/// ValidatingPolicies) read a request decoded as the webhook decodes it in
/// place: evaluating them converts neither object to a `serde_json::Value`,
/// and they answer as on the same request held as `Value`s.
#[test]
fn pod_security_cel_forms_read_a_decoded_request_in_place() {
    use gavel::context::NoResolver;
    use gavel::engine::cel::evaluate_validating_policy;
    use gavel::engine::{EvalEnv, RuleStatus, evaluate};
    use gavel::policy::CompiledPolicy;
    use gavel::policy::cel_policy::CompiledValidatingPolicy;
    use gavel::policy::load::{LoadedDocument, load_policy_text, parse_yaml_documents};

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let library = root.join("../shared/conformance/kyverno-policies");
    let (mut classic, mut validating) = (Vec::new(), Vec::new());
    for folder in ["pod-security-cel", "pod-security-vpol"] {
        let mut files = Vec::new();
        corpus::yaml_files(&library.join(folder), &mut files);
        for entry in files {
            let text = std::fs::read_to_string(&entry).unwrap();
            let Ok(docs) = load_policy_text(&entry.display().to_string(), &text) else {
                continue;
            };
            for doc in docs {
                match doc {
                    LoadedDocument::Policy(p) => classic.push(CompiledPolicy::compile(&p).unwrap()),
                    LoadedDocument::ValidatingPolicy(p) => {
                        validating.push(CompiledValidatingPolicy::compile(&p).unwrap())
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(
        classic.len() >= 16 && validating.len() >= 16,
        "{} {}",
        classic.len(),
        validating.len()
    );
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let mut failures = 0;
    for file in ["pod-compliant.yaml", "pod-violating.yaml"] {
        let text = std::fs::read_to_string(root.join("benches/data").join(file)).unwrap();
        let object = parse_yaml_documents(file, &text).unwrap().remove(0);
        let on_value = Request::offline(&object, "CREATE", Default::default(), None);
        let on_doc = corpus::as_documents(&on_value);
        let answers = |req: &Request| {
            let mut out: Vec<(String, RuleStatus, String)> = evaluate(&classic, req, &env)
                .iter()
                .flat_map(|r| {
                    r.rules
                        .iter()
                        .map(|x| (r.policy.to_string(), x.status, x.message.to_string()))
                })
                .collect();
            let input = CelRequest::of(req);
            for p in &validating {
                let r = evaluate_validating_policy(p, req, &input, &NoResolver);
                out.extend(
                    r.rules
                        .iter()
                        .map(|x| (r.policy.to_string(), x.status, x.message.to_string())),
                );
            }
            out
        };
        let from_doc = answers(&on_doc);
        assert!(
            !on_doc.object.converted() && !on_doc.old_object.converted(),
            "{file}: a CEL form converted the decoded request"
        );
        assert_eq!(from_doc, answers(&on_value), "{file}");
        failures += from_doc
            .iter()
            .filter(|(_, s, _)| *s == RuleStatus::Fail)
            .count();
    }
    // The violating Pod fails both forms of most controls.
    assert!(failures >= 20, "{failures} failures");
}
