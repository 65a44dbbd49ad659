//! `validate.podSecurity` (docs/kyverno-semantics.md#pod-security-standards):
//! the Pod Security Standards checks of the Kubernetes pod-security-admission
//! library (baseline and restricted, the `latest` profile), with Kyverno's
//! `exclude` entries. Works on Pods and on pod templates of controllers.

use crate::policy::types::{PodSecurity, PodSecurityExclude};
use crate::wildcard;
use serde_json::Value;

/// One check failure: which control, where, and the offending value.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub control: &'static str,
    /// Image of the offending container; `None` for pod-level fields.
    pub image: Option<String>,
    /// The field, in Kyverno's `restrictedField` notation.
    pub field: String,
    pub value: String,
}

const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SELINUX_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];
const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

/// The pod metadata and spec of a Pod or of a controller's pod template.
fn pod_parts(resource: &Value) -> Option<(&Value, &Value)> {
    let kind = resource
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let template = match kind {
        "Pod" => Some(resource),
        "CronJob" => resource.pointer("/spec/jobTemplate/spec/template"),
        _ => resource.pointer("/spec/template"),
    }?;
    Some((
        template.get("metadata").unwrap_or(&Value::Null),
        template.get("spec")?,
    ))
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

struct Checker<'a> {
    spec: &'a Value,
    out: Vec<Violation>,
}

impl Checker<'_> {
    fn pod(&mut self, control: &'static str, field: &str, value: &Value) {
        self.out.push(Violation {
            control,
            image: None,
            field: format!("spec.{field}"),
            value: show(value),
        });
    }

    fn containers(&self) -> impl Iterator<Item = (&'static str, &Value)> {
        CONTAINER_LISTS.iter().flat_map(move |list| {
            self.spec
                .get(*list)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(move |c| (*list, c))
        })
    }

    /// Records a violation for every container whose `path` value fails `ok`.
    fn each_container(
        &mut self,
        control: &'static str,
        path: &str,
        ok: impl Fn(Option<&Value>) -> bool,
    ) {
        let mut found = Vec::new();
        for (list, c) in self.containers() {
            let v = c.pointer(path);
            if !ok(v) {
                let field = format!("spec.{list}[*]{}", path.replace('/', "."));
                let image = c
                    .get("image")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                found.push(Violation {
                    control,
                    image: Some(image),
                    field,
                    value: v.map(show).unwrap_or_else(|| "undefined".into()),
                });
            }
        }
        self.out.extend(found);
    }
}

/// A seccomp profile type other than `Unconfined` (or none).
fn not_unconfined(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str) != Some("Unconfined")
}

fn unset_or_false(v: Option<&Value>) -> bool {
    v.is_none_or(|v| v.is_null() || v.as_bool() == Some(false))
}

/// Evaluates the Pod Security Standards at `level` and returns the violations.
pub fn check(resource: &Value, level: &str) -> Vec<Violation> {
    let Some((metadata, spec)) = pod_parts(resource) else {
        return Vec::new();
    };
    let mut c = Checker {
        spec,
        out: Vec::new(),
    };
    if level == "privileged" {
        return c.out;
    }
    baseline(&mut c, metadata);
    if level == "restricted" {
        restricted(&mut c);
    }
    c.out
}

/// The baseline level's controls (also checked at restricted): host
/// access and privileges here, profiles in [`baseline_profiles`].
fn baseline(c: &mut Checker, metadata: &Value) {
    let spec = c.spec;
    let psc = spec.get("securityContext");
    // HostProcess
    if let Some(v) = psc
        .and_then(|s| s.pointer("/windowsOptions/hostProcess"))
        .filter(|v| v.as_bool() == Some(true))
    {
        c.pod(
            "HostProcess",
            "securityContext.windowsOptions.hostProcess",
            v,
        );
    }
    c.each_container(
        "HostProcess",
        "/securityContext/windowsOptions/hostProcess",
        unset_or_false,
    );
    // Host Namespaces
    for f in ["hostNetwork", "hostPID", "hostIPC"] {
        if let Some(v) = spec.get(f).filter(|v| v.as_bool() == Some(true)) {
            c.pod("Host Namespaces", f, v);
        }
    }
    // Privileged Containers
    c.each_container(
        "Privileged Containers",
        "/securityContext/privileged",
        unset_or_false,
    );
    // Capabilities (baseline)
    c.each_container("Capabilities", "/securityContext/capabilities/add", |v| {
        v.and_then(Value::as_array).is_none_or(|a| {
            a.iter().all(|x| {
                x.as_str()
                    .is_some_and(|s| BASELINE_CAPABILITIES.contains(&s))
            })
        })
    });
    // HostPath Volumes
    for vol in spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(hp) = vol.get("hostPath") {
            c.out.push(Violation {
                control: "HostPath Volumes",
                image: None,
                field: "spec.volumes[*].hostPath".into(),
                // The Pod Security Admission library's bad value, which
                // exclusions' `values` match: the path.
                value: show(hp.get("path").unwrap_or(&Value::Null)),
            });
        }
    }
    // Host Ports
    c.each_container("Host Ports", "/ports", |v| {
        v.and_then(Value::as_array).is_none_or(|ports| {
            ports.iter().all(|p| {
                p.get("hostPort")
                    .is_none_or(|h| h.is_null() || h.as_f64() == Some(0.0))
            })
        })
    });
    baseline_profiles(c, metadata);
}

/// The baseline level's controls of security profiles and kernel settings:
/// AppArmor, SELinux, `/proc` mount, seccomp, sysctls.
fn baseline_profiles(c: &mut Checker, metadata: &Value) {
    let spec = c.spec;
    let psc = spec.get("securityContext");
    // AppArmor
    if let Some(ann) = metadata.get("annotations").and_then(Value::as_object) {
        for (k, v) in ann {
            if k.starts_with("container.apparmor.security.beta.kubernetes.io/") {
                let s = v.as_str().unwrap_or_default();
                if s != "runtime/default" && !s.starts_with("localhost/") {
                    c.out.push(Violation {
                        control: "AppArmor",
                        image: None,
                        field: format!("metadata.annotations[{k}]"),
                        value: s.into(),
                    });
                }
            }
        }
    }
    let apparmor_ok = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .is_none_or(|t| t == "RuntimeDefault" || t == "Localhost")
    };
    if let Some(t) = psc
        .and_then(|s| s.pointer("/appArmorProfile/type"))
        .filter(|t| !apparmor_ok(Some(t)))
    {
        c.pod("AppArmor", "securityContext.appArmorProfile.type", t);
    }
    c.each_container(
        "AppArmor",
        "/securityContext/appArmorProfile/type",
        apparmor_ok,
    );
    // SELinux
    let selinux_type_ok = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .is_none_or(|t| SELINUX_TYPES.contains(&t))
    };
    if let Some(opts) = psc.and_then(|s| s.get("seLinuxOptions")) {
        if !selinux_type_ok(opts.get("type")) {
            c.pod(
                "SELinux",
                "securityContext.seLinuxOptions.type",
                &opts["type"],
            );
        }
        for f in ["user", "role"] {
            if let Some(v) = opts
                .get(f)
                .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            {
                c.pod("SELinux", &format!("securityContext.seLinuxOptions.{f}"), v);
            }
        }
    }
    c.each_container(
        "SELinux",
        "/securityContext/seLinuxOptions/type",
        selinux_type_ok,
    );
    for f in ["user", "role"] {
        c.each_container(
            "SELinux",
            &format!("/securityContext/seLinuxOptions/{f}"),
            |v| v.and_then(Value::as_str).is_none_or(str::is_empty),
        );
    }
    // /proc Mount Type
    c.each_container("/proc Mount Type", "/securityContext/procMount", |v| {
        v.and_then(Value::as_str).is_none_or(|s| s == "Default")
    });
    // Seccomp (baseline): never Unconfined
    if let Some(t) = psc
        .and_then(|s| s.pointer("/seccompProfile/type"))
        .filter(|t| !not_unconfined(Some(t)))
    {
        c.pod("Seccomp", "securityContext.seccompProfile.type", t);
    }
    c.each_container(
        "Seccomp",
        "/securityContext/seccompProfile/type",
        not_unconfined,
    );
    // Sysctls
    for s in psc
        .and_then(|s| s.get("sysctls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = s.get("name").and_then(Value::as_str).unwrap_or_default();
        if !SAFE_SYSCTLS.contains(&name) {
            c.out.push(Violation {
                control: "Sysctls",
                image: None,
                field: "spec.securityContext.sysctls[*].name".into(),
                value: name.into(),
            });
        }
    }
}

/// The restricted level's controls beyond baseline.
fn restricted(c: &mut Checker) {
    let spec = c.spec;
    let psc = spec.get("securityContext");
    // Volume Types
    for vol in spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(m) = vol.as_object() {
            for k in m.keys().filter(|k| *k != "name") {
                if !RESTRICTED_VOLUMES.contains(&k.as_str()) && k != "hostPath" {
                    c.out.push(Violation {
                        control: "Volume Types",
                        image: None,
                        field: format!("spec.volumes[*].{k}"),
                        value: k.clone(),
                    });
                }
            }
        }
    }
    // Privilege Escalation: must be explicitly false
    c.each_container(
        "Privilege Escalation",
        "/securityContext/allowPrivilegeEscalation",
        |v| v.and_then(Value::as_bool) == Some(false),
    );
    // Running as Non-root
    let pod_non_root = psc
        .and_then(|s| s.get("runAsNonRoot"))
        .and_then(Value::as_bool);
    if pod_non_root == Some(false) {
        c.pod(
            "Running as Non-root",
            "securityContext.runAsNonRoot",
            &Value::Bool(false),
        );
    }
    c.each_container(
        "Running as Non-root",
        "/securityContext/runAsNonRoot",
        |v| match v.and_then(Value::as_bool) {
            Some(b) => b,
            None => pod_non_root == Some(true),
        },
    );
    // Running as Non-root user
    if let Some(u) = psc
        .and_then(|s| s.get("runAsUser"))
        .filter(|u| u.as_f64() == Some(0.0))
    {
        c.pod("Running as Non-root user", "securityContext.runAsUser", u);
    }
    c.each_container(
        "Running as Non-root user",
        "/securityContext/runAsUser",
        |v| v.is_none_or(|u| u.as_f64() != Some(0.0)),
    );
    // Seccomp (restricted): RuntimeDefault or Localhost, at pod level or on every container
    let strict = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .is_some_and(|t| t == "RuntimeDefault" || t == "Localhost")
    };
    let pod_seccomp = psc.and_then(|s| s.pointer("/seccompProfile/type"));
    if pod_seccomp.is_some() && !strict(pod_seccomp) && not_unconfined(pod_seccomp) {
        c.pod(
            "Seccomp",
            "securityContext.seccompProfile.type",
            pod_seccomp.unwrap_or(&Value::Null),
        );
    }
    let pod_ok = strict(pod_seccomp);
    c.each_container(
        "Seccomp",
        "/securityContext/seccompProfile/type",
        |v| match v {
            Some(t) if !t.is_null() => strict(Some(t)) || !not_unconfined(Some(t)),
            _ => pod_ok,
        },
    );
    // Capabilities (restricted): drop ALL, add at most NET_BIND_SERVICE
    c.each_container("Capabilities", "/securityContext/capabilities/drop", |v| {
        v.and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|x| x.as_str() == Some("ALL")))
    });
    c.each_container("Capabilities", "/securityContext/capabilities/add", |v| {
        v.and_then(Value::as_array)
            .is_none_or(|a| a.iter().all(|x| x.as_str() == Some("NET_BIND_SERVICE")))
    });
}

/// Whether an `exclude` entry covers a violation.
fn excluded(v: &Violation, entries: &[PodSecurityExclude]) -> bool {
    entries.iter().any(|e| {
        if e.control_name != v.control {
            return false;
        }
        let scope_ok = match &v.image {
            None => e.images.is_empty(),
            Some(img) => e.images.iter().any(|p| wildcard::matches(p, img)),
        };
        let field_ok = match &e.restricted_field {
            None => true,
            Some(f) => {
                wildcard::matches(f, &v.field)
                    && e.values.iter().any(|x| wildcard::matches(x, &v.value))
            }
        };
        scope_ok && field_ok
    })
}

/// Evaluates a `podSecurity` rule body: the violations left after exclusions.
pub fn evaluate(
    resource: &Value,
    ps: &PodSecurity,
    extra_excludes: &[PodSecurityExclude],
) -> Vec<Violation> {
    let level = ps.level.to_ascii_lowercase();
    check(resource, &level)
        .into_iter()
        .filter(|v| !excluded(v, &ps.exclude) && !excluded(v, extra_excludes))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn controls(pod: Value, level: &str) -> Vec<&'static str> {
        check(&pod, level).into_iter().map(|v| v.control).collect()
    }

    #[test]
    fn baseline_and_restricted() {
        let good = json!({"kind": "Pod", "spec": {
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "a", "image": "x", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}});
        assert!(controls(good.clone(), "restricted").is_empty());
        let bad = json!({"kind": "Pod", "spec": {"hostNetwork": true, "containers": [{"name": "a", "image": "x",
            "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}}}]}});
        assert_eq!(
            controls(bad.clone(), "baseline"),
            vec!["Host Namespaces", "Privileged Containers", "Capabilities"]
        );
        assert!(controls(bad, "restricted").contains(&"Privilege Escalation"));
        let deploy = json!({"kind": "Deployment", "spec": {"template": {"spec": {"hostPID": true, "containers": []}}}});
        assert_eq!(controls(deploy, "baseline"), vec!["Host Namespaces"]);
    }
}
