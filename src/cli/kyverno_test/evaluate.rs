//! The evaluation phases of `kyverno test`
//! (docs/kyverno-test-semantics.md#evaluation-phases) over the loaded
//! inputs: classic mutate, validate and generate, then the
//! MutatingAdmission-, Mutating-, Validating- and GeneratingPolicies, with
//! the test's mocks and objects answering context lookups.

use super::load::Loaded;
use crate::admission::phases::{self, Chaining, MutatingPhase, Visit};
use crate::cli::kyverno_test::file::{ApiCallMock, GlobalContextMock, TestDoc};
use crate::cli::values::PolicyRuleValues;
use crate::context::{ApiCallRequest, Objects, ResolveError, Resolver};
use crate::engine::cel::{
    CelRequest, TargetOutcome, deleting_policy_selects, evaluate_authorization_policy,
    evaluate_generating_policy, evaluate_image_validating_policy,
    evaluate_image_validating_policy_on_json, evaluate_validating_policy,
    evaluate_validating_policy_on_json, expression_targets, mutate_target, object_selected,
};
use crate::engine::generate::generate_policy;
use crate::engine::json_context::Builtins;
use crate::engine::json_context::JsonContext;
use crate::engine::mutate::mutate_policy;
use crate::engine::validate::evaluate_policy;
use crate::engine::validate::verify_policy;
use crate::engine::{
    EvalEnv, PolicyResponse, Request, RuleResponse, RuleResponses, RuleStatus, RuleType,
};
use crate::policy::CompiledPolicy;
use crate::policy::cel_policy::{CompiledMutatingPolicy, EvaluationMode, TargetSelection};
use crate::policy::cleanup::{CompiledCleanupPolicy, Selection};
use serde_json::Value;
use std::sync::Arc;

/// Offline context sources: `apiCallResponses` and `globalContextEntries`
/// mocks; the `cloneSourceResource` files (generate clones) and
/// `targetResources` (mutate existing) as the cluster's objects.
struct MockResolver<'a> {
    api_calls: &'a [ApiCallMock],
    globals: &'a [GlobalContextMock],
    objects: &'a [Value],
    /// `spec.images` of the test's Context file.
    images: &'a [Value],
    /// The test has `clusterResources`: API calls and ConfigMap lookups
    /// are answered from the objects (Kyverno's CLI allows API calls to
    /// its fake cluster only then).
    cluster: bool,
}

impl Resolver for MockResolver<'_> {
    fn api_call(&self, call: &ApiCallRequest) -> Result<Option<Value>, ResolveError> {
        let target = call
            .url_path
            .as_deref()
            .or(call.url.as_deref())
            .unwrap_or_default();
        let mocked = self
            .api_calls
            .iter()
            .find(|m| m.url == target && m.method.eq_ignore_ascii_case(&call.method))
            .map(|m| m.body.clone());
        if mocked.is_some()
            || !self.cluster
            || call.url_path.is_none()
            || !call.method.eq_ignore_ascii_case("GET")
        {
            return Ok(mocked);
        }
        // A GET of an API path answered from the test's objects, as
        // Kyverno's CLI answers it from its fake cluster.
        Ok(api_path_get(Objects(self.objects), target))
    }

    /// CEL's `http.Get/Post` answered by a mock: `{body, statusCode}`, as
    /// Kyverno's CLI wraps the mocked response.
    fn http_call(&self, call: &ApiCallRequest) -> Result<Option<Value>, ResolveError> {
        let url = call.url.as_deref().unwrap_or_default();
        Ok(self
            .api_calls
            .iter()
            .find(|m| m.url == url && m.method.eq_ignore_ascii_case(&call.method))
            .map(|m| serde_json::json!({"body": m.body, "statusCode": m.status_code})))
    }

    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<Value>, ResolveError> {
        if !self.cluster {
            return Ok(None);
        }
        Ok(Objects(self.objects).get("v1", "ConfigMap", namespace, name))
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

    /// `entry` or `entry.projection`, as Kyverno's mock store answers it.
    fn global_context(&self, name: &str) -> Result<Option<Arc<Value>>, ResolveError> {
        let (entry, projection) = name.split_once('.').unwrap_or((name, ""));
        let Some(mock) = self.globals.iter().find(|g| g.name == entry) else {
            return Ok(None);
        };
        mock.get(projection)
            .map(|v| Some(Arc::new(v)))
            .map_err(ResolveError::Failed)
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

/// `GET /api/v1/...` or `/apis/<group>/<version>/...` on the objects: one
/// object (a name last), or a list (`{items}`) of a kind in a namespace
/// or in all of them. `None` for a path that names no known resource.
fn api_path_get(objects: Objects, path: &str) -> Option<Value> {
    let path = path.split('?').next().unwrap_or_default().trim_matches('/');
    let parts: Vec<&str> = path.split('/').collect();
    let (api_version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ((*version).to_string(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (*ns, rest),
        _ => ("", rest),
    };
    let (resource, name) = match rest {
        [resource] => (*resource, None),
        [resource, name] => (*resource, Some(*name)),
        _ => return None,
    };
    let kind = objects
        .kind_for_resource(&api_version, resource)
        .or_else(|| {
            (api_version == "v1" && resource == "namespaces").then(|| "Namespace".to_string())
        })?;
    match name {
        Some(name) => objects.get(&api_version, &kind, namespace, name),
        None => Some(serde_json::json!({
            "apiVersion": api_version,
            "kind": format!("{kind}List"),
            "metadata": {},
            "items": objects.list(&api_version, &kind, namespace),
        })),
    }
}

/// What the engine made of one resource, per policy (in load order).
pub(super) struct Evaluated<'l> {
    /// Each policy's responses, one per phase as Kyverno's CLI makes
    /// them (mutate, validate, generate); none for a generate-only policy
    /// none of whose rules applied (it reads as "Not found").
    pub(super) responses: Vec<Vec<PolicyResponse<'l>>>,
    /// The resource after each policy's mutate rules.
    pub(super) patched: Vec<Value>,
    /// The resource validate and generate rules saw: after every mutation.
    pub(super) mutated: Value,
    /// One response per MutatingPolicy, in load order.
    pub(super) mutating: Vec<PolicyResponse<'l>>,
    /// The resource after the MutatingPolicies: what they report and what
    /// the ValidatingPolicies see.
    pub(super) cel_mutated: Value,
    /// One response per ValidatingPolicy and GeneratingPolicy, in load
    /// order.
    pub(super) validating: Vec<PolicyResponse<'l>>,
}

/// Runs the phases of `kyverno test`
/// (docs/kyverno-test-semantics.md#evaluation-phases) for every resource:
/// mutate policies in load order, each on the previous one's output; then
/// validate, then generate, on the mutated resource.
/// `operation`: the run of a `results[].operation` (it takes precedence
/// over the values file's, and DeletingPolicies, not admission-driven,
/// are left to the default run); `None` for the default run.
pub(super) fn evaluate<'l>(
    doc: &TestDoc,
    loaded: &'l Loaded,
    operation: Option<&str>,
) -> Vec<Evaluated<'l>> {
    let resolver = MockResolver {
        api_calls: &doc.api_calls,
        globals: &doc.global_context,
        objects: &loaded.objects,
        images: &loaded.images,
        cluster: !doc.cluster_resources.is_empty(),
    };
    let explicit = operation;
    let operation = operation
        .map(str::to_string)
        .unwrap_or_else(|| loaded.values.operation());
    let mut out = Vec::with_capacity(loaded.resources.len());
    for resource in &loaded.resources {
        let name = resource
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut current = resource.clone();
        let mut responses: Vec<Vec<PolicyResponse>> = Vec::with_capacity(loaded.set.policies.len());
        let mut patched = Vec::with_capacity(loaded.set.policies.len());
        for policy in &loaded.set.policies {
            if !policy.has_mutate() {
                responses.push(Vec::new());
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
            responses.push(vec![outcome.response]);
        }
        // kyverno-compat: the verification phase of verifyImages, after
        // every mutation, one response per policy that has such rules
        // (an empty one reads as Excluded).
        for (i, policy) in loaded.set.policies.iter().enumerate() {
            if policy.has_verify_images() {
                let verified = with_policy_context(
                    policy,
                    &current,
                    name,
                    &operation,
                    loaded,
                    &resolver,
                    |req, ctx, env| verify_policy(policy, req, ctx, env),
                );
                responses[i].push(verified);
            }
        }
        for (i, policy) in loaded.set.policies.iter().enumerate() {
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
            // kyverno-compat: a validate response for every policy with
            // validate (or verifyImages) rules, a generate response only
            // when the generate phase produced rule responses.
            if policy.has_validation_phase() || !validated.rules.is_empty() {
                responses[i].push(validated);
            }
            if let Some(g) = generated.filter(|g| !g.rules.is_empty()) {
                responses[i].push(g);
            }
        }
        let cel_input = |resource: &Value| {
            let req = build_request(resource, &operation, loaded);
            let mut input = CelRequest::owned(&req);
            if let Some(ns) = loaded.values.namespace_objects.get(req.namespace()) {
                input = input.with_namespace_object(ns);
            }
            (req, input)
        };
        let mut mutating = Vec::with_capacity(loaded.set.mutating.len());
        let next_request = |_: &Request, object: Value| cel_input(&object).0;
        let bind = |req: &Request| cel_input(req.object.value()).1;
        // MutatingAdmissionPolicies first, each on the previous output.
        if !loaded.set.admission_mutating.is_empty() {
            let start = cel_input(&current).0;
            let phase = MutatingPhase {
                policies: &loaded.set.admission_mutating,
                chaining: Chaining::Chained,
                resolver: &resolver,
            };
            let mutated = phases::mutating_policies(
                phase,
                &start,
                next_request,
                bind,
                |_, _| Visit::Evaluate,
                |m| {
                    if !m.response.rules.is_empty() {
                        mutating.push(m.response);
                    }
                },
            );
            if let Some(req) = mutated {
                current = req.object.into_value();
            }
        }
        // kyverno-compat: every MutatingPolicy sees the same incoming
        // resource, and the last one that applied gives the result all of
        // them report.
        let mut cel_mutated = None;
        if !loaded.set.mutating.is_empty() {
            let start = cel_input(&current).0;
            let phase = MutatingPhase {
                policies: &loaded.set.mutating,
                chaining: Chaining::SameInput,
                resolver: &resolver,
            };
            cel_mutated = phases::mutating_policies(
                phase,
                &start,
                next_request,
                bind,
                |_, _| Visit::Evaluate,
                |m| mutating.push(m.response),
            )
            .map(|req| req.object.into_value());
        }
        let cel_mutated = cel_mutated.unwrap_or_else(|| current.clone());
        if !loaded.targets.is_empty() {
            let (_, input) = cel_input(&cel_mutated);
            for p in &loaded.set.mutating {
                if let Some(response) = mutate_targets(p, &input, loaded, &resolver) {
                    mutating.push(response);
                }
            }
        }
        let mut validating = Vec::with_capacity(loaded.set.validating.len());
        if !loaded.set.validating.is_empty() || !loaded.set.generating.is_empty() {
            let (req, input) = cel_input(&cel_mutated);
            for p in loaded
                .set
                .validating
                .iter()
                .filter(|p| p.mode == EvaluationMode::Kubernetes)
            {
                validating.push(evaluate_validating_policy(p, &req, &input, &resolver));
            }
            for p in &loaded.set.generating {
                let response = evaluate_generating_policy(p, &req, &input, &resolver);
                if !response.rules.is_empty() {
                    validating.push(response);
                }
            }
        }
        // kyverno-compat: Kyverno's CLI gives ImageValidatingPolicies the
        // resource as the test wrote it, not the mutated one.
        if !loaded.set.image_validating.is_empty() {
            let (req, input) = cel_input(resource);
            for p in &loaded.set.image_validating {
                let response = evaluate_image_validating_policy(p, &req, &input, &resolver);
                if !response.rules.is_empty() {
                    validating.push(response);
                }
            }
        }
        for p in loaded.set.deleting.iter().filter(|_| explicit.is_none()) {
            if let Some(response) = deleting(p, resource, loaded, &resolver) {
                validating.push(response);
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
    // Payloads: the ValidatingPolicies of the payload's mode, each payload
    // one more trigger after the resources.
    for payload in &loaded.payloads {
        let document = &payload.document;
        let mut validating: Vec<PolicyResponse> = loaded
            .set
            .validating
            .iter()
            .filter(|p| p.mode == payload.mode)
            .map(|p| match payload.mode {
                EvaluationMode::Json => evaluate_validating_policy_on_json(p, document, &resolver),
                _ => evaluate_authorization_policy(p, document, &resolver),
            })
            .collect();
        if payload.mode == EvaluationMode::Json {
            validating.extend(
                loaded
                    .set
                    .image_validating
                    .iter()
                    .map(|p| evaluate_image_validating_policy_on_json(p, document, &resolver))
                    .filter(|r| !r.rules.is_empty()),
            );
        }
        out.push(Evaluated {
            responses: vec![Vec::new(); loaded.set.policies.len()],
            patched: vec![document.clone(); loaded.set.policies.len()],
            mutated: document.clone(),
            mutating: Vec::new(),
            cel_mutated: document.clone(),
            validating,
        });
    }
    out
}

/// A DeletingPolicy in `kyverno test`: pass ("resource matched") when a
/// run would delete the resource, fail when its conditions keep it, and
/// no row when its matchConstraints do not select it (Kyverno's CLI).
fn deleting<'p>(
    policy: &'p CompiledCleanupPolicy,
    resource: &Value,
    loaded: &Loaded,
    resolver: &MockResolver,
) -> Option<PolicyResponse<'p>> {
    let Selection::Cel { scope, variables } = &policy.selection else {
        return None;
    };
    let text = |p: &str| {
        resource
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let namespace = text("/metadata/namespace");
    let labels = loaded.values.namespace_labels.get(namespace).cloned();
    let mut req = Request::offline(resource, "", loaded.user.user.clone(), labels);
    req.gvr.resource = crate::kinds::plural(text("/apiVersion"), text("/kind")).into_owned();
    req.request_resource = req.gvr.clone();
    let namespace_object = loaded.values.namespace_objects.get(namespace);
    let name = scope.name.as_str();
    let rule = match deleting_policy_selects(scope, variables, &req, namespace_object, resolver) {
        Ok(None) => return None,
        Ok(Some(true)) => RuleResponse::new(name, RuleStatus::Pass, "resource matched"),
        Ok(Some(false)) => RuleResponse::new(name, RuleStatus::Fail, "resource did not match"),
        Err(e) => RuleResponse::new(name, RuleStatus::Error, e),
    };
    Some(PolicyResponse {
        policy: name,
        rules: RuleResponses::one(rule),
    })
}

/// Mutate existing of a MutatingPolicy in `kyverno test`: the
/// `targetResources` its targetMatchConstraints select (by expression on
/// the trigger, or by constraints with any operation), each mutated; one
/// rule per target, a passing one carrying the patched target. As
/// Kyverno's CLI does, the trigger is not matched against the policy's
/// constraints here.
fn mutate_targets<'p>(
    policy: &'p CompiledMutatingPolicy,
    trigger: &CelRequest,
    loaded: &Loaded,
    resolver: &MockResolver,
) -> Option<PolicyResponse<'p>> {
    let existing = policy.existing.as_ref()?;
    let name = policy.name();
    let respond = |status, message: String| {
        RuleResponse::new(name, status, message).of_type(RuleType::Mutation)
    };
    let key = |o: &Value| {
        let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
        (
            text("/metadata/namespace").to_string(),
            text("/metadata/name").to_string(),
        )
    };
    let named: Option<Vec<(String, String)>> =
        match expression_targets(policy, existing, trigger, resolver) {
            None => None,
            Some(Ok(list)) => Some(list.iter().map(key).collect()),
            Some(Err(e)) => {
                return Some(PolicyResponse {
                    policy: name,
                    rules: RuleResponses::one(respond(RuleStatus::Error, e)),
                });
            }
        };
    let mut rules = Vec::new();
    for target in &loaded.targets {
        let selected = match (&named, &existing.targets) {
            (Some(named), _) => named.contains(&key(target)),
            (None, TargetSelection::Constraints(m)) => {
                let (api_version, kind) = (
                    target["apiVersion"].as_str().unwrap_or_default(),
                    target["kind"].as_str().unwrap_or_default(),
                );
                let namespace = key(target).0;
                policy
                    .scope
                    .namespace
                    .as_ref()
                    .is_none_or(|ns| *ns == namespace)
                    && object_selected(
                        m,
                        target,
                        &crate::kinds::plural(api_version, kind),
                        loaded.values.namespace_labels.get(&namespace),
                    )
            }
            (None, TargetSelection::Expression(_)) => false,
        };
        if !selected {
            continue;
        }
        rules.push(
            match mutate_target(policy, existing, trigger, target, resolver) {
                TargetOutcome::Patched(p) => {
                    respond(RuleStatus::Pass, "success".into()).with_resources(vec![p])
                }
                TargetOutcome::Unchanged => {
                    respond(RuleStatus::Pass, "success".into()).with_resources(vec![target.clone()])
                }
                // The target, unpatched, goes with a skip or an error too, so
                // that an entry naming it gets a row (Kyverno's would read "Not
                // found").
                TargetOutcome::NotSelected(condition) => respond(
                    RuleStatus::Skip,
                    format!("target match condition {condition:?} not met"),
                )
                .with_resources(vec![target.clone()]),
                TargetOutcome::Failed(e) => {
                    respond(RuleStatus::Error, e).with_resources(vec![target.clone()])
                }
            },
        );
    }
    (!rules.is_empty()).then_some(PolicyResponse {
        policy: name,
        rules: rules.into(),
    })
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
        exceptions: &loaded.set.exceptions,
        rule_values: &rule_values,
    };
    f(&req, &ctx, &env)
}

/// The request's JSON context with the values file's global values applied.
fn context_for<'a>(req: &'a Request, loaded: &Loaded) -> JsonContext<'a> {
    let mut ctx = req.json_context(Builtins::of(&loaded.set.policies));
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
