//! The conformance yardstick: runs the Kyverno policy library's offline tests
//! in `../shared/conformance` and fails if a subset's passing-file count drops
//! below the floor recorded in `tests/conformance_floors.txt`.

use gavel::cli::kyverno_test::{Selector, run_test_file};
use std::path::{Path, PathBuf};

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance")
}

fn floors() -> Vec<(String, usize)> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance_floors.txt"),
    )
    .expect("tests/conformance_floors.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, n) = l.split_once(' ').expect("`<subset> <floor>`");
            (
                name.to_string(),
                n.trim().parse().expect("floor is a number"),
            )
        })
        .collect()
}

/// (files passing, files in subset, failing paths)
fn run_subset(name: &str) -> (usize, usize, Vec<String>) {
    let root = shared();
    let list =
        std::fs::read_to_string(root.join(format!("subsets/{name}.txt"))).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the conformance corpus must sit at ../shared)",
                root.display()
            )
        });
    let selector = Selector::default();
    let mut passing = 0;
    let mut total = 0;
    let mut failing = Vec::new();
    for line in list.lines().filter(|l| !l.trim().is_empty()) {
        total += 1;
        let outcomes = run_test_file(&root.join(line.trim()), &selector);
        if !outcomes.is_empty() && outcomes.iter().all(|o| o.passed()) {
            passing += 1;
        } else {
            failing.push(line.to_string());
        }
    }
    (passing, total, failing)
}

#[test]
fn conformance_subsets_stay_above_their_floors() {
    let mut report = Vec::new();
    let mut below = Vec::new();
    for (name, floor) in floors() {
        let (passing, total, failing) = run_subset(&name);
        report.push(format!(
            "{name}: {passing}/{total} files pass (floor {floor})"
        ));
        if passing < floor {
            below.push(format!(
                "{name}: {passing} < floor {floor}; failing: {failing:#?}"
            ));
        }
    }
    println!("{}", report.join("\n"));
    assert!(
        below.is_empty(),
        "conformance dropped below the floor:\n{}",
        below.join("\n")
    );
}
