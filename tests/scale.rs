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

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::bench::{Load, keep, load_identity};
use support::cluster::{RealCluster, eventually};
use support::gavel::{examples, temp_dir};
use support::release::{Release, apply_pod_security, install_kyverno_crds, post_review, scrape};

/// And from gavel's, summed over the replicas.
const GAVEL_SERIES: [&str; 2] = [
    "kyverno_admission_review_duration_seconds",
    "kyverno_admission_requests_total",
];

#[test]
#[ignore = "a benchmark of 10-20 minutes on the real control plane: run k6/cluster.sh"]
fn scale_run() {
    let _heavy = support::heavy();
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

/// The chart with its default values, `replicas` replicas, and the 17 Pod
/// Security policies applied with kubectl (Enforce), Ready and registered.
fn install_gavel(cluster: &RealCluster, dir: &Path, replicas: usize) -> Release {
    let dir = dir.join("gavel");
    std::fs::create_dir_all(&dir).unwrap();
    let gavel = Release::install_at(cluster, &dir, replicas, "{}\n", &webhook_host());
    apply_pod_security(cluster);
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

    fn run(&self) -> Value {
        let load = Load {
            cluster: self.cluster,
            k6: &self.config.k6,
            token: self.token,
            nodes: self.config.nodes,
            out: &self.config.out,
        };
        let replicas: Vec<(String, u32)> = self
            .gavel
            .iter()
            .flat_map(|g| &g.replicas)
            .map(|r| (r.identity.clone(), r.child.id()))
            .collect();
        let mut figures = load.round(&self.name(), self.vus, self.pods, &replicas, &|| {
            self.gavel_metrics()
        });
        figures["replicas"] = self.replicas.into();
        figures["webhook_host"] = json!(self.gavel.map(|g| g.webhook_host.clone()));
        figures["gavel_metrics"] = figures["engine_metrics"].take();
        figures
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
}
