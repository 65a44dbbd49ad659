//! The CI sample of the differential test against Kyverno's CLI: the
//! variations `e2e/differential.py --sample` generates from the conformance
//! corpus (every 8th usable test, 8 variations each), with the answers
//! `kyverno apply` gave for them recorded in tests/differential_sample.json
//! (`e2e/differential.py --sample --record tests/differential_sample.json`,
//! with Kyverno built by `e2e/cluster.sh build kyverno`). Here only `gavel
//! apply` runs, and every difference from Kyverno's recorded answer must be
//! explained in docs/compatibility.md, as in the full 10,000-pair run.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

#[test]
fn gavel_apply_agrees_with_kyverno_apply_on_the_sample() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("differential-sample");
    let run = Command::new(support::tools::python())
        .arg(repo.join("e2e/differential.py"))
        .arg("--replay")
        .arg(repo.join("tests/differential_sample.json"))
        .arg("--gavel")
        .arg(env!("CARGO_BIN_EXE_gavel"))
        .arg("--out")
        .arg(&out)
        .output()
        .expect("running e2e/differential.py");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let last = stdout.lines().last().unwrap_or_default();
    println!("{last}");
    assert!(
        run.status.success(),
        "differences from Kyverno that docs/compatibility.md does not explain \
         (report: {}):\n{last}\n{}",
        out.join("differential.md").display(),
        stderr
            .lines()
            .filter(|l| !l.starts_with('['))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The sample is not empty: a few hundred pairs were compared.
    let pairs: usize = last
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pairs="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_default();
    assert!(pairs >= 300, "only {pairs} pairs compared: {last}");
}
