//! The CEL variables of one request (`object`, `oldObject`, `request`,
//! `namespaceObject`) and the lookups CEL expressions make through the resolver.

use crate::cel::direct::{self, Val};
use crate::cel::{
    Activation, COST_LIMIT, InterpreterCache, LazyBindings, Lookup, Lookups, RequestValues,
};
use crate::context::{ApiCallRequest, Resolver};
use crate::engine::Request;
use crate::engine::plan::{Plan, PlannedCel};
use crate::json_doc::{Document, JsonRef};
use crate::kinds::{Gvk, Gvr};
use crate::policy::cel_policy::CelChecks;
use crate::policy::cel_policy::{PodTemplate, PolicyScope};
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
    pub(super) object: Bound<'r>,
    pub(super) old_object: Bound<'r>,
    /// What `request` and `namespaceObject` are made from.
    pub(super) source: Option<&'r Request>,
    /// The plural resource name admission rules match on.
    pub(super) resource: Cow<'r, str>,
    pub(super) request: OnceCell<Arc<Value>>,
    pub(super) namespace: OnceCell<Value>,
    pub(super) cache: InterpreterCache,
    /// The variables as a Pod controller's autogen sees them, one per
    /// [`PodTemplate`], made on first use.
    pub(super) views: [OnceCell<Box<TemplateView>>; 2],
    /// The values of request-wide plans, shared by every policy evaluated
    /// on `object` itself; none when the objects are owned here (a value
    /// kept beside them could not borrow them). Boxed behind the trait so
    /// that the cell inside does not pin `'r`.
    pub(super) shared: Option<Box<dyn RequestValues + 'r>>,
    /// How the policies' own constraints selected `source` so far, by
    /// [`PolicyScope::selection_key`]: `None` not selected, else the view.
    pub(super) selections: RefCell<Vec<(Arc<str>, Selection)>>,
    /// The answers of the policy set's planned checks on `object`, when
    /// the set's plan is attached ([`CelRequest::attach_plan`]).
    pub(super) planned: Option<PlannedCel<'r>>,
}

/// An object bound as a CEL variable: borrowed in either form (a request's
/// [`Document`] is read as it was decoded; it becomes a `Value` only for
/// autogen's template views, which rebuild the object), or owned.
#[derive(Debug)]
pub(super) enum Bound<'r> {
    Borrowed(Source<'r>),
    Owned(Value),
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Source<'r> {
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
pub(super) struct SharedValues<'r> {
    /// `object` and `oldObject` as the direct evaluator reads them, by
    /// their [`direct::KNOWN_ROOTS`] slots.
    pub(super) roots: [Val<'r>; 2],
    /// Keyed by the plan, which the entry holds so that its address is not
    /// reused while the request lives.
    pub(super) values: RefCell<Vec<(Arc<direct::Node>, Option<Val<'r>>)>>,
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
pub(super) type Selection = Option<Option<PodTemplate>>;

/// `object` and `oldObject` through a Pod controller's template.
#[derive(Debug)]
pub(super) struct TemplateView {
    pub(super) object: Value,
    pub(super) old_object: Value,
    pub(super) cache: InterpreterCache,
}

pub(super) static NULL: Value = Value::Null;

/// Binds the request-level variables; `request` and `namespaceObject`
/// come from `rest` when read.
pub(super) fn bind_request<'s>(
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
pub(super) struct NoRequest;

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
    pub(super) fn planned_answers(
        &self,
        checks: &CelChecks,
    ) -> Option<&[Result<bool, direct::Fail>]> {
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
    pub(super) fn selection(
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

pub(super) fn request_json(req: &Request) -> Value {
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
pub(super) fn namespace_object(req: &Request) -> Value {
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

pub(super) fn kind_for_resource(
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
