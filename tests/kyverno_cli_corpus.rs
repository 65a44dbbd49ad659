//! `gavel test` against Kyverno's own CLI tests: the `test/cli` tree of
//! the pinned Kyverno module (e2e/versions.env), the kyverno-test.yaml
//! files Kyverno's developers wrote for every policy kind and test field.
//! Each directory must print the same "Test Summary" counts as `kyverno
//! test` printed for it, recorded in tests/kyverno_cli_corpus.json by
//! `e2e/cli-side-by-side.py --corpus kyverno-cli`. How many agree is a
//! floor that only goes up (raise it there when more agree).
//!
//! The module comes from Go's module cache, downloaded through the module
//! proxy when it is not there yet.

use gavel::cli::kyverno_test::{Selector, discover, run_test_file};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn pinned_kyverno() -> String {
    let versions = std::fs::read_to_string(repo().join("e2e/versions.env")).unwrap();
    versions
        .lines()
        .find_map(|l| l.strip_prefix("KYVERNO_VERSION="))
        .expect("KYVERNO_VERSION in e2e/versions.env")
        .trim()
        .to_string()
}

/// `test/cli` of the pinned Kyverno module, downloaded when missing.
fn corpus(version: &str) -> PathBuf {
    let go = |args: &[&str]| {
        let out = Command::new("go")
            .args(args)
            .current_dir(std::env::temp_dir())
            .env("GOFLAGS", "-mod=mod")
            .output()
            .expect("go on PATH");
        assert!(
            out.status.success(),
            "go {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let module = format!("github.com/kyverno/kyverno@{version}");
    let dir = PathBuf::from(go(&["env", "GOMODCACHE"])).join(&module);
    if !dir.join("test/cli").is_dir() {
        go(&["mod", "download", &module]);
    }
    dir.join("test/cli")
}

/// What `gavel test <dir>` prints as its summary: (passed, failed); `None`
/// when a test does not load or run, which stops the run without one.
fn gavel_summary(dir: &Path) -> Option<(u64, u64)> {
    let (mut pass, mut fail) = (0, 0);
    for file in discover(&[dir.to_path_buf()], "kyverno-test.yaml") {
        for o in run_test_file(&file, &Selector::default()) {
            if o.error.is_some() {
                return None;
            }
            pass += (o.pass + o.skip) as u64;
            fail += o.fail as u64;
        }
    }
    Some((pass, fail))
}

#[test]
fn kyverno_cli_tests_agree_with_kyverno() {
    let recorded: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("tests/kyverno_cli_corpus.json")).unwrap(),
    )
    .unwrap();
    let version = pinned_kyverno();
    assert_eq!(
        recorded["kyverno"], version,
        "the recorded summaries are of another Kyverno: run e2e/cli-side-by-side.py --corpus kyverno-cli"
    );
    let root = corpus(&version);
    let files = recorded["files"].as_object().unwrap();
    let mut agree = 0;
    let mut differ = Vec::new();
    for (dir, kyverno) in files {
        let gavel = gavel_summary(&root.join(dir));
        // Kyverno's record is its summary, or why it printed none.
        let same = match (kyverno.as_array(), gavel) {
            (Some(k), Some((p, f))) => k[0].as_u64() == Some(p) && k[1].as_u64() == Some(f),
            (None, None) => kyverno
                .as_str()
                .is_some_and(|s| s.starts_with("no summary")),
            _ => false,
        };
        if same {
            agree += 1;
        } else {
            differ.push(format!("{dir}: gavel {gavel:?}, kyverno {kyverno}"));
        }
    }
    let floor = recorded["floor"].as_u64().unwrap();
    eprintln!(
        "kyverno test corpus: {agree} of {} directories agree (floor {floor})",
        files.len()
    );
    assert!(
        agree as u64 >= floor,
        "{agree} of {} agree, below the floor {floor}; differing:\n{}",
        files.len(),
        differ.join("\n")
    );
}
