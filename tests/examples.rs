//! The `kyverno-test.yaml` suites under `examples/tests` pass, row by row,
//! and a changed expectation fails them (the comparison is not vacuous).

use gavel::cli::kyverno_test::{Outcome, Selector, discover, run_test_file};
use std::path::{Path, PathBuf};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tests")
}

#[test]
fn example_suites_pass() {
    let files = discover(&[examples()], "kyverno-test.yaml");
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        for outcome in run_test_file(&f, &Selector::default()) {
            assert!(outcome.passed(), "{}: {:#?}", f.display(), outcome.rows);
            assert!(!outcome.rows.is_empty(), "{}: no rows", f.display());
            // Every row matched its expectation: a pass, or an expected
            // skip (not an Excluded or Invalid Policy row).
            assert!(
                outcome.rows.iter().all(|r| r.outcome == Outcome::Pass
                    || (r.outcome == Outcome::Skip && r.reason == "Ok")),
                "{}: {:#?}",
                f.display(),
                outcome.rows
            );
        }
    }
}

/// Copies an example suite, edits one expected file, and runs it.
fn with_edited(suite: &str, file: &str, from: &str, to: &str) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("gavel-examples-{suite}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(examples().join(suite)).unwrap() {
        let path = entry.unwrap().path();
        let mut text = std::fs::read_to_string(&path).unwrap();
        if path.file_name().unwrap() == file {
            assert!(text.contains(from), "{file} lacks {from:?}");
            text = text.replace(from, to);
        }
        std::fs::write(dir.join(path.file_name().unwrap()), text).unwrap();
    }
    let outcomes = run_test_file(&dir.join("kyverno-test.yaml"), &Selector::default());
    std::fs::remove_dir_all(&dir).ok();
    outcomes
        .iter()
        .flat_map(|o| o.rows.iter())
        .filter(|r| r.outcome == Outcome::Fail)
        .map(|r| r.reason.clone())
        .collect()
}

#[test]
fn changed_expectations_fail_with_a_resource_diff() {
    assert_eq!(
        with_edited(
            "mutate-existing",
            "patched-secret.yaml",
            "dictionary-1",
            "dictionary-2"
        ),
        ["Resource diff"]
    );
    assert_eq!(
        with_edited(
            "generate-clone",
            "generated.yaml",
            "eyJhdXRocyI6e319",
            "e30="
        ),
        ["Resource diff"]
    );
    // MutatingPolicy mutate existing: the patched targets are compared.
    assert_eq!(
        with_edited(
            "mutating-policy-existing",
            "patched.yaml",
            "rotated-by: db-password",
            "rotated-by: someone-else"
        ),
        ["Resource diff"]
    );
    // The status is checked as well as the resource.
    assert_eq!(
        with_edited(
            "mutate-existing",
            "kyverno-test.yaml",
            "result: pass",
            "result: skip"
        ),
        ["Want skip, got pass"]
    );
    // Admission policies: the binding-selected failure and the mutation.
    assert_eq!(
        with_edited(
            "admission-policies",
            "kyverno-test.yaml",
            "resources: [prod-big]\n  kind: Deployment\n  result: fail",
            "resources: [prod-big]\n  kind: Deployment\n  result: pass"
        ),
        ["Want pass, got fail"]
    );
    assert_eq!(
        with_edited(
            "admission-policies",
            "patched.yaml",
            "replicas: 1",
            "replicas: 2"
        ),
        ["Resource diff", "Resource diff"]
    );
    // Params: a higher limit in the param lets the big Deployment through,
    // and another default changes the mutation.
    assert_eq!(
        with_edited(
            "policy-params",
            "params.yaml",
            "maxReplicas: 5",
            "maxReplicas: 9"
        ),
        ["Want fail, got pass"]
    );
    assert_eq!(
        with_edited(
            "policy-params",
            "params.yaml",
            "defaultReplicas: 2",
            "defaultReplicas: 3"
        ),
        ["Resource diff"]
    );
}

/// A resource named twice in one `results[]` entry gives two rows, as in
/// Kyverno (other/require-reasonable-pdbs in the policy library lists one
/// PodDisruptionBudget twice: Kyverno counts 25 passes, not 24).
#[test]
fn a_resource_listed_twice_counts_twice() {
    let rows = |edit: bool| {
        let dir = std::env::temp_dir().join(format!(
            "gavel-examples-twice-{edit}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(examples().join("require-labels")).unwrap() {
            let path = entry.unwrap().path();
            let mut text = std::fs::read_to_string(&path).unwrap();
            if edit && path.file_name().unwrap() == "kyverno-test.yaml" {
                text = text.replacen(
                    "resources: [good-pod, good-deployment]",
                    "resources: [good-pod, good-pod, good-deployment]",
                    1,
                );
            }
            // The suite names policies by a path relative to its folder.
            text = text.replace(
                "../../policies/",
                &format!("{}/", examples().join("../policies").display()),
            );
            std::fs::write(dir.join(path.file_name().unwrap()), text).unwrap();
        }
        let outcomes = run_test_file(&dir.join("kyverno-test.yaml"), &Selector::default());
        std::fs::remove_dir_all(&dir).ok();
        assert!(outcomes.iter().all(|o| o.passed()), "{outcomes:#?}");
        outcomes
            .iter()
            .flat_map(|o| o.rows.iter())
            .filter(|r| r.resource.contains("good-pod"))
            .count()
    };
    assert_eq!(rows(true), rows(false) + 1);
}
