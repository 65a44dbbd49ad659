//! The peer engine: Gatekeeper's Pod Security ConstraintTemplates (Rego,
//! `../shared/peers/gatekeeper-psp/`) run by regorus, mapped to our Pod
//! Security policies as that corpus's README tables them. Shared by
//! `tests/peers.rs` and `benches/peers.rs`.

// Each target that includes this module uses only part of it.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

pub fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared")
}

/// One Kyverno Pod Security policy and the Gatekeeper constraints
/// (template directory, parameters) that stand for it.
pub struct Control {
    /// Directory under `conformance/kyverno-policies/pod-security/`.
    pub kyverno: &'static str,
    /// The Kyverno rule compared, when the control is split per rule (the
    /// test asserts only some rules for some Pods).
    pub rule: Option<&'static str>,
    pub constraints: Vec<(&'static str, Value)>,
}

/// The README's mapping table, row by row (row 6 has a range variant).
pub fn controls() -> Vec<Control> {
    let c = |kyverno, constraints| Control {
        kyverno,
        rule: None,
        constraints,
    };
    vec![
        c(
            "baseline/disallow-host-process",
            vec![("host-process", json!({}))],
        ),
        c(
            "baseline/disallow-host-namespaces",
            vec![
                ("host-namespaces", json!({})),
                ("host-network-ports", json!({"hostNetwork": false})),
            ],
        ),
        c(
            "baseline/disallow-privileged-containers",
            vec![("privileged-containers", json!({}))],
        ),
        c(
            "baseline/disallow-capabilities",
            vec![(
                "capabilities",
                json!({"allowedCapabilities": ["AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER",
                    "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP",
                    "SETUID", "SYS_CHROOT"]}),
            )],
        ),
        c(
            "baseline/disallow-host-path",
            vec![("host-filesystem", json!({"allowedHostPaths": []}))],
        ),
        c(
            "baseline/disallow-host-ports",
            vec![(
                "host-network-ports",
                json!({"hostNetwork": false, "min": 0, "max": 0}),
            )],
        ),
        c(
            "baseline/disallow-host-ports-range",
            vec![(
                "host-network-ports",
                json!({"hostNetwork": false, "min": 5000, "max": 6000}),
            )],
        ),
        c(
            "baseline/restrict-apparmor-profiles",
            vec![(
                "apparmor",
                json!({"allowedProfiles": ["runtime/default", "localhost/*"]}),
            )],
        ),
        c(
            "baseline/disallow-selinux",
            vec![(
                "selinux",
                json!({"allowedSELinuxOptions": [{"type": "container_t"},
                    {"type": "container_init_t"}, {"type": "container_kvm_t"}]}),
            )],
        ),
        c(
            "baseline/disallow-proc-mount",
            vec![("proc-mount", json!({"procMount": "Default"}))],
        ),
        c(
            "baseline/restrict-seccomp",
            vec![(
                "seccompv2",
                json!({"allowedProfiles": ["RuntimeDefault", "Localhost", "not configured"],
                       "allowedLocalhostFiles": ["*"]}),
            )],
        ),
        c(
            "baseline/restrict-sysctls",
            vec![(
                "forbidden-sysctls",
                json!({"allowedSysctls": ["kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                    "net.ipv4.ping_group_range"]}),
            )],
        ),
        c(
            "restricted/restrict-volume-types",
            vec![(
                "volumes",
                json!({"volumes": ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                    "persistentVolumeClaim", "projected", "secret"]}),
            )],
        ),
        c(
            "restricted/disallow-privilege-escalation",
            vec![("allow-privilege-escalation", json!({}))],
        ),
        c(
            "restricted/require-run-as-nonroot",
            vec![("users", json!({"runAsUser": {"rule": "MustRunAsNonRoot"}}))],
        ),
        c(
            "restricted/require-run-as-non-root-user",
            vec![("users", json!({"runAsUser": {"rule": "MustRunAsNonRoot"}}))],
        ),
        c(
            "restricted/restrict-seccomp-strict",
            vec![(
                "seccompv2",
                json!({"allowedProfiles": ["RuntimeDefault", "Localhost"],
                       "allowedLocalhostFiles": ["*"]}),
            )],
        ),
        Control {
            kyverno: "restricted/disallow-capabilities-strict",
            rule: Some("require-drop-all"),
            constraints: vec![(
                "capabilities",
                json!({"allowedCapabilities": ["*"], "requiredDropCapabilities": ["ALL"]}),
            )],
        },
        Control {
            kyverno: "restricted/disallow-capabilities-strict",
            rule: Some("adding-capabilities-strict"),
            constraints: vec![(
                "capabilities",
                json!({"allowedCapabilities": ["NET_BIND_SERVICE"]}),
            )],
        },
    ]
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The main Rego module and its libs of a template directory.
fn template_rego(dir: &str) -> (String, Vec<String>) {
    let path = shared()
        .join("peers/gatekeeper-psp/library/pod-security-policy")
        .join(dir)
        .join("template.yaml");
    let template = yaml(&path);
    let target = &template["spec"]["targets"][0];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    if let Some(code) = target["code"].as_array()
        && let Some(rego) = code.iter().find(|c| c["engine"] == "Rego")
    {
        let source = &rego["source"];
        return (
            source["rego"].as_str().unwrap().to_string(),
            strings(&source["libs"]),
        );
    }
    (
        target["rego"].as_str().unwrap().to_string(),
        strings(&target["libs"]),
    )
}

/// One constraint ready to evaluate: its template compiled once in an
/// engine of its own, its parameters, and the query of its violations.
pub struct Constraint {
    engine: regorus::Engine,
    query: String,
    parameters: Value,
}

impl Constraint {
    pub fn new(template: &str, parameters: Value) -> Constraint {
        let (rego, libs) = template_rego(template);
        let mut engine = regorus::Engine::new();
        engine.set_rego_v0(true);
        let package = engine
            .add_policy(format!("{template}.rego"), rego)
            .unwrap_or_else(|e| panic!("{template}: {e}"));
        for (i, lib) in libs.into_iter().enumerate() {
            engine
                .add_policy(format!("{template}-lib{i}.rego"), lib)
                .unwrap_or_else(|e| panic!("{template} lib {i}: {e}"));
        }
        Constraint {
            engine,
            query: format!("{package}.violation"),
            parameters,
        }
    }

    /// Gatekeeper's input for `review` under this constraint, converted
    /// once (the bench keeps it, as Gatekeeper builds it once per request).
    pub fn input(&self, review: &Value) -> regorus::Value {
        let input = json!({"review": review, "parameters": self.parameters});
        regorus::Value::from_json_str(&input.to_string()).unwrap()
    }

    /// The number of violations for a prepared input.
    pub fn violations(&mut self, input: regorus::Value) -> usize {
        self.engine.set_input(input);
        let result = self
            .engine
            .eval_rule(self.query.clone())
            .unwrap_or_else(|e| panic!("{}: {e}", self.query));
        match result {
            regorus::Value::Set(s) => s.len(),
            regorus::Value::Undefined => 0,
            other => panic!("{}: unexpected {other:?}", self.query),
        }
    }
}

/// The AdmissionRequest Gatekeeper puts under `input.review` for a Pod
/// created in its namespace.
pub fn review(pod: &Value) -> Value {
    json!({
        "uid": "00000000-0000-0000-0000-000000000000",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": pod["metadata"]["name"],
        "namespace": pod["metadata"]["namespace"].as_str().unwrap_or("default"),
        "operation": "CREATE",
        "userInfo": {"username": "admin", "uid": "", "groups": ["system:masters"]},
        "object": pod,
        "oldObject": null,
        "dryRun": false,
        "options": null,
    })
}

/// The Pods of a Kyverno PSS test and Kyverno's expected verdict for each
/// (true: the policy, or only `rule` when given, fails it).
pub fn kyverno_pods(dir: &str, rule: Option<&str>) -> Vec<(Value, bool)> {
    let test_dir = shared()
        .join("conformance/kyverno-policies/pod-security")
        .join(dir)
        .join(".kyverno-test");
    let test = yaml(&test_dir.join("kyverno-test.yaml"));
    let mut fails: std::collections::BTreeMap<String, bool> = Default::default();
    for result in test["results"].as_array().unwrap() {
        if result["kind"] != "Pod" || rule.is_some_and(|r| result["rule"] != r) {
            continue;
        }
        let status = result["result"].as_str().unwrap();
        let names = result["resources"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str())
                    .map(str::to_string)
                    .collect()
            })
            .or_else(|| result["resource"].as_str().map(|n| vec![n.to_string()]))
            .unwrap_or_default();
        // Skipped Pods are not verdicts; a Pod failing any rule fails.
        if status == "pass" || status == "fail" {
            for name in names {
                *fails.entry(name).or_default() |= status == "fail";
            }
        }
    }
    let mut pods = Vec::new();
    for resources in test["resources"].as_array().unwrap() {
        let path = test_dir.join(resources.as_str().unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in
            gavel::policy::load::parse_yaml_documents(&path.display().to_string(), &text).unwrap()
        {
            if doc["kind"] != "Pod" {
                continue;
            }
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if let Some(&failed) = fails.get(&name) {
                pods.push((doc, failed));
            }
        }
    }
    pods
}
