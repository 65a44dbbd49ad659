//! gavel and Kyverno side by side on the real control plane, the benchmark
//! behind `k6/side-by-side.sh` (ignored: the script runs it and writes the
//! report). One API server, etcd and kwok; the same 17 Pod Security
//! ClusterPolicies (Enforce) read by both engines from the cluster; the same
//! k6 scenario creating Pods through kube-apiserver. Per scenario: a round
//! with no webhook, then alternating rounds, gavel then Kyverno, each engine
//! running only for its own rounds (started, its webhooks registered, the
//! round, stopped and its webhooks removed), so that the API server calls
//! one engine at a time and noise falls on both alike.
//!
//! Both run as their charts configure them with their default values, one
//! replica each, out of cluster: Kyverno as its DEVELOPMENT.md runs it
//! locally (`--serverIP`: its webhooks name 127.0.0.1 and its own port),
//! gavel with its webhooks naming 127.0.0.1 and its own port too, so both
//! are called the same way (HTTP/2, one connection: the API server's
//! loopback rule) with no relay between.
//!
//! Raw figures only (`rounds.json`, k6's summaries) go to GAVEL_SBS_OUT;
//! `k6/side-by-side-report.py` writes the tables, ratios and plots.
//! Environment: GAVEL_SBS_OUT (required), K6, GAVEL_SBS_NODES (1000),
//! GAVEL_SBS_SCENARIOS ("100/1000 200/5000"), GAVEL_SBS_REPEATS (2),
//! GAVEL_SBS_POLICIES (`clusterpolicy`: gavel's 17 Pod Security
//! ClusterPolicies; `validatingpolicy`: the policy library's 16 Pod Security
//! ValidatingPolicies from ../shared/conformance, switched from Audit to Deny).

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use support::bench::{LOAD, Load, keep, load_identity};
use support::cluster::{RealCluster, eventually, repo, run_piped, versions_env};
use support::gavel::temp_dir;
use support::kyverno::{self, Kyverno};
use support::release::{Release, apply_pod_security, install_kyverno_crds, scrape};

/// The engines' own admission histograms (both under Kyverno's names).
const ENGINE_SERIES: [&str; 2] = [
    "kyverno_admission_review_duration_seconds",
    "kyverno_admission_requests_total",
];

#[test]
#[ignore = "a benchmark on the real control plane: run k6/side-by-side.sh"]
fn side_by_side() {
    let _heavy = support::heavy();
    assert!(
        kyverno::built(),
        "Kyverno is not built: run e2e/cluster.sh build kyverno"
    );
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or(default.to_string());
    let out = PathBuf::from(std::env::var("GAVEL_SBS_OUT").expect("GAVEL_SBS_OUT"));
    std::fs::create_dir_all(&out).unwrap();
    let nodes: u32 = var("GAVEL_SBS_NODES", "1000").parse().unwrap();
    let repeats: usize = var("GAVEL_SBS_REPEATS", "2").parse().unwrap();
    let scenarios: Vec<(u32, u32)> = var("GAVEL_SBS_SCENARIOS", "100/1000 200/5000")
        .split_whitespace()
        .map(|s| {
            let (vus, pods) = s.split_once('/').expect("VUS/PODS");
            (vus.parse().unwrap(), pods.parse().unwrap())
        })
        .collect();
    let k6 = var("K6", "k6");
    let policies = var("GAVEL_SBS_POLICIES", "clusterpolicy");

    let dir = temp_dir("side-by-side");
    let cluster = RealCluster::start(&dir.join("cluster"), nodes);
    install_kyverno_crds(&cluster);
    let token = load_identity(&cluster);
    let chart = kyverno::install_chart(&cluster, &kubernetes_version());
    let mut gavel = Release::install_direct(&cluster, &dir.join("gavel"), "{}\n");
    match policies.as_str() {
        "clusterpolicy" => apply_pod_security(&cluster),
        "validatingpolicy" => apply_validating_policies(&cluster),
        other => panic!("GAVEL_SBS_POLICIES={other}: clusterpolicy or validatingpolicy"),
    }
    gavel.stop_all(&cluster);

    let load = Load {
        cluster: &cluster,
        k6: &k6,
        token: &token,
        nodes,
        out: &out,
    };
    let mut rounds = vec![];
    let mut record = |round: Value| {
        eprintln!(
            "side-by-side: {} done in {:.1}s",
            round["name"].as_str().unwrap(),
            round["wall_seconds"].as_f64().unwrap()
        );
        rounds.push(round);
        std::fs::write(
            out.join("rounds.json"),
            serde_json::to_string_pretty(&rounds).unwrap(),
        )
        .unwrap();
    };
    for &(vus, pods) in &scenarios {
        let mut baseline = load.round(
            &format!("none-{vus}-{pods}"),
            vus,
            pods,
            &[],
            &BTreeMap::<String, f64>::new,
        );
        baseline["engine"] = "none".into();
        record(baseline);
        for repeat in 0..repeats {
            gavel.scale_to(1);
            eventually("gavel to deny", Duration::from_secs(120), || {
                denies(&cluster)
            });
            let replica = &gavel.replicas[0];
            let port = replica.port;
            let mut round = load.round(
                &format!("gavel-{vus}-{pods}-{repeat}"),
                vus,
                pods,
                &[("gavel".into(), replica.child.id())],
                &|| keep(&scrape(port), &ENGINE_SERIES),
            );
            round["engine"] = "gavel".into();
            round["policies"] = policies.as_str().into();
            record(round);
            gavel.stop_all(&cluster);

            let peer = Kyverno::start(&cluster, &dir.join("kyverno"), &chart);
            eventually("Kyverno to deny", Duration::from_secs(120), || {
                denies(&cluster)
            });
            let metrics_port = peer.metrics_port;
            let mut round = load.round(
                &format!("kyverno-{vus}-{pods}-{repeat}"),
                vus,
                pods,
                &[("kyverno".into(), peer.child.id())],
                &|| keep(&kyverno_metrics(metrics_port), &ENGINE_SERIES),
            );
            round["engine"] = "kyverno".into();
            round["policies"] = policies.as_str().into();
            round["kyverno_version"] = json!(kyverno_version());
            record(round);
            peer.stop(&cluster);
        }
    }
}

/// KUBERNETES_VERSION from e2e/versions.env (Kyverno's chart checks it).
fn kubernetes_version() -> String {
    versions_env("KUBERNETES_VERSION")
}

fn kyverno_version() -> String {
    versions_env("KYVERNO_VERSION")
}

/// The policy library's Pod Security ValidatingPolicies, in Deny mode (the
/// library ships them in Audit). Neither engine writes a Ready condition
/// on these kinds; [`denies`] shows them enforced.
fn apply_validating_policies(cluster: &RealCluster) {
    let library = repo().join("../shared/conformance/kyverno-policies/pod-security-vpol");
    let mut files = vec![];
    for level in ["baseline", "restricted"] {
        for entry in std::fs::read_dir(library.join(level)).unwrap() {
            let dir = entry.unwrap().path();
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            files.push(dir.join(format!("{name}.yaml")));
        }
    }
    assert_eq!(files.len(), 16, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("- Audit"), "{}", file.display());
        let out = cluster.kubectl_in(
            &["apply", "-f", "-"],
            Some(&text.replace("- Audit", "- Deny")),
        );
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Whether the API server refuses a Pod that breaks the baseline profile
/// (host networking); a server-side dry run goes through the admission
/// webhooks, after the API server's own validation.
fn denies(cluster: &RealCluster) -> bool {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "violating", "namespace": LOAD},
        "spec": {
            "hostNetwork": true,
            "containers": [{"name": "app", "image": "registry.example.com/app:1.0"}],
        },
    });
    let out = cluster.kubectl_in(
        &["create", "--dry-run=server", "-f", "-"],
        Some(&pod.to_string()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let denied = !out.status.success() && stderr.contains("denied the request");
    // The first few other answers say what is in the way.
    static SHOWN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    if !denied && SHOWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 3 {
        eprintln!("side-by-side: not denied yet: {}", stderr.trim());
    }
    denied
}

/// Kyverno's /metrics (plain HTTP on its metrics port).
fn kyverno_metrics(port: u16) -> String {
    let mut command = std::process::Command::new("curl");
    command.args(["-sf", &format!("http://127.0.0.1:{port}/metrics")]);
    String::from_utf8_lossy(&run_piped(command, None).stdout).into_owned()
}
