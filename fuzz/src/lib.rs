//! What the fuzz targets share: the panic policy, the policies and reviews
//! of `examples/`, and splitting one input into parts.

use gavel::admission::policies::{PolicySet, Snapshot, load_text};
use std::path::{Path, PathBuf};
use std::sync::Once;

/// libFuzzer's panic hook aborts on every panic, caught or not. gavel
/// evaluates CEL inside `catch_unwind`, because the `cel` interpreter panics
/// on some inputs rather than returning an error; those panics are handled
/// and must unwind. Any other panic, and one of `cel` that escapes the guard,
/// is a crash (libfuzzer-sys aborts on a panic that leaves the target).
pub fn guard_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_cel = info
                .location()
                .is_some_and(|l| l.file().contains("/cel-") || l.file().starts_with("cel-"));
            if !in_cel {
                abort(info);
            }
        }));
    });
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The example policies gavel ships (the 17 Pod Security policies, a mutate
/// and an Audit policy), compiled as `gavel serve` loads them.
pub fn example_snapshot() -> Snapshot {
    let mut set = PolicySet::default();
    let dir = repo().join("examples/policies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("pod-security"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.push(dir.join("add-pod-defaults.yaml"));
    files.push(dir.join("require-labels.yaml"));
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        set.extend(&load_text(&file.display().to_string(), &text).unwrap());
    }
    Snapshot::new(set, 1)
}

/// The compliant and the violating Pod review of `examples/reviews`.
pub fn example_reviews() -> Vec<Vec<u8>> {
    ["pod-compliant.json", "pod-violating.json"]
        .iter()
        .map(|f| std::fs::read(repo().join("examples/reviews").join(f)).unwrap())
        .collect()
}

/// Splits an input at its first NUL byte: (head, tail). Inputs without one
/// are all head.
pub fn split(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}
