//! The scale run behind `k6/cluster.sh`: a benchmark on the real control
//! plane, not a CI test (it is ignored; the script runs it and writes the
//! report). kwok fakes 1,000 nodes; k6 creates Pods through kube-apiserver
//! with a ServiceAccount token, in Kyverno's load-testing shapes; the run
//! measures, per round, with no webhook (baseline), then gavel at 1 and at 3
//! replicas enforcing the 17 Pod Security policies:
//!
//! - k6's request latency (the whole create, API server and etcd included);
//! - the API server's own histograms of the webhook calls
//!   (`apiserver_admission_webhook_admission_duration_seconds`) and of the
//!   Pod creates (`apiserver_request_duration_seconds`), as bucket deltas;
//! - CPU seconds and peak RSS of each process (gavel's replicas, the API
//!   server, etcd, kwok), from /proc.
//!
//! It writes raw figures only (`rounds.json` and k6's summaries) into
//! `GAVEL_SCALE_OUT`; `k6/scale-report.py` turns them into the tables and
//! plots. Environment: GAVEL_SCALE_OUT (required), K6 (the k6 binary, default
//! `k6` on PATH), GAVEL_SCALE_NODES (1000), GAVEL_SCALE_SCENARIOS
//! ("100/1000 200/5000 500/10000": VUs/Pods), GAVEL_SCALE_REPLICAS ("0 1 3":
//! non-decreasing, 0 is the no-webhook baseline).

mod support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::cluster::{RealCluster, eventually, repo};
use support::gavel::{examples, temp_dir};
use support::release::{Release, install_kyverno_crds, post_review, ready, scrape};

/// The namespace the Pods are created in, and the ServiceAccount k6 uses.
const LOAD: &str = "load";

/// Metric families kept from the API server's /metrics (bucket deltas are
/// turned into percentiles by the report).
const API_SERIES: [&str; 4] = [
    "apiserver_admission_webhook_admission_duration_seconds",
    "apiserver_admission_webhook_rejection_count",
    "apiserver_flowcontrol_rejected_requests_total",
    "apiserver_request_duration_seconds",
];
/// And from gavel's, summed over the replicas.
const GAVEL_SERIES: [&str; 2] = [
    "kyverno_admission_review_duration_seconds",
    "kyverno_admission_requests_total",
];

#[test]
#[ignore = "a benchmark of 10-20 minutes on the real control plane: run k6/cluster.sh"]
fn scale_run() {
    let config = Config::from_env();
    let dir = temp_dir("scale");
    let cluster = RealCluster::start(&dir.join("cluster"), config.nodes);
    install_kyverno_crds(&cluster);
    let token = load_identity(&cluster);
    let mut rounds = vec![];
    let mut gavel: Option<Release> = None;
    for &replicas in &config.replicas {
        if replicas > 0 {
            match gavel.as_mut() {
                None => gavel = Some(install_gavel(&cluster, &dir, replicas)),
                Some(gavel) => {
                    gavel.scale_to(replicas);
                    // The API server keeps its idle keep-alive connections,
                    // all to the first replica: new replicas would get no
                    // reviews. Cut them, as at a fresh start of all the
                    // replicas, so that its new ones are spread.
                    gavel.balancer.sever();
                    gavel.balancer.set_backends(gavel.ports());
                }
            }
            let gavel = gavel.as_ref().unwrap();
            // Each replica loads the policies from its own watch.
            for replica in &gavel.replicas {
                eventually(
                    &format!("{} to enforce the policies", replica.identity),
                    Duration::from_secs(60),
                    || denies(replica.port),
                );
            }
        }
        for &(vus, pods) in &config.scenarios {
            let round = Round {
                cluster: &cluster,
                gavel: gavel.as_ref(),
                replicas,
                vus,
                pods,
                token: &token,
                config: &config,
            };
            let figures = round.run();
            eprintln!(
                "scale: {} done in {:.1}s",
                figures["name"].as_str().unwrap(),
                figures["wall_seconds"].as_f64().unwrap()
            );
            rounds.push(figures);
            std::fs::write(
                config.out.join("rounds.json"),
                serde_json::to_string_pretty(&rounds).unwrap(),
            )
            .unwrap();
        }
    }
}

struct Config {
    out: PathBuf,
    k6: String,
    nodes: u32,
    scenarios: Vec<(u32, u32)>,
    replicas: Vec<usize>,
}

impl Config {
    fn from_env() -> Config {
        let var = |name: &str, default: &str| std::env::var(name).unwrap_or(default.to_string());
        let out = PathBuf::from(std::env::var("GAVEL_SCALE_OUT").expect("GAVEL_SCALE_OUT"));
        std::fs::create_dir_all(&out).unwrap();
        let scenarios = var("GAVEL_SCALE_SCENARIOS", "100/1000 200/5000 500/10000")
            .split_whitespace()
            .map(|s| {
                let (vus, pods) = s.split_once('/').expect("VUS/PODS");
                (vus.parse().unwrap(), pods.parse().unwrap())
            })
            .collect();
        let replicas: Vec<usize> = var("GAVEL_SCALE_REPLICAS", "0 1 3")
            .split_whitespace()
            .map(|r| r.parse().unwrap())
            .collect();
        // Replicas are only added: the baseline comes before gavel's webhooks exist.
        assert!(replicas.windows(2).all(|w| w[0] <= w[1]), "{replicas:?}");
        Config {
            out,
            k6: var("K6", "k6"),
            nodes: var("GAVEL_SCALE_NODES", "1000").parse().unwrap(),
            scenarios,
            replicas,
        }
    }
}

/// A ServiceAccount bound to cluster-admin in namespace `load` (as Kyverno's
/// load tests run k6), and a TokenRequest token for it.
fn load_identity(cluster: &RealCluster) -> String {
    cluster.kubectl(&["create", "namespace", LOAD]);
    cluster.kubectl(&["create", "serviceaccount", "k6", "-n", LOAD]);
    cluster.kubectl(&[
        "create",
        "clusterrolebinding",
        "k6-load",
        "--clusterrole=cluster-admin",
        "--serviceaccount=load:k6",
    ]);
    // Pods need the namespace's default ServiceAccount (admission plugin).
    eventually(
        "the default ServiceAccount of load",
        Duration::from_secs(60),
        || {
            cluster
                .get(&["serviceaccount", "default", "-n", LOAD])
                .is_some()
        },
    );
    cluster
        .kubectl(&["create", "token", "k6", "-n", LOAD, "--duration", "6h"])
        .trim()
        .to_string()
}

/// The chart with its default values, `replicas` replicas, and the 17 Pod
/// Security policies applied with kubectl (Enforce), Ready and registered.
fn install_gavel(cluster: &RealCluster, dir: &Path, replicas: usize) -> Release {
    let dir = dir.join("gavel");
    std::fs::create_dir_all(&dir).unwrap();
    let gavel = Release::install_at(cluster, &dir, replicas, "{}\n", &webhook_host());
    let policies = repo().join("examples/policies/pod-security");
    cluster.kubectl(&["apply", "-f", policies.to_str().unwrap()]);
    let names: Vec<String> = std::fs::read_dir(&policies)
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
    eventually("the 17 policies Ready", Duration::from_secs(120), || {
        names.iter().all(|n| ready(cluster, "clusterpolicy", n))
    });
    eventually(
        "a validating webhook for Pods",
        Duration::from_secs(60),
        || {
            cluster
                .get(&[
                    "validatingwebhookconfiguration",
                    support::release::VALIDATING,
                ])
                .is_some_and(|c| c["webhooks"].to_string().contains("\"pods\""))
        },
    );
    gavel
}

/// The host the webhooks are registered at. kube-apiserver calls a webhook
/// whose URL names `localhost` or a loopback IP over HTTP/2, one connection
/// for all reviews (k8s.io/apiserver, pkg/util/webhook/client.go,
/// isLocalHost), but a Service, or any other host, over HTTP/1.1 with a
/// connection per concurrent call, which the Service spreads over the
/// replicas. The machine's own name, when it resolves to loopback only,
/// gives the second behaviour while everything stays on loopback.
fn webhook_host() -> String {
    use std::net::ToSocketAddrs;
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = name.trim();
    let loopback = (name, 443)
        .to_socket_addrs()
        .is_ok_and(|mut a| a.all(|a| a.ip().is_loopback()));
    if !name.is_empty() && name != "localhost" && loopback {
        name.to_string()
    } else {
        eprintln!(
            "scale: the host name {name:?} does not resolve to loopback only: webhooks at 127.0.0.1, \
             which the API server calls over one HTTP/2 connection"
        );
        "127.0.0.1".to_string()
    }
}

fn denies(port: u16) -> bool {
    let review: Value = serde_json::from_str(
        &std::fs::read_to_string(examples().join("reviews/pod-violating.json")).unwrap(),
    )
    .unwrap();
    post_review(port, &review).is_ok_and(|r| r["allowed"] == false)
}

/// One k6 run and what the processes and the API server spent on it.
struct Round<'a> {
    cluster: &'a RealCluster,
    gavel: Option<&'a Release>,
    replicas: usize,
    vus: u32,
    pods: u32,
    token: &'a str,
    config: &'a Config,
}

impl Round<'_> {
    fn name(&self) -> String {
        format!("r{}-{}-{}", self.replicas, self.vus, self.pods)
    }

    /// The processes measured: (role, pid).
    fn processes(&self) -> Vec<(String, u32)> {
        let mut processes: Vec<(String, u32)> =
            ["kube-apiserver", "etcd", "kwok", "kube-controller-manager"]
                .iter()
                .map(|part| {
                    let pid =
                        std::fs::read_to_string(self.cluster.dir.join(format!("pids/{part}.pid")))
                            .unwrap();
                    (part.to_string(), pid.trim().parse().unwrap())
                })
                .collect();
        if let Some(gavel) = self.gavel {
            processes.extend(
                gavel
                    .replicas
                    .iter()
                    .map(|r| (r.identity.clone(), r.child.id())),
            );
        }
        processes
    }

    fn run(&self) -> Value {
        let name = self.name();
        let processes = self.processes();
        // The peak RSS of this round only: clear_refs 5 resets VmHWM.
        for (_, pid) in &processes {
            let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
        }
        let cpu_before: Vec<f64> = processes.iter().map(|(_, pid)| cpu_seconds(*pid)).collect();
        let api_before = keep(&self.cluster.metrics(), &API_SERIES);
        let gavel_before = self.gavel_metrics();

        let summary = self.config.out.join(format!("k6-{name}.json"));
        let started = Instant::now();
        let status = Command::new(&self.config.k6)
            .args(["run", "--quiet"])
            .arg(repo().join("k6/pods.js"))
            .env("API", self.cluster.server())
            .env("TOKEN", self.token)
            .env("NAMESPACE", LOAD)
            .env("VUS", self.vus.to_string())
            .env("ITERATIONS", self.pods.to_string())
            .env("NODES", self.config.nodes.to_string())
            .env("ROUND", &name)
            .env("SUMMARY", &summary)
            .status()
            .expect("running k6 (set K6)");
        let wall = started.elapsed().as_secs_f64();
        assert!(status.code().is_some(), "k6 was killed");

        let cpu: BTreeMap<String, f64> = processes
            .iter()
            .zip(&cpu_before)
            .map(|((role, pid), before)| (role.clone(), cpu_seconds(*pid) - before))
            .collect();
        let rss: BTreeMap<String, u64> = processes
            .iter()
            .map(|(role, pid)| (role.clone(), peak_rss_kib(*pid)))
            .collect();
        let api = delta(&api_before, &keep(&self.cluster.metrics(), &API_SERIES));
        let gavel = delta(&gavel_before, &self.gavel_metrics());
        let k6: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        let created = self.clear_pods();
        json!({
            "name": name,
            "replicas": self.replicas,
            "webhook_host": self.gavel.map(|g| g.webhook_host.clone()),
            "vus": self.vus,
            "pods": self.pods,
            "wall_seconds": wall,
            "stored_pods": created,
            "k6": {
                "http_req_duration": k6["metrics"]["http_req_duration"]["values"],
                "http_reqs": k6["metrics"]["http_reqs"]["values"],
                "checks": k6["metrics"]["checks"]["values"],
            },
            "cpu_seconds": cpu,
            "peak_rss_kib": rss,
            "apiserver_metrics": api,
            "gavel_metrics": gavel,
        })
    }

    fn gavel_metrics(&self) -> BTreeMap<String, f64> {
        let mut sum = BTreeMap::new();
        for replica in self.gavel.iter().flat_map(|g| &g.replicas) {
            for (series, value) in keep(&scrape(replica.port), &GAVEL_SERIES) {
                *sum.entry(series).or_default() += value;
            }
        }
        sum
    }

    /// Deletes the round's Pods (DELETE of the collection, no grace period)
    /// and waits until they are gone; how many there were. Deleting 10,000
    /// Pods can outlast the API server's request timeout (60 s), so the
    /// DELETE is repeated until the list is empty.
    fn clear_pods(&self) -> usize {
        let list = format!("/api/v1/namespaces/{LOAD}/pods");
        let count = || -> usize {
            let text = self
                .admin_request("GET", &format!("{list}?limit=1"))
                .unwrap();
            let page: Value = serde_json::from_str(&text).unwrap();
            let items = page["items"].as_array().map_or(0, |i| i.len());
            items + page["metadata"]["remainingItemCount"].as_u64().unwrap_or(0) as usize
        };
        let stored = count();
        eventually("the round's Pods deleted", Duration::from_secs(600), || {
            let _ = self.admin_request("DELETE", &format!("{list}?gracePeriodSeconds=0"));
            count() == 0
        });
        // Let kwok and the controllers catch up before the next round.
        std::thread::sleep(Duration::from_secs(5));
        stored
    }

    /// A request as the cluster admin: the body, or None on an HTTP error.
    fn admin_request(&self, method: &str, path: &str) -> Option<String> {
        let dir = &self.cluster.dir;
        let out = Command::new("curl")
            .args(["-sf", "-X", method, "--cacert"])
            .arg(self.cluster.ca())
            .arg("--cert")
            .arg(dir.join("pki/admin.crt"))
            .arg("--key")
            .arg(dir.join("pki/admin.key"))
            .arg(format!("{}{path}", self.cluster.server()))
            .output()
            .expect("curl");
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |t| {
        t.iter().map(|v| v.parse::<f64>().unwrap_or(0.0)).sum()
    });
    ticks / clock_ticks()
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    })
}

/// VmHWM: the peak resident set since the last clear_refs.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The samples of the given families in a Prometheus text page, by series
/// (name and labels as written).
fn keep(metrics: &str, families: &[&str]) -> BTreeMap<String, f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| families.iter().any(|f| l.starts_with(f)))
        // Only the Pod creates of the request histogram.
        .filter(|l| {
            !l.starts_with("apiserver_request_duration_seconds")
                || (l.contains("resource=\"pods\"") && l.contains("verb=\"POST\""))
        })
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// after − before, without the series that did not move.
fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(series, v)| {
            (
                series.clone(),
                v - before.get(series).copied().unwrap_or(0.0),
            )
        })
        .filter(|(_, d)| *d != 0.0)
        .collect()
}
