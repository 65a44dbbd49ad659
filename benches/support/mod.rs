//! What several benches share: the 17 Pod Security Standard policies (and
//! their CEL forms) and reading their input files.

// Each bench compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use gavel::policy::CompiledPolicy;
use gavel::policy::cel_policy::CompiledValidatingPolicy;
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
    let out = classic_in("pod-security");
    assert_eq!(out.len(), 17);
    out
}

/// The same controls as `validate.cel` rules (`pod-security-cel`: 16 of
/// the 17, without restrict-apparmor-profiles), each set to Enforce.
pub fn pss_cel_policies() -> Vec<CompiledPolicy> {
    let out = classic_in("pod-security-cel");
    assert_eq!(out.len(), 16);
    out
}

/// The same controls as ValidatingPolicies (`pod-security-vpol`), each
/// set to Deny.
pub fn pss_validating_policies() -> Vec<CompiledValidatingPolicy> {
    let out: Vec<_> = documents_in("pod-security-vpol")
        .into_iter()
        .filter_map(|doc| match doc {
            LoadedDocument::ValidatingPolicy(mut p) => {
                p.spec.validation_actions = vec!["Deny".into()];
                Some(CompiledValidatingPolicy::compile(&p).unwrap())
            }
            _ => None,
        })
        .collect();
    assert_eq!(out.len(), 16);
    out
}

fn classic_in(folder: &str) -> Vec<CompiledPolicy> {
    documents_in(folder)
        .into_iter()
        .filter_map(|doc| match doc {
            LoadedDocument::Policy(mut p) => {
                p.spec.validation_failure_action = Some("Enforce".into());
                Some(CompiledPolicy::compile(&p).unwrap())
            }
            _ => None,
        })
        .collect()
}

/// The documents of the PSS controls a folder of the corpus has.
fn documents_in(folder: &str) -> Vec<LoadedDocument> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/conformance/kyverno-policies")
        .join(folder);
    let mut out = Vec::new();
    for dir in PSS_DIRS {
        let name = dir.rsplit('/').next().unwrap();
        let path = root.join(dir).join(format!("{name}.yaml"));
        if !path.exists() {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.extend(load_policy_text(&path.display().to_string(), &text).unwrap());
    }
    out
}

/// The bytes of `dir/name`, `dir` relative to the repository root.
pub fn read(dir: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
