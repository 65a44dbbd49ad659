//! The tools the tests run, set up on first use, so that `cargo test
//! --release` works on a fresh machine of the project's kind (Rust, Go,
//! Python with pip, curl and openssl; nothing installed by hand).
//!
//! - [`python`]: a Python with the Kubernetes schemas (kubernetes-validate,
//!   and jsonschema with it) and PyYAML: the system's when it has them, else
//!   a virtualenv in the target directory, filled from PyPI once.
//! - [`kubectl`]: the one on PATH, else the one `e2e/cluster.sh build` builds
//!   from Go modules at the pinned Kubernetes version (cached outside the repo).
//! - [`helm`]: the Helm CLI `e2e/cluster.sh build` builds from its module.
//! - [`cel_go_oracle`]: cel-go as Kubernetes runs it, from `tests/cel-go`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const PYTHON_PACKAGES: [&str; 2] = ["kubernetes-validate", "pyyaml"];
const PYTHON_IMPORTS: &str = "import kubernetes_validate, jsonschema, yaml";

fn imports_ok(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", PYTHON_IMPORTS])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A Python interpreter that has [`PYTHON_PACKAGES`].
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            let system = PathBuf::from("python3");
            if imports_ok(&system) {
                return system;
            }
            let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python");
            let python = venv.join("bin/python");
            if imports_ok(&python) {
                return python;
            }
            // Built beside and renamed into place, so that two test binaries
            // never see a half-filled one.
            let staging = venv.with_extension(format!("staging-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&staging);
            run(Command::new("python3").args(["-m", "venv"]).arg(&staging));
            run(Command::new(staging.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .args(PYTHON_PACKAGES));
            let _ = std::fs::remove_dir_all(&venv);
            if std::fs::rename(&staging, &venv).is_err() {
                let _ = std::fs::remove_dir_all(&staging);
            }
            // A venv's scripts name its own path; the interpreter does not.
            assert!(
                imports_ok(&python),
                "{} lacks {PYTHON_PACKAGES:?}",
                python.display()
            );
            python
        })
        .clone()
}

/// A kubectl binary.
pub fn kubectl() -> PathBuf {
    static KUBECTL: OnceLock<PathBuf> = OnceLock::new();
    KUBECTL
        .get_or_init(|| {
            let on_path = Command::new("kubectl")
                .args(["version", "--client"])
                .output()
                .is_ok_and(|o| o.status.success());
            if on_path {
                return PathBuf::from("kubectl");
            }
            run(Command::new(super::cluster::repo().join("e2e/cluster.sh")).arg("build"));
            super::cluster::RealCluster::bin("kubectl")
        })
        .clone()
}

/// The Helm CLI of `e2e/cluster.sh build` (with the rest of its parts:
/// prometheus-operator's CRDs for the chart check among them).
pub fn helm() -> PathBuf {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        run(Command::new(super::cluster::repo().join("e2e/cluster.sh")).arg("build"));
        super::cluster::RealCluster::bin("helm")
    })
    .clone()
}

/// The cel-go oracle of `tests/cel_go.rs`, built from `tests/cel-go` into a
/// cache outside the repository when its sources change.
pub fn cel_go_oracle() -> PathBuf {
    let source = super::cluster::repo().join("tests/cel-go");
    let mut stamp = std::hash::DefaultHasher::new();
    for file in ["go.mod", "go.sum", "main.go"] {
        let text = std::fs::read(source.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        std::hash::Hash::hash(&text, &mut stamp);
    }
    let cache = std::env::var_os("GAVEL_BENCH_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/gavel-bench")
        });
    let binary = cache.join(format!(
        "cel-go-oracle-{:016x}",
        std::hash::Hasher::finish(&stamp)
    ));
    if !binary.exists() {
        std::fs::create_dir_all(&cache).unwrap();
        // Built beside and renamed into place, so that a concurrent run never
        // starts a half-written one.
        let staging = binary.with_extension(format!("staging-{}", std::process::id()));
        let status = Command::new("go")
            .args(["build", "-o"])
            .arg(&staging)
            .arg(".")
            .current_dir(&source)
            .status()
            .expect("go on PATH");
        assert!(status.success(), "building the cel-go oracle: {status}");
        std::fs::rename(&staging, &binary).unwrap();
    }
    binary
}

fn run(command: &mut Command) {
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(status.success(), "{command:?} failed: {status}");
}
