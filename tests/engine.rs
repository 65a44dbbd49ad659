//! Engine behaviour end to end: a policy text and a resource in, rule
//! statuses out. One case per line of the table.

use gavel::context::NoResolver;
use gavel::engine::{EvalEnv, Request, RuleStatus, evaluate};
use gavel::policy::load::{LoadedDocument, load_policy_text, parse_yaml_documents};
use gavel::policy::{CompiledException, CompiledPolicy};
use serde_json::Value;

fn load(text: &str) -> (Vec<CompiledPolicy>, Vec<CompiledException>) {
    let mut policies = Vec::new();
    let mut exceptions = Vec::new();
    for d in load_policy_text("test.yaml", text).unwrap() {
        match d {
            LoadedDocument::Policy(p) => policies.push(CompiledPolicy::compile(&p).unwrap()),
            LoadedDocument::Exception(e) => {
                exceptions.push(CompiledException::compile(&e).unwrap())
            }
            other => panic!("{other:?}"),
        }
    }
    (policies, exceptions)
}

fn statuses(policy: &str, resource: &str, operation: &str) -> Vec<(String, RuleStatus)> {
    answers(policy, resource, operation)
        .into_iter()
        .map(|(name, status, _)| (name, status))
        .collect()
}

/// Each rule's name, status and message.
fn answers(policy: &str, resource: &str, operation: &str) -> Vec<(String, RuleStatus, String)> {
    let (policies, exceptions) = load(policy);
    let object: Value = parse_yaml_documents("r.yaml", resource).unwrap().remove(0);
    let req = Request::offline(&object, operation, Default::default(), None);
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &exceptions,
        rule_values: &(),
    };
    evaluate(&policies, &req, &env)
        .into_iter()
        .flat_map(|r| r.rules)
        .map(|r| (r.name.to_string(), r.status, r.message.to_string()))
        .collect()
}

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default, labels: {app: web}}\nspec:\n  containers:\n  - name: a\n    image: nginx:1.0\n    ports: [{containerPort: 80}, {containerPort: 8080}]\n  - name: b\n    image: busybox:latest\n";

fn policy(rule_body: &str) -> String {
    format!(
        "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {{name: p}}\nspec:\n  rules:\n  - name: r\n    match: {{any: [{{resources: {{kinds: [Pod]}}}}]}}\n{rule_body}"
    )
}

#[test]
fn rule_outcomes() {
    use RuleStatus::*;
    let cases: &[(&str, &str, RuleStatus)] = &[
        (
            "pattern pass",
            "    validate: {pattern: {metadata: {labels: {app: web}}}}\n",
            Pass,
        ),
        (
            "pattern fail",
            "    validate: {pattern: {spec: {containers: [{image: '!*:latest'}]}}}\n",
            Fail,
        ),
        (
            "pattern with variable",
            "    validate: {pattern: {metadata: {name: '{{ request.object.metadata.name }}'}}}\n",
            Pass,
        ),
        (
            "anyPattern second passes",
            "    validate: {anyPattern: [{metadata: {labels: {app: db}}}, {metadata: {labels: {app: web}}}]}\n",
            Pass,
        ),
        (
            "deny fires",
            "    validate: {deny: {conditions: {any: [{key: '{{ request.object.spec.containers[].image }}', operator: AnyIn, value: ['*:latest']}]}}}\n",
            Fail,
        ),
        (
            "deny quiet",
            "    validate: {deny: {conditions: {all: [{key: '{{ request.object.metadata.name }}', operator: Equals, value: other}]}}}\n",
            Pass,
        ),
        (
            "preconditions skip",
            "    preconditions: {all: [{key: '{{ request.operation }}', operator: Equals, value: UPDATE}]}\n    validate: {deny: {}}\n",
            Skip,
        ),
        ("empty deny denies", "    validate: {deny: {}}\n", Fail),
        (
            "variable context entry",
            "    context: [{name: podname, variable: {jmesPath: 'request.object.metadata.name'}}]\n    validate: {deny: {conditions: {all: [{key: '{{ podname }}', operator: Equals, value: p}]}}}\n",
            Fail,
        ),
        (
            "missing variable errors",
            "    validate: {message: '{{ request.object.nope }}', pattern: {metadata: {name: 'q*'}}}\n",
            Fail,
        ),
        (
            "validate.cel",
            "    validate: {cel: {expressions: [{expression: \"object.metadata.name.startsWith('q')\"}]}}\n",
            Fail,
        ),
        (
            "celPreconditions false skips",
            "    celPreconditions: [{name: never, expression: 'false'}]\n    validate: {cel: {expressions: [{expression: 'false'}]}}\n",
            Skip,
        ),
        (
            "nested foreach with element0",
            "    validate:\n      foreach:\n      - list: request.object.spec.containers\n        foreach:\n        - list: element.ports || `[]`\n          deny: {conditions: {all: [{key: '{{ element0.name }}-{{ element.containerPort }}', operator: Equals, value: a-8080}]}}\n",
            Fail,
        ),
        (
            "foreach preconditions skip every element",
            "    validate:\n      foreach:\n      - list: request.object.spec.containers\n        preconditions: {all: [{key: '{{ element.name }}', operator: Equals, value: zzz}]}\n        deny: {}\n",
            Skip,
        ),
        (
            "apply to no matching kind",
            "    validate: {deny: {}}\n    exclude: {any: [{resources: {kinds: [Pod]}}]}\n",
            Pass,
        ),
    ];
    for (name, body, want) in cases {
        let got = statuses(&policy(body), POD, "CREATE");
        if *name == "apply to no matching kind" {
            assert!(
                got.is_empty(),
                "{name}: excluded rules give no response, got {got:?}"
            );
            continue;
        }
        // As Kyverno's validateForEach: no element processed, no result.
        if *name == "foreach preconditions skip every element" {
            assert!(got.is_empty(), "{name}: no response, got {got:?}");
            continue;
        }
        assert_eq!(got.first().map(|(_, s)| *s), Some(*want), "{name}: {got:?}");
    }
}

/// kyverno-compat: Kyverno's policy validation (its webhook, and its CLI
/// before it applies anything: "Policies Skipped") refuses a policy whose
/// variables do not parse; gavel refuses it when it compiles, so it never
/// serves (or passes) a rule it cannot evaluate.
#[test]
fn rules_without_exactly_one_check_refuse_the_policy() {
    // Kyverno's policy validation (pkg/policy/validate), word for word
    // after the rule's path.
    for (body, error) in [
        (
            "    validate: {message: no check}\n",
            "validate: one of pattern, anyPattern, deny, foreach, cel must be specified",
        ),
        // Kyverno v1.19 counts no assert, and manifests only with attestors.
        (
            "    validate: {assert: {object: {metadata: {name: p}}}}\n",
            "validate: one of pattern, anyPattern, deny, foreach, cel must be specified",
        ),
        (
            "    validate: {manifests: {attestors: []}}\n",
            "validate: one of pattern, anyPattern, deny, foreach, cel must be specified",
        ),
        (
            "    validate: {pattern: {metadata: {name: p}}, deny: {}}\n",
            "validate: only one of pattern, anyPattern, deny, foreach, cel can be specified",
        ),
        (
            "    validate: {foreach: [{list: request.object.spec.containers}]}\n",
            "validate.foreach[0]: one of pattern, anyPattern, deny, or a nested foreach must be specified",
        ),
        (
            "    validate: {foreach: [{list: a, deny: {}, pattern: {name: x}}]}\n",
            "validate.foreach[0]: only one of pattern, anyPattern, deny, or a nested foreach can be specified",
        ),
        (
            "    validate: {foreach: [{deny: {}}]}\n",
            "validate.foreach[0]: foreach.list is required",
        ),
    ] {
        let LoadedDocument::Policy(doc) = load_policy_text("test.yaml", &policy(body))
            .unwrap()
            .remove(0)
        else {
            panic!("{body}: a policy");
        };
        let e = CompiledPolicy::compile(&doc).unwrap_err().to_string();
        assert_eq!(e, format!("policy p: spec.rules[0]: {error}"), "{body}");
    }
}

#[test]
fn unparseable_variables_refuse_the_policy() {
    for (name, body) in [
        (
            "deny key",
            "    validate: {deny: {conditions: {any: [{key: '{{ request.object.metadata.name | | }}', operator: Equals, value: x}]}}}\n",
        ),
        (
            "unclosed bracket",
            "    validate: {deny: {conditions: {any: [{key: '{{ request.object.metadata.name[ }}', operator: Equals, value: x}]}}}\n",
        ),
        (
            "precondition",
            "    preconditions: {all: [{key: '{{ request.operation | | }}', operator: Equals, value: UPDATE}]}\n    validate: {deny: {}}\n",
        ),
    ] {
        let LoadedDocument::Policy(doc) = load_policy_text("test.yaml", &policy(body))
            .unwrap()
            .remove(0)
        else {
            panic!("{name}: a policy");
        };
        let e = CompiledPolicy::compile(&doc).unwrap_err().to_string();
        assert!(
            e.contains("policy contains invalid variables"),
            "{name}: {e}"
        );
        assert!(e.contains("invalid JMESPath query"), "{name}: {e}");
    }
}

#[test]
fn delete_skips_patterns_and_exceptions_skip_rules() {
    let body = "    validate: {pattern: {metadata: {labels: {app: db}}}}\n";
    assert!(statuses(&policy(body), POD, "DELETE").is_empty());
    let with_exception = format!(
        "{}---\napiVersion: kyverno.io/v2\nkind: PolicyException\nmetadata: {{name: ex, namespace: default}}\nspec:\n  exceptions: [{{policyName: p, ruleNames: [r]}}]\n  match: {{any: [{{resources: {{kinds: [Pod], names: [p]}}}}]}}\n",
        policy(body)
    );
    assert_eq!(
        statuses(&with_exception, POD, "CREATE"),
        vec![("r".to_string(), RuleStatus::Skip)]
    );
}

/// Foreach context entries reach the caller's resolver like rule context entries do.
#[test]
fn foreach_context_uses_the_resolver() {
    use gavel::context::{ApiCallRequest, ResolveError, Resolver};
    struct Registry;
    impl Resolver for Registry {
        fn config_map(&self, _: &str, _: &str) -> Result<Option<Value>, ResolveError> {
            Ok(None)
        }
        fn api_call(&self, call: &ApiCallRequest) -> Result<Option<Value>, ResolveError> {
            Ok((call.url_path.as_deref() == Some("/allowed"))
                .then(|| serde_json::json!(["nginx:1.0", "busybox:latest"])))
        }
        fn global_context(&self, _: &str) -> Result<Option<std::sync::Arc<Value>>, ResolveError> {
            Ok(None)
        }
    }
    let body = "    validate:\n      foreach:\n      - list: request.object.spec.containers\n        context: [{name: allowed, apiCall: {urlPath: /allowed}}]\n        deny: {conditions: {all: [{key: '{{ element.image }}', operator: AnyNotIn, value: '{{ allowed }}'}]}}\n";
    let (policies, _) = load(&policy(body));
    let object: Value = parse_yaml_documents("r.yaml", POD).unwrap().remove(0);
    let req = Request::offline(&object, "CREATE", Default::default(), None);
    let env = EvalEnv {
        resolver: &Registry,
        exceptions: &[],
        rule_values: &(),
    };
    let got: Vec<RuleStatus> = evaluate(&policies, &req, &env)
        .into_iter()
        .flat_map(|r| r.rules)
        .map(|r| r.status)
        .collect();
    // Both images are in the list only the resolver knows; without it the
    // list is empty and the deny fires.
    assert_eq!(got, vec![RuleStatus::Pass]);
}

/// The messages of failing and skipped patterns, as Kyverno words them:
/// the path for a failure, each alternative's note for anyPattern.
#[test]
fn pattern_messages() {
    let cases: &[(&str, &str, RuleStatus, &str)] = &[
        (
            "pattern fail names the path",
            "    validate: {message: 'no latest', pattern: {spec: {containers: [{image: '!*:latest'}]}}}\n",
            RuleStatus::Fail,
            "validation error: no latest. rule r failed at path /spec/containers/1/image/",
        ),
        (
            "anyPattern lists every alternative",
            "    validate: {message: 'app label.', anyPattern: [{metadata: {labels: {app: db}}}, {spec: {containers: [{name: a}]}}]}\n",
            RuleStatus::Fail,
            "validation error: app label. rule r[0] failed at path /metadata/labels/app/ rule r[1] failed at path /spec/containers/1/name/",
        ),
        (
            "anyPattern skipped alternatives",
            "    validate: {anyPattern: [{spec: {containers: [{(name): z, image: x}]}}, {(metadata): {(name): q}}]}\n",
            RuleStatus::Skip,
            "rule r[0] skipped: conditional anchor mismatch: value 'a' does not match the pattern rule r[1] skipped: conditional anchor mismatch: conditional anchor mismatch: value 'p' does not match the pattern",
        ),
        (
            "nested conditional anchors",
            "    validate: {pattern: {(metadata): {(labels): {(app): db}}}}\n",
            RuleStatus::Skip,
            "conditional anchor mismatch: conditional anchor mismatch: conditional anchor mismatch: value 'web' does not match the pattern",
        ),
        (
            "a number is shown as JSON",
            "    validate: {pattern: {spec: {containers: [{(ports): [{containerPort: 80}]}]}}}\n",
            RuleStatus::Skip,
            "conditional anchor mismatch: value '8080' does not match the pattern",
        ),
    ];
    for (name, body, status, message) in cases {
        let (policies, exceptions) = load(&policy(body));
        let object: Value = parse_yaml_documents("r.yaml", POD).unwrap().remove(0);
        let req = Request::offline(&object, "CREATE", Default::default(), None);
        let env = EvalEnv {
            resolver: &NoResolver,
            exceptions: &exceptions,
            rule_values: &(),
        };
        let responses = evaluate(&policies, &req, &env);
        let rule = &responses[0].rules[0];
        assert_eq!(
            (rule.status, rule.message.as_ref()),
            (*status, *message),
            "{name}"
        );
    }
}

/// A passing anyPattern names the alternative that passed, in Kyverno's
/// words (worded when the rule compiles). In a foreach the rule passes as
/// Kyverno's foreach handler words it.
#[test]
fn any_pattern_pass_messages_name_the_alternative() {
    let messages = |rule_body: &str| -> Vec<(RuleStatus, String)> {
        answers(&policy(rule_body), POD, "CREATE")
            .into_iter()
            .map(|(_, status, message)| (status, message))
            .collect()
    };
    for (alternatives, index) in [
        (
            "[{spec: {hostNetwork: true}}, {metadata: {labels: {app: web}}}]",
            1,
        ),
        (
            "[{metadata: {labels: {app: web}}}, {spec: {hostPID: true}}]",
            0,
        ),
    ] {
        assert_eq!(
            messages(&format!("    validate: {{anyPattern: {alternatives}}}\n")),
            [(
                RuleStatus::Pass,
                format!("validation rule 'r' anyPattern[{index}] passed.")
            )],
            "{alternatives}"
        );
    }
    // In a foreach over the containers: the third alternative passes for
    // each.
    assert_eq!(
        messages(
            "    validate:\n      foreach:\n      - list: request.object.spec.containers\n        anyPattern: [{name: x}, {name: y}, {image: '?*'}]\n"
        ),
        [(RuleStatus::Pass, "rule passed".to_string())],
    );
}
