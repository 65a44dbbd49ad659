//! The inputs of one `gavel test` document, read and compiled: the
//! policies of every kind (classic, CEL, admission policies with their
//! bindings), exceptions, the resources under test, the cluster's objects
//! for context lookups, and the values and userInfo files (§1).

use crate::cli::resources::{load_objects_as_written, load_resources, resource_key};
use crate::cli::test_file::TestDoc;
use crate::cli::values::{UserInfoFile, Values};
use crate::engine::cel::{envoy_request, http_request};
use crate::policy::cel_policy::{
    AdmissionDocs, CelCompileError, CompiledCelException, CompiledGeneratingPolicy,
    CompiledImageValidatingPolicy, CompiledMutatingPolicy, CompiledValidatingPolicy,
    EvaluationMode, attach_exceptions_to,
};
use crate::policy::cleanup::CompiledCleanupPolicy;
use crate::policy::load::{LoadedDocument, load_policy_text, parse_yaml_documents, read_file};
use crate::policy::{CompiledException, CompiledPolicy};
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
    pub(super) policies: Vec<CompiledPolicy>,
    /// MutatingAdmissionPolicies, evaluated after the classic policies
    /// (§2.4), each on the previous one's output.
    pub(super) admission_mutating: Vec<CompiledMutatingPolicy>,
    /// MutatingPolicies, evaluated after those.
    pub(super) mutating: Vec<CompiledMutatingPolicy>,
    /// ValidatingPolicies, evaluated after the MutatingPolicies.
    pub(super) validating: Vec<CompiledValidatingPolicy>,
    /// GeneratingPolicies, evaluated last.
    pub(super) generating: Vec<CompiledGeneratingPolicy>,
    /// ImageValidatingPolicies, evaluated on each resource as written (as
    /// Kyverno's CLI does, after the other policies).
    pub(super) image_validating: Vec<CompiledImageValidatingPolicy>,
    /// DeletingPolicies: whether a run would delete each resource.
    pub(super) deleting: Vec<CompiledCleanupPolicy>,
    /// `spec.images` of the Context file.
    pub(super) images: Vec<Value>,
    /// Policies rejected by validation: (name, reason).
    pub(super) invalid: Vec<(String, String)>,
    /// Unsupported policy kinds: (name, kind).
    pub(super) unsupported: Vec<(String, String)>,
    pub(super) exceptions: Vec<CompiledException>,
    /// PolicyExceptions of the CEL kinds, attached to the policies they
    /// name once every file is read.
    pub(super) cel_exceptions: Vec<std::sync::Arc<CompiledCelException>>,
    pub(super) resources: Vec<Value>,
    /// `jsonPayloads`, `httpPayloads` and `envoyPayloads`, in that order.
    pub(super) payloads: Vec<Payload>,
    pub(super) values: Values,
    pub(super) user: UserInfoFile,
    /// Documents of every `cloneSourceResource` and `targetResources` file.
    pub(super) objects: Vec<Value>,
    /// The `targetResources` documents alone: what mutate existing patches.
    pub(super) targets: Vec<Value>,
    /// Admission policies and bindings, until all files are read.
    pub(super) admission_docs: AdmissionDocs,
}

impl Loaded {
    /// Files a compiled CEL policy, or records why it did not compile.
    fn file_cel<T>(
        &mut self,
        kind: &str,
        name: &str,
        compiled: Result<T, CelCompileError>,
        into: fn(&mut Loaded) -> &mut Vec<T>,
    ) {
        match compiled {
            Ok(c) => into(self).push(c),
            Err(CelCompileError::Unsupported(_)) => {
                self.unsupported.push((name.into(), kind.into()))
            }
            Err(CelCompileError::Invalid(e)) => self.invalid.push((name.into(), e)),
        }
    }
}

/// Reads and compiles every file `doc` names. A policy that does not
/// compile is recorded as invalid; an unreadable file is the error.
pub(super) fn load_test(doc: &TestDoc) -> Result<Loaded, String> {
    let mut loaded = Loaded {
        policies: Vec::new(),
        admission_mutating: Vec::new(),
        mutating: Vec::new(),
        validating: Vec::new(),
        generating: Vec::new(),
        image_validating: Vec::new(),
        images: Vec::new(),
        invalid: Vec::new(),
        unsupported: Vec::new(),
        exceptions: Vec::new(),
        resources: Vec::new(),
        values: Values::default(),
        user: UserInfoFile::default(),
        objects: Vec::new(),
        targets: Vec::new(),
        deleting: Vec::new(),
        cel_exceptions: Vec::new(),
        payloads: Vec::new(),
        admission_docs: AdmissionDocs::default(),
    };
    let load_docs = |path: &Path, loaded: &mut Loaded| -> Result<(), String> {
        let text = read_file(path).map_err(|e| e.to_string())?;
        for d in load_policy_text(&path.display().to_string(), &text).map_err(|e| e.to_string())? {
            match d {
                LoadedDocument::Policy(p) => match CompiledPolicy::compile(&p) {
                    Ok(c) => loaded.policies.push(c),
                    Err(e) => loaded
                        .invalid
                        .push((p.metadata.name.clone(), e.to_string())),
                },
                LoadedDocument::Exception(e) => loaded
                    .exceptions
                    .push(CompiledException::compile(&e).map_err(|e| e.to_string())?),
                LoadedDocument::ValidatingPolicy(p) => loaded.file_cel(
                    &p.kind,
                    &p.metadata.name,
                    CompiledValidatingPolicy::compile(&p),
                    |l| &mut l.validating,
                ),
                LoadedDocument::MutatingPolicy(p) => loaded.file_cel(
                    &p.kind,
                    &p.metadata.name,
                    CompiledMutatingPolicy::compile(&p),
                    |l| &mut l.mutating,
                ),
                LoadedDocument::GeneratingPolicy(p) => loaded.file_cel(
                    &p.kind,
                    &p.metadata.name,
                    CompiledGeneratingPolicy::compile(&p),
                    |l| &mut l.generating,
                ),
                LoadedDocument::ImageValidatingPolicy(p) => loaded.file_cel(
                    &p.kind,
                    &p.metadata.name,
                    CompiledImageValidatingPolicy::compile(&p),
                    |l| &mut l.image_validating,
                ),
                // Compiled once every file is read: a binding may come
                // after its policy.
                LoadedDocument::ValidatingAdmissionPolicy(p) => {
                    loaded.admission_docs.validating.push(*p)
                }
                LoadedDocument::MutatingAdmissionPolicy(p) => {
                    loaded.admission_docs.mutating.push(*p)
                }
                LoadedDocument::AdmissionPolicyBinding(b) => {
                    loaded.admission_docs.bindings.push(*b)
                }
                LoadedDocument::CelException(e) => match CompiledCelException::compile(&e) {
                    Ok(c) => loaded.cel_exceptions.push(std::sync::Arc::new(c)),
                    Err(CelCompileError::Unsupported(_)) => loaded
                        .unsupported
                        .push((e.metadata.name.clone(), e.kind.clone())),
                    Err(CelCompileError::Invalid(why)) => {
                        return Err(format!("PolicyException {}: {why}", e.metadata.name));
                    }
                },
                LoadedDocument::Unsupported {
                    api_version,
                    kind,
                    name,
                    document,
                } if api_version.starts_with("policies.kyverno.io/")
                    && matches!(kind.as_str(), "DeletingPolicy" | "NamespacedDeletingPolicy") =>
                {
                    match CompiledCleanupPolicy::compile(&document) {
                        Ok(p) => loaded.deleting.push(p),
                        Err(e) => loaded.invalid.push((name, e)),
                    }
                }
                LoadedDocument::Unsupported { kind, name, .. } => {
                    loaded.unsupported.push((name, kind))
                }
            }
        }
        Ok(())
    };
    for p in &doc.policies {
        load_docs(p, &mut loaded)?;
    }
    for p in &doc.exceptions {
        load_docs(p, &mut loaded)?;
    }
    let admission = std::mem::take(&mut loaded.admission_docs);
    for p in &admission.validating {
        let compiled = CompiledValidatingPolicy::compile_admission(p, &admission.bindings);
        loaded.file_cel(&p.kind, &p.metadata.name, compiled, |l| &mut l.validating);
    }
    for p in &admission.mutating {
        let compiled = CompiledMutatingPolicy::compile_admission(p, &admission.bindings);
        loaded.file_cel(&p.kind, &p.metadata.name, compiled, |l| {
            &mut l.admission_mutating
        });
    }
    let scopes = loaded
        .validating
        .iter_mut()
        .map(|p| &mut p.scope)
        .chain(loaded.mutating.iter_mut().map(|p| &mut p.scope))
        .chain(loaded.admission_mutating.iter_mut().map(|p| &mut p.scope))
        .chain(loaded.generating.iter_mut().map(|p| &mut p.scope))
        .chain(loaded.image_validating.iter_mut().map(|p| &mut p.scope));
    attach_exceptions_to(scopes, &loaded.cel_exceptions);
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
    if !doc.cluster_resources.is_empty() {
        namespaces_exist(&loaded)?;
    }
    Ok(loaded)
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
