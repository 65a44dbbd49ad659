//! `gavel test`'s evaluation: the loaded inputs handed to the one
//! evaluation (`admission::evaluation`, in its `kyverno test` mode), the
//! test's mocks and objects answering context lookups, and the responses
//! arranged as `kyverno test` reports them.

use super::load::Loaded;
use crate::admission::evaluation::{self, Evaluation, Inputs, Mode};
use crate::admission::policies::Snapshot;
use crate::cli::kyverno_test::file::{ApiCallMock, GlobalContextMock, TestDoc};
use crate::cli::values::PolicyRuleValues;
use crate::context::{ApiCallRequest, Objects, ResolveError, Resolver, WithObjects};
use crate::engine::json_context::JsonContext;
use crate::engine::{PolicyResponse, RuleValues};
use crate::matching::UserInfo;
use crate::policy::CompiledPolicy;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Offline context sources: `apiCallResponses` and `globalContextEntries`
/// mocks and the Context file's images; the objects (the
/// `cloneSourceResource` files for generate clones, `targetResources` for
/// mutate existing) come beside them ([`MockResolver`]).
struct Mocks<'a> {
    api_calls: &'a [ApiCallMock],
    globals: &'a [GlobalContextMock],
    objects: Objects<'a>,
    /// `spec.images` of the test's Context file.
    images: &'a [Value],
    /// The test has `clusterResources`: API calls and ConfigMap lookups
    /// are answered from the objects (Kyverno's CLI allows API calls to
    /// its fake cluster only then).
    cluster: bool,
}

/// A test's lookups: its mocks, with its objects.
type MockResolver<'a> = WithObjects<Objects<'a>, &'a Mocks<'a>>;

impl Resolver for Mocks<'_> {
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
        Ok(api_path_get(self.objects, target))
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
        Ok(self.objects.get("v1", "ConfigMap", namespace, name))
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
    /// The resource after the classic policies and the
    /// MutatingAdmissionPolicies.
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

/// What a test gives the evaluation of one resource: its values file
/// (global, per policy and resource, per rule), userInfo, namespaces,
/// mocks and target objects.
struct TestInputs<'a> {
    loaded: &'a Loaded,
    resolver: &'a MockResolver<'a>,
    operation: &'a str,
    /// The resource's name, which per-resource values are keyed by.
    name: &'a str,
}

impl TestInputs<'_> {
    fn resource_values(&self, policy: &CompiledPolicy) -> Option<&Map<String, Value>> {
        self.loaded
            .values
            .resources
            .get(&policy.name)
            .and_then(|m| m.get(self.name))
    }
}

impl Inputs for TestInputs<'_> {
    fn resolver(&self) -> &dyn Resolver {
        self.resolver
    }

    fn operation(&self) -> &str {
        self.operation
    }

    fn user(&self) -> UserInfo {
        self.loaded.user.user.clone()
    }

    fn namespace_labels(&self, namespace: &str) -> Option<Map<String, Value>> {
        self.loaded.values.namespace_labels.get(namespace).cloned()
    }

    fn namespace_object(&self, namespace: &str) -> Option<&Value> {
        self.loaded.values.namespace_objects.get(namespace)
    }

    fn varies_by_policy(&self) -> bool {
        !self.loaded.values.resources.is_empty()
    }

    /// A resource-level `request.operation` changes the request itself
    /// (oldObject on UPDATE).
    fn policy_operation(&self, policy: &CompiledPolicy, _: &Value) -> Option<&str> {
        self.resource_values(policy)?
            .get("request.operation")
            .and_then(Value::as_str)
    }

    fn fill_context(&self, ctx: &mut JsonContext, policy: Option<&CompiledPolicy>, _: &Value) {
        for (k, v) in &self.loaded.values.global {
            ctx.set_path(k, v.clone());
        }
        for (k, v) in policy
            .and_then(|p| self.resource_values(p))
            .into_iter()
            .flatten()
        {
            ctx.set_path(k, v.clone());
        }
    }

    fn rule_values(&self, policy: &CompiledPolicy) -> Box<dyn RuleValues + '_> {
        Box::new(PolicyRuleValues(self.loaded.values.rules.get(&policy.name)))
    }

    fn targets(&self) -> &[Value] {
        &self.loaded.targets
    }
}

/// Evaluates every resource of the test as `kyverno test` does
/// (docs/kyverno-test-semantics.md#evaluation-phases), and its payloads.
/// `operation`: the run of a `results[].operation` (it takes precedence
/// over the values file's, and DeletingPolicies, not admission-driven,
/// are left to the default run); `None` for the default run.
pub(super) fn evaluate<'l>(
    doc: &TestDoc,
    loaded: &'l Loaded,
    operation: Option<&str>,
) -> Vec<Evaluated<'l>> {
    let mocks = Mocks {
        api_calls: &doc.api_calls,
        globals: &doc.global_context,
        objects: Objects(&loaded.objects),
        images: &loaded.images,
        cluster: !doc.cluster_resources.is_empty(),
    };
    let resolver = MockResolver {
        objects: Objects(&loaded.objects),
        rest: &mocks,
    };
    let mode = Mode::Test {
        default_run: operation.is_none(),
    };
    let operation = operation
        .map(str::to_string)
        .unwrap_or_else(|| loaded.values.operation());
    let mut out = Vec::with_capacity(loaded.resources.len() + loaded.payloads.len());
    for resource in &loaded.resources {
        let inputs = TestInputs {
            loaded,
            resolver: &resolver,
            operation: &operation,
            name: resource
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        };
        out.push(as_reported(
            evaluation::evaluate(&loaded.set, resource, mode, &inputs),
            &loaded.set,
            resource,
        ));
    }
    // Payloads: each one more trigger after the resources.
    for payload in &loaded.payloads {
        let document = &payload.document;
        out.push(Evaluated {
            responses: vec![Vec::new(); loaded.set.policies.len()],
            patched: vec![document.clone(); loaded.set.policies.len()],
            mutated: document.clone(),
            mutating: Vec::new(),
            cel_mutated: document.clone(),
            validating: evaluation::evaluate_payload(
                &loaded.set,
                document,
                payload.mode,
                &resolver,
            ),
        });
    }
    out
}

/// An evaluation's responses as `kyverno test` reports them.
fn as_reported<'l>(ev: Evaluation<'l>, set: &'l Snapshot, resource: &Value) -> Evaluated<'l> {
    let mut patched = Vec::with_capacity(ev.classic.len());
    let mut current = resource;
    let mut responses = Vec::with_capacity(ev.classic.len());
    for classic in &ev.classic {
        if let Some(p) = &classic.patched {
            current = p;
        }
        patched.push(current.clone());
    }
    for (policy, classic) in set.policies.iter().zip(ev.classic) {
        let mut phases = Vec::new();
        phases.extend(classic.mutate);
        // kyverno-compat: the verification phase of verifyImages, one
        // response per policy that has such rules (an empty one reads as
        // Excluded).
        phases.extend(classic.verify);
        // kyverno-compat: a validate response for every policy with
        // validate (or verifyImages) rules, a generate response only when
        // the generate phase produced rule responses.
        phases.extend(
            classic
                .validate
                .filter(|v| policy.has_validation_phase() || !v.rules.is_empty()),
        );
        phases.extend(classic.generate.filter(|g| !g.rules.is_empty()));
        responses.push(phases);
    }
    let applied = |r: &PolicyResponse| !r.rules.is_empty();
    let mutating = ev
        .admission_mutating
        .into_iter()
        .map(|(_, r)| r)
        .filter(applied)
        .chain(ev.mutating.into_iter().map(|(_, r)| r))
        .chain(ev.targets)
        .collect();
    let validating = ev
        .validating
        .into_iter()
        .map(|(_, r)| r)
        .chain(ev.generating.into_iter().map(|(_, r)| r).filter(applied))
        .chain(
            ev.image_validating
                .into_iter()
                .map(|(_, r)| r)
                .filter(applied),
        )
        .chain(ev.deleting)
        .collect();
    Evaluated {
        responses,
        patched,
        mutated: ev.after_admission_mutating,
        mutating,
        cel_mutated: ev.mutated,
        validating,
    }
}
