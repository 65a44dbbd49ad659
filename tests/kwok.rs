//! The objects `kwok/cluster-objects.py` generates for a scale run are
//! valid Kubernetes 1.33 objects (kubernetes-validate, strict), and there
//! are as many as asked for.

use crate::support;

use std::process::Command;

#[test]
fn scale_run_objects_are_valid() {
    let script = r#"
import subprocess, sys, yaml, kubernetes_validate
out = subprocess.run([sys.executable, "kwok/cluster-objects.py", "--nodes", "30", "--pods", "500", "--namespaces", "4"],
                     capture_output=True, text=True, check=True).stdout
docs = list(yaml.safe_load_all(out))
kinds = {}
for d in docs:
    kubernetes_validate.validate(d, "1.33.0", strict=True)
    kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
pods = sum(d["spec"]["replicas"] for d in docs if d["kind"] == "Deployment")
print("kinds", sorted(kinds.items()), "pods", pods)
assert kinds == {"Namespace": 4, "Node": 30, "Deployment": 10}, kinds
assert pods == 500, pods
"#;
    let out = Command::new(support::tools::python())
        .arg("-c")
        .arg(script)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("python runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("pods 500"), "{text}");
}
