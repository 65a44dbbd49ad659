//! The JSON context (docs/kyverno-semantics.md#built-in-variables):
//! `request`, builtin variables, context entries and foreach elements, read
//! by rules through JMESPath.
//!
//! It is layered rather than one JSON object: a rule or a foreach element
//! gets a child scope over its parent, so leaving a scope is dropping it, and
//! the request object and foreach elements are borrowed, never copied. The
//! layers are a JMESPath [`Scope`], which the interpreter reads as one
//! object; `request` is a [`Root`] in it, served field by field.

use super::Request;
use super::cel::CelRequest;
use super::plan::{Plan, PlanForRequest};
use crate::jmespath::{Expression, Root, Scope, Streamed, Val};
use crate::json_doc::JsonRef;
use crate::kinds::{Gvk, Gvr};
use crate::policy::CompiledPolicy;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::cell::{OnceCell, RefCell};

pub use crate::jmespath::Slot;

pub struct JsonContext<'p> {
    parent: Option<&'p JsonContext<'p>>,
    scope: Scope<'p>,
    /// The request's CEL variables, at the root of a request's context:
    /// converted on first use and shared by every CEL rule evaluated for it.
    cel: Option<CelRequest<'p>>,
    delete: bool,
    /// At a request's root: results of conditions that read only `request`
    /// (see `Condition::memo`), shared by every rule evaluated for it.
    memo: Option<RefCell<Vec<(u32, bool)>>>,
    /// `request` was set here or in a scope above, so it may no longer be
    /// the request the memo describes.
    request_replaced: bool,
    /// At a request's root: the policy set's plan, when the caller has one.
    plan: Option<PlanForRequest<'p>>,
    /// At a request's root: its admission operation, by
    /// [`crate::matching::operation_index`].
    operation: Option<usize>,
    /// At a request's root: the request, whose object and oldObject a walk
    /// from `request.object` starts at directly ([`JsonContext::request_start`]).
    request: Option<&'p Request>,
}

/// Memoised conditions per request; past this many, the rest are evaluated
/// each time (a linear scan stays cheaper than evaluating).
const MEMO_CAPACITY: usize = 64;

/// The parts of a request's context that cost work to make, made up front
/// only for a policy set that reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Builtins {
    /// The `images` variable: a parse of every container image
    /// (`CompiledPolicy::uses_images`).
    pub images: bool,
    /// The request's CEL variables, shared by the set's `validate.cel`
    /// rules (`CompiledPolicy::uses_cel`). Without them a CEL rule makes
    /// its own, so leaving them out changes no result.
    pub cel: bool,
}

impl Builtins {
    /// What `policies` read.
    pub fn of<'a>(policies: impl IntoIterator<Item = &'a CompiledPolicy>) -> Builtins {
        policies
            .into_iter()
            .fold(Builtins::default(), |b, p| Builtins {
                images: b.images || p.uses_images,
                cel: b.cel || p.uses_cel,
            })
    }
}

impl<'p> JsonContext<'p> {
    /// The context of one request: `request.*` and the builtin variables,
    /// with `builtins` made up front.
    pub fn for_request(req: &'p Request, builtins: Builtins) -> JsonContext<'p> {
        let (sa_namespace, sa_name) = req
            .user
            .username
            .strip_prefix("system:serviceaccount:")
            .and_then(|r| r.split_once(':'))
            .unwrap_or_default();
        let mut ctx = JsonContext {
            parent: None,
            scope: Scope::new(Some(("request", Box::new(RequestRoot::new(req)))), 4),
            cel: builtins.cel.then(|| CelRequest::of(req)),
            delete: req.operation == "DELETE",
            memo: Some(RefCell::new(Vec::new())),
            request_replaced: false,
            plan: None,
            operation: crate::matching::operation_index(&req.operation),
            request: Some(req),
        };
        ctx.set("serviceAccountName", Value::String(sa_name.to_string()));
        ctx.set(
            "serviceAccountNamespace",
            Value::String(sa_namespace.to_string()),
        );
        if let Some(images) = builtins
            .images
            .then(|| super::images::images_of(req.resource().value()))
            .flatten()
        {
            ctx.set("images", images);
        }
        ctx
    }

    /// A context holding the top-level fields of `data` (tests, and callers
    /// with no request).
    pub fn from_value(data: Value) -> JsonContext<'static> {
        let delete = data.pointer("/request/operation").and_then(Value::as_str) == Some("DELETE");
        let mut scope = Scope::new(None, 0);
        if let Value::Object(m) = data {
            for (k, v) in m {
                scope.set(k, Slot::Own(v));
            }
        }
        JsonContext {
            parent: None,
            scope,
            cel: None,
            delete,
            memo: None,
            request_replaced: false,
            plan: None,
            operation: None,
            request: None,
        }
    }

    /// A scope over this one: what is set in it is gone when it is dropped.
    pub fn child(&'p self) -> JsonContext<'p> {
        JsonContext {
            parent: Some(self),
            scope: self.scope.child(),
            cel: None,
            delete: self.delete,
            memo: None,
            request_replaced: self.request_replaced,
            plan: None,
            operation: None,
            request: None,
        }
    }

    /// Lets the rules evaluated in this request's context use `plan`,
    /// the plan of the policy set they belong to.
    pub fn attach_plan(&mut self, plan: &'p Plan, req: &'p Request) {
        self.plan = Some(PlanForRequest::new(plan, req));
        // The policies evaluated with this request's CEL variables read
        // its answers too (ValidatingPolicies).
        if let Some(cel) = &mut self.cel {
            cel.attach_plan(plan);
        }
    }

    /// The plan attached to this request's context, if any.
    pub fn plan(&self) -> Option<&PlanForRequest<'p>> {
        match (&self.plan, self.parent) {
            (Some(plan), _) => Some(plan),
            (None, Some(parent)) => parent.plan(),
            (None, None) => None,
        }
    }

    /// The memoised result of condition `id` for this request, if any.
    pub fn memo_get(&self, id: u32) -> Option<bool> {
        let memo = self.memo_cell()?.borrow();
        memo.iter().find(|(i, _)| *i == id).map(|(_, r)| *r)
    }

    /// Records the result of condition `id` for this request.
    pub fn memo_put(&self, id: u32, result: bool) {
        if let Some(cell) = self.memo_cell() {
            let mut memo = cell.borrow_mut();
            if memo.len() < MEMO_CAPACITY {
                memo.push((id, result));
            }
        }
    }

    /// The admission operation of the request this context is for, while
    /// `request` is still that request's (see `memo_cell`); `None` for a
    /// context of no admission request.
    pub fn request_operation(&self) -> Option<usize> {
        self.own_root()?.operation
    }

    /// Where compiled walk `expr` starts when its first keys are
    /// `request.object` or `request.oldObject` and `request` is still the
    /// request's own: those keys and the request's object (or oldObject)
    /// as JSON, to start at without looking them up through the scopes.
    pub(in crate::engine) fn request_start(
        &self,
        expr: &Expression,
    ) -> Option<([&'static str; 2], JsonRef<'p>)> {
        const OBJECT: [&str; 2] = ["request", "object"];
        const OLD_OBJECT: [&str; 2] = ["request", "oldObject"];
        let req = self.own_root()?.request?;
        if expr.walks_under(&OBJECT) {
            Some((OBJECT, req.object.json()))
        } else if expr.walks_under(&OLD_OBJECT) {
            Some((OLD_OBJECT, req.old_object.json()))
        } else {
            None
        }
    }

    /// [`Expression::stream_strings`] in this context: from the request's
    /// own object where the walk starts there ([`JsonContext::request_start`]),
    /// else through the scopes.
    pub(in crate::engine) fn stream_strings<'a>(
        &'a self,
        expr: &'a Expression,
        each: &mut dyn FnMut(&str),
    ) -> Option<Streamed<'a>> {
        match self.request_start(expr) {
            Some((path, object)) => expr.stream_strings_under(&path, object, each),
            None => expr.stream_strings(self.root(), each),
        }
    }

    /// [`Expression::stream_list`] in this context, started as
    /// [`JsonContext::stream_strings`] starts.
    pub(in crate::engine) fn stream_list<'a>(
        &'a self,
        expr: &'a Expression,
        each: &mut dyn FnMut(JsonRef<'a>),
    ) -> Option<usize> {
        match self.request_start(expr) {
            Some((path, object)) => expr.stream_list_under(&path, object, each),
            None => expr.stream_list(self.root(), each),
        }
    }

    /// The root of the request this context is for (the context that
    /// holds the request), while `request` is still that request's.
    fn own_root(&self) -> Option<&JsonContext<'p>> {
        if self.request_replaced {
            return None;
        }
        match self.parent {
            _ if self.request.is_some() => Some(self),
            Some(p) => p.own_root(),
            None => None,
        }
    }

    /// The request's memo, at its root: only a request's context has one.
    fn memo_cell(&self) -> Option<&RefCell<Vec<(u32, bool)>>> {
        self.own_root()?.memo.as_ref()
    }

    pub fn is_delete(&self) -> bool {
        self.delete
    }

    /// The request's CEL variables, when this context belongs to a request.
    pub fn cel_request(&self) -> Option<&CelRequest<'_>> {
        match (&self.cel, self.parent) {
            (Some(cel), _) => Some(cel),
            (None, Some(p)) => p.cel_request(),
            (None, None) => None,
        }
    }

    /// The context as one JSON-like value for the JMESPath interpreter.
    pub fn root(&self) -> Val<'_> {
        Val::Scope(&self.scope)
    }

    /// Sets a top-level name.
    pub fn set(&mut self, name: impl Into<Cow<'static, str>>, value: Value) {
        let name = name.into();
        self.request_replaced |= name == "request";
        self.scope.set(name, Slot::Own(value));
    }

    /// Sets a top-level name to a value borrowed from an enclosing scope.
    pub fn set_ref(&mut self, name: impl Into<Cow<'static, str>>, value: &'p Value) {
        self.set_slot(name, Slot::Ref(value));
    }

    /// Sets a top-level name to a value borrowed from an enclosing scope
    /// or the request, or computed.
    pub fn set_slot(&mut self, name: impl Into<Cow<'static, str>>, value: Slot<'p>) {
        let name = name.into();
        self.request_replaced |= name == "request";
        self.scope.set(name, value);
    }

    /// Sets a dotted path (`request.object.metadata.name`), creating objects
    /// on the way. The top-level value is copied once and shadowed.
    pub fn set_path(&mut self, path: &str, value: Value) {
        let parts = variable_path(path);
        let [first, rest @ ..] = parts.as_slice() else {
            return;
        };
        if rest.is_empty() {
            self.set(first.to_string(), value);
            return;
        }
        let mut top = match self.scope.field(first) {
            Some(v) => v.into_owned(),
            None => Value::Object(Map::new()),
        };
        let mut cur = &mut top;
        for part in rest {
            if !cur.is_object() {
                *cur = Value::Object(Map::new());
            }
            cur = cur
                .as_object_mut()
                .expect("just made an object")
                .entry(part.to_string())
                .or_insert(Value::Null);
        }
        *cur = value;
        self.set(first.to_string(), top);
    }

    /// A top-level value that is plain JSON (not the request view).
    pub fn get(&self, name: &str) -> Option<JsonRef<'_>> {
        self.scope.get(name)
    }

    /// The whole context as one JSON object.
    pub fn to_value(&self) -> Value {
        self.scope.to_value()
    }
}

/// `request.*` (docs/kyverno-semantics.md#built-in-variables): the
/// admission request's object and oldObject are borrowed; `operation` (read
/// by nearly every policy) is built up front, the other small fields on
/// first use.
struct RequestRoot<'r> {
    req: &'r Request,
    operation: Value,
    rest: OnceCell<Map<String, Value>>,
}

impl<'r> RequestRoot<'r> {
    fn new(req: &'r Request) -> RequestRoot<'r> {
        RequestRoot {
            req,
            operation: Value::String(req.operation.clone()),
            rest: OnceCell::new(),
        }
    }

    fn rest(&self) -> &Map<String, Value> {
        self.rest.get_or_init(|| {
            let req = self.req;
            // kyverno-compat: empty user fields are omitted (Go `omitempty`).
            let mut user_info = Map::new();
            if !req.user.username.is_empty() {
                user_info.insert("username".into(), json!(req.user.username));
            }
            if !req.user.groups.is_empty() {
                user_info.insert("groups".into(), json!(req.user.groups));
            }
            let mut fields = Map::new();
            fields.insert("userInfo".into(), Value::Object(user_info));
            fields.insert("namespace".into(), Value::String(req.namespace().into()));
            fields.insert("name".into(), Value::String(req.name().into()));
            // The request's own kinds and resources, as the API server
            // sends them: on a subresource, `kind` is the subresource's
            // (`autoscaling/v1 Scale`) while rules match the parent's.
            let gvk = |k: &Gvk| json!({"group": k.group, "version": k.version, "kind": k.kind});
            let gvr =
                |r: &Gvr| json!({"group": r.group, "version": r.version, "resource": r.resource});
            fields.insert("kind".into(), gvk(&req.object_kind));
            fields.insert("subResource".into(), Value::String(req.subresource.clone()));
            if req.from_review {
                fields.insert("resource".into(), gvr(&req.gvr));
                fields.insert("requestKind".into(), gvk(&req.request_kind));
                fields.insert("requestResource".into(), gvr(&req.request_resource));
                fields.insert(
                    "requestSubResource".into(),
                    Value::String(req.request_sub_resource.clone()),
                );
                fields.insert("dryRun".into(), Value::Bool(req.dry_run));
            }
            if !req.user.roles.is_empty() {
                fields.insert("roles".into(), json!(req.user.roles));
            }
            if !req.user.cluster_roles.is_empty() {
                fields.insert("clusterRoles".into(), json!(req.user.cluster_roles));
            }
            fields
        })
    }
}

impl Root for RequestRoot<'_> {
    fn field(&self, name: &str) -> Option<Val<'_>> {
        match name {
            "operation" => Some(Val::Ref(&self.operation)),
            "object" => Some(self.req.object.json().into()),
            "oldObject" => Some(self.req.old_object.json().into()),
            _ => self.rest().get(name).map(Val::Ref),
        }
    }

    fn to_value(&self) -> Value {
        let mut m = self.rest().clone();
        m.insert("operation".into(), self.operation.clone());
        m.insert("object".into(), self.req.object.value().clone());
        m.insert("oldObject".into(), self.req.old_object.value().clone());
        Value::Object(m)
    }
}

/// The keys of a variable's dotted path, read as Kyverno's `AddVariable`
/// reads them (a CSV record with `.` for the comma): a key in double
/// quotes may hold dots (`metadata.annotations."example.com/team"`), and
/// `""` in it is a quote. A path without quotes borrows its keys (the
/// common case, on every request's context entries).
fn variable_path(path: &str) -> Vec<std::borrow::Cow<'_, str>> {
    if !path.contains('"') {
        return path.split('.').map(std::borrow::Cow::Borrowed).collect();
    }
    let mut keys = Vec::new();
    let mut chars = path.chars().peekable();
    loop {
        let mut key = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        key.push('"');
                    }
                    '"' => break,
                    c => key.push(c),
                }
            }
            // Anything between the closing quote and the next dot is kept.
            while let Some(&c) = chars.peek() {
                if c == '.' {
                    break;
                }
                key.push(c);
                chars.next();
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' {
                    break;
                }
                key.push(c);
                chars.next();
            }
        }
        keys.push(std::borrow::Cow::Owned(key));
        if chars.next().is_none() {
            return keys;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jmespath::Expression;
    use serde_json::json;

    fn search(ctx: &JsonContext, expr: &str) -> Value {
        Expression::parse(expr)
            .unwrap()
            .resolve_val(ctx.root())
            .map(Val::into_owned)
            .unwrap_or(Value::String("<error>".into()))
    }

    #[test]
    fn variable_paths_read_quoted_keys() {
        for (path, want) in [
            ("a.b.c", vec!["a", "b", "c"]),
            (
                r#"request.object.metadata.annotations."example.com/team""#,
                vec![
                    "request",
                    "object",
                    "metadata",
                    "annotations",
                    "example.com/team",
                ],
            ),
            (r#""say ""hi"".x".y"#, vec![r#"say "hi".x"#, "y"]),
            ("single", vec!["single"]),
        ] {
            assert_eq!(variable_path(path), want, "{path}");
        }
    }

    #[test]
    fn scopes_shadow_and_drop() {
        let base = JsonContext::from_value(json!({"request": {"operation": "CREATE"}}));
        {
            let mut child = base.child();
            child.set("element", json!(1));
            child.set_path("request.object.metadata.name", json!("x"));
            assert_eq!(search(&child, "request.object.metadata.name"), json!("x"));
            assert_eq!(search(&child, "request.operation"), json!("CREATE"));
            assert_eq!(search(&child, "element"), json!(1));
        }
        assert_eq!(search(&base, "element"), json!("<error>"));
        assert_eq!(base.to_value(), json!({"request": {"operation": "CREATE"}}));
    }

    #[test]
    fn request_view_matches_the_built_object() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}});
        let req = Request::offline(&pod, "CREATE", Default::default(), None);
        let ctx = JsonContext::for_request(&req, Builtins::default());
        assert_eq!(search(&ctx, "request.object.metadata.name"), json!("p"));
        assert_eq!(search(&ctx, "request.namespace"), json!("ns"));
        assert_eq!(search(&ctx, "request.kind.kind"), json!("Pod"));
        assert_eq!(search(&ctx, "request.missing"), json!("<error>"));
        assert_eq!(search(&ctx, "keys(request) | length(@)"), json!(8));
        assert_eq!(search(&ctx, "serviceAccountName"), json!(""));
    }

    #[test]
    fn memo_is_shared_down_the_scopes_until_request_is_replaced() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let req = Request::offline(&pod, "CREATE", Default::default(), None);
        let root = JsonContext::for_request(&req, Builtins::default());
        root.memo_put(7, true);
        let mut child = root.child();
        assert_eq!(child.memo_get(7), Some(true));
        child.set("element", json!(1));
        assert_eq!(child.memo_get(7), Some(true));
        {
            let mut replaced = child.child();
            replaced.set_path("request.operation", json!("DELETE"));
            assert_eq!(replaced.memo_get(7), None);
            // A scope under the replacement sees it too.
            assert_eq!(replaced.child().memo_get(7), None);
        }
        assert_eq!(child.memo_get(7), Some(true));
        // Only a request's context has a memo.
        let plain = JsonContext::from_value(json!({"request": {"operation": "CREATE"}}));
        plain.memo_put(7, true);
        assert_eq!(plain.memo_get(7), None);
    }

    /// A condition the request's operation alone decides is decided per
    /// operation when its set is planned, and a request's own context
    /// reads that table; a scope that replaced `request`, and a context of
    /// no admission request, evaluate it. A condition that reads anything
    /// else, or calls a function (the clock), gets no table.
    #[test]
    fn conditions_decided_by_operation_are_read_from_their_table() {
        use crate::policy::compile::ValidateRule;
        use crate::policy::{Conditions, RuleBody, ValidateCheck};
        let deny = |key: &str| {
            compiled(&format!(
                "deny: {{conditions: {{all: [{{key: \"{key}\", operator: Equals, value: DELETE}}]}}}}"
            ))
        };
        let mut policies = vec![
            deny("{{ request.operation || 'BACKGROUND' }}"),
            deny("{{ request.operation }}"),
            deny("{{ to_upper(request.operation) }}"),
            deny("{{ time_now_utc() }}"),
            deny("{{ request.object.metadata.name }}"),
        ];
        crate::engine::plan_set(&mut policies);
        fn conditions(p: &mut CompiledPolicy) -> &mut Conditions {
            match &mut p.rules[0].body {
                RuleBody::Validate(ValidateRule {
                    check: ValidateCheck::Deny(c),
                    ..
                }) => c,
                _ => unreachable!("a deny rule"),
            }
        }
        let table = |p: &mut CompiledPolicy| conditions(p).all.as_ref().unwrap()[0].by_operation;
        // CREATE, UPDATE, DELETE, CONNECT.
        let delete_only = Some([Some(false), Some(false), Some(true), Some(false)]);
        assert_eq!(table(&mut policies[0]), delete_only);
        assert_eq!(table(&mut policies[1]), delete_only);
        for p in &mut policies[2..] {
            assert_eq!(table(p), None);
        }
        // The table is what a request's context reads: made to say
        // otherwise, it answers otherwise; evaluating does not.
        let c = conditions(&mut policies[0]);
        c.all.as_mut().unwrap()[0].by_operation = Some([Some(true); 4]);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let req = Request::offline(&pod, "CREATE", Default::default(), None);
        let exprs = crate::policy::ExprCache::default();
        let ctx = JsonContext::for_request(&req, Builtins::default());
        let holds = |ctx: &JsonContext| {
            super::super::validate::eval_conditions(c, ctx, &exprs)
                .unwrap()
                .0
        };
        assert!(holds(&ctx));
        assert!(holds(&ctx.child()));
        let mut replaced = ctx.child();
        replaced.set_path("request.operation", json!("CREATE"));
        assert!(!holds(&replaced));
        let plain = JsonContext::from_value(json!({"request": {"operation": "CREATE"}}));
        assert!(!holds(&plain));
        let background = Request::offline(&pod, "", Default::default(), None);
        assert!(!holds(&JsonContext::for_request(
            &background,
            Builtins::default()
        )));
    }

    /// A walk from the request's own object or oldObject starts there,
    /// in the request's context and the scopes under it, but not where
    /// `request` was replaced, nor for a walk from anywhere else.
    #[test]
    fn walks_from_the_request_object_start_there() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        // An offline UPDATE holds the resource as object and oldObject.
        let req = Request::offline(&pod, "UPDATE", Default::default(), None);
        let ctx = JsonContext::for_request(&req, Builtins::default());
        let walk = |s: &str| Expression::parse(s).unwrap();
        let (object, old_object) = (
            walk("request.object.spec[]"),
            walk("request.oldObject.a[].b"),
        );
        let name = |r: Option<([&'static str; 2], JsonRef)>| {
            r.map(|(path, j)| (path, j.to_value().pointer("/metadata/name").cloned()))
        };
        assert_eq!(
            name(ctx.request_start(&object)),
            Some((["request", "object"], Some(json!("p"))))
        );
        assert_eq!(
            name(ctx.child().request_start(&old_object)),
            Some((["request", "oldObject"], Some(json!("p"))))
        );
        assert!(ctx.request_start(&walk("element.spec[]")).is_none());
        assert!(
            ctx.request_start(&walk("request.object")).is_none(),
            "not a walk"
        );
        let mut replaced = ctx.child();
        replaced.set_path("request.object.metadata.name", json!("x"));
        assert!(replaced.request_start(&object).is_none());
        let plain = JsonContext::from_value(json!({"request": {"object": pod}}));
        assert!(plain.request_start(&object).is_none());
    }

    fn compiled(rule: &str) -> CompiledPolicy {
        let yaml = format!(
            "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {{name: p}}\n\
             spec:\n  validationFailureAction: Enforce\n  rules:\n  - name: r\n    \
             match: {{any: [{{resources: {{kinds: [Pod]}}}}]}}\n    validate:\n      {rule}\n"
        );
        let docs = crate::policy::load::load_policy_text("p.yaml", &yaml).unwrap();
        let crate::policy::load::LoadedDocument::Policy(doc) = docs.into_iter().next().unwrap()
        else {
            panic!("not a policy")
        };
        CompiledPolicy::compile(&doc).unwrap()
    }

    /// A set's builtins follow what its rules read, and a CEL rule answers
    /// the same whether the request's CEL variables were made up front.
    #[test]
    fn builtins_follow_what_the_rules_read() {
        let cel = compiled("cel: {expressions: [{expression: 'object.metadata.name == \"p\"'}]}");
        let images = compiled(
            "deny: {conditions: {all: [{key: '{{ images }}', operator: Equals, value: x}]}}",
        );
        let pattern = compiled("pattern: {metadata: {name: p}}");
        assert_eq!(
            Builtins::of([&cel]),
            Builtins {
                images: false,
                cel: true
            }
        );
        assert_eq!(
            Builtins::of([&images]),
            Builtins {
                images: true,
                cel: false
            }
        );
        assert_eq!(Builtins::of([&pattern]), Builtins::default());
        assert_eq!(
            Builtins::of([&cel, &images, &pattern]),
            Builtins {
                images: true,
                cel: true
            }
        );
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"}});
        let req = Request::offline(&pod, "CREATE", Default::default(), None);
        let env = crate::engine::EvalEnv {
            resolver: &crate::context::NoResolver,
            exceptions: &[],
            rule_values: &(),
        };
        let answer = |builtins| {
            let ctx = req.json_context(builtins);
            let response = crate::engine::validate::evaluate_policy(&cel, &req, &ctx, &env);
            format!("{:?}", response.rules)
        };
        let made = answer(Builtins::of([&cel]));
        assert!(made.contains("Fail"), "{made}");
        assert_eq!(answer(Builtins::default()), made);
    }
}
