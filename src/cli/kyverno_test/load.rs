//! The inputs of one `gavel test` document, read and compiled: the
//! policies of every kind (classic, CEL, admission policies with their
//! bindings), exceptions, the resources under test, the cluster's objects
//! for context lookups, and the values and userInfo files (see
//! docs/kyverno-test-semantics.md#discovery-and-loading, #values-and-user-info).

use crate::admission::policies::Snapshot;
use crate::cli::kyverno_test::file::TestDoc;
use crate::cli::resources::{load_objects_as_written, load_resources, resource_key};
use crate::cli::values::{UserInfoFile, Values};
use crate::engine::cel::{envoy_request, http_request};
use crate::policy::cel_policy::EvaluationMode;
use crate::policy::load::{parse_yaml_documents, read_file};
use crate::policy::set::{LoadOptions, Loader};
use serde_json::Value;
use std::path::Path;

/// A document a test gives to the policies of one evaluation mode.
pub(super) struct Payload {
    /// As the test wrote it: results name it so.
    pub(super) name: String,
    /// The policies it is for.
    pub(super) mode: EvaluationMode,
    /// `object`, as that mode reads the file.
    pub(super) document: Value,
}

/// Everything one test document names, read and compiled.
pub(super) struct Loaded {
    /// The policies of every kind, compiled into a snapshot as the server
    /// compiles its own, so that a test evaluates through the same plan.
    pub(super) set: Snapshot,
    /// Policies rejected by validation: (name, reason).
    pub(super) invalid: Vec<(String, String)>,
    /// Unsupported policy kinds: (name, kind).
    pub(super) unsupported: Vec<(String, String)>,
    /// PolicyExceptions of either group.
    pub(super) exceptions: usize,
    /// `spec.images` of the Context file.
    pub(super) images: Vec<Value>,
    pub(super) resources: Vec<Value>,
    /// `jsonPayloads`, `httpPayloads` and `envoyPayloads`, in that order.
    pub(super) payloads: Vec<Payload>,
    pub(super) values: Values,
    pub(super) user: UserInfoFile,
    /// Documents of every `cloneSourceResource` and `targetResources` file.
    pub(super) objects: Vec<Value>,
    /// The `targetResources` documents alone: what mutate existing patches.
    pub(super) targets: Vec<Value>,
}

/// Reads and compiles every file `doc` names. A policy that does not
/// compile is recorded as invalid, a kind gavel does not evaluate as
/// unsupported; an unreadable file or an invalid PolicyException is the
/// error.
pub(super) fn load_test(doc: &TestDoc) -> Result<Loaded, String> {
    let mut loader = Loader::new(LoadOptions::TEST);
    for path in doc.policies.iter().chain(&doc.exceptions) {
        let text = read_file(path).map_err(|e| e.to_string())?;
        loader
            .add_text(&path.display().to_string(), &text)
            .map_err(|e| e.to_string())?;
    }
    let (set, rejected) = loader.finish();
    let (mut invalid, mut unsupported) = (Vec::new(), Vec::new());
    for r in rejected {
        match (r.unsupported, r.is_exception()) {
            (true, _) => unsupported.push((r.name, r.kind)),
            // kyverno-compat: an exception that does not load stops the
            // test, where a policy that does not is reported per result.
            (false, true) => return Err(r.reason),
            (false, false) => invalid.push((r.name, r.reason)),
        }
    }
    let mut loaded = Loaded {
        exceptions: set.exceptions.len() + set.cel_exceptions.len(),
        set: Snapshot::new(set, 1),
        invalid,
        unsupported,
        images: Vec::new(),
        resources: Vec::new(),
        values: Values::default(),
        user: UserInfoFile::default(),
        objects: Vec::new(),
        targets: Vec::new(),
        payloads: Vec::new(),
    };
    load_payloads(doc, &mut loaded)?;
    let mut seen = std::collections::HashSet::new();
    for p in &doc.resources {
        for r in load_resources(p).map_err(|e| e.to_string())? {
            let (api, kind, ns, name) = resource_key(&r);
            let group = api
                .split_once('/')
                .map(|(g, _)| g.to_string())
                .unwrap_or_default();
            if seen.insert((group, kind, ns, name)) {
                loaded.resources.push(r);
            }
        }
    }
    load_objects(doc, &mut loaded)?;
    load_values(doc, &mut loaded)?;
    if !doc.cluster_resources.is_empty() {
        namespaces_exist(&loaded)?;
    }
    Ok(loaded)
}

/// The `jsonPayloads`, `httpPayloads` and `envoyPayloads`, as each mode
/// reads its files.
fn load_payloads(doc: &TestDoc, loaded: &mut Loaded) -> Result<(), String> {
    let kinds = [
        (&doc.json_payloads, EvaluationMode::Json, "JSON"),
        (&doc.http_payloads, EvaluationMode::Http, "HTTP"),
        (&doc.envoy_payloads, EvaluationMode::Envoy, "Envoy"),
    ];
    for (payloads, mode, what) in kinds {
        for (path, name) in payloads {
            let text = read_file(path).map_err(|e| e.to_string())?;
            let payload: Value = serde_json::from_str(&text)
                .map_err(|e| format!("failed to load {what} payload {name}: {e}"))?;
            let document = match mode {
                EvaluationMode::Http => http_request(&payload),
                EvaluationMode::Envoy => envoy_request(&payload),
                _ if payload.is_object() => Ok(payload),
                _ => Err("it must be a top-level object".to_string()),
            }
            .map_err(|e| format!("failed to load {what} payload {name}: {e}"))?;
            loaded.payloads.push(Payload {
                name: name.clone(),
                mode,
                document,
            });
        }
    }
    Ok(())
}

/// The cluster's objects for context lookups: clone sources, mutate
/// targets, parameter resources, the Context file's resources and images,
/// and the ClusterResources with the CRDs they name.
fn load_objects(doc: &TestDoc, loaded: &mut Loaded) -> Result<(), String> {
    let dir = doc.path.parent().unwrap_or(Path::new("."));
    let mut clone_files: Vec<&str> = doc
        .results
        .iter()
        .filter_map(|r| r.clone_source.as_deref())
        .collect();
    clone_files.dedup();
    for f in clone_files {
        loaded
            .objects
            .extend(load_resources(&dir.join(f)).map_err(|e| e.to_string())?);
    }
    for f in &doc.target_resources {
        loaded
            .targets
            .extend(load_resources(f).map_err(|e| e.to_string())?);
    }
    loaded.objects.extend(loaded.targets.iter().cloned());
    for f in &doc.param_resources {
        loaded
            .objects
            .extend(load_objects_as_written(f).map_err(|e| e.to_string())?);
    }
    if let Some(path) = &doc.context {
        let text = read_file(path).map_err(|e| e.to_string())?;
        for d in
            parse_yaml_documents(&path.display().to_string(), &text).map_err(|e| e.to_string())?
        {
            let list = |k: &str| {
                d.pointer(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            };
            loaded.objects.extend(list("/spec/resources"));
            loaded.images.extend(list("/spec/images"));
        }
    }
    // The cluster the test stands for: each ClusterResource's objects and
    // the CRDs it names (paths relative to the test).
    for path in &doc.cluster_resources {
        let text = read_file(path).map_err(|e| e.to_string())?;
        for d in
            parse_yaml_documents(&path.display().to_string(), &text).map_err(|e| e.to_string())?
        {
            if let Some(objects) = d.pointer("/spec/resources").and_then(Value::as_array) {
                loaded.objects.extend(objects.iter().cloned());
            }
            for crd in d
                .pointer("/spec/crds")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(file) = crd.as_str() else { continue };
                loaded
                    .objects
                    .extend(load_resources(&dir.join(file)).map_err(|e| e.to_string())?);
            }
        }
    }
    Ok(())
}

/// The values (inline or the variables file) and the userInfo file.
fn load_values(doc: &TestDoc, loaded: &mut Loaded) -> Result<(), String> {
    if let Some(v) = &doc.inline_values {
        loaded.values = Values::parse(v, false)?;
    } else if let Some(path) = &doc.variables {
        let text = read_file(path).map_err(|e| e.to_string())?;
        let docs =
            parse_yaml_documents(&path.display().to_string(), &text).map_err(|e| e.to_string())?;
        if let Some(d) = docs.first() {
            loaded.values =
                Values::parse(d, true).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    if let Some(path) = &doc.userinfo {
        let text = read_file(path).map_err(|e| e.to_string())?;
        let docs =
            parse_yaml_documents(&path.display().to_string(), &text).map_err(|e| e.to_string())?;
        if let Some(d) = docs.first() {
            loaded.user = UserInfoFile::parse(d).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// kyverno-compat: a test with `clusterResources` runs against Kyverno's
/// fake cluster, which reads each namespaced resource's Namespace for its
/// labels (unless the values give them); a Namespace that is none of the
/// test's objects stops the run, naming the first resource in it.
fn namespaces_exist(loaded: &Loaded) -> Result<(), String> {
    fn str_at<'v>(v: &'v Value, pointer: &str) -> &'v str {
        v.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
    let exists = |ns: &str| {
        loaded
            .objects
            .iter()
            .chain(&loaded.resources)
            .any(|o| str_at(o, "/kind") == "Namespace" && str_at(o, "/metadata/name") == ns)
    };
    for r in &loaded.resources {
        let ns = str_at(r, "/metadata/namespace");
        if ns.is_empty()
            || str_at(r, "/kind") == "Namespace"
            || loaded
                .values
                .namespace_labels
                .get(ns)
                .is_some_and(|l| !l.is_empty())
            || exists(ns)
        {
            continue;
        }
        return Err(format!(
            "failed to apply policies on resource {} (failed to get the resource's namespace \
             (namespaces \"{ns}\" not found))",
            str_at(r, "/metadata/name")
        ));
    }
    Ok(())
}
