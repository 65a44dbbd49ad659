//! gavel's container image as `image/build.sh` assembles it (crane, no
//! Docker daemon): its config is what the chart expects of it, its one
//! layer holds everything the binary needs and nothing it does not, and the
//! binary in it serves admission reviews as the image's user, with the
//! layer's files alone (a chroot into the unpacked layer).

use crate::support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::cluster::{free_port, repo};
use support::gavel::{examples, response, temp_dir};

/// The chart's runAsUser / runAsGroup (charts/gavel/templates/deployment.yaml).
const CHART_USER: &str = "65532:65532";

#[test]
fn image_is_what_the_chart_runs() {
    let dir = temp_dir("image");
    let out = dir.join("image");
    let build = Command::new(repo().join("image/build.sh"))
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_gavel"))
        .arg("--out")
        .arg(&out)
        .output()
        .expect("image/build.sh runs");
    assert!(
        build.status.success(),
        "image/build.sh: {}",
        String::from_utf8_lossy(&build.stderr)
    );
    let (repository, app_version) = chart_image();

    // The OCI layout: one manifest, one layer, the config the chart needs.
    let index = json(&out.join("oci/index.json"));
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "{index}");
    let manifest = json(&blob(&out, &manifests[0]["digest"]));
    let config = json(&blob(&out, &manifest["config"]["digest"]));
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    let c = &config["config"];
    assert_eq!(c["Entrypoint"], serde_json::json!(["/usr/local/bin/gavel"]));
    assert!(c["Cmd"].is_null(), "the chart passes the arguments: {c}");
    assert_eq!(c["User"], CHART_USER);
    assert_eq!(c["Labels"]["org.opencontainers.image.version"], app_version);
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");

    // The docker-archive is tagged as the chart's default image.
    let archive = out.join(format!("gavel-{app_version}.tar"));
    let listing = run(Command::new("tar")
        .arg("xOf")
        .arg(&archive)
        .arg("manifest.json"));
    let archive_manifest: Value = serde_json::from_str(&listing).unwrap();
    assert_eq!(
        archive_manifest[0]["RepoTags"],
        serde_json::json!([format!("{repository}:{app_version}")])
    );

    // The layer, unpacked on its own: the binary, the libraries the loader
    // resolves, the user; no shell.
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    run(Command::new("tar")
        .arg("xzf")
        .arg(blob(&out, &layers[0]["digest"]))
        .arg("-C")
        .arg(&root));
    assert!(root.join("usr/local/bin/gavel").is_file());
    assert!(!root.join("bin/sh").exists(), "no shell in the image");
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(passwd.contains(":65532:65532:"), "{passwd}");
    let ldd = run(Command::new("ldd").arg(root.join("usr/local/bin/gavel")));
    for lib in ldd.lines().filter_map(|l| {
        let path = l.split("=>").nth(1).unwrap_or(l).trim();
        path.starts_with('/')
            .then(|| path.split(' ').next().unwrap())
    }) {
        assert!(
            root.join(lib.trim_start_matches('/')).is_file(),
            "{lib} missing from the layer"
        );
    }

    // Run from the layer alone, as the image's user: only root may chroot.
    if run(Command::new("id").arg("-u")).trim() != "0" {
        eprintln!("image: not root, the chroot run is skipped");
        return;
    }
    let version = run(chroot(&root).args(["--version"]));
    assert_eq!(
        version.trim(),
        format!("gavel {}", env!("CARGO_PKG_VERSION")),
        "the binary in the image is this build"
    );
    assert_eq!(
        app_version,
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml's appVersion names the image of this version"
    );
    serves_reviews_from_the_layer(&root);
}

/// `gavel serve` in the chroot: TLS with its own CA, a policy read from the
/// layer's filesystem, a violating Pod denied.
fn serves_reviews_from_the_layer(root: &Path) {
    let policies = root.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::copy(
        examples().join("policies/pod-security/disallow-host-namespaces.yaml"),
        policies.join("a.yaml"),
    )
    .unwrap();
    let port = free_port();
    let mut server = Server(
        chroot(root)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--policies", "/policies", "--ca-out", "/tmp/ca.pem"])
            .args(["--shutdown-delay-seconds", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let ca = root.join("tmp/ca.pem");
    let curl = |args: &[&str]| {
        let out = Command::new("curl")
            .args(["-s", "--cacert"])
            .arg(&ca)
            .args(["-w", "\n%{http_code}"])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().to_string(), body.to_string())
    };
    let url = |path: &str| format!("https://localhost:{port}{path}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while curl(&[&url("/health/readiness")]).0 != "200" {
        assert!(
            Instant::now() < deadline,
            "gavel serve in the image did not become ready"
        );
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!("gavel serve in the image exited: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let review = format!(
        "@{}",
        examples().join("reviews/pod-violating.json").display()
    );
    let (code, body) = curl(&[&url("/validate"), "--data-binary", &review]);
    assert_eq!(code, "200", "{body}");
    let answer = response(&body);
    assert_eq!(answer["allowed"], false, "{answer}");
    assert!(
        answer["status"]["message"]
            .as_str()
            .unwrap()
            .contains("disallow-host-namespaces"),
        "{answer}"
    );
    server.0.kill().unwrap();
    let _ = server.0.wait();
}

/// Kills the server if an assertion fails first.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chroot(root: &Path) -> Command {
    let mut c = Command::new("chroot");
    c.arg(format!("--userspec={CHART_USER}"))
        .arg(root)
        .arg("/usr/local/bin/gavel");
    c
}

/// The chart's default image: (image.repository, appVersion).
fn chart_image() -> (String, String) {
    let chart = std::fs::read_to_string(repo().join("charts/gavel/Chart.yaml")).unwrap();
    let chart: Value = serde_saphyr::from_str(&chart).unwrap();
    let values = std::fs::read_to_string(repo().join("charts/gavel/values.yaml")).unwrap();
    let values: Value = serde_saphyr::from_str(&values).unwrap();
    (
        values["image"]["repository"].as_str().unwrap().to_string(),
        chart["appVersion"].as_str().unwrap().to_string(),
    )
}

fn blob(out: &Path, digest: &Value) -> PathBuf {
    let digest = digest.as_str().unwrap();
    out.join("oci/blobs/sha256")
        .join(digest.strip_prefix("sha256:").unwrap())
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn run(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}
