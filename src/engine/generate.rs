//! Generate rules (docs/kyverno-semantics.md#generate-rules): the downstream
//! resources a trigger produces, from `data`, `clone`, `cloneList` or
//! `foreach`, with Kyverno's labels (docs/kyverno-semantics.md#downstream-labels).
//! Creating them in a cluster is the background controller's job; the engine
//! only computes them.

use super::json_context::JsonContext;
use super::validate::{before_body, eval_conditions, foreach_list};
use super::variables::Substituter;
use super::{EvalEnv, PolicyResponse, Request, RuleResponse, RuleStatus, RuleType};
use crate::matching::selector_matches;
use crate::policy::compile::PolicyScope;
use crate::policy::types::GeneratePattern;
use crate::policy::{CompiledPolicy, ExprCache, RuleBody};
use serde_json::{Map, Value};

/// Evaluates the generate rules of `policy` for the trigger `req.object`.
/// Each applied rule's response carries its downstream resources.
pub fn generate_policy<'p>(
    policy: &'p CompiledPolicy,
    req: &Request,
    ctx: &JsonContext,
    env: &EvalEnv,
) -> PolicyResponse<'p> {
    let mut rules = Vec::new();
    let in_scope = policy.scope != PolicyScope::Namespaced
        || policy.namespace.as_deref() == Some(req.namespace());
    let input = req.match_input();
    for rule in policy.rules.iter().filter(|_| in_scope) {
        let RuleBody::Generate(g) = &rule.body else {
            continue;
        };
        if !rule.selects(&input) {
            continue;
        }
        let name = rule.name.as_str();
        let respond = |status, message: String| {
            RuleResponse::new(name, status, message).of_type(RuleType::Generation)
        };
        let mut rctx = ctx.child();
        if let Some(stop) = before_body(policy, rule, req, &mut rctx, env) {
            rules.push(stop.of_type(RuleType::Generation));
            continue;
        }
        let builder = Builder {
            policy,
            rule: name,
            trigger: req.resource().value(),
            exprs: &policy.exprs,
            env,
        };
        let result = if g.spec.foreach.is_empty() {
            builder.build(&g.spec.pattern, &rctx)
        } else {
            builder.foreach(g, &rctx)
        };
        rules.push(match result {
            Err(e) => respond(RuleStatus::Error, e),
            Ok(resources) if resources.is_empty() => {
                respond(RuleStatus::Skip, "no resources to generate".into())
            }
            // Kyverno's background engine passes a generate rule with no
            // message.
            Ok(resources) => respond(RuleStatus::Pass, String::new()).with_resources(resources),
        });
    }
    PolicyResponse {
        policy: policy.qualified_name(),
        rules: rules.into(),
    }
}

struct Builder<'a> {
    policy: &'a CompiledPolicy,
    rule: &'a str,
    trigger: &'a Value,
    exprs: &'a ExprCache,
    env: &'a EvalEnv<'a>,
}

impl Builder<'_> {
    fn foreach(
        &self,
        g: &crate::policy::mutation::GenerateRule,
        ctx: &JsonContext,
    ) -> Result<Vec<Value>, String> {
        let mut out = Vec::new();
        for (fe, pre) in g.spec.foreach.iter().zip(&g.foreach_preconditions) {
            let items = foreach_list(&fe.list, None, ctx, self.exprs)
                .map_err(|e| format!("failed to evaluate list {}: {e}", fe.list))?
                .into_owned();
            let items = match items {
                Value::Null => Vec::new(),
                Value::Array(a) => a,
                other => vec![other],
            };
            for (index, item) in items.iter().enumerate() {
                let mut scope = ctx.child();
                scope.set_ref("element", item);
                scope.set("elementIndex", Value::from(index));
                super::context_loader::load(
                    &fe.context,
                    &mut scope,
                    self.exprs,
                    self.env.resolver,
                )?;
                if let Some(pre) = pre {
                    match eval_conditions(pre, &scope, self.exprs) {
                        Ok((true, _)) => {}
                        Ok((false, _)) => continue,
                        Err(e) => return Err(format!("failed to evaluate preconditions: {e}")),
                    }
                }
                out.extend(self.build(&fe.pattern, &scope)?);
            }
        }
        Ok(out)
    }

    /// The resources of one generate pattern.
    fn build(&self, p: &GeneratePattern, ctx: &JsonContext) -> Result<Vec<Value>, String> {
        let sub = Substituter {
            ctx,
            exprs: self.exprs,
        };
        let text = |s: &Option<String>| -> Result<String, String> {
            match s {
                None => Ok(String::new()),
                Some(s) => match sub.string(s) {
                    Ok(Value::String(v)) => Ok(v),
                    Ok(other) => Ok(other.to_string()),
                    Err(e) => Err(format!("variable substitution failed: {e}")),
                },
            }
        };
        let name = text(&p.name)?;
        let namespace = text(&p.namespace)?;
        let api_version = p.api_version.clone().unwrap_or_default();
        let kind = p.kind.clone().unwrap_or_default();
        if let Some(list) = &p.clone_list {
            let mut out = Vec::new();
            for k in &list.kinds {
                let (api, kind) = k.rsplit_once('/').unwrap_or(("v1", k));
                let sources = self
                    .env
                    .resolver
                    .resources(api, kind, &list.namespace)
                    .map_err(|e| e.to_string())?;
                for source in sources {
                    let labels = source
                        .pointer("/metadata/labels")
                        .and_then(Value::as_object);
                    if list
                        .selector
                        .as_ref()
                        .is_some_and(|s| !selector_matches(s, labels))
                    {
                        continue;
                    }
                    let source_name = source
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    out.push(self.downstream(
                        source.clone(),
                        Some(&source),
                        &namespace,
                        &source_name,
                    ));
                }
            }
            return Ok(out);
        }
        let (body, source) = if let Some(c) = &p.clone {
            let source = self
                .env
                .resolver
                .resource(&api_version, &kind, &c.namespace, &c.name)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| {
                    format!(
                        "source resource {api_version}/{kind}/{}/{} not found",
                        c.namespace, c.name
                    )
                })?;
            (source.clone(), Some(source))
        } else {
            let data = match &p.data {
                Some(d) => sub
                    .value(d)
                    .map_err(|e| format!("variable substitution failed: {e}"))?,
                None => Value::Object(Map::new()),
            };
            (data, None)
        };
        let mut resource = self.downstream(body, source.as_ref(), &namespace, &name);
        if let Value::Object(m) = &mut resource {
            m.insert("apiVersion".into(), Value::String(api_version));
            m.insert("kind".into(), Value::String(kind));
        }
        Ok(vec![resource])
    }

    /// `body` as a downstream resource: identity set, server fields of a
    /// clone source dropped, Kyverno's labels added.
    fn downstream(
        &self,
        body: Value,
        source: Option<&Value>,
        namespace: &str,
        name: &str,
    ) -> Value {
        let mut resource = match body {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        let meta = resource
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        let meta = meta.as_object_mut().expect("metadata is an object");
        for server_field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
            "selfLink",
            "ownerReferences",
        ] {
            if source.is_some() {
                meta.remove(server_field);
            }
        }
        meta.insert("name".into(), Value::String(name.to_string()));
        if namespace.is_empty() {
            meta.remove("namespace");
        } else {
            meta.insert("namespace".into(), Value::String(namespace.to_string()));
        }
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(labels) = labels {
            for (k, v) in self.labels(source) {
                labels.insert(k, Value::String(v));
            }
        }
        if source.is_some() {
            resource.remove("status");
        }
        Value::Object(resource)
    }

    /// Managed-by, policy, rule, trigger and (for clones) source labels
    /// (docs/kyverno-semantics.md#downstream-labels).
    fn labels(&self, source: Option<&Value>) -> Vec<(String, String)> {
        let field = |v: &Value, p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let gv = |v: &Value| {
            let api = field(v, "/apiVersion");
            match api.split_once('/') {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (String::new(), api),
            }
        };
        let mut out = vec![
            (
                "app.kubernetes.io/managed-by".to_string(),
                "kyverno".to_string(),
            ),
            (
                "generate.kyverno.io/policy-name".into(),
                self.policy.name.clone(),
            ),
            (
                "generate.kyverno.io/policy-namespace".into(),
                self.policy.namespace.clone().unwrap_or_default(),
            ),
            (
                "generate.kyverno.io/rule-name".into(),
                self.rule.to_string(),
            ),
        ];
        let t = self.trigger;
        let (group, version) = gv(t);
        out.extend([
            (
                "generate.kyverno.io/trigger-name".into(),
                field(t, "/metadata/name"),
            ),
            (
                "generate.kyverno.io/trigger-namespace".into(),
                field(t, "/metadata/namespace"),
            ),
            (
                "generate.kyverno.io/trigger-uid".into(),
                field(t, "/metadata/uid"),
            ),
            ("generate.kyverno.io/trigger-kind".into(), field(t, "/kind")),
            ("generate.kyverno.io/trigger-group".into(), group),
            ("generate.kyverno.io/trigger-version".into(), version),
        ]);
        if let Some(s) = source {
            let (group, version) = gv(s);
            out.extend([
                (
                    "generate.kyverno.io/source-name".into(),
                    field(s, "/metadata/name"),
                ),
                (
                    "generate.kyverno.io/source-namespace".into(),
                    field(s, "/metadata/namespace"),
                ),
                (
                    "generate.kyverno.io/source-uid".into(),
                    field(s, "/metadata/uid"),
                ),
                ("generate.kyverno.io/source-kind".into(), field(s, "/kind")),
                ("generate.kyverno.io/source-group".into(), group),
                ("generate.kyverno.io/source-version".into(), version),
            ]);
        }
        out
    }
}
