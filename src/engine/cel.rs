//! CEL evaluation: the variables a request gives (`object`, `oldObject`,
//! `request`, `namespaceObject`, `variables`), lookups through the
//! [`Resolver`], and the checks of `validate.cel` and of the validating
//! policy kinds.

use super::Request;
use crate::cel::values::{cel_to_json, json_to_cel};
use crate::cel::{Activation, CelError, Lookup, Lookups};
use crate::context::{ApiCallRequest, Resolver};
use crate::policy::cel_policy::{CelChecks, CompiledNamed};
use kube_cel::cel::Value as CelValue;
use kube_cel::cel::objects::{Key, Map};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// The plural resource name the API server would guess for a kind
/// (`meta.UnsafeGuessKindToResource`), for the kinds without an irregular one.
pub fn plural_of(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    match lower.as_str() {
        "endpoints" => return lower,
        _ => {}
    }
    if lower.ends_with('s') {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

/// The CEL variables of one request, converted once and shared by every
/// CEL rule and policy evaluated for it.
#[derive(Clone)]
pub struct CelRequest {
    vars: Activation,
}

impl CelRequest {
    pub fn of(req: &Request) -> CelRequest {
        let mut vars = Activation::default();
        vars.set("object", json_to_cel(&req.object));
        vars.set("oldObject", json_to_cel(&req.old_object));
        vars.set("request", json_to_cel(&request_json(req)));
        vars.set("namespaceObject", json_to_cel(&namespace_object(req)));
        vars.set("params", CelValue::Null);
        vars.set("variables", empty_map());
        CelRequest { vars }
    }

    /// The same request seen through a Pod controller's template: `object`
    /// and `oldObject` have the template's metadata and spec (what autogen
    /// rewrites `object.spec`/`object.metadata` to).
    pub fn with_template(&self, req: &Request, template: &[&str]) -> CelRequest {
        let mut out = self.clone();
        let view = |o: &Value| -> Value {
            let Some(map) = o.as_object() else {
                return o.clone();
            };
            let mut t = o;
            for k in template {
                t = t.get(*k).unwrap_or(&Value::Null);
            }
            let mut m = map.clone();
            m.insert(
                "metadata".into(),
                t.get("metadata").cloned().unwrap_or(json!({})),
            );
            m.insert("spec".into(), t.get("spec").cloned().unwrap_or(json!({})));
            Value::Object(m)
        };
        out.vars.set("object", json_to_cel(&view(&req.object)));
        out.vars
            .set("oldObject", json_to_cel(&view(&req.old_object)));
        out
    }

    pub fn activation(&self) -> &Activation {
        &self.vars
    }
}

fn empty_map() -> CelValue {
    CelValue::Map(Map {
        map: Arc::new(HashMap::new()),
    })
}

fn request_json(req: &Request) -> Value {
    let gvk = json!({"group": req.gvk.group, "version": req.gvk.version, "kind": req.gvk.kind});
    json!({
        "kind": gvk,
        "requestKind": gvk,
        "resource": {"group": req.gvk.group, "version": req.gvk.version, "resource": plural_of(&req.gvk.kind)},
        "subResource": req.subresource,
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
                let kind = r
                    .kind_for_resource(api_version, resource)
                    .ok_or_else(|| format!("unknown resource {resource:?} in {api_version}"))?;
                r.resource(api_version, &kind, namespace, name)
                    .map_err(failed)?
                    .ok_or_else(|| format!("{resource} \"{name}\" not found"))
            }
            Lookup::ResourceList {
                api_version,
                resource,
                namespace,
            } => {
                let kind = r
                    .kind_for_resource(api_version, resource)
                    .ok_or_else(|| format!("unknown resource {resource:?} in {api_version}"))?;
                let items = r.resources(api_version, &kind, namespace).map_err(failed)?;
                Ok(
                    json!({"apiVersion": api_version, "kind": format!("{kind}List"), "items": items}),
                )
            }
            Lookup::GlobalContext { name, .. } => r
                .global_context(name)
                .map_err(failed)?
                .map(|v| (*v).clone())
                .ok_or_else(|| format!("global context entry {name:?} not found")),
            Lookup::ImageMetadata(image) => {
                r.image_metadata(image).map_err(failed)?.ok_or_else(|| {
                    format!(
                        "no metadata for image {image:?} (image registries are not reachable here)"
                    )
                })
            }
            Lookup::Http { method, url, body } => r
                .api_call(&ApiCallRequest {
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

/// Evaluates `variables` in order into the activation: each sees the ones
/// before it. A variable that fails is left out, so only an expression
/// that reads it fails (the API server evaluates variables lazily).
pub fn bind_variables(
    base: &Activation,
    variables: &[CompiledNamed],
    lookups: &dyn Lookups,
) -> Activation {
    let mut vars = base.clone();
    if variables.is_empty() {
        return vars;
    }
    let mut map: HashMap<Key, CelValue> = HashMap::new();
    for v in variables {
        if let Ok(value) = v.program.eval(&vars, lookups) {
            map.insert(Key::String(Arc::new(v.name.clone())), value);
            vars.set(
                "variables",
                CelValue::Map(Map {
                    map: Arc::new(map.clone()),
                }),
            );
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
    for c in conditions {
        if !c.program.eval_bool(vars, lookups)? {
            return Ok(Some(c.name.clone()));
        }
    }
    Ok(None)
}

/// Runs the validations of `checks` with `vars` (variables already bound).
pub fn run_validations(checks: &CelChecks, vars: &Activation, lookups: &dyn Lookups) -> CelVerdict {
    let mut failures = Vec::new();
    for v in &checks.validations {
        match v.program.eval_bool(vars, lookups) {
            Ok(true) => {}
            Ok(false) => {
                let message = match &v.message_expression {
                    Some(p) => match p.eval(vars, lookups).map(|m| cel_to_json(&m)) {
                        Ok(Ok(Value::String(s))) if !s.trim().is_empty() => Some(s),
                        _ => None,
                    },
                    None => None,
                };
                let message = message
                    .or_else(|| v.message.clone().filter(|m| !m.is_empty()))
                    .unwrap_or_else(|| format!("failed expression: {}", v.program.source().trim()));
                failures.push(message);
            }
            // As the API server's admission policies do under
            // failurePolicy Fail: an expression that cannot be evaluated
            // denies.
            Err(e) => failures.push(format!(
                "expression '{}' resulted in error: {e}",
                v.program.source().trim()
            )),
        }
    }
    if failures.is_empty() {
        CelVerdict::Pass
    } else {
        CelVerdict::Fail(failures.join("; "))
    }
}

/// `validate.cel` of a rule: celPreconditions, variables, expressions.
pub fn validate_rule(
    checks: &CelChecks,
    preconditions: &[CompiledNamed],
    input: &CelRequest,
    resolver: &dyn Resolver,
) -> CelVerdict {
    let lookups = ResolverLookups(resolver);
    match conditions_hold(preconditions, input.activation(), &lookups) {
        Ok(None) => {}
        Ok(Some(name)) => {
            return CelVerdict::NotMatched(format!("cel precondition {name:?} not met"));
        }
        Err(e) => return CelVerdict::Error(format!("failed to evaluate cel preconditions: {e}")),
    }
    let vars = bind_variables(input.activation(), &checks.variables, &lookups);
    run_validations(checks, &vars, &lookups)
}
