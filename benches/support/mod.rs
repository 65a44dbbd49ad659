//! What several benches share: the 17 Pod Security Standard policies and
//! reading their input files.

// Each bench compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use gavel::policy::CompiledPolicy;
use gavel::policy::load::{LoadedDocument, load_policy_text};
use std::path::Path;

const PSS_DIRS: &[&str] = &[
    "baseline/disallow-capabilities",
    "baseline/disallow-host-namespaces",
    "baseline/disallow-host-path",
    "baseline/disallow-host-ports",
    "baseline/disallow-host-process",
    "baseline/disallow-privileged-containers",
    "baseline/disallow-proc-mount",
    "baseline/disallow-selinux",
    "baseline/restrict-apparmor-profiles",
    "baseline/restrict-seccomp",
    "baseline/restrict-sysctls",
    "restricted/disallow-capabilities-strict",
    "restricted/disallow-privilege-escalation",
    "restricted/require-run-as-non-root-user",
    "restricted/require-run-as-nonroot",
    "restricted/restrict-seccomp-strict",
    "restricted/restrict-volume-types",
];

/// The baseline and restricted PSS policies of the conformance corpus,
/// each set to Enforce.
pub fn pss_policies() -> Vec<CompiledPolicy> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/conformance/kyverno-policies/pod-security");
    let mut out = Vec::new();
    for dir in PSS_DIRS {
        let name = dir.rsplit('/').next().unwrap();
        let path = root.join(dir).join(format!("{name}.yaml"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for doc in load_policy_text(&path.display().to_string(), &text).unwrap() {
            if let LoadedDocument::Policy(mut p) = doc {
                p.spec.validation_failure_action = Some("Enforce".into());
                out.push(CompiledPolicy::compile(&p).unwrap());
            }
        }
    }
    assert_eq!(out.len(), 17);
    out
}

/// The bytes of `dir/name`, `dir` relative to the repository root.
pub fn read(dir: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
