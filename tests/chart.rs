//! `charts/gavel` through the real Helm engine and the Kubernetes schemas:
//! `.ci/check-chart.py` lints it strictly, renders it with the default and
//! the large-cluster values, validates every manifest against Kubernetes
//! 1.33, and checks the Deployment passes only flags `gavel serve` knows.

use std::process::Command;

#[test]
fn chart_lints_renders_and_validates() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(".ci/check-chart.py")
        .arg(env!("CARGO_BIN_EXE_gavel"))
        .current_dir(root)
        .output()
        .expect("python3 runs (.ci/run installs helm-python-sdk and kubernetes-validate)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "chart check failed:\n{text}");
    assert!(text.contains("lint clean, manifests valid"), "{text}");
}
