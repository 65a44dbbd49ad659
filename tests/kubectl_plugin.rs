//! gavel as Kyverno users call Kyverno's CLI: `kubectl gavel ...` through
//! the real kubectl's plugin mechanism (an executable named
//! `kubectl-gavel` on PATH), and shell completions from `gavel completion`.

use crate::support;

use std::process::Command;
use support::gavel::{examples, temp_dir};

#[test]
fn kubectl_runs_gavel_as_a_plugin() {
    let dir = temp_dir("kubectl-plugin");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_gavel"), bin.join("kubectl-gavel")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = |args: &[&str]| {
        let out = Command::new(support::tools::kubectl())
            .args(args)
            .env("PATH", &path)
            // No cluster is needed: plugins run before kubectl connects.
            .env("KUBECONFIG", dir.join("none"))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, listed) = kubectl(&["plugin", "list"]);
    assert!(listed.contains("kubectl-gavel"), "{code:?} {listed}");

    // Help names the command as typed.
    let (code, help) = kubectl(&["gavel", "--help"]);
    assert_eq!(code, Some(0), "{help}");
    assert!(help.contains("Usage: kubectl gavel"), "{help}");

    // And it works: the examples' kyverno-test.yaml files pass.
    let tests = examples().join("tests");
    let (code, out) = kubectl(&["gavel", "test", tests.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("pass"), "{out}");
}

#[test]
fn completion_scripts_name_every_command() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = Command::new(env!("CARGO_BIN_EXE_gavel"))
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        for word in ["gavel", "test", "apply", "serve", "completion"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
    // A completion script bash accepts.
    let out = Command::new(env!("CARGO_BIN_EXE_gavel"))
        .args(["completion", "bash"])
        .output()
        .unwrap();
    let check = Command::new("bash")
        .args(["-n", "-c"])
        .arg(String::from_utf8(out.stdout).unwrap())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}
