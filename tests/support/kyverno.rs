//! Kyverno's admission controller on the real control plane, the peer gavel
//! is measured against: built by `e2e/cluster.sh build kyverno`, its chart's
//! objects applied as the chart renders them with its default values, and
//! the controller run out of cluster the way its DEVELOPMENT.md runs it
//! ("Debugging local code": `--kubeconfig` and `--serverIP`, which make it
//! register its webhooks by URL and issue its certificate for that address).
//! Its arguments are the chart's Deployment's, changed only where a host
//! process must differ from a pod (ports, the kubeconfig).

use super::cluster::{RealCluster, cache, eventually, free_port};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const NAMESPACE: &str = "kyverno";
/// Kyverno's label on the webhook configurations it manages.
const MANAGED: &str = "webhook.kyverno.io/managed-by=kyverno";

/// What the chart gives the admission controller.
pub struct KyvernoChart {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Whether `e2e/cluster.sh build kyverno` has run.
pub fn built() -> bool {
    RealCluster::bin("kyverno").exists() && cache().join("kyverno-chart/Chart.yaml").exists()
}

/// Applies every object Kyverno's chart renders with its default values
/// except those that run something (Deployments, Jobs, the chart's test
/// Pods) and the CRDs (installed from the same module's config/crds);
/// returns the admission controller's arguments and environment.
pub fn install_chart(cluster: &RealCluster, kubernetes_version: &str) -> KyvernoChart {
    let out = cluster.helm(&[
        "template",
        "kyverno",
        cache().join("kyverno-chart").to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        kubernetes_version,
    ]);
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if cluster.get(&["namespace", NAMESPACE]).is_none() {
        cluster.kubectl(&["create", "namespace", NAMESPACE]);
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut chart = None;
    for doc in text.split("\n---") {
        let Ok(object) = serde_saphyr::from_str::<Value>(doc) else {
            continue;
        };
        let kind = object["kind"].as_str().unwrap_or("").to_string();
        match kind.as_str() {
            "" | "Job" | "Pod" | "CustomResourceDefinition" => {}
            "Deployment" => {
                if object["metadata"]["name"] == "kyverno-admission-controller" {
                    chart = Some(admission_controller(&object));
                }
            }
            _ => {
                let mut object = object;
                if object["metadata"]["namespace"].is_null() && namespaced(&kind) {
                    object["metadata"]["namespace"] = NAMESPACE.into();
                }
                cluster.apply(&object);
            }
        }
    }
    chart.expect("no kyverno-admission-controller Deployment in the chart")
}

fn namespaced(kind: &str) -> bool {
    !matches!(
        kind,
        "ClusterRole" | "ClusterRoleBinding" | "Namespace" | "CustomResourceDefinition"
    )
}

/// The container's args and the environment it would get in its pod (the
/// downward API's fields filled in as for one pod).
fn admission_controller(deployment: &Value) -> KyvernoChart {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let env = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            let value = match e["value"].as_str() {
                Some(v) => v.to_string(),
                None => match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.namespace") => NAMESPACE.to_string(),
                    Some("metadata.name") => "kyverno-admission-controller-local".to_string(),
                    other => panic!("{name}: no value for {other:?}"),
                },
            };
            (name, value)
        })
        .collect();
    KyvernoChart { args, env }
}

/// One running admission controller.
pub struct Kyverno {
    pub child: Child,
    pub port: u16,
    pub metrics_port: u16,
    pub log: PathBuf,
}

impl Kyverno {
    /// Starts the controller with the chart's arguments and waits until it
    /// has registered its webhooks for Pods.
    pub fn start(cluster: &RealCluster, dir: &Path, chart: &KyvernoChart) -> Kyverno {
        let (port, metrics_port, runtime_port) = (free_port(), free_port(), free_port());
        let mut args: Vec<String> = chart
            .args
            .iter()
            .filter(|a| {
                ![
                    "--webhookServerPort=",
                    "--metricsPort=",
                    "--controllerRuntimeMetricsAddress=",
                ]
                .iter()
                .any(|flag| a.starts_with(flag))
            })
            .cloned()
            .collect();
        args.push(format!("--webhookServerPort={port}"));
        args.push(format!("--serverIP=127.0.0.1:{port}"));
        args.push(format!("--metricsPort={metrics_port}"));
        args.push(format!(
            "--controllerRuntimeMetricsAddress=127.0.0.1:{runtime_port}"
        ));
        args.push(format!("--kubeconfig={}", cluster.kubeconfig.display()));
        std::fs::create_dir_all(dir).unwrap();
        let log = dir.join("kyverno.log");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(RealCluster::bin("kyverno"))
            .args(&args)
            .envs(chart.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            // Sigstore's cache, which the pod has at /.sigstore.
            .env("TUF_ROOT", dir.join("sigstore"))
            .env("HOME", dir)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .expect("starting kyverno");
        let kyverno = Kyverno {
            child,
            port,
            metrics_port,
            log,
        };
        let started = Instant::now();
        eventually(
            "Kyverno's validating webhook for Pods",
            Duration::from_secs(180),
            || {
                cluster
                    .get(&["validatingwebhookconfiguration", "-l", MANAGED])
                    .is_some_and(|list| {
                        list["items"].as_array().is_some_and(|items| {
                            items.iter().any(|c| {
                                c["webhooks"].to_string().contains("\"pods\"")
                                    && c["webhooks"]
                                        .to_string()
                                        .contains(&format!("127.0.0.1:{port}"))
                            })
                        })
                    })
            },
        );
        eprintln!(
            "kyverno: webhooks registered {:.1}s after start",
            started.elapsed().as_secs_f64()
        );
        kyverno
    }

    /// SIGTERM, as the kubelet stops it, then its webhook configurations
    /// removed (the chart's pre-delete Job does that in a cluster), so that
    /// the next round sees no webhook of Kyverno's.
    pub fn stop(mut self, cluster: &RealCluster) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && self.child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_webhooks(cluster);
    }
}

/// Deletes the webhook configurations Kyverno manages.
pub fn remove_webhooks(cluster: &RealCluster) {
    cluster.kubectl(&[
        "delete",
        "validatingwebhookconfiguration,mutatingwebhookconfiguration",
        "-l",
        MANAGED,
        "--ignore-not-found",
    ]);
}

impl Drop for Kyverno {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
