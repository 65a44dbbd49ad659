//! A kyverno-test.yaml as `gavel test` reads it: the input is the test file,
//! in a directory that also holds a policy and a resource file it may name
//! (`policy.yaml`, `resource.yaml`, `values.yaml`), taken from the
//! conformance corpus layout.
#![no_main]

use gavel::cli::kyverno_test::{Selector, run_test_file};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::LazyLock;

static DIR: LazyLock<PathBuf> = LazyLock::new(|| {
    let dir = std::env::temp_dir().join(format!("gavel-fuzz-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let examples = gavel_fuzz::repo().join("examples");
    std::fs::copy(
        examples.join("policies/require-labels.yaml"),
        dir.join("policy.yaml"),
    )
    .unwrap();
    let review: serde_json::Value = serde_json::from_slice(
        &std::fs::read(examples.join("reviews/pod-violating.json")).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("resource.yaml"),
        review["request"]["object"].to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("values.yaml"),
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Values\npolicies: []\n",
    )
    .unwrap();
    dir
});

fuzz_target!(init: gavel_fuzz::guard_panics(), |data: &[u8]| {
    let path = DIR.join("kyverno-test.yaml");
    std::fs::write(&path, data).unwrap();
    let _ = run_test_file(&path, &Selector::default());
});
