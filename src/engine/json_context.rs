//! The JSON context (§4.2): `request`, builtin variables, context entries
//! and foreach elements, read by rules through JMESPath.
//!
//! It is layered rather than one JSON object: a rule or a foreach element
//! gets a child scope over its parent, so leaving a scope is dropping it, and
//! the request object and foreach elements are borrowed, never copied. The
//! layers are a JMESPath [`Scope`], which the interpreter reads as one
//! object; `request` is a [`Root`] in it, served field by field.

use super::Request;
use super::cel::CelRequest;
use crate::jmespath::{Root, Scope, Val};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::cell::OnceCell;

pub use crate::jmespath::Slot;

pub struct JsonContext<'p> {
    parent: Option<&'p JsonContext<'p>>,
    scope: Scope<'p>,
    /// The request's CEL variables, at the root of a request's context:
    /// converted on first use and shared by every CEL rule evaluated for it.
    cel: Option<(&'p Request, OnceCell<CelRequest>)>,
    delete: bool,
}

impl<'p> JsonContext<'p> {
    /// The context of one request: `request.*` and the builtin variables;
    /// `images` only when a policy reads it (see `CompiledPolicy::uses_images`).
    pub fn for_request(req: &'p Request, with_images: bool) -> JsonContext<'p> {
        let (sa_namespace, sa_name) = req
            .user
            .username
            .strip_prefix("system:serviceaccount:")
            .and_then(|r| r.split_once(':'))
            .unwrap_or_default();
        let mut ctx = JsonContext {
            parent: None,
            scope: Scope::new(Some(("request", Box::new(RequestRoot::new(req)))), 4),
            cel: Some((req, OnceCell::new())),
            delete: req.operation == "DELETE",
        };
        ctx.set("serviceAccountName", Value::String(sa_name.to_string()));
        ctx.set(
            "serviceAccountNamespace",
            Value::String(sa_namespace.to_string()),
        );
        if let Some(images) = with_images
            .then(|| super::images::images_of(req.resource()))
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
        }
    }

    /// A scope over this one: what is set in it is gone when it is dropped.
    pub fn child(&'p self) -> JsonContext<'p> {
        JsonContext {
            parent: Some(self),
            scope: self.scope.child(),
            cel: None,
            delete: self.delete,
        }
    }

    pub fn is_delete(&self) -> bool {
        self.delete
    }

    /// The request's CEL variables, when this context belongs to a request.
    pub fn cel_request(&self) -> Option<&CelRequest> {
        match (&self.cel, self.parent) {
            (Some((req, cel)), _) => Some(cel.get_or_init(|| CelRequest::of(req))),
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
        self.scope.set(name, Slot::Own(value));
    }

    /// Sets a top-level name to a value borrowed from an enclosing scope.
    pub fn set_ref(&mut self, name: impl Into<Cow<'static, str>>, value: &'p Value) {
        self.scope.set(name, Slot::Ref(value));
    }

    /// Sets a dotted path (`request.object.metadata.name`), creating objects
    /// on the way. The top-level value is copied once and shadowed.
    pub fn set_path(&mut self, path: &str, value: Value) {
        let Some((first, rest)) = path.split_once('.') else {
            self.set(path.to_string(), value);
            return;
        };
        let mut top = match self.scope.field(first) {
            Some(v) => v.into_owned(),
            None => Value::Object(Map::new()),
        };
        let mut cur = &mut top;
        for part in rest.split('.') {
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
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.scope.get(name)
    }

    /// The whole context as one JSON object.
    pub fn to_value(&self) -> Value {
        self.scope.to_value()
    }
}

/// `request.*` (§4.2): the admission request's object and oldObject are
/// borrowed; `operation` (read by nearly every policy) is built up front,
/// the other small fields on first use.
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
            fields.insert(
                "kind".into(),
                json!({"group": req.gvk.group, "version": req.gvk.version, "kind": req.gvk.kind}),
            );
            fields.insert("subResource".into(), Value::String(req.subresource.clone()));
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
            "object" => Some(Val::Ref(&self.req.object)),
            "oldObject" => Some(Val::Ref(&self.req.old_object)),
            _ => self.rest().get(name).map(Val::Ref),
        }
    }

    fn to_value(&self) -> Value {
        let mut m = self.rest().clone();
        m.insert("operation".into(), self.operation.clone());
        m.insert("object".into(), self.req.object.clone());
        m.insert("oldObject".into(), self.req.old_object.clone());
        Value::Object(m)
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
        let ctx = JsonContext::for_request(&req, false);
        assert_eq!(search(&ctx, "request.object.metadata.name"), json!("p"));
        assert_eq!(search(&ctx, "request.namespace"), json!("ns"));
        assert_eq!(search(&ctx, "request.kind.kind"), json!("Pod"));
        assert_eq!(search(&ctx, "request.missing"), json!("<error>"));
        assert_eq!(search(&ctx, "keys(request) | length(@)"), json!(8));
        assert_eq!(search(&ctx, "serviceAccountName"), json!(""));
    }
}
