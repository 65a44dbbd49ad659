//! The real control plane of `e2e/cluster.sh` (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok, built from Go modules),
//! started for one test binary and stopped when the handle drops, and the
//! real tools that speak to it (`kubectl` and `helm` of the same build).

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where `e2e/cluster.sh build` puts the binaries (its `GAVEL_E2E_CACHE`).
pub fn cache() -> PathBuf {
    match std::env::var_os("GAVEL_E2E_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/gavel-e2e"),
    }
}

fn script(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(repo().join("e2e/cluster.sh"));
    command.args(args).env("GAVEL_E2E_DIR", dir);
    command
}

/// A pinned version from e2e/versions.env (`KUBERNETES_VERSION`, ...).
pub fn versions_env(name: &str) -> String {
    std::fs::read_to_string(repo().join("e2e/versions.env"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{name} in e2e/versions.env"))
        .trim()
        .to_string()
}

/// A running cluster; dropping it runs `e2e/cluster.sh down`.
pub struct RealCluster {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
}

impl RealCluster {
    /// Builds what is missing (a no-op when the cache is current), then
    /// starts a cluster with `nodes` kwok nodes in `dir`.
    pub fn start(dir: &Path, nodes: u32) -> RealCluster {
        let status = script(dir, &["build"])
            .status()
            .expect("running e2e/cluster.sh build");
        assert!(status.success(), "e2e/cluster.sh build failed");
        let started = Instant::now();
        let nodes = nodes.to_string();
        let status = script(dir, &["up", "--nodes", &nodes])
            .status()
            .expect("running e2e/cluster.sh up");
        // Whatever `up` left running is stopped even when it failed.
        let cluster = RealCluster {
            dir: dir.to_path_buf(),
            kubeconfig: dir.join("admin.kubeconfig"),
        };
        assert!(
            status.success(),
            "e2e/cluster.sh up failed: see {}/logs",
            dir.display()
        );
        eprintln!(
            "e2e: control plane up in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        cluster
    }

    pub fn bin(name: &str) -> PathBuf {
        cache().join("bin").join(name)
    }

    pub fn api_port(&self) -> u16 {
        self.read_port("apiserver")
    }

    pub fn etcd_port(&self) -> u16 {
        self.read_port("etcd")
    }

    fn read_port(&self, name: &str) -> u16 {
        let text = std::fs::read_to_string(self.dir.join("ports").join(name)).unwrap();
        text.trim().parse().unwrap()
    }

    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.api_port())
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("pki/ca.crt")
    }

    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("logs/audit.log")
    }

    /// `kubectl` as the cluster admin, with `stdin` piped in when given.
    pub fn kubectl_in(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut command = Command::new(RealCluster::bin("kubectl"));
        command.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        run_piped(command, stdin)
    }

    /// `kubectl` that must succeed; its stdout.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_in(args, None);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl apply --server-side` of one object (as JSON on stdin).
    pub fn apply(&self, object: &Value) {
        let out = self.kubectl_in(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&object.to_string()),
        );
        assert!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl get -o json`, or None when it is not there.
    pub fn get(&self, args: &[&str]) -> Option<Value> {
        let mut full = vec!["get", "-o", "json"];
        full.extend_from_slice(args);
        let out = self.kubectl_in(&full, None);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).unwrap())
    }

    /// `helm` as the cluster admin.
    pub fn helm(&self, args: &[&str]) -> Output {
        Command::new(RealCluster::bin("helm"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HELM_CACHE_HOME", self.dir.join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.dir.join("helm/config"))
            .env("HELM_DATA_HOME", self.dir.join("helm/data"))
            .output()
            .expect("running helm")
    }

    /// The API server's own `/metrics`, as the admin reads them.
    pub fn metrics(&self) -> String {
        let out = Command::new("curl")
            .args(["-sf", "--cacert"])
            .arg(self.ca())
            .arg("--cert")
            .arg(self.dir.join("pki/admin.crt"))
            .arg("--key")
            .arg(self.dir.join("pki/admin.key"))
            .arg(format!("{}/metrics", self.server()))
            .output()
            .expect("curl");
        assert!(out.status.success(), "reading the API server's metrics");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Stops one control-plane part (`kube-apiserver`, `etcd`, ...) by its
    /// recorded pid (`e2e/cluster.sh stop`).
    pub fn stop(&self, part: &str) {
        let status = script(&self.dir, &["stop", part]).status().unwrap();
        assert!(status.success(), "cluster.sh stop {part}");
    }

    /// Starts a stopped part again with the arguments `up` gave it, and
    /// waits for it to be healthy (`e2e/cluster.sh start`).
    pub fn start_again(&self, part: &str) {
        let status = script(&self.dir, &["start", part]).status().unwrap();
        assert!(status.success(), "cluster.sh start {part}");
    }

    /// Audit events (one JSON object a line) written since byte `from`;
    /// returns them and the new end.
    pub fn audit_since(&self, from: u64) -> (Vec<Value>, u64) {
        let text = std::fs::read(self.audit_log()).unwrap_or_default();
        let end = text.len() as u64;
        let events = text[from.min(end) as usize..]
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .filter_map(|line| serde_json::from_slice(line).ok())
            .collect();
        (events, end)
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        let _ = script(&self.dir, &["down"]).status();
    }
}

/// The kubeconfig of a ServiceAccount: a token from the TokenRequest API, so
/// that what the account's RBAC allows is exactly what its holder may do.
/// `server` is the API server's URL as the holder reaches it.
pub fn service_account_kubeconfig(
    cluster: &RealCluster,
    server: &str,
    namespace: &str,
    name: &str,
    path: &Path,
) {
    let token = cluster.kubectl(&["create", "token", name, "-n", namespace, "--duration", "6h"]);
    let ca = std::fs::read(cluster.ca()).unwrap();
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\n\
         users:\n- name: {name}\n  user:\n    token: {}\ncontexts:\n- name: e2e\n  context: {{cluster: e2e, user: {name}, namespace: {namespace}}}\n\
         current-context: e2e\n",
        server,
        token.trim()
    );
    std::fs::write(path, text).unwrap();
}

/// Runs `command` with `stdin` (when given) written to it; its output.
pub fn run_piped(mut command: Command, stdin: Option<&str>) -> Output {
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {:?}: {e}", command.get_program()));
    if let Some(text) = stdin {
        let mut input = child.stdin.take().unwrap();
        input.write_all(text.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

/// A port free on 127.0.0.1 a moment ago, for a process to listen on.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    let deadline = started + timeout;
    while Instant::now() < deadline {
        if check() {
            // Long waits are part of what a run measures.
            if started.elapsed() > Duration::from_secs(5) {
                eprintln!(
                    "e2e: waited {:.1}s for {what}",
                    started.elapsed().as_secs_f64()
                );
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}
