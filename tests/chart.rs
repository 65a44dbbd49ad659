//! `charts/gavel` through the real Helm CLI and the Kubernetes schemas:
//! `.ci/check-chart.py` lints it strictly and renders it with every values
//! file (the defaults, the large-cluster values, `charts/gavel/ci/*`),
//! validates every manifest against Kubernetes 1.33 (the ServiceMonitor
//! against prometheus-operator's CRD), and checks the Deployment passes
//! only flags `gavel serve` knows.
//! The strategic-merge table generated from those schemas is checked too.

use crate::support;

use std::process::Command;

#[test]
fn chart_lints_renders_and_validates() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(support::tools::python())
        .arg(".ci/check-chart.py")
        .arg(env!("CARGO_BIN_EXE_gavel"))
        .arg(support::tools::helm())
        .arg(support::cluster::cache().join("monitoring-crds"))
        .current_dir(root)
        .output()
        .expect("python runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "chart check failed:\n{text}");
    assert!(text.contains("lint clean, manifests valid"), "{text}");
}

/// `src/kinds/schema/merge_keys.rs` is what `.ci/gen-merge-keys.py` generates from
/// the Kubernetes schema of kubernetes-validate today.
#[test]
fn merge_key_table_matches_its_schema() {
    let out = Command::new(support::tools::python())
        .args([".ci/gen-merge-keys.py", "--check"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
