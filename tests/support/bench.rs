//! What the benchmarks on the real control plane share (`tests/scale.rs`,
//! `tests/side_by_side.rs`): the identity k6 creates Pods with, and one
//! measured round: k6 creating Pods through kube-apiserver while the CPU
//! and peak RSS of each process and the API server's histograms are taken
//! before and after, then the round's Pods deleted.

use super::cluster::{RealCluster, eventually, repo};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The namespace the Pods are created in, and the ServiceAccount k6 uses.
pub const LOAD: &str = "load";

/// Metric families kept from the API server's /metrics (bucket deltas are
/// turned into percentiles by the reports).
pub const API_SERIES: [&str; 4] = [
    "apiserver_admission_webhook_admission_duration_seconds",
    "apiserver_admission_webhook_rejection_count",
    "apiserver_flowcontrol_rejected_requests_total",
    "apiserver_request_duration_seconds",
];

/// Where and how k6 runs.
pub struct Load<'a> {
    pub cluster: &'a RealCluster,
    /// The k6 binary.
    pub k6: &'a str,
    pub token: &'a str,
    /// kwok's node count: Pods are spread over them by nodeName.
    pub nodes: u32,
    /// Where k6's summaries go.
    pub out: &'a Path,
}

impl Load<'_> {
    /// One k6 run of `pods` creates by `vus` virtual users, named `name`,
    /// with `processes` (role, pid) measured besides the control plane's;
    /// `engine` reads the webhook's own metrics. The figures as JSON.
    pub fn round(
        &self,
        name: &str,
        vus: u32,
        pods: u32,
        processes: &[(String, u32)],
        engine: &dyn Fn() -> BTreeMap<String, f64>,
    ) -> Value {
        let mut measured: Vec<(String, u32)> =
            ["kube-apiserver", "etcd", "kwok", "kube-controller-manager"]
                .iter()
                .map(|part| {
                    let pid =
                        std::fs::read_to_string(self.cluster.dir.join(format!("pids/{part}.pid")))
                            .unwrap();
                    (part.to_string(), pid.trim().parse().unwrap())
                })
                .collect();
        measured.extend_from_slice(processes);
        // The peak RSS of this round only: clear_refs 5 resets VmHWM.
        for (_, pid) in &measured {
            let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
        }
        let cpu_before: Vec<f64> = measured.iter().map(|(_, pid)| cpu_seconds(*pid)).collect();
        let api_before = keep(&self.cluster.metrics(), &API_SERIES);
        let engine_before = engine();

        let summary = self.out.join(format!("k6-{name}.json"));
        let started = Instant::now();
        let status = Command::new(self.k6)
            .args(["run", "--quiet"])
            .arg(repo().join("k6/pods.js"))
            .env("API", self.cluster.server())
            .env("TOKEN", self.token)
            .env("NAMESPACE", LOAD)
            .env("VUS", vus.to_string())
            .env("ITERATIONS", pods.to_string())
            .env("NODES", self.nodes.to_string())
            .env("ROUND", name)
            .env("SUMMARY", &summary)
            .status()
            .expect("running k6 (set K6)");
        let wall = started.elapsed().as_secs_f64();
        assert!(status.code().is_some(), "k6 was killed");

        let cpu: BTreeMap<String, f64> = measured
            .iter()
            .zip(&cpu_before)
            .map(|((role, pid), before)| (role.clone(), cpu_seconds(*pid) - before))
            .collect();
        let rss: BTreeMap<String, u64> = measured
            .iter()
            .map(|(role, pid)| (role.clone(), peak_rss_kib(*pid)))
            .collect();
        let api = delta(&api_before, &keep(&self.cluster.metrics(), &API_SERIES));
        let engine = delta(&engine_before, &engine());
        let k6: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        let stored = clear_pods(self.cluster);
        json!({
            "name": name,
            "vus": vus,
            "pods": pods,
            "wall_seconds": wall,
            "stored_pods": stored,
            "k6": {
                "http_req_duration": k6["metrics"]["http_req_duration"]["values"],
                "http_reqs": k6["metrics"]["http_reqs"]["values"],
                "checks": k6["metrics"]["checks"]["values"],
            },
            "cpu_seconds": cpu,
            "peak_rss_kib": rss,
            "apiserver_metrics": api,
            "engine_metrics": engine,
        })
    }
}

/// Deletes the round's Pods (DELETE of the collection, no grace period)
/// and waits until they are gone; how many there were. Deleting 10,000
/// Pods can outlast the API server's request timeout (60 s), so the
/// DELETE is repeated until the list is empty.
pub fn clear_pods(cluster: &RealCluster) -> usize {
    let list = format!("/api/v1/namespaces/{LOAD}/pods");
    let count = || -> usize {
        let text = admin_request(cluster, "GET", &format!("{list}?limit=1")).unwrap();
        let page: Value = serde_json::from_str(&text).unwrap();
        let items = page["items"].as_array().map_or(0, |i| i.len());
        items + page["metadata"]["remainingItemCount"].as_u64().unwrap_or(0) as usize
    };
    let stored = count();
    eventually("the round's Pods deleted", Duration::from_secs(600), || {
        let _ = admin_request(cluster, "DELETE", &format!("{list}?gracePeriodSeconds=0"));
        count() == 0
    });
    // Let kwok and the controllers catch up before the next round.
    std::thread::sleep(Duration::from_secs(5));
    stored
}

/// A request as the cluster admin: the body, or None on an HTTP error.
pub fn admin_request(cluster: &RealCluster, method: &str, path: &str) -> Option<String> {
    let dir = &cluster.dir;
    let out = Command::new("curl")
        .args(["-sf", "-X", method, "--cacert"])
        .arg(cluster.ca())
        .arg("--cert")
        .arg(dir.join("pki/admin.crt"))
        .arg("--key")
        .arg(dir.join("pki/admin.key"))
        .arg(format!("{}{path}", cluster.server()))
        .output()
        .expect("curl");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A ServiceAccount bound to cluster-admin in namespace `load` (as Kyverno's
/// load tests run k6), and a TokenRequest token for it.
pub fn load_identity(cluster: &RealCluster) -> String {
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

/// utime + stime of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
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
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// VmRSS: the resident set now.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// One kB field of /proc/PID/status.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The samples of the given families in a Prometheus text page, by series
/// (name and labels as written).
pub fn keep(metrics: &str, families: &[&str]) -> BTreeMap<String, f64> {
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
pub fn delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
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
