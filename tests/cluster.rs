//! Cluster mode against the Kubernetes API test server in `tests/support/`.

mod support;

use serde_json::{Value, json};
use std::process::Command;
use support::apiserver::TestApiServer;

fn kubectl(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl must be installed (the machine image or Debian's kubernetes-client)");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn kubectl_speaks_to_test_server() {
    let server = TestApiServer::start();
    let dir = tempdir();
    let kc = server.write_kubeconfig(&dir);

    let (ok, out, err) = kubectl(&kc, &["version", "-o", "json"], None);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["serverVersion"]["minor"], "33");

    // apply creates, then updates through a patch.
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels:\n    app: web\ndata:\n  mode: strict\n";
    let (ok, out, err) = kubectl(&kc, &["apply", "-f", "-"], Some(cm));
    assert!(ok, "apply (create): {out}{err}");
    assert!(out.contains("configmap/settings created"), "{out}");
    let (ok, out, err) = kubectl(
        &kc,
        &["apply", "-f", "-"],
        Some(&cm.replace("strict", "lenient")),
    );
    assert!(ok, "apply (update): {out}{err}");
    assert!(out.contains("configmap/settings configured"), "{out}");
    let stored = server
        .get("v1", "ConfigMap", "default", "settings")
        .unwrap();
    assert_eq!(stored["data"]["mode"], "lenient");

    // get -o json, by name, by label and across namespaces.
    let (ok, out, err) = kubectl(&kc, &["get", "configmap", "settings", "-o", "json"], None);
    assert!(ok, "{err}");
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["data"]["mode"], "lenient");
    assert_eq!(
        got["metadata"]["resourceVersion"],
        stored["metadata"]["resourceVersion"]
    );
    let (ok, out, err) = kubectl(
        &kc,
        &["get", "cm", "-l", "app=web", "-A", "-o", "json"],
        None,
    );
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (ok, out, _) = kubectl(&kc, &["get", "cm", "-l", "app=db", "-o", "json"], None);
    assert!(ok);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["items"],
        json!([])
    );

    // Kyverno's kinds resolve through discovery, short names included.
    let policy = "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata:\n  name: require-labels\nspec:\n  rules: []\n";
    let (ok, out, err) = kubectl(&kc, &["apply", "-f", "-"], Some(policy));
    assert!(ok, "apply policy: {out}{err}");
    let (ok, out, err) = kubectl(&kc, &["get", "cpol", "-o", "json"], None);
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["items"][0]["metadata"]["name"],
        "require-labels"
    );

    // Errors come back as Status objects kubectl understands.
    let (ok, _, err) = kubectl(&kc, &["get", "configmap", "missing"], None);
    assert!(!ok);
    assert!(err.contains("configmaps \"missing\" not found"), "{err}");
    let (ok, _, err) = kubectl(&kc, &["create", "-f", "-"], Some(cm));
    assert!(!ok);
    assert!(err.contains("already exists"), "{err}");

    // A watch sees later writes as events.
    let watcher = Command::new("timeout")
        .args(["4", "kubectl", "--kubeconfig"])
        .arg(&kc)
        .args([
            "get",
            "configmaps",
            "--watch-only",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (ok, _, err) = kubectl(&kc, &["label", "configmap", "settings", "tier=gold"], None);
    assert!(ok, "label: {err}");
    let watched = watcher.wait_with_output().unwrap();
    let events = String::from_utf8_lossy(&watched.stdout);
    assert!(
        events.contains("\"MODIFIED\"") && events.contains("\"tier\":\"gold\""),
        "watch output: {events} {}",
        String::from_utf8_lossy(&watched.stderr)
    );

    let (ok, out, err) = kubectl(&kc, &["delete", "configmap", "settings"], None);
    assert!(ok, "{err}");
    assert!(out.contains("deleted"), "{out}");
    assert!(
        server
            .get("v1", "ConfigMap", "default", "settings")
            .is_none()
    );
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gavel-cluster-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gavel-cluster-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
#[ignore]
fn probe_server() {
    let server = TestApiServer::start();
    let dir = tempdir();
    let kc = server.write_kubeconfig(&dir);
    println!("KUBECONFIG={}", kc.display());
    std::thread::sleep(std::time::Duration::from_secs(120));
}
