//! Every fuzz target of `fuzz/` (cargo-fuzz, libFuzzer) runs for a bounded
//! time, seeded from `../shared/conformance` and `examples/`; a crash, a
//! timeout or a leak of memory past the limit fails the test with the input
//! that caused it.
//!
//! The targets build with the nightly toolchain (libFuzzer's coverage
//! instrumentation) and `cargo-fuzz` from crates.io, installed into
//! `~/.cache/gavel-fuzz` when it is not on PATH. The build and the corpora
//! live there too, so a warm machine rebuilds only gavel itself and each run
//! starts from what earlier runs found. GAVEL_FUZZ_SECONDS sets the time per
//! target (default 30); a long local run is the same command with a larger
//! value, or `cargo +nightly fuzz run TARGET` in `fuzz/`.

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use support::cluster::repo;

/// The version of cargo-fuzz installed when none is on PATH.
const CARGO_FUZZ: &str = "0.13.2";

const TARGETS: [&str; 8] = [
    "admission_review",
    "policy_load",
    "pattern",
    "jmespath",
    "cel",
    "patch",
    "kyverno_test",
    "signed_manifest",
];

#[test]
fn fuzz_targets_survive_a_bounded_run() {
    let _heavy = support::heavy();
    let seconds: u64 = std::env::var("GAVEL_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let cache = cache();
    let cargo_fuzz = cargo_fuzz(&cache);
    let fuzz = |args: &[&str]| {
        let mut command = Command::new(&cargo_fuzz);
        command
            .arg("fuzz")
            .args(args)
            .current_dir(repo())
            .env("RUSTUP_TOOLCHAIN", "nightly")
            .env("CARGO_TARGET_DIR", cache.join("target"));
        command
    };
    // No sanitizer: gavel forbids unsafe code, so ASan would find nothing
    // that a panic does not show, at half the speed. Debug assertions and
    // overflow checks stay on (cargo-fuzz's release build).
    let started = Instant::now();
    let status = fuzz(&["build", "--sanitizer", "none"])
        .status()
        .expect("running cargo fuzz build");
    assert!(status.success(), "cargo fuzz build failed");
    eprintln!(
        "fuzz: targets built in {:.0}s",
        started.elapsed().as_secs_f64()
    );

    let seeds = Seeds::collect();
    // One libFuzzer process per core, each target still for `seconds`:
    // on 2 cores the eight runs take half as long as one after another.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(vec![]);
    let run = |target: &'static str| {
        let corpus = cache.join("corpus").join(target);
        std::fs::create_dir_all(&corpus).unwrap();
        let added = seeds.write(target, &corpus);
        let artifacts = repo().join("target/fuzz-artifacts").join(target);
        std::fs::create_dir_all(&artifacts).unwrap();
        let out = fuzz(&["run", "--sanitizer", "none", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg("-timeout=10")
            .arg("-rss_limit_mb=2048")
            .arg("-max_len=262144")
            .arg("-print_final_stats=1")
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .output()
            .expect("running cargo fuzz run");
        let log = String::from_utf8_lossy(&out.stderr);
        let stat = |name: &str| {
            log.lines()
                .find_map(|l| l.strip_prefix(&format!("stat::{name}:")))
                .map_or("?".to_string(), |v| v.trim().to_string())
        };
        let files = std::fs::read_dir(&corpus).map_or(0, |d| d.count());
        eprintln!(
            "fuzz: {target}: {} executions in {seconds}s ({} per second), corpus {files} ({added} seeds new), peak RSS {} MB",
            stat("number_of_executed_units"),
            stat("average_exec_per_sec"),
            stat("peak_rss_mb"),
        );
        if !out.status.success() {
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!(
                "fuzz: {target} FAILED; the input is in {}:\n{}",
                artifacts.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
            failed.lock().unwrap().push(target);
        }
    };
    std::thread::scope(|s| {
        for _ in 0..workers.min(TARGETS.len()) {
            s.spawn(|| {
                while let Some(target) = TARGETS.get(next.fetch_add(1, Ordering::Relaxed)).copied()
                {
                    run(target);
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap();
    assert!(failed.is_empty(), "fuzz targets failed: {failed:?}");
}

fn cache() -> PathBuf {
    let dir = match std::env::var_os("GAVEL_FUZZ_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/gavel-fuzz"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// cargo-fuzz on PATH, or installed from crates.io into the cache.
fn cargo_fuzz(cache: &Path) -> PathBuf {
    let nightly = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .output();
    assert!(
        nightly.is_ok_and(|o| o.status.success()),
        "the fuzz targets need the nightly toolchain: rustup toolchain install nightly"
    );
    if let Ok(out) = Command::new("cargo-fuzz").arg("--version").output()
        && out.status.success()
    {
        return PathBuf::from("cargo-fuzz");
    }
    let installed = cache.join("bin/cargo-fuzz");
    if !installed.exists() {
        let status = Command::new("cargo")
            .args(["install", "--locked", "cargo-fuzz", "--version", CARGO_FUZZ])
            .arg("--root")
            .arg(cache)
            .status()
            .expect("running cargo install");
        assert!(status.success(), "cargo install cargo-fuzz failed");
    }
    installed
}

/// Seed inputs per target, from the conformance corpus and `examples/`.
#[derive(Default)]
struct Seeds {
    policies: Vec<String>,
    tests: Vec<String>,
    resources: Vec<Value>,
    patterns: Vec<Value>,
    jmespath: Vec<String>,
    cel: Vec<String>,
    patches: Vec<Value>,
    reviews: Vec<Vec<u8>>,
}

impl Seeds {
    fn collect() -> Seeds {
        let mut seeds = Seeds::default();
        let mut files = vec![];
        for root in [
            repo().join("../shared/conformance"),
            repo().join("examples"),
        ] {
            walk(&root, &mut files);
        }
        for file in &files {
            let name = file.file_name().unwrap().to_string_lossy();
            if name.ends_with(".json") && file.parent().unwrap().ends_with("reviews") {
                seeds.reviews.push(std::fs::read(file).unwrap());
                continue;
            }
            if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            if text.len() > 64 * 1024 {
                continue;
            }
            if name.starts_with("kyverno-test") {
                seeds.tests.push(text);
                continue;
            }
            let Ok(docs) = gavel::policy::load::parse_yaml_documents(&name, &text) else {
                continue;
            };
            let mut is_policy = false;
            for doc in docs {
                let api = doc["apiVersion"].as_str().unwrap_or("");
                if api.contains("kyverno.io") || api.starts_with("admissionregistration") {
                    is_policy = true;
                    seeds.policy_parts(&doc);
                } else if doc["kind"].is_string() && doc["metadata"].is_object() {
                    seeds.resources.push(doc);
                }
            }
            if is_policy {
                seeds.policies.push(text);
            }
        }
        seeds
    }

    /// The patterns, JMESPath and CEL expressions and patches of a policy.
    fn policy_parts(&mut self, value: &Value) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("pattern", _) => self.patterns.push(v.clone()),
                        ("anyPattern", Value::Array(list)) => self.patterns.extend(list.clone()),
                        ("expression" | "condition" | "messageExpression", Value::String(s)) => {
                            self.cel.push(s.clone())
                        }
                        ("patchStrategicMerge", _) => self.patches.push(v.clone()),
                        ("patchesJson6902", Value::String(s)) => {
                            if let Ok(ops) = gavel::policy::mutation::parse_operations(s) {
                                self.patches.push(Value::Array(ops));
                            }
                        }
                        _ => {}
                    }
                    self.policy_parts(v);
                }
            }
            Value::Array(list) => list.iter().for_each(|v| self.policy_parts(v)),
            Value::String(s) => {
                let mut rest = s.as_str();
                while let Some(start) = rest.find("{{") {
                    let Some(end) = rest[start..].find("}}") else {
                        break;
                    };
                    self.jmespath
                        .push(rest[start + 2..start + end].trim().to_string());
                    rest = &rest[start + end + 2..];
                }
            }
            _ => {}
        }
    }

    /// Writes the target's seeds into its corpus, named by content so that
    /// the same seed is written once; how many were new.
    fn write(&self, target: &str, corpus: &Path) -> usize {
        let resource = |i: usize| -> &Value {
            self.resources
                .get(i % self.resources.len().max(1))
                .unwrap_or(&Value::Null)
        };
        let joined = |head: &str, i: usize| -> Vec<u8> {
            let mut bytes = head.as_bytes().to_vec();
            bytes.push(0);
            bytes.extend(
                json!({"request": {"object": resource(i)}})
                    .to_string()
                    .bytes(),
            );
            bytes
        };
        let inputs: Vec<Vec<u8>> = match target {
            "admission_review" => self
                .reviews
                .iter()
                .cloned()
                .chain(self.resources.iter().take(300).map(|r| {
                    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "request": {"uid": "seed", "kind": {"group": "", "version": "v1", "kind": r["kind"]},
                                       "resource": {"group": "", "version": "v1", "resource": "pods"},
                                       "operation": "CREATE", "name": r["metadata"]["name"],
                                       "namespace": "default", "userInfo": {"username": "seed"},
                                       "object": r}})
                    .to_string()
                    .into_bytes()
                }))
                .collect(),
            "policy_load" => self.policies.iter().map(|p| p.clone().into_bytes()).collect(),
            "kyverno_test" => self.tests.iter().map(|t| t.clone().into_bytes()).collect(),
            "pattern" => self
                .patterns
                .iter()
                .enumerate()
                .map(|(i, p)| json!([resource(i), p]).to_string().into_bytes())
                .collect(),
            "patch" => self
                .patches
                .iter()
                .enumerate()
                .map(|(i, p)| json!([resource(i), p]).to_string().into_bytes())
                .collect(),
            "jmespath" => self
                .jmespath
                .iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .enumerate()
                .map(|(i, e)| joined(e, i))
                .collect(),
            // The message of each resource signed into its annotations,
            // and the resource without them.
            "signed_manifest" => self
                .resources
                .iter()
                .filter_map(|r| {
                    use base64::Engine as _;
                    use std::io::Read as _;
                    let message = r["metadata"]["annotations"]["cosign.sigstore.dev/message"]
                        .as_str()?;
                    let gz = base64::engine::general_purpose::STANDARD
                        .decode(message)
                        .ok()?;
                    let mut bytes = Vec::new();
                    flate2::read::GzDecoder::new(gz.as_slice())
                        .read_to_end(&mut bytes)
                        .ok()?;
                    let mut object = r.clone();
                    object["metadata"]
                        .as_object_mut()?
                        .remove("annotations");
                    bytes.push(0);
                    bytes.extend(object.to_string().bytes());
                    Some(bytes)
                })
                .collect(),
            "cel" => self
                .cel
                .iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .enumerate()
                .map(|(i, e)| joined(e, i))
                .collect(),
            other => panic!("no seeds for {other}"),
        };
        // Inputs that once crashed the target, kept verbatim in
        // fuzz/regressions/TARGET: libFuzzer runs its whole corpus first,
        // so each is replayed on every run.
        let mut inputs = inputs;
        if let Ok(dir) = std::fs::read_dir(repo().join("fuzz/regressions").join(target)) {
            inputs.extend(dir.map(|e| std::fs::read(e.unwrap().path()).unwrap()));
        }
        let mut added = 0;
        for input in inputs {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(&input);
            let name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            let path = corpus.join(format!("seed-{name}"));
            if !path.exists() {
                std::fs::write(path, input).unwrap();
                added += 1;
            }
        }
        added
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}
