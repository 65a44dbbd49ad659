//! The background scan at scale, behind `k6/reports-scan.sh`: a benchmark
//! on the real control plane, not a CI test (it is ignored; the script
//! runs it and writes the report). One gavel replica installed with its
//! chart; N ConfigMaps (10,000 by default) in ten namespaces; then an
//! Audit policy every ConfigMap fails, so that the first scan writes one
//! PolicyReport per ConfigMap. Measured, every second: reports written,
//! gavel's RSS; over the first scan and over the next (quiet) one: time,
//! CPU seconds, peak RSS (VmHWM), and the API server's own count of the
//! requests on policyreports by verb.
//!
//! Writes `scan.json` into GAVEL_REPORTS_OUT (required); the script's
//! `k6/reports-report.py` turns it into the report and plots.
//! GAVEL_REPORTS_RESOURCES sets N.

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::bench::{cpu_seconds, peak_rss_kib, rss_kib};
use support::cluster::{RealCluster, eventually};
use support::gavel::temp_dir;
use support::release::{Release, install_kyverno_crds, ready};

const INTERVAL_SECONDS: u64 = 60;

/// The API server's requests on policyreports, by verb.
fn report_requests(cluster: &RealCluster) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in cluster.metrics().lines() {
        if !line.starts_with("apiserver_request_total{")
            || !line.contains("resource=\"policyreports\"")
        {
            continue;
        }
        let verb = line
            .split("verb=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?")
            .to_string();
        let value: f64 = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(verb).or_default() += value;
    }
    out
}

fn minus(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> Value {
    let mut out = serde_json::Map::new();
    for (k, v) in after {
        let d = v - before.get(k).copied().unwrap_or(0.0);
        if d > 0.0 {
            out.insert(k.clone(), json!(d));
        }
    }
    Value::Object(out)
}

#[test]
#[ignore = "a benchmark of several minutes on the real control plane: run k6/reports-scan.sh"]
fn reports_scan_at_scale() {
    let _heavy = support::heavy();
    let out =
        std::path::PathBuf::from(std::env::var("GAVEL_REPORTS_OUT").expect("GAVEL_REPORTS_OUT"));
    let n: usize = std::env::var("GAVEL_REPORTS_RESOURCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = temp_dir("reports-scale");
    let cluster = RealCluster::start(&dir.join("cluster"), 1);
    install_kyverno_crds(&cluster);
    let values = format!("reports:\n  backgroundScanInterval: {INTERVAL_SECONDS}s\n");
    let gavel = Release::install(&cluster, &dir, 1, &values);
    let pid = gavel.replicas[0].child.id();
    let per_namespace = n.div_ceil(10);
    for ns in 0..10 {
        cluster.kubectl(&["create", "namespace", &format!("scan-{ns}")]);
        for chunk in (0..per_namespace).collect::<Vec<_>>().chunks(500) {
            let items: Vec<Value> = chunk
                .iter()
                .map(|i| {
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": format!("cm-{i:05}"), "namespace": format!("scan-{ns}")},
                           "data": {"i": i.to_string()}})
                })
                .collect();
            let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
            let created = cluster.kubectl_in(&["create", "-f", "-"], Some(&list));
            assert!(
                created.status.success(),
                "{}",
                String::from_utf8_lossy(&created.stderr)
            );
        }
    }
    let total = cluster
        .get(&["configmap", "-A"])
        .and_then(|l| l["items"].as_array().map(Vec::len))
        .unwrap();
    eprintln!("reports-scale: {total} ConfigMaps");
    // Let the scan at start (nothing to report) end and memory settle.
    std::thread::sleep(Duration::from_secs(5));
    let rss_idle = rss_kib(pid);
    let written = || {
        gavel.metric_sum(
            "gavel_background_objects_total",
            &["action=\"report_written\""],
        )
    };
    let scans = || {
        gavel.metric_sum(
            "kyverno_controller_reconcile_total",
            &["controller_name=\"reports\""],
        )
    };
    let requests_before = report_requests(&cluster);
    let cpu_before = cpu_seconds(pid);
    let scans_before = scans();
    cluster.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: require-owner
spec:
  validationFailureAction: Audit
  background: true
  rules:
    - name: owner-label
      match:
        any:
          - resources:
              kinds: [ConfigMap]
      validate:
        message: "an owner label is required"
        pattern:
          metadata:
            labels:
              owner: "?*"
"#,
        ),
    );
    eventually("require-owner Ready", Duration::from_secs(60), || {
        ready(&cluster, "clusterpolicy", "require-owner")
    });
    let started = Instant::now();
    let mut samples = Vec::new();
    loop {
        let w = written();
        samples.push(json!({"seconds": started.elapsed().as_secs_f64(), "written": w, "rss_kib": rss_kib(pid)}));
        if w as usize >= total && scans() > scans_before {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "the first scan did not end"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let first_seconds = started.elapsed().as_secs_f64();
    let first = json!({
        "seconds": first_seconds,
        "reports": written(),
        "cpu_seconds": cpu_seconds(pid) - cpu_before,
        "peak_rss_kib": peak_rss_kib(pid),
        "rss_after_kib": rss_kib(pid),
        "api_requests": minus(&report_requests(&cluster), &requests_before),
    });
    eprintln!("reports-scale: first scan {first}");
    // The next scan finds the same results: it reads, and writes nothing.
    let requests_before = report_requests(&cluster);
    let cpu_before = cpu_seconds(pid);
    let written_before = written();
    let scans_before = scans();
    let quiet_started = Instant::now();
    eventually(
        "the next scan",
        Duration::from_secs(INTERVAL_SECONDS + 600),
        || scans() > scans_before,
    );
    let quiet = json!({
        "seconds_after_first": quiet_started.elapsed().as_secs_f64(),
        "reports": written() - written_before,
        "cpu_seconds": cpu_seconds(pid) - cpu_before,
        "peak_rss_kib": peak_rss_kib(pid),
        "rss_after_kib": rss_kib(pid),
        "api_requests": minus(&report_requests(&cluster), &requests_before),
    });
    eprintln!("reports-scale: quiet scan {quiet}");
    let reports = cluster
        .get(&["policyreport", "-A"])
        .and_then(|l| l["items"].as_array().map(Vec::len))
        .unwrap();
    let result = json!({
        "configmaps": total,
        "policyreports": reports,
        "interval_seconds": INTERVAL_SECONDS,
        "rss_idle_kib": rss_idle,
        "first_scan": first,
        "quiet_scan": quiet,
        "samples": samples,
    });
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("scan.json"),
        serde_json::to_string_pretty(&result).unwrap(),
    )
    .unwrap();
    assert_eq!(reports, total, "one report per ConfigMap");
}
