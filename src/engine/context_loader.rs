//! Context entries (docs/kyverno-semantics.md#context-entries): variable,
//! configMap, apiCall, globalReference and imageRegistry, loaded in order
//! into the JSON context. External data comes from the [`Resolver`]; an
//! unavailable source leaves the name undefined.

use super::json_context::JsonContext;
use super::variables::Substituter;
use crate::context::ResolveError;
use crate::context::{ApiCallRequest, Resolver};
use crate::jmespath::Val;
use crate::policy::ExprCache;
use crate::policy::types::{ApiCall, ConfigMapReference, ContextEntry, GlobalReference, Variable};
use serde_json::{Map, Value};

/// Why a rule's context could not be loaded: the rule errors with this
/// message, in Kyverno's words.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("failed to load context entry {entry:?}: {cause}")]
pub struct ContextError {
    pub entry: String,
    pub cause: EntryError,
}

/// What went wrong in one entry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EntryError {
    /// A variable in the entry could not be substituted.
    #[error("{0}")]
    Substitution(String),
    /// The entry's JMESPath failed on its value or answer, and it has no
    /// default.
    #[error("failed to apply jmespath {path}: {reason}")]
    JmesPath { path: String, reason: String },
    /// A `variable`'s JMESPath failed on the context, and it has no
    /// default.
    #[error("failed to apply jmespath {path} to context: {reason}")]
    JmesPathOnContext { path: String, reason: String },
    /// A `globalReference`'s JMESPath failed.
    #[error("{0}")]
    Query(String),
    /// A `variable` came out nil, with no default.
    #[error("unable to add context entry for variable {0} since it evaluated to nil")]
    Nil(String),
    /// The lookup failed (a ConfigMap, an API call without a default, a
    /// global context entry).
    #[error(transparent)]
    Lookup(#[from] ResolveError),
}

/// The rule's message, where a caller words its error as text.
impl From<ContextError> for String {
    fn from(e: ContextError) -> String {
        e.to_string()
    }
}

fn query(exprs: &ExprCache, source: &str, root: Val) -> Result<Value, String> {
    exprs
        .resolve(source, root)
        .map(Val::into_owned)
        .map_err(|e| e.to_string())
}

fn substitute(ctx: &JsonContext, exprs: &ExprCache, v: &Value) -> Result<Value, EntryError> {
    Substituter { ctx, exprs }
        .value(v)
        .map_err(|e| EntryError::Substitution(e.to_string()))
}

fn substitute_str(ctx: &JsonContext, exprs: &ExprCache, s: &str) -> Result<String, EntryError> {
    match substitute(ctx, exprs, &Value::String(s.to_string()))? {
        Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

/// Loads `entries` into `ctx`, in order.
pub fn load(
    entries: &[ContextEntry],
    ctx: &mut JsonContext,
    exprs: &ExprCache,
    resolver: &dyn Resolver,
) -> Result<(), ContextError> {
    entries
        .iter()
        .try_for_each(|entry| load_one(entry, ctx, exprs, resolver))
}

/// Loads the entries of `entries` that `order` lists, in its order: the
/// entries one step of a rule reaches
/// ([`crate::policy::deferred_context`]).
pub fn load_deferred(
    entries: &[ContextEntry],
    order: &[usize],
    ctx: &mut JsonContext,
    exprs: &ExprCache,
    resolver: &dyn Resolver,
) -> Result<(), ContextError> {
    order
        .iter()
        .try_for_each(|&i| load_one(&entries[i], ctx, exprs, resolver))
}

fn load_one(
    entry: &ContextEntry,
    ctx: &mut JsonContext,
    exprs: &ExprCache,
    resolver: &dyn Resolver,
) -> Result<(), ContextError> {
    load_entry(entry, ctx, exprs, resolver).map_err(|cause| ContextError {
        entry: entry.name.clone(),
        cause,
    })
}

fn load_entry(
    entry: &ContextEntry,
    ctx: &mut JsonContext,
    exprs: &ExprCache,
    resolver: &dyn Resolver,
) -> Result<(), EntryError> {
    if let Some(var) = &entry.variable {
        return load_variable(&entry.name, var, ctx, exprs);
    }
    if let Some(cm) = &entry.config_map {
        return load_config_map(&entry.name, cm, ctx, exprs, resolver);
    }
    if let Some(call) = &entry.api_call {
        return load_api_call(&entry.name, call, ctx, exprs, resolver);
    }
    if let Some(global) = &entry.global_reference {
        return load_global(&entry.name, global, ctx, exprs, resolver);
    }
    // imageRegistry entries need registry access; offline they are skipped.
    Ok(())
}

/// A `variable` entry: its value or JMESPath (on the context), or its
/// default; nil is an error, as in Kyverno.
fn load_variable(
    entry_name: &str,
    var: &Variable,
    ctx: &mut JsonContext,
    exprs: &ExprCache,
) -> Result<(), EntryError> {
    let path = var
        .jmes_path
        .as_deref()
        .map(|p| substitute_str(ctx, exprs, p))
        .transpose()?;
    let default = var
        .default
        .as_ref()
        .map(|d| substitute(ctx, exprs, d))
        .transpose()?;
    let output = if let Some(value) = &var.value {
        let value = substitute(ctx, exprs, value)?;
        match &path {
            Some(p) => match query(exprs, p, Val::Ref(&value)) {
                Ok(v) if !v.is_null() => Some(v),
                Ok(_) => default,
                Err(reason) => Some(default.ok_or_else(|| EntryError::JmesPath {
                    path: p.clone(),
                    reason,
                })?),
            },
            None => Some(value),
        }
    } else if let Some(p) = &path {
        match query(exprs, p, ctx.root()) {
            Ok(v) if !v.is_null() => Some(v),
            Ok(_) => default,
            Err(reason) => Some(default.ok_or_else(|| EntryError::JmesPathOnContext {
                path: p.clone(),
                reason,
            })?),
        }
    } else {
        default
    };
    let output = output.ok_or_else(|| EntryError::Nil(entry_name.to_string()))?;
    ctx.set_path(entry_name, output);
    Ok(())
}

/// A `configMap` entry, from the resolver; a missing ConfigMap leaves the
/// entry unset.
fn load_config_map(
    entry_name: &str,
    cm: &ConfigMapReference,
    ctx: &mut JsonContext,
    exprs: &ExprCache,
    resolver: &dyn Resolver,
) -> Result<(), EntryError> {
    let name = substitute_str(ctx, exprs, &cm.name)?;
    let namespace = substitute_str(ctx, exprs, &cm.namespace)?;
    if let Some(obj) = resolver.config_map(&namespace, &name)? {
        ctx.set_path(entry_name, obj);
    }
    Ok(())
}

/// An `apiCall` entry: the request with its variables substituted, its
/// answer (or its default when the call fails) and its JMESPath.
fn load_api_call(
    entry_name: &str,
    call: &ApiCall,
    ctx: &mut JsonContext,
    exprs: &ExprCache,
    resolver: &dyn Resolver,
) -> Result<(), EntryError> {
    let method = call.method.clone().unwrap_or_else(|| "GET".into());
    let body = if call.data.is_empty() {
        None
    } else {
        let mut m = Map::new();
        for item in &call.data {
            let item = substitute(ctx, exprs, item)?;
            if let (Some(k), Some(v)) = (item.get("key").and_then(Value::as_str), item.get("value"))
            {
                m.insert(k.to_string(), v.clone());
            }
        }
        Some(Value::Object(m))
    };
    let request = ApiCallRequest {
        url_path: call
            .url_path
            .as_deref()
            .map(|p| substitute_str(ctx, exprs, p))
            .transpose()?,
        url: call
            .service
            .as_ref()
            .and_then(|s| s.get("url"))
            .and_then(Value::as_str)
            .map(|u| substitute_str(ctx, exprs, u))
            .transpose()?,
        method,
        body,
        ca_bundle: call
            .service
            .as_ref()
            .and_then(|s| s.get("caBundle"))
            .and_then(Value::as_str)
            .map(str::to_string),
        headers: call
            .service
            .as_ref()
            .and_then(|s| s.get("headers"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|h| {
                let key = h.get("key").and_then(Value::as_str).unwrap_or_default();
                let value = h.get("value").and_then(Value::as_str).unwrap_or_default();
                Ok((key.to_string(), substitute_str(ctx, exprs, value)?))
            })
            .collect::<Result<_, EntryError>>()?,
    };
    let default = call
        .default
        .as_ref()
        .map(|d| substitute(ctx, exprs, d))
        .transpose()?;
    let response = match resolver.api_call(&request) {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(()),
        Err(e) => {
            return default
                .map(|d| ctx.set_path(entry_name, d))
                .ok_or(EntryError::Lookup(e));
        }
    };
    let value = match &call.jmes_path {
        Some(p) => {
            let p = substitute_str(ctx, exprs, p)?;
            match query(exprs, &p, Val::Ref(&response)) {
                Ok(v) => v,
                Err(reason) => default.clone().ok_or(EntryError::JmesPath {
                    path: p.clone(),
                    reason,
                })?,
            }
        }
        None => response,
    };
    ctx.set_path(entry_name, value);
    Ok(())
}

/// A `globalReference` entry, with its JMESPath.
fn load_global(
    entry_name: &str,
    global: &GlobalReference,
    ctx: &mut JsonContext,
    exprs: &ExprCache,
    resolver: &dyn Resolver,
) -> Result<(), EntryError> {
    let name = substitute_str(ctx, exprs, &global.name)?;
    let Some(data) = resolver.global_context(&name)? else {
        return Ok(());
    };
    let value = match &global.jmes_path {
        Some(p) => query(exprs, &substitute_str(ctx, exprs, p)?, Val::Ref(&data))
            .map_err(EntryError::Query)?,
        None => std::sync::Arc::unwrap_or_clone(data),
    };
    ctx.set_path(entry_name, value);
    Ok(())
}
