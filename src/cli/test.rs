//! `gavel test`: discovery of kyverno-test.yaml files, offline evaluation,
//! and result matching and counting exactly as `kyverno test` does
//! (see kyverno-test-semantics.md §1-§4, §7).

use super::resources::{load_objects_as_written, load_resources, resource_key};
use super::test_file::{ApiCallMock, GlobalContextMock, TestDoc};
use super::values::{PolicyRuleValues, UserInfoFile, Values};
use super::{OutputFormat, TestArgs};
use crate::context::{ApiCallRequest, Objects, ResolveError, Resolver};
use crate::engine::cel::{
    CelRequest, evaluate_generating_policy, evaluate_mutating_policy, evaluate_validating_policy,
};
use crate::engine::generate::generate_policy;
use crate::engine::json_context::JsonContext;
use crate::engine::mutate::mutate_policy;
use crate::engine::validate::evaluate_policy;
use crate::engine::{EvalEnv, PolicyResponse, Request, RuleStatus, RuleType};
use crate::policy::cel_policy::{
    AdmissionDocs, CelCompileError, CompiledGeneratingPolicy, CompiledMutatingPolicy,
    CompiledValidatingPolicy,
};
use crate::policy::load::{LoadedDocument, load_policy_text, parse_yaml_documents, read_file};
use crate::policy::{CompiledException, CompiledPolicy};
use crate::wildcard;
use serde_json::{Value, json};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One table row of a test.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub policy: String,
    pub rule: String,
    pub resource: String,
    /// `Pass`, `Fail` or `Skip`, as printed.
    pub result: &'static str,
    pub reason: String,
    pub message: String,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Skip,
    Fail,
}

/// The outcome of one test document.
#[derive(Debug, Clone, Default)]
pub struct TestOutcome {
    pub path: String,
    pub pass: usize,
    pub fail: usize,
    pub skip: usize,
    pub error: Option<String>,
    pub rows: Vec<Row>,
    pub policies: usize,
    pub resources: usize,
    pub exceptions: usize,
}

impl TestOutcome {
    /// A test passes when it loaded and no row failed.
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.fail == 0
    }
}

/// `--test-case-selector` filters.
#[derive(Debug, Clone)]
pub struct Selector {
    policy: String,
    rule: String,
    resource: String,
}

impl Selector {
    pub fn parse(s: &str) -> Selector {
        let mut sel = Selector {
            policy: "*".into(),
            rule: "*".into(),
            resource: "*".into(),
        };
        for part in s.split(',') {
            match part.split_once('=') {
                Some(("policy", v)) => sel.policy = v.trim().into(),
                Some(("rule", v)) => sel.rule = v.trim().into(),
                Some(("resource", v)) => sel.resource = v.trim().into(),
                _ => {}
            }
        }
        sel
    }

    fn keeps(&self, policy: &str, rule: &str, resources: &[String]) -> bool {
        let ok = |pat: &str, v: &str| v.is_empty() || wildcard::matches(pat, v);
        ok(&self.policy, policy)
            && ok(&self.rule, rule)
            && (self.resource == "*"
                || resources.is_empty()
                || resources
                    .iter()
                    .any(|r| wildcard::matches(&self.resource, r)))
    }
}

impl Default for Selector {
    fn default() -> Self {
        Selector::parse("")
    }
}

/// Finds files named `file_name` under `paths`, in sorted (ReadDir) order.
pub fn discover(paths: &[PathBuf], file_name: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, name, out);
            } else if p.file_name().and_then(|f| f.to_str()) == Some(name) {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, file_name, &mut out);
        } else {
            out.push(p.clone());
        }
    }
    out
}

/// Offline context sources: `apiCallResponses` and `globalContextEntries`
/// mocks; the `cloneSourceResource` files (generate clones) and
/// `targetResources` (mutate existing) as the cluster's objects.
struct MockResolver<'a> {
    api_calls: &'a [ApiCallMock],
    globals: &'a [GlobalContextMock],
    objects: &'a [Value],
    /// `spec.images` of the test's Context file.
    images: &'a [Value],
}

impl Resolver for MockResolver<'_> {
    fn api_call(&self, call: &ApiCallRequest) -> Result<Option<Value>, ResolveError> {
        let target = call
            .url_path
            .as_deref()
            .or(call.url.as_deref())
            .unwrap_or_default();
        Ok(self
            .api_calls
            .iter()
            .find(|m| m.url == target && m.method.eq_ignore_ascii_case(&call.method))
            .map(|m| m.body.clone()))
    }

    fn kind_for_resource(&self, api_version: &str, resource: &str) -> Option<String> {
        Objects(self.objects).kind_for_resource(api_version, resource)
    }

    fn image_metadata(&self, image: &str) -> Result<Option<Value>, ResolveError> {
        Ok(self
            .images
            .iter()
            .find(|i| i.get("image").and_then(Value::as_str) == Some(image))
            .cloned())
    }

    fn global_context(&self, name: &str) -> Result<Option<Arc<Value>>, ResolveError> {
        Ok(self
            .globals
            .iter()
            .find(|g| g.name == name)
            .map(|g| Arc::new(g.data.clone())))
    }

    fn resource(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ResolveError> {
        Ok(Objects(self.objects).get(api_version, kind, namespace, name))
    }

    fn resources(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<Vec<Value>, ResolveError> {
        Ok(Objects(self.objects).list(api_version, kind, namespace))
    }

    fn serves_objects(&self) -> bool {
        true
    }

    fn is_namespaced(&self, api_version: &str, kind: &str) -> bool {
        Objects(self.objects).is_namespaced(api_version, kind)
    }
}

struct Loaded {
    policies: Vec<CompiledPolicy>,
    /// MutatingAdmissionPolicies, evaluated after the classic policies
    /// (§2.4), each on the previous one's output.
    admission_mutating: Vec<CompiledMutatingPolicy>,
    /// MutatingPolicies, evaluated after those.
    mutating: Vec<CompiledMutatingPolicy>,
    /// ValidatingPolicies, evaluated after the MutatingPolicies.
    validating: Vec<CompiledValidatingPolicy>,
    /// GeneratingPolicies, evaluated last.
    generating: Vec<CompiledGeneratingPolicy>,
    /// `spec.images` of the Context file.
    images: Vec<Value>,
    /// Policies rejected by validation: (name, reason).
    invalid: Vec<(String, String)>,
    /// Unsupported policy kinds: (name, kind).
    unsupported: Vec<(String, String)>,
    exceptions: Vec<CompiledException>,
    resources: Vec<Value>,
    values: Values,
    user: UserInfoFile,
    /// Documents of every `cloneSourceResource` and `targetResources` file.
    objects: Vec<Value>,
    /// Admission policies and bindings, until all files are read.
    admission_docs: AdmissionDocs,
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

fn load_test(doc: &TestDoc) -> Result<Loaded, String> {
    let mut loaded = Loaded {
        policies: Vec::new(),
        admission_mutating: Vec::new(),
        mutating: Vec::new(),
        validating: Vec::new(),
        generating: Vec::new(),
        images: Vec::new(),
        invalid: Vec::new(),
        unsupported: Vec::new(),
        exceptions: Vec::new(),
        resources: Vec::new(),
        values: Values::default(),
        user: UserInfoFile::default(),
        objects: Vec::new(),
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
            .objects
            .extend(load_resources(f).map_err(|e| e.to_string())?);
    }
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
    Ok(loaded)
}

/// What the engine made of one resource, per policy (in load order).
struct Evaluated<'l> {
    /// Each policy's responses over all phases; `None` for a generate-only
    /// policy none of whose rules applied (it reads as "Not found").
    responses: Vec<Option<PolicyResponse<'l>>>,
    /// The resource after each policy's mutate rules.
    patched: Vec<Value>,
    /// The resource validate and generate rules saw: after every mutation.
    mutated: Value,
    /// One response per MutatingPolicy, in load order.
    mutating: Vec<PolicyResponse<'l>>,
    /// The resource after the MutatingPolicies: what they report and what
    /// the ValidatingPolicies see.
    cel_mutated: Value,
    /// One response per ValidatingPolicy and GeneratingPolicy, in load
    /// order.
    validating: Vec<PolicyResponse<'l>>,
}

/// Runs the phases of `kyverno test` (§2) for every resource: mutate
/// policies in load order, each on the previous one's output; then
/// validate, then generate, on the mutated resource.
fn evaluate<'l>(doc: &TestDoc, loaded: &'l Loaded) -> Vec<Evaluated<'l>> {
    let resolver = MockResolver {
        api_calls: &doc.api_calls,
        globals: &doc.global_context,
        objects: &loaded.objects,
        images: &loaded.images,
    };
    let operation = loaded.values.operation();
    let mut out = Vec::with_capacity(loaded.resources.len());
    for resource in &loaded.resources {
        let name = resource
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut current = resource.clone();
        let mut responses: Vec<Option<PolicyResponse>> = Vec::with_capacity(loaded.policies.len());
        let mut patched = Vec::with_capacity(loaded.policies.len());
        for policy in &loaded.policies {
            if !policy.has_mutate() {
                responses.push(None);
                patched.push(current.clone());
                continue;
            }
            let outcome = with_policy_context(
                policy,
                &current,
                name,
                &operation,
                loaded,
                &resolver,
                |req, ctx, env| mutate_policy(policy, req, ctx, env),
            );
            if let Some(p) = outcome.patched {
                current = p;
            }
            patched.push(current.clone());
            responses.push(Some(outcome.response));
        }
        for (i, policy) in loaded.policies.iter().enumerate() {
            // Validate and generate see the same request: one build for both.
            let (validated, generated) = with_policy_context(
                policy,
                &current,
                name,
                &operation,
                loaded,
                &resolver,
                |req, ctx, env| {
                    (
                        evaluate_policy(policy, req, ctx, env),
                        policy
                            .has_generate()
                            .then(|| generate_policy(policy, req, ctx, env)),
                    )
                },
            );
            let slot = &mut responses[i];
            let mut merged = slot.take().unwrap_or(PolicyResponse {
                policy: validated.policy,
                rules: Vec::new(),
            });
            merged.rules.extend(validated.rules);
            if let Some(g) = generated {
                merged.rules.extend(g.rules);
            }
            // kyverno-compat: only a generate phase that produced rule
            // responses yields an engine response for a generate policy.
            let generate_only =
                policy.has_generate() && !policy.has_mutate() && !policy.has_validate();
            *slot = (!generate_only || !merged.rules.is_empty()).then_some(merged);
        }
        let cel_input = |resource: &Value| {
            let req = build_request(resource, &operation, loaded);
            let mut input = CelRequest::of(&req);
            if let Some(ns) = loaded.values.namespace_objects.get(req.namespace()) {
                input = input.with_namespace_object(ns);
            }
            (req, input)
        };
        // kyverno-compat: every MutatingPolicy sees the same incoming
        // resource, and the last one that mutated gives the result all of
        // them report.
        let mut mutating = Vec::with_capacity(loaded.mutating.len());
        // MutatingAdmissionPolicies first, each on the previous output.
        for p in &loaded.admission_mutating {
            let (req, input) = cel_input(&current);
            let outcome = evaluate_mutating_policy(p, &req, &input, &resolver);
            if let Some(patched) = outcome.patched {
                current = patched;
            }
            if !outcome.response.rules.is_empty() {
                mutating.push(outcome.response);
            }
        }
        let mut cel_mutated = None;
        if !loaded.mutating.is_empty() {
            let (req, input) = cel_input(&current);
            for p in &loaded.mutating {
                let outcome = evaluate_mutating_policy(p, &req, &input, &resolver);
                if outcome.patched.is_some() {
                    cel_mutated = outcome.patched;
                }
                mutating.push(outcome.response);
            }
        }
        let cel_mutated = cel_mutated.unwrap_or_else(|| current.clone());
        let mut validating = Vec::with_capacity(loaded.validating.len());
        if !loaded.validating.is_empty() || !loaded.generating.is_empty() {
            let (req, input) = cel_input(&cel_mutated);
            for p in &loaded.validating {
                validating.push(evaluate_validating_policy(p, &req, &input, &resolver));
            }
            for p in &loaded.generating {
                let response = evaluate_generating_policy(p, &req, &input, &resolver);
                if !response.rules.is_empty() {
                    validating.push(response);
                }
            }
        }
        out.push(Evaluated {
            responses,
            patched,
            mutated: current,
            mutating,
            cel_mutated,
            validating,
        });
    }
    out
}

/// Builds the request and context `kyverno test` gives `policy` for
/// `resource` (values file, per-resource values, operation) and runs `f`.
fn with_policy_context<'l, R>(
    policy: &'l CompiledPolicy,
    resource: &Value,
    name: &str,
    operation: &str,
    loaded: &'l Loaded,
    resolver: &MockResolver,
    f: impl FnOnce(&Request, &JsonContext, &EvalEnv) -> R,
) -> R {
    let resource_values = loaded
        .values
        .resources
        .get(&policy.name)
        .and_then(|m| m.get(name));
    // A resource-level `request.operation` changes the request itself (oldObject on UPDATE).
    let op = resource_values
        .and_then(|v| v.get("request.operation"))
        .and_then(Value::as_str)
        .unwrap_or(operation);
    let req = build_request(resource, op, loaded);
    let mut ctx = context_for(&req, loaded);
    for (k, v) in resource_values.into_iter().flatten() {
        ctx.set_path(k, v.clone());
    }
    let rule_values = PolicyRuleValues(loaded.values.rules.get(&policy.name));
    let env = EvalEnv {
        resolver,
        exceptions: &loaded.exceptions,
        rule_values: &rule_values,
    };
    f(&req, &ctx, &env)
}

/// The request's JSON context with the values file's global values applied.
fn context_for<'a>(req: &'a Request, loaded: &Loaded) -> JsonContext<'a> {
    let mut ctx = req.json_context(loaded.policies.iter().any(|p| p.uses_images));
    for (k, v) in &loaded.values.global {
        ctx.set_path(k, v.clone());
    }
    ctx
}

fn build_request(resource: &Value, operation: &str, loaded: &Loaded) -> Request {
    let namespace = resource
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let labels = loaded.values.namespace_labels.get(namespace).cloned();
    Request::offline(resource, operation, loaded.user.user.clone(), labels)
}

fn display_resource(r: &Value) -> String {
    let (api, kind, ns, name) = resource_key(r);
    if ns.is_empty() {
        format!("{api}/{kind}/{name}")
    } else {
        format!("{api}/{kind}/{ns}/{name}")
    }
}

fn status_word(s: RuleStatus) -> &'static str {
    match s {
        RuleStatus::Pass => "pass",
        RuleStatus::Fail => "fail",
        RuleStatus::Warn => "warn",
        RuleStatus::Error => "error",
        RuleStatus::Skip => "skip",
    }
}

/// Compares expected results with engine responses (§4).
fn check_results(
    doc: &TestDoc,
    loaded: &Loaded,
    evaluated: &[Evaluated],
    selector: &Selector,
) -> Vec<Row> {
    let dir = doc.path.parent().unwrap_or(Path::new("."));
    let mut expected_files = ExpectedFiles::default();
    let mut rows = Vec::new();
    for expected in &doc.results {
        if !selector.keeps(&expected.policy, &expected.rule, &expected.resources) {
            continue;
        }
        let names: Vec<String> = if selector.resource != "*" {
            vec![selector.resource.clone()]
        } else {
            expected.resources.clone()
        };
        // A name listed twice gives its rows twice, as Kyverno appends the
        // resources of each listed name without removing repeats
        // (commands/test/output.go, printTestResult).
        let mut chosen: Vec<usize> = Vec::new();
        for n in &names {
            for (i, r) in loaded.resources.iter().enumerate() {
                let (_, _, ns, name) = resource_key(r);
                let hit = match n.split_once('/') {
                    Some((want_ns, want_name)) => ns == want_ns && name == want_name,
                    None => name == *n,
                };
                if hit {
                    chosen.push(i);
                }
            }
        }
        if chosen.is_empty() {
            chosen = (0..loaded.resources.len()).collect();
        }
        let policy_name = expected
            .policy
            .rsplit('/')
            .next()
            .unwrap_or(&expected.policy);
        for i in chosen {
            let resource = &loaded.resources[i];
            let shown = display_resource(resource);
            let ev = &evaluated[i];
            // (index among classic policies, response, scored)
            let mut matching: Vec<(Option<usize>, &PolicyResponse, bool)> = ev
                .responses
                .iter()
                .zip(&loaded.policies)
                .enumerate()
                .filter(|(_, (_, p))| p.name == policy_name)
                .filter_map(|(pi, (r, p))| r.as_ref().map(|r| (Some(pi), r, p.scored)))
                .collect();
            matching.extend(
                ev.mutating
                    .iter()
                    .chain(&ev.validating)
                    .filter(|r| r.policy == policy_name)
                    .map(|r| (None, r, true)),
            );
            let row = |rule: &str,
                       result: &'static str,
                       reason: String,
                       message: String,
                       outcome: Outcome| Row {
                policy: expected.policy.clone(),
                rule: rule.to_string(),
                resource: shown.clone(),
                result,
                reason,
                message,
                outcome,
            };
            if matching.is_empty() {
                if loaded.invalid.iter().any(|(n, _)| n == policy_name) {
                    rows.push(row(
                        &expected.rule,
                        "Skip",
                        "Invalid Policy".into(),
                        String::new(),
                        Outcome::Skip,
                    ));
                } else if let Some((_, kind)) =
                    loaded.unsupported.iter().find(|(n, _)| n == policy_name)
                {
                    rows.push(row(
                        &expected.rule,
                        "Fail",
                        "Not found".into(),
                        format!("unsupported: policy kind {kind}"),
                        Outcome::Fail,
                    ));
                } else {
                    rows.push(row(
                        &expected.rule,
                        "Fail",
                        "Not found".into(),
                        String::new(),
                        Outcome::Fail,
                    ));
                }
                continue;
            }
            for (pi, resp, scored) in matching {
                let rule_rows: Vec<_> = resp
                    .rules
                    .iter()
                    .filter(|r| {
                        expected.rule.is_empty()
                            || expected.is_cel_policy
                            || r.name == expected.rule
                            || r.name == format!("autogen-{}", expected.rule)
                            || r.name == format!("autogen-cronjob-{}", expected.rule)
                    })
                    .collect();
                if rule_rows.is_empty() {
                    rows.push(row(
                        &expected.rule,
                        "Pass",
                        "Excluded".into(),
                        String::new(),
                        Outcome::Skip,
                    ));
                    continue;
                }
                for r in rule_rows {
                    let mut actual = status_word(r.status);
                    if actual == "fail" && !scored {
                        actual = "warn";
                    }
                    // Resources to compare: (actual, expected file). A
                    // generate rule gives one row per downstream resource, a
                    // mutate-existing rule one per patched target.
                    let existing = r.rule_type == RuleType::Mutation && !r.resources().is_empty();
                    let mut compare: Vec<(&Value, &str)> = Vec::new();
                    if let Some(file) = &expected.patched_resources
                        && !existing
                    {
                        let resource = match (r.rule_type, pi) {
                            (RuleType::Mutation, Some(pi)) => &ev.patched[pi],
                            (_, Some(_)) => &ev.mutated,
                            (_, None) => &ev.cel_mutated,
                        };
                        compare.push((resource, file));
                    }
                    let produced_file = match r.rule_type {
                        RuleType::Generation => expected.generated_resource.as_deref(),
                        RuleType::Mutation if existing => expected.patched_resources.as_deref(),
                        _ => None,
                    };
                    let mut produced_rows: Vec<Option<&Value>> = vec![None];
                    if produced_file.is_some() && !r.resources().is_empty() {
                        produced_rows = r.resources().iter().map(Some).collect();
                    }
                    for produced in produced_rows {
                        let mut checks = compare.clone();
                        if let (Some(g), Some(file)) = (produced, produced_file) {
                            checks.push((g, file));
                        }
                        let mut diff = None;
                        let mut missing = false;
                        for (resource, file) in checks {
                            match expected_files.find(&dir.join(file), resource) {
                                Err(e) => diff = Some(e),
                                Ok(None) => missing = true,
                                Ok(Some(want)) => {
                                    if let Some(d) = resource_diff(resource, want) {
                                        diff = Some(d);
                                    }
                                }
                            }
                        }
                        // §4.6: a resource the expected file lacks drops the row.
                        if missing && diff.is_none() {
                            continue;
                        }
                        let row = if let Some(d) = diff {
                            row(r.name, "Fail", "Resource diff".into(), d, Outcome::Fail)
                        } else if actual == expected.result {
                            let outcome = if expected.result == "skip" {
                                Outcome::Skip
                            } else {
                                Outcome::Pass
                            };
                            row(r.name, "Pass", "Ok".into(), r.message.to_string(), outcome)
                        } else {
                            row(
                                r.name,
                                "Fail",
                                format!("Want {}, got {actual}", expected.result),
                                r.message.to_string(),
                                Outcome::Fail,
                            )
                        };
                        rows.push(row);
                    }
                }
            }
        }
    }
    rows
}

/// Expected-resource files, loaded once per test.
#[derive(Default)]
struct ExpectedFiles {
    loaded: std::collections::HashMap<PathBuf, Result<Vec<Value>, String>>,
}

impl ExpectedFiles {
    /// The document of `path` with the same apiVersion, kind, namespace and
    /// name as `actual` (§5); `None` when the file has none.
    fn find(&mut self, path: &Path, actual: &Value) -> Result<Option<&Value>, String> {
        let docs = self
            .loaded
            .entry(path.to_path_buf())
            .or_insert_with(|| load_resources(path).map_err(|e| e.to_string()));
        let docs = docs.as_ref().map_err(Clone::clone)?;
        let key = resource_key(actual);
        Ok(docs.iter().find(|d| resource_key(d) == key))
    }
}

/// `None` when `actual` and `expected` are equal after the comparison's
/// normalisation (§5), else a readable diff.
fn resource_diff(actual: &Value, expected: &Value) -> Option<String> {
    let a = tidy(normalise_labels(actual.clone()));
    let e = tidy(normalise_labels(expected.clone()));
    if a == e {
        return None;
    }
    let ops = crate::patch::json_patch::diff(&e, &a);
    let lines: Vec<String> = ops.iter().map(|op| op.to_string()).collect();
    Some(format!(
        "actual differs from expected: {}",
        lines.join(", ")
    ))
}

/// Drops `generate.kyverno.io/` labels and adds `app.kubernetes.io/managed-by: kyverno`.
fn normalise_labels(mut v: Value) -> Value {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Value::Object(l) = labels {
            l.retain(|k, _| !k.starts_with("generate.kyverno.io/"));
            l.insert("app.kubernetes.io/managed-by".into(), json!("kyverno"));
        }
    }
    v
}

/// Removes nulls, empty maps and empty lists, recursively.
fn tidy(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, tidy(v)))
                .filter(|(_, v)| !is_empty_value(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.into_iter()
                .map(tidy)
                .filter(|v| !is_empty_value(v))
                .collect(),
        ),
        other => other,
    }
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Runs every test document of one file.
pub fn run_test_file(path: &Path, selector: &Selector) -> Vec<TestOutcome> {
    let shown = path.display().to_string();
    let fail = |e: String| {
        vec![TestOutcome {
            path: shown.clone(),
            error: Some(e),
            ..Default::default()
        }]
    };
    let text = match read_file(path) {
        Ok(t) => t,
        Err(e) => return fail(e.to_string()),
    };
    let docs = match parse_yaml_documents(&shown, &text) {
        Ok(d) => d,
        Err(e) => return fail(e.to_string()),
    };
    docs.iter()
        .map(|d| run_test_doc(path, d, selector))
        .collect()
}

fn run_test_doc(path: &Path, raw: &Value, selector: &Selector) -> TestOutcome {
    let mut outcome = TestOutcome {
        path: path.display().to_string(),
        ..Default::default()
    };
    let doc = match TestDoc::parse(path, raw) {
        Ok(d) => d,
        Err(e) => {
            outcome.error = Some(format!("{}: {e}", path.display()));
            return outcome;
        }
    };
    let loaded = match load_test(&doc) {
        Ok(l) => l,
        Err(e) => {
            outcome.error = Some(e);
            return outcome;
        }
    };
    let evaluated = evaluate(&doc, &loaded);
    outcome.rows = check_results(&doc, &loaded, &evaluated, selector);
    outcome.policies = loaded.policies.len()
        + loaded.admission_mutating.len()
        + loaded.mutating.len()
        + loaded.validating.len()
        + loaded.generating.len()
        + loaded.invalid.len()
        + loaded.unsupported.len();
    outcome.resources = loaded.resources.len();
    outcome.exceptions = loaded.exceptions.len();
    for r in &outcome.rows {
        match r.outcome {
            Outcome::Pass => outcome.pass += 1,
            Outcome::Skip => outcome.skip += 1,
            Outcome::Fail => outcome.fail += 1,
        }
    }
    outcome
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn print_table(out: &mut dyn Write, rows: &[&Row], detailed: bool) -> std::io::Result<()> {
    let mut header = vec!["ID", "POLICY", "RULE", "RESOURCE", "RESULT", "REASON"];
    if detailed {
        header.push("MESSAGE");
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut c = vec![
                (i + 1).to_string(),
                r.policy.clone(),
                r.rule.clone(),
                r.resource.clone(),
                r.result.into(),
                r.reason.clone(),
            ];
            if detailed {
                c.push(r.message.clone());
            }
            c
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            cells
                .iter()
                .map(|c| c[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cols: &[String]| {
        cols.iter()
            .enumerate()
            .map(|(i, c)| format!(" {:w$} ", c, w = widths[i]))
            .collect::<Vec<_>>()
            .join("│")
    };
    let sep = widths
        .iter()
        .map(|w| "─".repeat(w + 2))
        .collect::<Vec<_>>()
        .join("┼");
    writeln!(
        out,
        "{}",
        line(&header.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    )?;
    writeln!(out, "{sep}")?;
    for c in &cells {
        writeln!(out, "{}", line(c))?;
    }
    Ok(())
}

/// `gavel test`.
pub fn run(args: &TestArgs) -> anyhow::Result<i32> {
    let selector = Selector::parse(&args.test_case_selector);
    let files = discover(&args.paths, &args.file_name);
    let json_mode = args.output == OutputFormat::Json;
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let progress = json_mode && stderr.is_terminal();
    let mut human: Box<dyn Write> = if json_mode {
        Box::new(stderr.lock())
    } else {
        Box::new(stdout.lock())
    };
    let mut outcomes = Vec::new();
    let (mut pass, mut fail, mut skip) = (0, 0, 0);
    for (n, file) in files.iter().enumerate() {
        if progress {
            eprint!("\r[{}/{}] {}", n + 1, files.len(), file.display());
        }
        for o in run_test_file(file, &selector) {
            writeln!(human, "Loading test  ( {} ) ...", o.path)?;
            if let Some(e) = &o.error {
                writeln!(human, "  Error: {e}")?;
            } else {
                writeln!(
                    human,
                    "  Applying {} to {} with {} ...\n  Checking results ...",
                    plural(o.policies, "policy", "policies"),
                    plural(o.resources, "resource", "resources"),
                    plural(o.exceptions, "exception", "exceptions"),
                )?;
                let rows: Vec<&Row> = o
                    .rows
                    .iter()
                    .filter(|r| !args.fail_only || r.outcome == Outcome::Fail)
                    .collect();
                if !rows.is_empty() {
                    print_table(&mut *human, &rows, args.detailed_results)?;
                }
            }
            pass += o.pass;
            fail += o.fail + usize::from(o.error.is_some());
            skip += o.skip;
            outcomes.push(o);
        }
    }
    if progress {
        eprintln!();
    }
    if args.fail_only {
        writeln!(
            human,
            "Test Summary: {fail} out of {} tests failed",
            pass + skip + fail
        )?;
    } else {
        writeln!(
            human,
            "Test Summary: {} tests passed and {fail} tests failed",
            pass + skip
        )?;
    }
    drop(human);
    if json_mode {
        let tests: Vec<Value> = outcomes
            .iter()
            .map(|o| json!({"path": o.path, "pass": o.pass, "fail": o.fail, "skip": o.skip, "error": o.error}))
            .collect();
        let doc = json!({"summary": {"pass": pass, "fail": fail, "skip": skip}, "tests": tests});
        println!("{doc}");
    }
    Ok(if fail > 0 { 1 } else { 0 })
}
