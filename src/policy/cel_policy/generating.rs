//! GeneratingPolicy and NamespacedGeneratingPolicy (policies.kyverno.io):
//! the documents and their compilation. Generation has no autogen.

use super::scope::{MatchConstraints, PolicyScope};
use super::{CelCompileError, CompiledNamed, NamedExpression, compile, compile_named};
use crate::cel::Program;
use serde::Deserialize;
use serde_json::Value;

/// One of `spec.generate[]`: an expression that calls `generator.Apply`,
/// or a YAML template of the objects to generate.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerateExpression {
    #[serde(default)]
    pub expression: Option<String>,
    #[serde(default)]
    pub template: Option<GenerationTemplate>,
}

/// `generate[].template`: YAML (one or more documents); with
/// `interpolate: cel`, `(( expr ))` placeholders are CEL.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerationTemplate {
    pub value: String,
    #[serde(default)]
    pub interpolate: Option<String>,
}

/// One compiled `generate[]` entry.
#[derive(Debug, Clone)]
pub enum CompiledGeneration {
    /// An expression calling `generator.Apply`.
    Expression(Program),
    /// A template: one node tree per YAML document, each rendering to an
    /// object (its namespace from its own metadata).
    Template(Vec<TemplateNode>),
}

/// A template tree, placeholders compiled (Kyverno's
/// gpol/template): a whole-scalar placeholder is spliced as whatever value
/// it gives; one inside a longer string is interpolated and must give a
/// scalar.
#[derive(Debug, Clone)]
pub enum TemplateNode {
    Literal(Value),
    Splice(Program),
    Interpolated(Vec<Segment>),
    Map(Vec<(String, TemplateNode)>),
    List(Vec<TemplateNode>),
}

#[derive(Debug, Clone)]
pub enum Segment {
    Text(String),
    Expr(Program),
}

fn compile_template(t: &GenerationTemplate, field: &str) -> Result<Vec<TemplateNode>, String> {
    let interpolate = match t.interpolate.as_deref() {
        None | Some("none") => false,
        Some("cel") => true,
        Some(other) => return Err(format!("{field}.interpolate: {other:?} is not none or cel")),
    };
    let docs = crate::policy::load::parse_yaml_documents(field, &t.value)
        .map_err(|e| format!("{field}.value: {e}"))?;
    if docs.is_empty() {
        return Err(format!("{field}.value: the template has no document"));
    }
    docs.into_iter()
        .enumerate()
        .map(|(i, doc)| {
            if !doc.is_object() {
                return Err(format!(
                    "{field}.value: document {} must be a mapping describing a resource",
                    i + 1
                ));
            }
            if interpolate {
                template_node(doc, &format!("{field}.value"))
            } else {
                Ok(TemplateNode::Literal(doc))
            }
        })
        .collect()
}

fn template_node(v: Value, field: &str) -> Result<TemplateNode, String> {
    Ok(match v {
        Value::String(s) if s.contains("((") => {
            let segments = scan(&s).map_err(|e| format!("{field}: {e}"))?;
            let compile_expr = |e: &str| compile(e, &format!("{field} placeholder"));
            match segments.as_slice() {
                [Scanned::Expr(e)] => TemplateNode::Splice(compile_expr(e)?),
                _ if segments.iter().all(|s| matches!(s, Scanned::Text(_))) => {
                    TemplateNode::Literal(Value::String(
                        segments
                            .iter()
                            .map(|s| match s {
                                Scanned::Text(t) => t.as_str(),
                                Scanned::Expr(_) => "",
                            })
                            .collect(),
                    ))
                }
                _ => TemplateNode::Interpolated(
                    segments
                        .into_iter()
                        .map(|s| match s {
                            Scanned::Text(t) => Ok(Segment::Text(t)),
                            Scanned::Expr(e) => compile_expr(&e).map(Segment::Expr),
                        })
                        .collect::<Result<_, String>>()?,
                ),
            }
        }
        Value::Object(m) => TemplateNode::Map(
            m.into_iter()
                .map(|(k, v)| {
                    if k.contains("((") {
                        return Err(format!(
                            "{field}: placeholders are not supported in mapping keys; use a whole-value placeholder on the parent field instead"
                        ));
                    }
                    Ok((k, template_node(v, field)?))
                })
                .collect::<Result<_, String>>()?,
        ),
        Value::Array(a) => TemplateNode::List(
            a.into_iter()
                .map(|v| template_node(v, field))
                .collect::<Result<_, String>>()?,
        ),
        other => TemplateNode::Literal(other),
    })
}

enum Scanned {
    Text(String),
    Expr(String),
}

/// Splits a scalar into text and `(( expr ))` placeholders: `\((` is a
/// literal `((`; a placeholder ends at the first `))` outside quotes and
/// nested parentheses.
fn scan(s: &str) -> Result<Vec<Scanned>, String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if s[i..].starts_with("\\((") {
            text.push_str("((");
            i += 3;
            continue;
        }
        if s[i..].starts_with("((") {
            let (expr, next) = placeholder(s, i)?;
            if !text.is_empty() {
                out.push(Scanned::Text(std::mem::take(&mut text)));
            }
            out.push(Scanned::Expr(expr));
            i = next;
            continue;
        }
        let c = s[i..].chars().next().expect("in bounds");
        text.push(c);
        i += c.len_utf8();
    }
    if !text.is_empty() {
        out.push(Scanned::Text(text));
    }
    Ok(out)
}

fn placeholder(s: &str, start: usize) -> Result<(String, usize), String> {
    let b = s.as_bytes();
    let (mut depth, mut quote, mut i) = (0usize, None::<u8>, start + 2);
    while i < b.len() {
        let c = b[i];
        if let Some(q) = quote {
            if c == b'\\' {
                i += 2;
                continue;
            }
            if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        match c {
            b'"' | b'\'' => quote = Some(c),
            b'(' => depth += 1,
            b')' if depth > 0 => depth -= 1,
            b')' if b.get(i + 1) == Some(&b')') => {
                let expr = s[start + 2..i].trim();
                if expr.is_empty() {
                    return Err(format!("empty placeholder at offset {start}"));
                }
                return Ok((expr.to_string(), i + 2));
            }
            _ => {}
        }
        i += 1;
    }
    Err(format!("unterminated placeholder at offset {start}"))
}

/// The spec of a GeneratingPolicy / NamespacedGeneratingPolicy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GeneratingPolicySpec {
    #[serde(default)]
    pub match_constraints: Option<MatchConstraints>,
    #[serde(default)]
    pub match_conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default)]
    pub generate: Vec<GenerateExpression>,
    /// Background behaviour (synchronize, generateExisting,
    /// orphanDownstreamOnPolicyDelete): no effect on one evaluation.
    #[serde(default)]
    pub evaluation: Option<GeneratingEvaluation>,
    #[serde(default)]
    pub webhook_configuration: Option<Value>,
    #[serde(default)]
    pub use_server_side_apply: Option<bool>,
}

/// `spec.evaluation` of a GeneratingPolicy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GeneratingEvaluation {
    #[serde(default)]
    pub admission: Option<Enabled>,
    #[serde(default)]
    pub generate_existing: Option<Enabled>,
    #[serde(default)]
    pub synchronize: Option<Enabled>,
    #[serde(default)]
    pub orphan_downstream_on_policy_delete: Option<Enabled>,
    #[serde(default)]
    pub skip_background_requests: Option<bool>,
}

/// `{enabled: bool}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Enabled {
    #[serde(default)]
    pub enabled: Option<bool>,
}

fn enabled(setting: &Option<Enabled>, default: bool) -> bool {
    setting.as_ref().and_then(|s| s.enabled).unwrap_or(default)
}

/// What the background controller does with a GeneratingPolicy's
/// downstream (Kyverno's defaults: admission on, the rest off, and
/// requests caused by the controller's own writes skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerationSettings {
    /// Admitted triggers generate (`evaluation.admission.enabled`).
    pub admission: bool,
    /// Triggers that exist when the policy appears generate too.
    pub generate_existing: bool,
    /// Downstream kept in line with the policy and its trigger: re-made
    /// when changed or deleted, deleted with its trigger.
    pub synchronize: bool,
    /// Downstream kept when the policy is deleted.
    pub orphan_downstream_on_policy_delete: bool,
    /// Triggers written by gavel's own background work do not generate.
    pub skip_background_requests: bool,
    pub use_server_side_apply: bool,
}

impl GenerationSettings {
    fn of(spec: &GeneratingPolicySpec) -> GenerationSettings {
        let e = spec.evaluation.clone().unwrap_or_default();
        GenerationSettings {
            admission: enabled(&e.admission, true),
            generate_existing: enabled(&e.generate_existing, false),
            synchronize: enabled(&e.synchronize, false),
            orphan_downstream_on_policy_delete: enabled(
                &e.orphan_downstream_on_policy_delete,
                false,
            ),
            skip_background_requests: e.skip_background_requests.unwrap_or(true),
            use_server_side_apply: spec.use_server_side_apply.unwrap_or(false),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GeneratingPolicyDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: crate::policy::types::ObjectMeta,
    pub spec: GeneratingPolicySpec,
    #[serde(default)]
    pub status: Option<Value>,
}

/// A compiled GeneratingPolicy (cluster or namespaced).
#[derive(Debug, Clone)]
pub struct CompiledGeneratingPolicy {
    pub scope: PolicyScope,
    pub variables: Vec<CompiledNamed>,
    /// The `generate[]` entries: expressions that call `generator.Apply`,
    /// or templates.
    pub generate: Vec<CompiledGeneration>,
    pub settings: GenerationSettings,
    /// `webhookConfiguration.timeoutSeconds`.
    pub timeout_seconds: Option<i32>,
    /// `name`, or `namespace/name` for a NamespacedGeneratingPolicy: the
    /// policy key of its UpdateRequests, as Kyverno writes it.
    pub key: String,
    /// What its report results carry from its annotations.
    pub report: crate::policy::ReportMeta,
    /// Changes with the spec: how the background controller tells a
    /// changed policy (whose synchronized downstream follows it).
    pub revision: u64,
}

impl CompiledGeneratingPolicy {
    pub fn compile(doc: &GeneratingPolicyDoc) -> Result<CompiledGeneratingPolicy, CelCompileError> {
        let spec = &doc.spec;
        let generate = spec
            .generate
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let field = format!("spec.generate[{i}]");
                match (&g.expression, &g.template) {
                    (Some(e), None) => compile(e, &format!("{field}.expression"))
                        .map(CompiledGeneration::Expression),
                    (None, Some(t)) => compile_template(t, &format!("{field}.template"))
                        .map(CompiledGeneration::Template),
                    _ => Err(format!("{field}: exactly one of expression and template")),
                }
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut scope = PolicyScope::compile(
            &doc.kind,
            &doc.metadata,
            spec.match_constraints.as_ref(),
            &spec.match_conditions,
            None,
            None,
        )?;
        // Generation has no autogen: a Pod policy generates for Pods only.
        scope.controllers.clear();
        let key = match &scope.namespace {
            Some(ns) => format!("{ns}/{}", scope.name),
            None => scope.name.clone(),
        };
        Ok(CompiledGeneratingPolicy {
            scope,
            variables: compile_named(&spec.variables, "spec.variables")?,
            generate,
            settings: GenerationSettings::of(spec),
            timeout_seconds: spec
                .webhook_configuration
                .as_ref()
                .and_then(|w| w.get("timeoutSeconds"))
                .and_then(Value::as_i64)
                .map(|t| t as i32),
            key,
            report: crate::policy::ReportMeta::of(&doc.metadata),
            revision: {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                format!("{spec:?}").hash(&mut h);
                h.finish()
            },
        })
    }

    pub fn name(&self) -> &str {
        &self.scope.name
    }
}
