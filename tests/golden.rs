//! Golden mutate cases: each file under `tests/golden/mutate/` holds a
//! policy, a resource and the resource Kyverno makes of it (the reasoning
//! is in each file's opening comment). The rule passes when it changes the
//! resource and skips when it does not.

use gavel::context::NoResolver;
use gavel::engine::json_context::Builtins;
use gavel::engine::mutate::mutate_policy;
use gavel::engine::{EvalEnv, Request, RuleStatus};
use gavel::policy::CompiledPolicy;
use gavel::policy::load::{LoadedDocument, load_policy_text, parse_yaml_documents};
use std::path::Path;

#[test]
fn golden_mutations() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/mutate");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    for file in files {
        let name = file.display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        let docs = parse_yaml_documents(&name, &text).unwrap();
        assert_eq!(docs.len(), 3, "{name}: policy, resource, expected");
        let policy_text = serde_json::to_string(&docs[0]).unwrap();
        let policy = match load_policy_text(&name, &policy_text).unwrap().remove(0) {
            LoadedDocument::Policy(p) => CompiledPolicy::compile(&p).unwrap(),
            _ => panic!("{name}: the first document must be a policy"),
        };
        let (resource, expected) = (&docs[1], &docs[2]);
        let req = Request::offline(resource, "CREATE", Default::default(), None);
        let ctx = req.json_context(Builtins::of([&policy]));
        let env = EvalEnv {
            resolver: &NoResolver,
            exceptions: &[],
            rule_values: &(),
        };
        let out = mutate_policy(&policy, &req, &ctx, &env);
        let statuses: Vec<RuleStatus> = out.response.rules.iter().map(|r| r.status).collect();
        let want = if expected == resource {
            RuleStatus::Skip
        } else {
            RuleStatus::Pass
        };
        assert_eq!(statuses, [want], "{name}: {:?}", out.response.rules);
        assert_eq!(
            out.resource(resource),
            expected,
            "{name}: got\n{}",
            serde_json::to_string_pretty(out.resource(resource)).unwrap()
        );
    }
}
