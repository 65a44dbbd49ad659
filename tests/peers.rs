//! Differential check against the peer engine: for every Pod of the Pod
//! Security tests in `../shared/conformance/kyverno-policies/pod-security/`,
//! gavel's verdict equals Kyverno's expected one, and where Gatekeeper's
//! Rego (run by regorus) disagrees with gavel, the disagreement is one of
//! the documented Gatekeeper/PSS differences of
//! `../shared/peers/gatekeeper-psp/README.md`. Anything else fails.

use crate::support::gatekeeper;

use gatekeeper::{Constraint, controls, kyverno_pods, review, shared};
use gavel::context::NoResolver;
use gavel::engine::{EvalEnv, Request, RuleStatus, evaluate};
use gavel::policy::CompiledPolicy;
use gavel::policy::load::{LoadedDocument, load_policy_text};
use serde_json::Value;

fn kyverno_policy(dir: &str) -> CompiledPolicy {
    let name = dir.rsplit('/').next().unwrap();
    let path = shared()
        .join("conformance/kyverno-policies/pod-security")
        .join(dir)
        .join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    let docs = load_policy_text(&path.display().to_string(), &text).unwrap();
    let Some(LoadedDocument::Policy(mut p)) = docs.into_iter().next() else {
        panic!("{dir}: no policy");
    };
    p.spec.validation_failure_action = Some("Enforce".into());
    CompiledPolicy::compile(&p).unwrap()
}

fn gavel_fails(policy: &CompiledPolicy, rule: Option<&str>, pod: &Value) -> bool {
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    let req = Request::offline(pod, "CREATE", Default::default(), None);
    evaluate(std::slice::from_ref(policy), &req, &env)
        .iter()
        .flat_map(|r| r.rules.iter())
        .filter(|r| rule.is_none_or(|name| r.name == name))
        .any(|r| r.status == RuleStatus::Fail)
}

/// Every security context of a Pod: its own, then each container's.
fn contexts(pod: &Value) -> Vec<&Value> {
    let spec = &pod["spec"];
    let mut out = vec![&spec["securityContext"]];
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in spec[list].as_array().into_iter().flatten() {
            out.push(&c["securityContext"]);
        }
    }
    out
}

/// Which documented difference explains Gatekeeper denying a Pod that
/// Kyverno admits, if any.
fn documented_difference(dir: &str, pod: &Value) -> Option<&'static str> {
    let spec = &pod["spec"];
    let containers = || {
        ["containers", "initContainers", "ephemeralContainers"]
            .into_iter()
            .flat_map(|l| spec[l].as_array().into_iter().flatten())
    };
    match dir {
        "baseline/disallow-selinux"
            if contexts(pod)
                .iter()
                .any(|c| !c["seLinuxOptions"]["level"].is_null()) =>
        {
            Some("SELinux level")
        }
        "restricted/require-run-as-non-root-user" | "restricted/require-run-as-nonroot" => {
            let unset = |c: &Value| c["runAsUser"].is_null() && c["runAsNonRoot"].is_null();
            let pod_unset = unset(&spec["securityContext"]);
            (pod_unset && containers().any(|c| unset(&c["securityContext"])))
                .then_some("neither runAsUser nor runAsNonRoot")
        }
        "baseline/disallow-host-ports-range"
            if containers()
                .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                .any(|p| p["hostPort"] == 0) =>
        {
            Some("explicit hostPort: 0")
        }
        "baseline/restrict-apparmor-profiles"
            if pod["metadata"]["annotations"]
                .as_object()
                .into_iter()
                .flatten()
                .any(|(k, v)| {
                    k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                        && v.as_str().is_some_and(|v| v.starts_with("localhost/"))
                }) =>
        {
            Some("AppArmor localhost/...")
        }
        _ => None,
    }
}

#[test]
fn gavel_matches_kyverno_and_gatekeeper_differs_only_where_documented() {
    let mut pods_checked = 0;
    let mut agreed = 0;
    let mut documented: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut findings = Vec::new();
    for control in controls() {
        let policy = kyverno_policy(control.kyverno);
        let mut constraints: Vec<Constraint> = control
            .constraints
            .iter()
            .map(|(t, p)| Constraint::new(t, p.clone()))
            .collect();
        let pods = kyverno_pods(control.kyverno, control.rule);
        assert!(!pods.is_empty(), "{}: no Pods", control.kyverno);
        for (pod, kyverno_fails) in pods {
            let name = pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let ours = gavel_fails(&policy, control.rule, &pod);
            assert_eq!(
                ours, kyverno_fails,
                "{} {name}: gavel differs from Kyverno's expected result",
                control.kyverno
            );
            let review = review(&pod);
            let theirs = constraints.iter_mut().any(|c| {
                let input = c.input(&review);
                c.violations(input) > 0
            });
            pods_checked += 1;
            if theirs == ours {
                agreed += 1;
                continue;
            }
            match documented_difference(control.kyverno, &pod) {
                Some(why) if theirs && !ours => *documented.entry(why).or_default() += 1,
                _ => findings.push(format!(
                    "{} {name}: gavel {}, Gatekeeper {}",
                    control.kyverno,
                    if ours { "denies" } else { "admits" },
                    if theirs { "denies" } else { "admits" },
                )),
            }
        }
    }
    eprintln!(
        "{pods_checked} Pods: {agreed} agree; documented differences: {documented:?}; findings: {}",
        findings.len()
    );
    assert!(
        findings.is_empty(),
        "undocumented disagreements:\n{}",
        findings.join("\n")
    );
    assert!(pods_checked >= 300, "only {pods_checked} Pods checked");
    assert!(agreed + documented.values().sum::<usize>() == pods_checked);
}
