//! CEL evaluation: the variables a request gives (`object`, `oldObject`,
//! `request`, `namespaceObject`, `variables`), lookups through the
//! [`Resolver`], the checks of `validate.cel` and of the validating
//! policy kinds, and the mutating and generating policy kinds.

mod authorization;
mod deleting;
mod generating;
mod image_validating;
mod lazy_variables;
mod mutating;
mod params;

pub use authorization::{envoy_request, evaluate_authorization_policy, http_request};
pub use deleting::deleting_policy_selects;
pub use generating::evaluate_generating_policy;
pub use image_validating::{
    evaluate_image_validating_policy, evaluate_image_validating_policy_on_json, image_matches,
};
pub use mutating::{
    MutatingOutcome, TargetOutcome, evaluate_mutating_policy, expression_targets, mutate_target,
    trigger_conditions_hold,
};

use super::plan::{Plan, PlannedCel};
use super::{PolicyResponse, Request, RuleResponse, RuleResponses, RuleStatus};
use crate::cel::direct::{self, Val};
use crate::cel::values::cel_to_json;
use crate::cel::{
    Activation, COST_LIMIT, CelError, InterpreterCache, LazyBindings, Lookup, Lookups,
    RequestValues,
};
use crate::context::{ApiCallRequest, Resolver};
use crate::json_doc::{Document, JsonRef, View as _};
use crate::kinds::{Gvk, Gvr};
use crate::matching::selector_matches;
use crate::policy::cel_policy::{
    Bindings, CompiledBinding, CompiledValidatingPolicy, EvaluationMode, MatchConstraints,
    PodTemplate, PolicyScope, ResourceRule,
};
use crate::policy::cel_policy::{CelChecks, CompiledNamed, CompiledValidation};
use crate::text::same;
use kube_cel::cel::Value as CelValue;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::cell::{OnceCell, RefCell};
use std::sync::Arc;

/// The CEL variables of one request, shared by every CEL rule and policy
/// evaluated for it. The JSON is bound by reference: the direct evaluator
/// reads it in place, and the interpreter's copy is made once, on first
/// use ([`InterpreterCache`]). Making one costs nothing until a CEL
/// expression runs: `request` and `namespaceObject` are built on first use.
#[derive(Debug)]
pub struct CelRequest<'r> {
    object: Bound<'r>,
    old_object: Bound<'r>,
    /// What `request` and `namespaceObject` are made from.
    source: Option<&'r Request>,
    /// The plural resource name admission rules match on.
    resource: Cow<'r, str>,
    request: OnceCell<Arc<Value>>,
    namespace: OnceCell<Value>,
    cache: InterpreterCache,
    /// The variables as a Pod controller's autogen sees them, one per
    /// [`PodTemplate`], made on first use.
    views: [OnceCell<Box<TemplateView>>; 2],
    /// The values of request-wide plans, shared by every policy evaluated
    /// on `object` itself; none when the objects are owned here (a value
    /// kept beside them could not borrow them). Boxed behind the trait so
    /// that the cell inside does not pin `'r`.
    shared: Option<Box<dyn RequestValues + 'r>>,
    /// How the policies' own constraints selected `source` so far, by
    /// [`PolicyScope::selection_key`]: `None` not selected, else the view.
    selections: RefCell<Vec<(Arc<str>, Selection)>>,
    /// The answers of the policy set's planned checks on `object`, when
    /// the set's plan is attached ([`CelRequest::attach_plan`]).
    planned: Option<PlannedCel<'r>>,
}

/// An object bound as a CEL variable: borrowed in either form (a request's
/// [`Document`] is read as it was decoded; it becomes a `Value` only for
/// autogen's template views, which rebuild the object), or owned.
#[derive(Debug)]
enum Bound<'r> {
    Borrowed(Source<'r>),
    Owned(Value),
}

#[derive(Debug, Clone, Copy)]
enum Source<'r> {
    Value(&'r Value),
    Document(&'r Document),
}

impl<'r> Source<'r> {
    fn value(self) -> &'r Value {
        match self {
            Source::Value(v) => v,
            Source::Document(d) => d.value(),
        }
    }

    /// The object where it lies, unconverted.
    fn json(self) -> JsonRef<'r> {
        match self {
            Source::Value(v) => JsonRef::Value(v),
            Source::Document(d) => d.json(),
        }
    }
}

impl Bound<'_> {
    fn value(&self) -> &Value {
        match self {
            Bound::Borrowed(s) => s.value(),
            Bound::Owned(v) => v,
        }
    }

    fn json(&self) -> JsonRef<'_> {
        match self {
            Bound::Borrowed(s) => s.json(),
            Bound::Owned(v) => JsonRef::Value(v),
        }
    }
}

/// The request-wide values of one request's `object` and `oldObject`,
/// each computed when a policy first asks for it.
#[derive(Debug)]
struct SharedValues<'r> {
    /// `object` and `oldObject` as the direct evaluator reads them, by
    /// their [`direct::KNOWN_ROOTS`] slots.
    roots: [Val<'r>; 2],
    /// Keyed by the plan, which the entry holds so that its address is not
    /// reused while the request lives.
    values: RefCell<Vec<(Arc<direct::Node>, Option<Val<'r>>)>>,
}

impl<'r> SharedValues<'r> {
    fn boxed(object: Source<'r>, old_object: Source<'r>) -> Box<dyn RequestValues + 'r> {
        Box::new(SharedValues {
            roots: [
                Val::from_ref(object.json()),
                Val::from_ref(old_object.json()),
            ],
            values: RefCell::default(),
        })
    }
}

impl<'r> direct::Bindings<'r> for SharedValues<'r> {
    fn ident(&self, name: &str) -> Option<Val<'r>> {
        match name {
            "object" => self.known(direct::OBJECT).cloned(),
            "oldObject" => self.known(direct::OLD_OBJECT).cloned(),
            _ => None,
        }
    }

    fn known(&self, index: usize) -> Option<&Val<'r>> {
        const { assert!(direct::OBJECT == 0 && direct::OLD_OBJECT == 1) };
        self.roots.get(index)
    }

    fn variable(&self, _: &str) -> Option<&Val<'r>> {
        None
    }
}

impl RequestValues for SharedValues<'_> {
    fn value_of(&self, plan: &Arc<direct::Node>) -> Option<Val<'_>> {
        if let Some((_, value)) = self
            .values
            .borrow()
            .iter()
            .find(|(p, _)| Arc::ptr_eq(p, plan))
        {
            return value.clone();
        }
        let value = direct::evaluate(plan, self, COST_LIMIT as i64).ok();
        self.values.borrow_mut().push((plan.clone(), value.clone()));
        value
    }
}

/// How a policy's own constraints select a request: `None` when they do
/// not, else the view it is seen through (a Pod controller's template, or
/// `None` for the object itself).
type Selection = Option<Option<PodTemplate>>;

/// `object` and `oldObject` through a Pod controller's template.
#[derive(Debug)]
struct TemplateView {
    object: Value,
    old_object: Value,
    cache: InterpreterCache,
}

static NULL: Value = Value::Null;

/// Binds the request-level variables; `request` and `namespaceObject`
/// come from `rest` when read.
fn bind_request<'s>(
    cache: &'s InterpreterCache,
    object: JsonRef<'s>,
    old_object: JsonRef<'s>,
    rest: &'s dyn LazyBindings,
) -> Activation<'s> {
    let mut vars = Activation::root(cache);
    vars.set_known_ref(direct::OBJECT, object);
    vars.set_known_ref(direct::OLD_OBJECT, old_object);
    vars.set_lazy(rest);
    vars.set_known_ref(direct::PARAMS, JsonRef::Value(&NULL));
    vars.start_variables(0);
    vars
}

impl LazyBindings for CelRequest<'_> {
    fn names(&self) -> &'static [&'static str] {
        &["request", "namespaceObject"]
    }

    fn get(&self, name: &str) -> Option<&Value> {
        match name {
            "request" => Some(self.request()),
            "namespaceObject" => Some(self.namespace()),
            _ => None,
        }
    }
}

/// A JSON payload's variables: no request, no namespace.
struct NoRequest;

impl LazyBindings for NoRequest {
    fn names(&self) -> &'static [&'static str] {
        &["request", "namespaceObject"]
    }

    fn get(&self, name: &str) -> Option<&Value> {
        matches!(name, "request" | "namespaceObject").then_some(&NULL)
    }
}

impl<'r> CelRequest<'r> {
    pub fn of(req: &'r Request) -> CelRequest<'r> {
        CelRequest {
            object: Bound::Borrowed(Source::Document(&req.object)),
            old_object: Bound::Borrowed(Source::Document(&req.old_object)),
            source: Some(req),
            resource: Cow::Borrowed(&req.gvr.resource),
            request: OnceCell::new(),
            namespace: OnceCell::new(),
            cache: InterpreterCache::default(),
            views: Default::default(),
            shared: Some(SharedValues::boxed(
                Source::Document(&req.object),
                Source::Document(&req.old_object),
            )),
            selections: RefCell::default(),
            planned: None,
        }
    }

    /// Lets the policies evaluated on this request read the answers of
    /// `plan`, the plan of the set they belong to. Only for a request
    /// holding borrowed objects: the answers borrow them.
    pub fn attach_plan(&mut self, plan: &'r Plan) {
        if let (Bound::Borrowed(object), Bound::Borrowed(old_object)) =
            (&self.object, &self.old_object)
        {
            self.planned = Some(PlannedCel::new(plan, object.json(), old_object.json()));
        }
    }

    /// [`CelRequest::attach_plan`] on a request made here.
    pub fn with_plan(mut self, plan: &'r Plan) -> CelRequest<'r> {
        self.attach_plan(plan);
        self
    }

    /// The answers of the plan attached to this request for the
    /// validations of `checks` on its objects, in order; `None` without
    /// one, or when it does not evaluate them.
    fn planned_answers(&self, checks: &CelChecks) -> Option<&[Result<bool, direct::Fail>]> {
        self.planned.as_ref()?.answers(checks)
    }

    /// [`CelRequest::of`] holding its own copy of the request's objects,
    /// for callers that keep it beyond the request.
    pub fn owned(req: &Request) -> CelRequest<'static> {
        CelRequest {
            object: Bound::Owned(req.object.value().clone()),
            old_object: Bound::Owned(req.old_object.value().clone()),
            source: None,
            resource: Cow::Owned(req.gvr.resource.clone()),
            request: OnceCell::from(Arc::new(request_json(req))),
            namespace: OnceCell::from(namespace_object(req)),
            cache: InterpreterCache::default(),
            views: Default::default(),
            shared: None,
            selections: RefCell::default(),
            planned: None,
        }
    }

    /// Replaces the synthesized `namespaceObject` with the real Namespace.
    pub fn with_namespace_object(mut self, namespace: &Value) -> CelRequest<'r> {
        self.namespace = OnceCell::from(namespace.clone());
        self.cache = InterpreterCache::default();
        self.views = Default::default();
        self
    }

    fn request(&self) -> &Arc<Value> {
        self.request
            .get_or_init(|| Arc::new(self.source.map_or(Value::Null, request_json)))
    }

    fn namespace(&self) -> &Value {
        self.namespace
            .get_or_init(|| self.source.map_or(Value::Null, namespace_object))
    }

    /// How `scope`'s own constraints select `req`, from `select` the
    /// first time a policy with the same [`PolicyScope::selection_key`]
    /// asks on this request.
    fn selection(
        &self,
        scope: &PolicyScope,
        req: &Request,
        select: impl FnOnce() -> Selection,
    ) -> Selection {
        // Only for the request this was made from: the answer is its.
        if !self.source.is_some_and(|source| std::ptr::eq(source, req)) {
            return select();
        }
        let key = &scope.selection_key;
        if let Some((_, found)) = self
            .selections
            .borrow()
            .iter()
            .find(|(k, _)| Arc::ptr_eq(k, key))
        {
            return *found;
        }
        let found = select();
        self.selections.borrow_mut().push((key.clone(), found));
        found
    }

    /// `root` when the caller made one for this request's variables, else
    /// one made in `slot` ([`CelRequest::activation`]): how a set's
    /// policies share one root, and a policy evaluated alone has its own.
    pub fn root_in<'s>(
        &'s self,
        root: Option<&'s Activation<'s>>,
        slot: &'s mut Option<Activation<'s>>,
    ) -> &'s Activation<'s> {
        match root {
            Some(root) => root,
            None => slot.insert(self.activation()),
        }
    }

    pub fn activation(&self) -> Activation<'_> {
        let mut vars = bind_request(
            &self.cache,
            self.object.json(),
            self.old_object.json(),
            self,
        );
        if let Some(shared) = &self.shared {
            vars.set_request_values(shared.as_ref());
        }
        vars
    }

    /// The variables of mutate existing on `target`: the target as
    /// `object`, this request as `request`, no `oldObject` and no
    /// `namespaceObject` (Kyverno's background controller binds none).
    pub fn for_target<'t>(&self, target: &'t Value) -> CelRequest<'t> {
        CelRequest {
            object: Bound::Borrowed(Source::Value(target)),
            old_object: Bound::Owned(Value::Null),
            source: None,
            resource: Cow::Owned(self.resource.to_string()),
            request: OnceCell::from(self.request().clone()),
            namespace: OnceCell::from(Value::Null),
            cache: InterpreterCache::default(),
            views: Default::default(),
            shared: Some(SharedValues::boxed(
                Source::Value(target),
                Source::Value(&NULL),
            )),
            selections: RefCell::default(),
            planned: None,
        }
    }

    /// The variables seen through a Pod controller's template: `object` and
    /// `oldObject` have the template's metadata and spec (what autogen
    /// rewrites `object.spec`/`object.metadata` to).
    pub fn view(&self, template: PodTemplate) -> Activation<'_> {
        let slot = match template {
            PodTemplate::Spec => &self.views[0],
            PodTemplate::CronJob => &self.views[1],
        };
        let view = slot.get_or_init(|| {
            Box::new(TemplateView {
                object: template_view(self.object.value(), template),
                old_object: template_view(self.old_object.value(), template),
                cache: InterpreterCache::default(),
            })
        });
        bind_request(
            &view.cache,
            JsonRef::Value(&view.object),
            JsonRef::Value(&view.old_object),
            self,
        )
    }
}

/// An object as autogen shows it to a Pod policy: the template's metadata
/// and spec in place of the controller's own.
pub fn template_view(o: &Value, template: PodTemplate) -> Value {
    let Some(map) = o.as_object() else {
        return o.clone();
    };
    let t = template
        .path()
        .iter()
        .fold(o, |t, k| t.get(*k).unwrap_or(&Value::Null));
    let mut m = map.clone();
    m.insert(
        "metadata".into(),
        t.get("metadata").cloned().unwrap_or(json!({})),
    );
    // Kyverno rewrites `object.spec` to the template's: a controller
    // without one has no `spec` to select (`no such key: spec`).
    match t.get("spec") {
        Some(spec) => m.insert("spec".into(), spec.clone()),
        None => m.remove("spec"),
    };
    Value::Object(m)
}

fn request_json(req: &Request) -> Value {
    let gvk = |k: &Gvk| json!({"group": k.group, "version": k.version, "kind": k.kind});
    let gvr = |r: &Gvr| json!({"group": r.group, "version": r.version, "resource": r.resource});
    json!({
        "kind": gvk(&req.object_kind),
        "requestKind": gvk(&req.request_kind),
        "resource": gvr(&req.gvr),
        "requestResource": gvr(&req.request_resource),
        "subResource": req.subresource,
        "requestSubResource": req.request_sub_resource,
        "name": req.name(),
        "namespace": req.namespace(),
        "operation": req.operation,
        "userInfo": {"username": req.user.username, "groups": req.user.groups},
        "dryRun": false,
    })
}

/// The Namespace of a namespaced request, as far as it is known (name and
/// labels); null for cluster-scoped resources.
fn namespace_object(req: &Request) -> Value {
    let ns = req.namespace();
    if ns.is_empty() {
        return Value::Null;
    }
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": ns, "labels": req.namespace_labels.clone().unwrap_or_default()},
    })
}

fn kind_for_resource(
    r: &dyn Resolver,
    api_version: &str,
    resource: &str,
) -> Result<String, String> {
    r.kind_for_resource(api_version, resource)
        .ok_or_else(|| format!("unknown resource {resource:?} in {api_version}"))
}

/// Lookups answered by the engine's resolver.
pub struct ResolverLookups<'a>(pub &'a dyn Resolver);

impl Lookups for ResolverLookups<'_> {
    fn lookup(&self, lookup: &Lookup) -> Result<Value, String> {
        let r = self.0;
        let failed = |e: crate::context::ResolveError| e.to_string();
        match lookup {
            Lookup::Resource {
                api_version,
                resource,
                namespace,
                name,
            } => {
                let kind = kind_for_resource(r, api_version, resource)?;
                r.resource(api_version, &kind, namespace, name)
                    .map_err(failed)?
                    .ok_or_else(|| format!("{resource} \"{name}\" not found"))
            }
            Lookup::ResourceList {
                api_version,
                resource,
                namespace,
            } => {
                let kind = kind_for_resource(r, api_version, resource)?;
                let items = r.resources(api_version, &kind, namespace).map_err(failed)?;
                Ok(
                    json!({"apiVersion": api_version, "kind": format!("{kind}List"), "items": items}),
                )
            }
            // A projection is stored under `<entry>.<projection>`.
            Lookup::GlobalContext { name, projection } => {
                let key = match projection.as_str() {
                    "" => Cow::Borrowed(name.as_str()),
                    p => Cow::Owned(format!("{name}.{p}")),
                };
                r.global_context(&key)
                    .map_err(failed)?
                    .map(|v| (*v).clone())
                    .ok_or_else(|| format!("global context entry {name:?} not found"))
            }
            Lookup::ImageMetadata(image) => {
                r.image_metadata(image).map_err(failed)?.ok_or_else(|| {
                    format!(
                        "no metadata for image {image:?} (image registries are not reachable here)"
                    )
                })
            }
            // Only an ImageValidatingPolicy's evaluation answers these.
            Lookup::ImageVerification { function, .. } => Err(format!(
                "undeclared reference to '{function}' (only ImageValidatingPolicies declare it)"
            )),
            Lookup::Http { method, url, body } => r
                .http_call(&ApiCallRequest {
                    url_path: None,
                    url: Some(url.clone()),
                    method: method.clone(),
                    body: body.clone(),
                    ca_bundle: None,
                    headers: Vec::new(),
                })
                .map_err(failed)?
                .ok_or_else(|| format!("no response for {method} {url}")),
        }
    }
}

/// The verdict of a set of CEL checks.
#[derive(Debug, Clone, PartialEq)]
pub enum CelVerdict {
    Pass,
    /// Conditions (celPreconditions, matchConditions) were false.
    NotMatched(String),
    Fail(String),
    Error(String),
}

/// Whether PolicyExceptions exempt the request from a CEL policy, as
/// Kyverno checks them before the policy's matchConditions: every
/// exception whose matchConditions all hold (on `object`, `oldObject`,
/// `request`, `namespaceObject`; no variables) exempts it, named in the
/// message; the first one's `reportResult: pass` reports pass, else skip.
/// An exception whose conditions fail to evaluate is the policy's error,
/// unless another already exempted the request.
pub fn exempted(
    scope: &PolicyScope,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Option<(RuleStatus, String)> {
    let mut keys: Vec<&str> = Vec::new();
    let mut pass = false;
    let mut failure = None;
    for e in &scope.exceptions {
        match conditions_hold(&e.match_conditions, vars, lookups) {
            Ok(None) => {
                if keys.is_empty() {
                    pass = e.report_pass;
                }
                keys.push(&e.key);
            }
            Ok(Some(_)) => {}
            Err(err) => {
                failure.get_or_insert(format!("policy exception {}: {err}", e.key));
            }
        }
    }
    if keys.is_empty() {
        return failure.map(|f| (RuleStatus::Error, f));
    }
    let (status, word) = if pass {
        (RuleStatus::Pass, "passed")
    } else {
        (RuleStatus::Skip, "skipped")
    };
    Some((
        status,
        format!(
            "rule is {word} due to policy exception: {}",
            keys.join(", ")
        ),
    ))
}

/// Evaluates `variables` in order into the activation: each sees the ones
/// before it. A variable that fails is left out, so only an expression
/// that reads it fails (the API server evaluates variables lazily).
pub fn bind_variables<'a>(
    base: &'a Activation<'a>,
    variables: &'a [CompiledNamed],
    lookups: &dyn Lookups,
) -> Activation<'a> {
    let mut vars = base.scope();
    vars.start_variables(variables.len());
    for v in variables {
        // A value the interpreter could not hold (a function) is left out
        // like a failure.
        let value = match vars.shared_value(&v.program) {
            Some(value) => Ok(value),
            None => v.program.eval_val(&vars, lookups),
        };
        match value {
            Ok(value) if !matches!(&value, Val::Foreign(v) if matches!(**v, CelValue::Function(..))) => {
                vars.set_variable(&v.name, value)
            }
            Ok(_) => {}
            Err(e) => {
                let text = variable_failure_text(&vars, v.program.source(), e.to_string());
                vars.set_variable_failure(&v.name, text)
            }
        }
    }
    vars
}

/// All conditions true (matchConditions, celPreconditions); the name of
/// the first false one otherwise. An error is the caller's error.
pub fn conditions_hold(
    conditions: &[CompiledNamed],
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<Option<String>, CelError> {
    // As the API server's matcher and Kyverno's CEL engines: a condition
    // that is false decides even after one that failed; an error counts
    // only when none is false.
    let mut failed = None;
    for c in conditions {
        match c.program.eval_bool(vars, lookups) {
            Ok(true) => {}
            Ok(false) => return Ok(Some(c.name.clone())),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    failed.map_or(Ok(None), Err)
}

/// The API server's matcher error for matchConditions that fail to
/// evaluate (and none false): each `expression '<source>' resulted in
/// error: <error>`, aggregated (`[a, b]` when there are several).
fn match_condition_errors(
    conditions: &[CompiledNamed],
    vars: &Activation,
    lookups: &dyn Lookups,
) -> String {
    let errors: Vec<String> = conditions
        .iter()
        .filter_map(|c| c.program.eval_bool(vars, lookups).err().map(|e| (c, e)))
        .map(|(c, e)| format!("expression '{}' resulted in error: {e}", c.program.source()))
        .collect();
    match errors.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// What an expression that cannot be evaluated gives.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum EvalErrors {
    /// A denial, as the API server's validator gives one under
    /// failurePolicy Fail (validate.cel, ValidatingAdmissionPolicy):
    /// `expression '<source>' resulted in error: <error>`.
    Deny,
    /// The rule's error, as Kyverno's ValidatingPolicy engine gives it:
    /// `error: <error>`.
    RuleError,
    /// The validator's denial message, reported as the rule's error: how
    /// Kyverno reports a ValidatingAdmissionPolicy's evaluation error (it
    /// checks a decision's evaluation before its action).
    DenialAsError,
}

/// Runs the validations of `checks` with `vars` (variables already bound).
/// The first that fails decides, with its message: Kyverno's validate.cel
/// handler and its ValidatingPolicy engine both stop at the first denying
/// decision.
pub fn run_validations(
    checks: &CelChecks,
    vars: &Activation,
    lookups: &dyn Lookups,
    errors: EvalErrors,
) -> CelVerdict {
    for v in &checks.validations {
        match v.program.eval_bool(vars, lookups) {
            Ok(true) => {}
            Ok(false) => {
                let Some(p) = &v.message_expression else {
                    return CelVerdict::Fail(static_denial(v, errors));
                };
                let message = match (errors, message_of(p, vars, lookups)) {
                    // Kyverno's ValidatingPolicy: the messageExpression's
                    // result as it is, or why it has none.
                    (EvalErrors::RuleError, Ok(Value::String(s))) => s,
                    (EvalErrors::RuleError, Ok(other)) => format!(
                        "failed to convert message expression to string: \
                         type conversion error from '{}' to 'string'",
                        json_type_name(&other)
                    ),
                    (EvalErrors::RuleError, Err(e)) => {
                        format!("failed to evaluate message expression: {e}")
                    }
                    // The API server's validator: the messageExpression's
                    // non-blank result, else as without one.
                    (_, Ok(Value::String(s))) if !s.trim().is_empty() => s,
                    _ => static_denial(v, errors),
                };
                return CelVerdict::Fail(message);
            }
            Err(e) => {
                // Verbatim, trailing blanks included, as the API server
                // quotes it.
                let source = v.program.source();
                let failed = failed_variable(vars, source, &e.to_string());
                let denial = || match &failed {
                    Some((name, error)) => format!(
                        "expression '{source}' resulted in error: composited variable \
                         {name:?} fails to evaluate: {error}"
                    ),
                    None => format!("expression '{source}' resulted in error: {e}"),
                };
                return match (errors, &failed) {
                    (EvalErrors::Deny, _) => CelVerdict::Fail(denial()),
                    (EvalErrors::DenialAsError, _) => CelVerdict::Error(denial()),
                    (EvalErrors::RuleError, Some((_, error))) => {
                        CelVerdict::Error(format!("error: {error}"))
                    }
                    (EvalErrors::RuleError, None) => CelVerdict::Error(format!("error: {e}")),
                };
            }
        }
    }
    CelVerdict::Pass
}

/// The verdict of validations whose answers a policy set's plan found
/// (`crate::engine::plan`): a pass when every one holds, else the first
/// false one's denial, as [`run_validations`] gives them. `None` when one
/// did not give a bool (an error is worded by the checks' own evaluation)
/// or the failing one's message is an expression.
pub(crate) fn planned_verdict(
    checks: &CelChecks,
    answers: &[Result<bool, direct::Fail>],
    errors: EvalErrors,
) -> Option<CelVerdict> {
    for (v, answer) in checks.validations.iter().zip(answers) {
        match answer {
            Ok(true) => {}
            Ok(false) if v.message_expression.is_none() => {
                return Some(CelVerdict::Fail(static_denial(v, errors)));
            }
            _ => return None,
        }
    }
    Some(CelVerdict::Pass)
}

/// The denial of a validation that is false, without its
/// messageExpression: Kyverno's ValidatingPolicy gives the message (or
/// nothing); the API server's validator the message when it is not empty,
/// else the expression.
pub(crate) fn static_denial(v: &CompiledValidation, errors: EvalErrors) -> String {
    match v.message.as_deref().unwrap_or_default() {
        "" if errors != EvalErrors::RuleError => {
            format!("failed expression: {}", v.program.source().trim())
        }
        message => message.to_string(),
    }
}

/// A messageExpression's value, or why it has none.
fn message_of(
    p: &crate::cel::Program,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<Value, String> {
    let value = p.eval(vars, lookups).map_err(|e| e.to_string())?;
    cel_to_json(&value)
}

/// A JSON value's CEL type name, for conversion errors.
fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null_type",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "double",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// The variable behind an evaluation error, with its own error: variables
/// are evaluated before the expressions here, and one that fails is left
/// out, so reading it fails with "no such key: <name>". The API server
/// evaluates variables lazily and reports the variable's own error.
fn failed_variable<'v>(
    vars: &'v Activation,
    source: &str,
    error: &str,
) -> Option<(&'v str, &'v str)> {
    let (name, failure) = variable_error(vars, error)?;
    read_at(source, name)?;
    // The API server evaluates variables when an expression first reads
    // them, left to right, and keeps the left error of `||` and `&&`: of
    // the failed variables the expression reads, the first it reads is
    // the one named (the interpreter may have reported another).
    Some(
        vars.failed_variables()
            .iter()
            .filter_map(|(n, e)| read_at(source, n).map(|at| (at, *n, e.as_str())))
            .min_by_key(|(at, _, _)| *at)
            .map_or((name, failure), |(_, n, e)| (n, e)),
    )
}

/// Where `source` first reads `variables.<name>` (not a longer name).
fn read_at(source: &str, name: &str) -> Option<usize> {
    let needle = format!("variables.{name}");
    source.match_indices(&needle).map(|(at, _)| at).find(|at| {
        let before = source[..*at].chars().next_back();
        let after = source[at + needle.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The error a variable's failed evaluation is kept with: when it failed
/// reading another failed variable, the API server's chain (`composited
/// variable "<name>" fails to evaluate: <its error>`).
fn variable_failure_text(vars: &Activation, source: &str, error: String) -> String {
    match failed_variable(vars, source, &error) {
        Some((name, failure)) => {
            format!("composited variable {name:?} fails to evaluate: {failure}")
        }
        None => error,
    }
}

/// (name, its own error) of the failed variable an evaluation error of
/// `vars` reports as "no such key: <name>".
pub fn variable_error<'v>(vars: &'v Activation, error: &str) -> Option<(&'v str, &'v str)> {
    vars.variable_failure(error.strip_prefix("no such key: ")?)
}

/// The matchConditions of a CEL policy: `None` when they all hold;
/// otherwise the status and message to answer with: skip when one is
/// false (or cannot be evaluated under failurePolicy Ignore), else error.
pub fn match_conditions_gate(
    scope: &PolicyScope,
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Option<(RuleStatus, Cow<'static, str>)> {
    gate_of(
        scope,
        conditions_hold(&scope.match_conditions, vars, lookups),
    )
}

/// [`match_conditions_gate`] of conditions already evaluated.
pub fn gate_of(
    scope: &PolicyScope,
    held: Result<Option<String>, CelError>,
) -> Option<(RuleStatus, Cow<'static, str>)> {
    match held {
        Ok(None) => None,
        // Kyverno's CEL policy engines say only "skip" (no allocation for
        // the common outcome of a policy that does not apply).
        Ok(Some(_)) => Some((RuleStatus::Skip, Cow::Borrowed("skip"))),
        Err(e) if scope.failure_policy_ignore => {
            Some((RuleStatus::Skip, format!("match conditions: {e}").into()))
        }
        Err(e) => Some((
            RuleStatus::Error,
            format!("failed to evaluate match conditions: {e}").into(),
        )),
    }
}

/// Evaluates auditAnnotations: each a string, or null to leave it out.
pub fn audit_annotations(
    annotations: &[CompiledNamed],
    vars: &Activation,
    lookups: &dyn Lookups,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for a in annotations {
        let failed = |e: String| format!("failed to evaluate auditAnnotation {:?}: {e}", a.name);
        match a
            .program
            .eval(vars, lookups)
            .map_err(|e| failed(e.to_string()))?
        {
            CelValue::Null => {}
            CelValue::String(v) if v.is_empty() => {}
            CelValue::String(v) => out.push((a.name.clone(), v.to_string())),
            other => {
                return Err(failed(format!(
                    "valueExpression must give a string or null, got {}",
                    other.type_of()
                )));
            }
        }
    }
    Ok(out)
}

/// `validate.cel` of a rule: celPreconditions, then for each param (once
/// without a paramKind) variables, expressions and auditAnnotations. The
/// first param that fails decides; the annotations of every evaluation
/// are returned.
pub fn validate_rule(
    checks: &CelChecks,
    preconditions: &[CompiledNamed],
    req: &Request,
    input: &CelRequest,
    root: Option<&Activation>,
    resolver: &dyn Resolver,
) -> (CelVerdict, Vec<(String, String)>) {
    let lookups = ResolverLookups(resolver);
    let mut made = None;
    let root = input.root_in(root, &mut made);
    match conditions_hold(preconditions, root, &lookups) {
        Ok(None) => {}
        Ok(Some(_)) => {
            // Kyverno's words: which precondition failed is not said.
            let why = "cel preconditions not met".to_string();
            return (CelVerdict::NotMatched(why), Vec::new());
        }
        // Kyverno hands celPreconditions to the API server's validator as
        // matchConditions: one that cannot be evaluated denies (failure
        // policy Fail) with the matcher's error.
        Err(_) => {
            let why = match_condition_errors(preconditions, root, &lookups);
            return (CelVerdict::Fail(why), Vec::new());
        }
    }
    let (kind, reference) = match &checks.params {
        Some(p) => (Some(&p.kind), p.reference.as_ref()),
        None => (None, None),
    };
    let evaluate = |vars: &Activation| {
        // No variables to bind: the root's (none) serve, with no scope
        // made and dropped for them.
        let scoped;
        let vars = if checks.variables.is_empty() {
            vars
        } else if let Some(verdict) = lazy_variables::validations(checks, vars, EvalErrors::Deny) {
            return (verdict, Vec::new());
        } else {
            scoped = bind_variables(vars, &checks.variables, &lookups);
            &scoped
        };
        let verdict = run_validations(checks, vars, &lookups, EvalErrors::Deny);
        match audit_annotations(&checks.audit_annotations, vars, &lookups) {
            Ok(properties) => (verdict, properties),
            Err(e) => (CelVerdict::Error(e), Vec::new()),
        }
    };
    match params::collect(kind, reference, req, resolver) {
        Err(e) => (CelVerdict::Error(e), Vec::new()),
        Ok(None) => evaluate(root),
        Ok(Some(list)) => {
            let mut properties = Vec::new();
            for param in &list {
                let (verdict, mut found) = match params::bind(root, param) {
                    Ok(vars) => evaluate(&vars),
                    Err(e) => (CelVerdict::Error(e), Vec::new()),
                };
                properties.append(&mut found);
                if verdict != CelVerdict::Pass {
                    return (verdict, properties);
                }
            }
            (CelVerdict::Pass, properties)
        }
    }
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || same(x, value))
}

/// What admission rules match a request on.
struct RuleTarget<'a> {
    group: &'a str,
    version: &'a str,
    /// The plural resource name.
    resource: &'a str,
    subresource: &'a str,
    /// Empty: any operation (a trigger's kind and labels, not a request).
    operation: &'a str,
    /// The object's name, which `resourceNames` lists.
    name: TargetName<'a>,
}

/// The object's name, looked up only for a rule that lists
/// `resourceNames` (few do, and every policy matches every request).
#[derive(Clone, Copy)]
enum TargetName<'a> {
    Is(&'a str),
    OfRequest(&'a Request),
}

impl<'a> TargetName<'a> {
    fn get(self) -> &'a str {
        match self {
            TargetName::Is(name) => name,
            TargetName::OfRequest(req) => req.name(),
        }
    }
}

impl RuleTarget<'_> {
    /// Whether an admission rule (`resourceRules[]`) covers the request.
    fn covered_by(&self, rule: &ResourceRule) -> bool {
        let (resource, sub) = (self.resource, self.subresource);
        listed(&rule.api_groups, self.group)
            && listed(&rule.api_versions, self.version)
            && (self.operation.is_empty() || listed(&rule.operations, self.operation))
            && (rule.resource_names.is_empty()
                || rule.resource_names.iter().any(|n| n == self.name.get()))
            && rule.resources.iter().any(|r| match r.split_once('/') {
                None => r == "*" || (sub.is_empty() && same(r, resource)),
                Some((res, s)) => {
                    (same(res, resource) && (same(s, sub) || (s == "*" && !sub.is_empty())))
                        || (res == "*" && same(s, sub))
                }
            })
    }

    /// As the API server matches: no resourceRules (a binding's
    /// matchResources may have none) does not constrain.
    fn covered_by_constraints(&self, m: &MatchConstraints) -> bool {
        (m.resource_rules.is_empty() || m.resource_rules.iter().any(|r| self.covered_by(r)))
            && !m.exclude_resource_rules.iter().any(|r| self.covered_by(r))
    }
}

/// How a CEL policy that applies to a request sees it.
#[derive(Debug, Clone, Copy)]
pub struct View<'s> {
    /// Through a Pod controller's template (autogen), or `None` for the
    /// object itself.
    pub template: Option<PodTemplate>,
    /// The binding that selected the request (admission policies).
    pub binding: Option<&'s CompiledBinding>,
}

impl View<'_> {
    /// The params of this view: `None` without a paramKind (see
    /// [`params::collect`]).
    ///
    /// kyverno-compat: a binding whose paramRef has a selector evaluates
    /// the policy once, with `params` the list of every param it selects
    /// (`{"items": [...]}`), as Kyverno's CLI does (the API server
    /// evaluates once per param instead; gavel reads params only offline).
    fn params(
        &self,
        scope: &PolicyScope,
        req: &Request,
        resolver: &dyn Resolver,
    ) -> Result<Option<Vec<Value>>, String> {
        let reference = self.binding.and_then(|b| b.param_ref.as_ref());
        let found = params::collect(scope.param_kind.as_ref(), reference, req, resolver)?;
        Ok(match found {
            Some(list) if !list.is_empty() && reference.is_some_and(|r| r.selector.is_some()) => {
                Some(vec![serde_json::json!({ "items": list })])
            }
            other => other,
        })
    }
}

/// The start of every CEL policy's evaluation on a resource: its empty
/// response (no rules reads as "does not apply") and the view through
/// which its constraints select the request; no view when they do not,
/// or when the policy evaluates payloads of another `mode`.
pub fn begin<'p>(
    scope: &'p PolicyScope,
    mode: EvaluationMode,
    req: &Request,
    input: &CelRequest,
) -> (PolicyResponse<'p>, Option<View<'p>>) {
    let response = PolicyResponse::empty(&scope.name);
    let view = match mode {
        EvaluationMode::Kubernetes => scope_view(scope, req, input),
        _ => None,
    };
    (response, view)
}

/// Whether a CEL policy applies to the request, and how it sees it. A
/// policy selected by its own constraints (no bindings) asks the request,
/// which answers once for all policies with the same constraints.
pub fn scope_view<'s>(
    scope: &'s PolicyScope,
    req: &Request,
    input: &CelRequest,
) -> Option<View<'s>> {
    if !matches!(scope.bindings, Bindings::Own) {
        return select(scope, req, input);
    }
    let template = input.selection(scope, req, || {
        select(scope, req, input).map(|view| view.template)
    })?;
    Some(View {
        template,
        binding: None,
    })
}

/// [`scope_view`], computed.
fn select<'s>(scope: &'s PolicyScope, req: &Request, input: &CelRequest) -> Option<View<'s>> {
    if scope
        .namespace
        .as_deref()
        .is_some_and(|ns| ns != req.namespace())
    {
        return None;
    }
    let resource = input.resource.as_ref();
    let target = RuleTarget {
        group: &req.gvk.group,
        version: &req.gvk.version,
        resource,
        subresource: &req.subresource,
        operation: &req.operation,
        name: TargetName::OfRequest(req),
    };
    let m = &scope.match_constraints;
    let selected =
        |m: &MatchConstraints| target.covered_by_constraints(m) && selectors_match(m, req);
    let bound = |binding: &'s CompiledBinding| View {
        template: None,
        binding: Some(binding),
    };
    match &scope.bindings {
        Bindings::Own => {}
        Bindings::Validating(bindings) => {
            return bindings
                .iter()
                .find(|b| b.match_resources.as_ref().is_none_or(selected))
                .map(bound);
        }
        Bindings::Mutating(bindings) => {
            if !selected(m) {
                return None;
            }
            return bindings
                .iter()
                .find(|b| b.match_resources.as_ref().is_some_and(selected))
                .map(bound);
        }
    }
    let template = if target.covered_by_constraints(m) {
        None
    } else {
        let pod = RuleTarget {
            group: "",
            version: "v1",
            resource: "pods",
            subresource: "",
            operation: &req.operation,
            name: TargetName::OfRequest(req),
        };
        let controller = scope.controllers.iter().find(|c| {
            same(c.group, target.group)
                && same(c.resource, resource)
                && target.subresource.is_empty()
        })?;
        if !pod.covered_by_constraints(m) {
            return None;
        }
        Some(controller.template)
    };
    selectors_match(m, req).then_some(View {
        template,
        binding: None,
    })
}

/// The namespaceSelector and objectSelector of `m` accept the request.
fn selectors_match(m: &MatchConstraints, req: &Request) -> bool {
    selectors_accept(m, req, req.resource().json())
}

/// The namespaceSelector of `m` accepts the request's namespace, and its
/// objectSelector `object`. Only the labels are read (a decoded request is
/// not converted whole).
fn selectors_accept(m: &MatchConstraints, req: &Request, object: JsonRef) -> bool {
    if let Some(sel) = &m.namespace_selector
        && !req.namespace().is_empty()
        && !selector_matches(sel, req.namespace_labels.as_ref())
    {
        return false;
    }
    if let Some(sel) = &m.object_selector {
        let labels = object
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .map(JsonRef::to_cow);
        if !selector_matches(sel, labels.as_deref().and_then(Value::as_object)) {
            return false;
        }
    }
    true
}

/// Whether a policy's own matchConstraints (no bindings, no autogen)
/// select `object` as the request's resource, for `operation` (`None`:
/// any). No CEL runs: this is what the answer path checks before it
/// leaves generation work, whose conditions the background evaluates.
pub fn constraints_select(
    scope: &PolicyScope,
    req: &Request,
    object: JsonRef,
    operation: Option<&str>,
) -> bool {
    if scope
        .namespace
        .as_deref()
        .is_some_and(|ns| ns != req.namespace())
    {
        return false;
    }
    let target = RuleTarget {
        group: &req.gvk.group,
        version: &req.gvk.version,
        resource: &req.gvr.resource,
        subresource: &req.subresource,
        operation: operation.unwrap_or_default(),
        name: TargetName::Is(
            object
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(|n| n.as_str())
                .unwrap_or_default(),
        ),
    };
    let m = &scope.match_constraints;
    target.covered_by_constraints(m) && selectors_accept(m, req, object)
}

/// Whether `constraints` select an object that exists (a mutate-existing
/// target): its kind, name and labels, and its namespace's labels; no
/// operation applies. `resource` is the object's plural resource name.
pub fn object_selected(
    constraints: &MatchConstraints,
    object: &Value,
    resource: &str,
    namespace_labels: Option<&serde_json::Map<String, Value>>,
) -> bool {
    let text = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let gvk = Gvk::new(text("/apiVersion"), text("/kind"));
    let target = RuleTarget {
        group: &gvk.group,
        version: &gvk.version,
        resource,
        subresource: "",
        operation: "",
        name: TargetName::Is(text("/metadata/name")),
    };
    if !target.covered_by_constraints(constraints) {
        return false;
    }
    if let Some(sel) = &constraints.namespace_selector
        && !text("/metadata/namespace").is_empty()
        && !selector_matches(sel, namespace_labels)
    {
        return false;
    }
    constraints.object_selector.as_ref().is_none_or(|sel| {
        selector_matches(
            sel,
            object
                .pointer("/metadata/labels")
                .and_then(Value::as_object),
        )
    })
}

/// Evaluates a ValidatingPolicy: one rule response named after the policy,
/// or none when the policy does not match the request.
pub fn evaluate_validating_policy<'p>(
    policy: &'p CompiledValidatingPolicy,
    req: &Request,
    input: &CelRequest,
    resolver: &dyn Resolver,
) -> PolicyResponse<'p> {
    evaluate_validating_policy_over(policy, req, input, None, resolver)
}

/// [`evaluate_validating_policy`] over `root`, the request's CEL variables
/// made once for every policy of a set ([`CelRequest::activation`]), as
/// `validate.cel` rules share theirs: a policy seen as the object itself
/// binds its scopes over it rather than making and dropping its own. A
/// policy seen through a Pod controller's template still makes that view.
pub fn evaluate_validating_policy_over<'p>(
    policy: &'p CompiledValidatingPolicy,
    req: &Request,
    input: &CelRequest,
    root: Option<&Activation>,
    resolver: &dyn Resolver,
) -> PolicyResponse<'p> {
    let scope = &policy.scope;
    let (mut response, Some(view)) = begin(scope, policy.mode, req, input) else {
        return PolicyResponse::empty(&scope.name);
    };
    let mut made = None;
    let vars = match view.template {
        Some(template) => made.insert(input.view(template)),
        None => input.root_in(root, &mut made),
    };
    let lookups = ResolverLookups(resolver);
    let respond =
        |status: RuleStatus, message: String| RuleResponse::new(&scope.name, status, message);
    let evaluate = |vars: &Activation| validating_policy_rule(policy, vars, &lookups, None);
    let rule = match view.params(scope, req, resolver) {
        Err(e) => respond(RuleStatus::Error, e),
        // The plan's answers are on the request's object itself, which
        // `vars` binds when the policy does not see it through a
        // template.
        Ok(None) => {
            let planned = view.template.is_none().then_some(input);
            validating_policy_rule(policy, vars, &lookups, planned)
        }
        // Each param is one evaluation of the policy; the first that does
        // not pass decides.
        Ok(Some(list)) => {
            let mut last = respond(RuleStatus::Pass, params::NONE_FOUND.into());
            for param in &list {
                last = match params::bind(vars, param) {
                    Ok(vars) => evaluate(&vars),
                    Err(e) => respond(RuleStatus::Error, e),
                };
                if last.status != RuleStatus::Pass {
                    break;
                }
            }
            last
        }
    };
    response.rules.push(rule);
    response
}

/// Evaluates a ValidatingPolicy of `evaluation.mode: JSON` on a JSON
/// payload: `object` is the payload (no request, no namespace); then
/// exceptions, matchConditions, variables and validations as for a
/// resource. A Kubernetes-mode policy gives no rule.
pub fn evaluate_validating_policy_on_json<'p>(
    policy: &'p CompiledValidatingPolicy,
    payload: &Value,
    resolver: &dyn Resolver,
) -> PolicyResponse<'p> {
    let scope = &policy.scope;
    let mut response = PolicyResponse {
        policy: &scope.name,
        rules: RuleResponses::new(),
    };
    if policy.mode != EvaluationMode::Json {
        return response;
    }
    let cache = InterpreterCache::default();
    let vars = bind_request(
        &cache,
        JsonRef::Value(payload),
        JsonRef::Value(&NULL),
        &NoRequest,
    );
    let lookups = ResolverLookups(resolver);
    response
        .rules
        .push(validating_policy_rule(policy, &vars, &lookups, None));
    response
}

/// One evaluation of a ValidatingPolicy that applies, with `vars` (the
/// request's, a template view's, or a payload's; params bound when it has
/// them): exceptions, matchConditions, variables, validations and
/// auditAnnotations, as Kyverno's `evaluateWithData` does in every mode.
/// With `planned`, the request whose objects `vars` binds as they are, the
/// validations' answers are read from the plan attached to it when it
/// evaluates them ([`planned_verdict`]).
fn validating_policy_rule<'p>(
    policy: &'p CompiledValidatingPolicy,
    vars: &Activation,
    lookups: &dyn Lookups,
    planned: Option<&CelRequest>,
) -> RuleResponse<'p> {
    let scope = &policy.scope;
    let respond =
        |status: RuleStatus, message: Cow<'p, str>| RuleResponse::new(&scope.name, status, message);
    if let Some((status, message)) = exempted(scope, vars, lookups) {
        // Kyverno names the outcome of an exception `exception`.
        return RuleResponse::new("exception", status, message);
    }
    if let Some((status, message)) = match_conditions_gate(scope, vars, lookups) {
        return respond(status, message);
    }
    // Kyverno reports an admission policy's evaluation error as the rule's
    // error in the validator's words; its ValidatingPolicy in its own.
    let errors = match scope.kind.as_str() {
        "ValidatingAdmissionPolicy" => EvalErrors::DenialAsError,
        _ => EvalErrors::RuleError,
    };
    let answer = |verdict| match verdict {
        // Kyverno's ValidatingPolicy engine says "success".
        CelVerdict::Pass => respond(RuleStatus::Pass, Cow::Borrowed("success")),
        CelVerdict::Fail(m) => respond(RuleStatus::Fail, m.into()),
        CelVerdict::NotMatched(m) => respond(RuleStatus::Skip, m.into()),
        CelVerdict::Error(e) => respond(RuleStatus::Error, e.into()),
    };
    if let Some(verdict) = planned
        .and_then(|input| input.planned_answers(&policy.checks))
        .and_then(|answers| planned_verdict(&policy.checks, answers, errors))
    {
        return answer(verdict);
    }
    if !policy.checks.variables.is_empty()
        && let Some(verdict) = lazy_variables::validations(&policy.checks, vars, errors)
    {
        return answer(verdict);
    }
    let vars = bind_variables(vars, &policy.checks.variables, lookups);
    let rule = answer(run_validations(&policy.checks, &vars, lookups, errors));
    match audit_annotations(&policy.checks.audit_annotations, &vars, lookups) {
        Ok(properties) => rule.with_properties(properties),
        Err(e) => respond(RuleStatus::Error, e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::NoResolver;
    use crate::engine::json_context::Builtins;
    use crate::policy::cel_policy::ValidatingPolicyDoc;

    const POLICY: &str = "apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: no-latest}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  matchConditions:
  - {name: not-system, expression: \"object.metadata.?namespace.orValue('') != 'kube-system'\"}
  variables:
  - {name: images, expression: 'object.spec.containers.map(c, c.image)'}
  validations:
  - expression: \"variables.images.all(i, !i.endsWith(':latest'))\"
    messageExpression: \"'latest tag: ' + variables.images.join(', ')\"
";

    fn policy() -> CompiledValidatingPolicy {
        let doc: ValidatingPolicyDoc = serde_saphyr::from_str(POLICY).unwrap();
        CompiledValidatingPolicy::compile(&doc).unwrap()
    }

    fn verdict(p: &CompiledValidatingPolicy, resource: Value) -> Vec<(RuleStatus, String)> {
        let req = Request::offline(&resource, "CREATE", Default::default(), None);
        evaluate_validating_policy(p, &req, &CelRequest::of(&req), &NoResolver)
            .rules
            .into_iter()
            .map(|r| (r.status, r.message.to_string()))
            .collect()
    }

    /// An expression reading failed variables names the first it reads,
    /// with the chain of variables that failed through others, as the API
    /// server words it.
    #[test]
    fn failed_variables_are_named_in_reading_order_with_their_chain() {
        let yaml = "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: chain}
spec:
  validationFailureAction: Enforce
  rules:
  - name: chain
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      cel:
        variables:
        - {name: spec, expression: object.spec}
        - {name: context, expression: variables.spec.securityContext}
        - {name: nonRoot, expression: variables.context.runAsNonRoot == true}
        - {name: containers, expression: object.spec.containers}
        - {name: containersNonRoot, expression: 'variables.containers.all(c, true)'}
        expressions:
        - expression: variables.nonRoot || variables.containersNonRoot
";
        let docs = crate::policy::load::load_policy_text("p.yaml", yaml).unwrap();
        let crate::policy::load::LoadedDocument::Policy(doc) = docs.into_iter().next().unwrap()
        else {
            panic!("not a policy")
        };
        let policy = crate::policy::CompiledPolicy::compile(&doc).unwrap();
        let pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}});
        let req = Request::offline(&pod, "CREATE", Default::default(), None);
        let ctx = req.json_context(Builtins::of([&policy]));
        let env = crate::engine::EvalEnv {
            resolver: &NoResolver,
            exceptions: &[],
            rule_values: &(),
        };
        let response = crate::engine::validate::evaluate_policy(&policy, &req, &ctx, &env);
        assert_eq!(
            response.rules[0].message,
            "expression 'variables.nonRoot || variables.containersNonRoot' resulted in error: \
             composited variable \"nonRoot\" fails to evaluate: composited variable \"context\" \
             fails to evaluate: composited variable \"spec\" fails to evaluate: no such key: spec"
        );
    }

    fn pod(ns: &str, image: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns},
               "spec": {"containers": [{"name": "c", "image": image}]}})
    }

    #[test]
    fn validations_pass_fail_and_match_conditions_skip() {
        let p = policy();
        assert_eq!(
            verdict(&p, pod("a", "nginx:1.0")),
            vec![(RuleStatus::Pass, "success".to_string())]
        );
        assert_eq!(
            verdict(&p, pod("a", "nginx:latest")),
            vec![(RuleStatus::Fail, "latest tag: nginx:latest".to_string())]
        );
        assert_eq!(
            verdict(&p, pod("kube-system", "nginx:latest"))[0].0,
            RuleStatus::Skip
        );
        // Not a matched resource at all: no rule response.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert!(verdict(&p, cm).is_empty());
    }

    #[test]
    fn request_wide_values_are_shared_only_where_object_is_the_requests() {
        let req = Request::offline(&pod("a", "nginx:1.0"), "CREATE", Default::default(), None);
        let input = CelRequest::of(&req);
        let images =
            crate::cel::Program::compile("object.spec.containers.map(c, c.image)").unwrap();
        let image = |v: Option<Val>| v.map(|v| cel_to_json(&v.to_cel()).unwrap());
        let root = input.activation();
        assert_eq!(
            image(root.shared_value(&images)),
            Some(json!(["nginx:1.0"]))
        );
        // A second policy's copy of the expression is the same plan: the
        // same answer, from the request's table.
        let again =
            crate::cel::Program::compile("object.spec.containers.map(c,\n c.image)").unwrap();
        assert_eq!(
            image(root.scope().shared_value(&again)),
            Some(json!(["nginx:1.0"]))
        );
        // A scope that rebinds object gets nothing shared.
        let mut rebound = root.scope();
        rebound
            .set(
                "object",
                crate::cel::values::json_to_cel(&pod("a", "other:2")),
            )
            .unwrap();
        assert!(rebound.shared_value(&images).is_none());
        // Nor does a Pod controller's template view.
        assert!(
            input
                .view(PodTemplate::Spec)
                .shared_value(&images)
                .is_none()
        );
        // An expression that reads more than the objects is not shared.
        let named = crate::cel::Program::compile("request.name + object.metadata.name").unwrap();
        assert!(root.shared_value(&named).is_none());
    }

    #[test]
    fn pod_controllers_are_checked_through_their_template() {
        let p = policy();
        let deploy = |image: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "a"},
                   "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "c", "image": image}]}}}})
        };
        assert_eq!(verdict(&p, deploy("nginx:1.0"))[0].0, RuleStatus::Pass);
        assert_eq!(verdict(&p, deploy("nginx:latest"))[0].0, RuleStatus::Fail);
        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "j", "namespace": "a"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:latest"}]}}}}}});
        assert_eq!(verdict(&p, cron)[0].0, RuleStatus::Fail);
    }

    /// `evaluation.mode: JSON`: evaluated on a payload (no constraints
    /// needed), never on a Kubernetes request; a PolicyException naming
    /// the policy whose conditions hold makes it a skip (a pass with
    /// `reportResult: pass`).
    /// `globalContext.Get(entry, projection)` reads the projection, which
    /// resolvers hold under `<entry>.<projection>` (the cluster's store).
    #[test]
    fn global_context_projections_are_looked_up_by_their_key() {
        struct Entries;
        impl Resolver for Entries {
            fn global_context(
                &self,
                name: &str,
            ) -> Result<Option<Arc<Value>>, crate::context::ResolveError> {
                Ok(match name {
                    "svc" => Some(Arc::new(json!({"items": [1, 2, 3]}))),
                    "svc.count" => Some(Arc::new(json!(3))),
                    _ => None,
                })
            }
        }
        let lookups = ResolverLookups(&Entries);
        let cases = [
            (
                "globalContext.Get('svc', '')",
                Ok(json!({"items": [1, 2, 3]})),
            ),
            ("globalContext.Get('svc', 'count')", Ok(json!(3))),
        ];
        for (source, want) in cases {
            let program = crate::cel::Program::compile(source).unwrap();
            let got = program
                .eval(&Activation::new(), &lookups)
                .map(|v| cel_to_json(&v).unwrap())
                .map_err(|e| e.to_string());
            assert_eq!(got, want, "{source}");
        }
        let missing = crate::cel::Program::compile("globalContext.Get('svc', 'nope')").unwrap();
        assert!(missing.eval(&Activation::new(), &lookups).is_err());
    }

    #[test]
    fn json_mode_and_cel_exceptions() {
        let doc: ValidatingPolicyDoc = serde_saphyr::from_str(
            "apiVersion: policies.kyverno.io/v1beta1
kind: ValidatingPolicy
metadata: {name: no-root-ca}
spec:
  evaluation: {mode: JSON}
  validations:
  - {expression: \"object.type != 'ROOT'\", message: root CAs are not allowed}
",
        )
        .unwrap();
        let mut p = CompiledValidatingPolicy::compile(&doc).unwrap();
        let run = |p: &CompiledValidatingPolicy, payload: Value| {
            let r = evaluate_validating_policy_on_json(p, &payload, &NoResolver);
            r.rules
                .iter()
                .map(|r| (r.status, r.message.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            run(&p, json!({"type": "SUBORDINATE"})),
            [(RuleStatus::Pass, "success".to_string())]
        );
        assert_eq!(
            run(&p, json!({"type": "ROOT"})),
            [(RuleStatus::Fail, "root CAs are not allowed".to_string())]
        );
        assert!(
            verdict(
                &p,
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
            )
            .is_empty()
        );
        let exception = |report: &str| {
            let doc: crate::policy::cel_policy::CelExceptionDoc = serde_saphyr::from_str(&format!(
                "apiVersion: policies.kyverno.io/v1beta1
kind: PolicyException
metadata: {{name: lab, namespace: ops}}
spec:
  policyRefs: [{{name: no-root-ca, kind: ValidatingPolicy}}]
  reportResult: {report}
  matchConditions:
  - {{name: lab, expression: \"object.account == 'lab'\"}}
"
            ))
            .unwrap();
            Arc::new(crate::policy::cel_policy::CompiledCelException::compile(&doc).unwrap())
        };
        p.scope.exceptions = crate::policy::cel_policy::attach_exceptions(
            &[exception("skip")],
            "ValidatingPolicy",
            "no-root-ca",
        );
        assert_eq!(
            run(&p, json!({"type": "ROOT", "account": "lab"})),
            [(
                RuleStatus::Skip,
                "rule is skipped due to policy exception: ops/lab".to_string()
            )]
        );
        assert_eq!(
            run(&p, json!({"type": "ROOT", "account": "prod"}))[0].0,
            RuleStatus::Fail
        );
        p.scope.exceptions = crate::policy::cel_policy::attach_exceptions(
            &[exception("pass")],
            "ValidatingPolicy",
            "no-root-ca",
        );
        assert_eq!(
            run(&p, json!({"type": "ROOT", "account": "lab"}))[0].0,
            RuleStatus::Pass
        );
        assert!(
            crate::policy::cel_policy::attach_exceptions(
                &[exception("pass")],
                "MutatingPolicy",
                "no-root-ca"
            )
            .is_empty()
        );
    }
}
