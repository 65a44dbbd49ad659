//! gavel as a user installs it on the real control plane: Kyverno's CRDs,
//! the chart installed by the real Helm CLI, and the replicas running as host
//! processes with the identity of the ServiceAccount the chart created (a
//! TokenRequest token), so the chart's RBAC is exactly what is enforced. The
//! API server calls the replicas through a loopback balancer at the URL
//! gavel registers, as it would call the chart's Service.

use super::balancer::Balancer;
use super::cluster::{RealCluster, eventually, repo, service_account_kubeconfig};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const NAMESPACE: &str = "gavel";
pub const RELEASE: &str = "gavel";
pub const VALIDATING: &str = "gavel-resource-validating-webhook-cfg";
pub const MUTATING: &str = "gavel-resource-mutating-webhook-cfg";
/// The configuration of the policy and TTL label checks.
pub const POLICY_VALIDATING: &str = "gavel-policy-validating-webhook-cfg";

/// Kyverno's CRDs, pinned with Kyverno in e2e/versions.env, as a user
/// installs them before gavel's chart (server-side: some are too large for
/// the last-applied annotation).
pub fn install_kyverno_crds(cluster: &RealCluster) {
    let crds = super::cluster::cache().join("kyverno-crds");
    cluster.kubectl(&["apply", "--server-side", "-f", crds.to_str().unwrap()]);
    // `kubectl wait` fails at once, instead of waiting, on a CRD whose
    // status has no conditions yet (just created, on a busy API server).
    eventually(
        "Kyverno's CRDs Established",
        Duration::from_secs(120),
        || {
            cluster
                .kubectl_in(
                    &[
                        "wait",
                        "--for",
                        "condition=Established",
                        "crd",
                        "--all",
                        "--timeout",
                        "60s",
                    ],
                    None,
                )
                .status
                .success()
        },
    );
}

/// The chart installed by Helm and its replicas running on this machine.
pub struct Release {
    pub dir: PathBuf,
    /// `gavel serve`'s arguments exactly as the chart's Deployment renders them.
    pub chart_args: Vec<String>,
    pub kubeconfig: PathBuf,
    pub balancer: Balancer,
    /// The replicas reach the API server through this relay, so that a
    /// test can cut them off (a network partition).
    pub api_relay: Balancer,
    pub replicas: Vec<Replica>,
    /// The host of the URL the webhooks are registered with.
    pub webhook_host: String,
    /// The webhooks name the replica's own port instead of the balancer's
    /// (one replica; what a benchmark against a peer without a balancer
    /// needs, so that the relay's hop is not counted against gavel).
    pub direct: bool,
}

pub struct Replica {
    pub identity: String,
    pub port: u16,
    pub child: Child,
    /// Its unique `--ca-out` path: under GAVEL_SPAWN_WRAPPER `child` is the
    /// wrapper, and gavel itself is found by this argument.
    ca_out: String,
}

impl Replica {
    /// Stops the replica (SIGKILL); under GAVEL_SPAWN_WRAPPER gavel itself
    /// is killed, and the profiler around it ends its data and exits.
    pub fn stop(&mut self) {
        if std::env::var_os("GAVEL_SPAWN_WRAPPER").is_some() {
            let _ = Command::new("pkill")
                .args(["-KILL", "-f", &format!("ca-out={}", self.ca_out)])
                .status();
        } else {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Release {
    /// `helm install` of the chart with `values` (YAML), then `replicas`
    /// replicas started behind the balancer; returns once they are ready and
    /// the leader has registered the webhook configurations.
    pub fn install(cluster: &RealCluster, dir: &Path, replicas: usize, values: &str) -> Release {
        Release::install_at(cluster, dir, replicas, values, "127.0.0.1")
    }

    /// [`Release::install`] with the webhooks registered at `webhook_host`.
    pub fn install_at(
        cluster: &RealCluster,
        dir: &Path,
        replicas: usize,
        values: &str,
        webhook_host: &str,
    ) -> Release {
        Release::install_with(cluster, dir, replicas, values, webhook_host, false)
    }

    /// One replica whose webhooks name its own port at 127.0.0.1, as
    /// Kyverno's out-of-cluster mode registers its own (see [`Release::direct`]).
    pub fn install_direct(cluster: &RealCluster, dir: &Path, values: &str) -> Release {
        Release::install_with(cluster, dir, 1, values, "127.0.0.1", true)
    }

    fn install_with(
        cluster: &RealCluster,
        dir: &Path,
        replicas: usize,
        values: &str,
        webhook_host: &str,
        direct: bool,
    ) -> Release {
        std::fs::create_dir_all(dir).unwrap();
        let values_file = dir.join("values.yaml");
        std::fs::write(&values_file, values).unwrap();
        let chart = repo().join("charts/gavel");
        let out = cluster.helm(&[
            "install",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--values",
            values_file.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "helm install: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let chart_args = deployment_args(cluster);
        let kubeconfig = dir.join("gavel.kubeconfig");
        let api_relay = Balancer::start(vec![cluster.api_port()]);
        service_account_kubeconfig(
            cluster,
            &format!("https://127.0.0.1:{}", api_relay.port),
            NAMESPACE,
            "gavel",
            &kubeconfig,
        );
        let balancer = Balancer::start(vec![]);
        let mut gavel = Release {
            dir: dir.to_path_buf(),
            chart_args,
            kubeconfig,
            balancer,
            api_relay,
            replicas: vec![],
            webhook_host: webhook_host.to_string(),
            direct,
        };
        let started = Instant::now();
        gavel.scale_to(replicas);
        // With no policy yet they hold no webhook; the policies add theirs.
        eventually(
            "the webhook configurations",
            Duration::from_secs(60),
            || webhook_configurations(cluster) == (true, true),
        );
        eprintln!(
            "e2e: {replicas} replicas ready and webhooks registered {:.1}s after start",
            started.elapsed().as_secs_f64()
        );
        gavel
    }

    /// Starts replicas until there are `n`, puts them behind the balancer and
    /// waits until each is ready.
    pub fn scale_to(&mut self, n: usize) {
        while self.replicas.len() < n {
            let replica = self.spawn(&format!("gavel-{}", self.replicas.len()));
            self.replicas.push(replica);
        }
        self.balancer.set_backends(self.ports());
        for replica in &self.replicas {
            wait_ready(replica, Duration::from_secs(60));
        }
    }

    /// Stops every replica (SIGKILL) and removes the webhook
    /// configurations they registered, so that the API server calls no
    /// webhook of gavel's until [`Release::scale_to`] starts them again.
    pub fn stop_all(&mut self, cluster: &RealCluster) {
        for mut replica in self.replicas.drain(..) {
            replica.stop();
        }
        self.balancer.set_backends(vec![]);
        cluster.kubectl(&[
            "delete",
            "validatingwebhookconfiguration",
            VALIDATING,
            "--ignore-not-found",
        ]);
        cluster.kubectl(&[
            "delete",
            "mutatingwebhookconfiguration",
            MUTATING,
            "--ignore-not-found",
        ]);
        // Its policy check fails closed: left behind, it would refuse
        // every policy written while gavel is down.
        cluster.kubectl(&[
            "delete",
            "validatingwebhookconfiguration",
            POLICY_VALIDATING,
            "--ignore-not-found",
        ]);
    }

    pub fn ports(&self) -> Vec<u16> {
        self.replicas.iter().map(|r| r.port).collect()
    }

    /// Starts one replica with the chart's arguments, changed only where a
    /// host process must differ from a pod: its address, where it writes the
    /// CA, the kubeconfig of the chart's ServiceAccount, and the URL the API
    /// server calls (the balancer) in place of the Service.
    pub fn spawn(&self, identity: &str) -> Replica {
        let port = super::cluster::free_port();
        let mut args = vec!["serve".to_string()];
        args.extend(
            self.chart_args
                .iter()
                .filter(|a| !a.starts_with("--listen=") && !a.starts_with("--ca-out="))
                .cloned(),
        );
        args.push(format!("--listen=127.0.0.1:{port}"));
        let ca_out = self
            .dir
            .join(format!("{identity}-ca.pem"))
            .display()
            .to_string();
        args.push(format!("--ca-out={ca_out}"));
        args.push(format!("--kubeconfig={}", self.kubeconfig.display()));
        args.push(format!(
            "--webhook-url=https://{}:{}",
            self.webhook_host,
            if self.direct {
                port
            } else {
                self.balancer.port
            }
        ));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{identity}.log")))
            .unwrap();
        // GAVEL_SPAWN_WRAPPER runs the replica under a profiler, e.g.
        // "heaptrack -o /tmp/gavel-heap" (a measurement aid, never in CI).
        let wrapper = std::env::var("GAVEL_SPAWN_WRAPPER").unwrap_or_default();
        let mut wrapper = wrapper.split_whitespace();
        let mut command = match wrapper.next() {
            Some(program) => {
                let mut c = Command::new(program);
                c.args(wrapper).arg(env!("CARGO_BIN_EXE_gavel"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_gavel")),
        };
        let child = command
            .args(&args)
            .env("POD_NAMESPACE", NAMESPACE)
            .env("POD_NAME", identity)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("starting gavel");
        Replica {
            identity: identity.to_string(),
            port,
            child,
            ca_out,
        }
    }

    /// The sum over replicas of one metric series.
    pub fn metric_sum(&self, name: &str, labels: &[&str]) -> f64 {
        self.replicas
            .iter()
            .map(|r| series(&scrape(r.port), name, labels))
            .sum()
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        for replica in &mut self.replicas {
            replica.stop();
        }
    }
}

/// The container args of the Deployment the chart rendered, without `serve`.
pub fn deployment_args(cluster: &RealCluster) -> Vec<String> {
    let out = cluster.helm(&["get", "manifest", RELEASE, "--namespace", NAMESPACE]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for doc in text.split("\n---") {
        let Ok(value) = serde_saphyr::from_str::<Value>(doc) else {
            continue;
        };
        if value["kind"] == "Deployment" {
            let args = value["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .unwrap();
            assert_eq!(args[0], "serve");
            return args[1..]
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
        }
    }
    panic!("no Deployment in the chart's manifest");
}

/// (status, body) of a GET on a replica, as the kubelet probes it (HTTPS
/// without verifying the serving certificate).
pub fn get(port: u16, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sk", "-w", "\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

pub fn wait_ready(replica: &Replica, timeout: Duration) {
    eventually(
        &format!("{} to be ready", replica.identity),
        timeout,
        || get(replica.port, "/health/readiness").0 == 200,
    );
}

pub fn scrape(port: u16) -> String {
    get(port, "/metrics").1
}

/// The value of the series of `name` whose labels include all of `labels`
/// (`key="value"`), summed.
pub fn series(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub fn ready(cluster: &RealCluster, kind: &str, name: &str) -> bool {
    ready_at(cluster, &[kind, name])
}

/// Whether the object `kubectl get <args>` names has a `Ready` condition
/// that is `True` (args with `-n` for a namespaced one).
pub fn ready_at(cluster: &RealCluster, args: &[&str]) -> bool {
    cluster.get(args).is_some_and(|p| {
        p["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    })
}

/// The names of the 17 Pod Security ClusterPolicies in
/// examples/policies/pod-security (one per file).
pub fn pod_security_names() -> Vec<String> {
    let names: Vec<String> = std::fs::read_dir(repo().join("examples/policies/pod-security"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names.len(), 17);
    names
}

/// Applies the 17 Pod Security ClusterPolicies (Enforce) with kubectl and
/// waits until each is Ready (gavel's leader writes the condition).
pub fn apply_pod_security(cluster: &RealCluster) {
    let policies = repo().join("examples/policies/pod-security");
    cluster.kubectl(&["apply", "-f", policies.to_str().unwrap()]);
    let names = pod_security_names();
    eventually("the 17 policies Ready", Duration::from_secs(120), || {
        names.iter().all(|n| ready(cluster, "clusterpolicy", n))
    });
}

/// Whether gavel's (validating, mutating) webhook configurations exist.
pub fn webhook_configurations(cluster: &RealCluster) -> (bool, bool) {
    (
        cluster
            .get(&["validatingwebhookconfiguration", VALIDATING])
            .is_some(),
        cluster
            .get(&["mutatingwebhookconfiguration", MUTATING])
            .is_some(),
    )
}

/// The `response` of a review posted straight to a replica's /validate/fail.
pub fn post_review(port: u16, review: &Value) -> Result<Value, String> {
    let mut curl = Command::new("curl");
    curl.args([
        "-sk",
        "--max-time",
        "5",
        "-H",
        "Content-Type: application/json",
    ])
    .args(["--data-binary", "@-"])
    .arg(format!("https://127.0.0.1:{port}/validate/fail"));
    let out = super::cluster::run_piped(curl, Some(&review.to_string()));
    let body: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&out.stdout)))?;
    Ok(body["response"].clone())
}
