//! Compiled forms of `mutate` (docs/kyverno-semantics.md#mutate-rules) and
//! `generate` (docs/kyverno-semantics.md#generate-rules) rule bodies.

use super::conditions::Conditions;
use super::types::{
    ContextEntry, ForEachMutation, GENERATE_FIELDS, Generation, Mutation, TargetResource,
};
use crate::jmespath::Expression;
use serde_json::Value;

/// What a mutate rule (or one foreach level) applies.
#[derive(Debug, Clone)]
pub enum MutatePatch {
    /// `patchStrategicMerge`, with Kyverno's anchors.
    Strategic {
        overlay: Value,
        /// Whether it holds `{{ }}` to substitute per request.
        has_variables: bool,
        /// The overlay ready to merge, when neither variables nor anchors
        /// make it depend on the request: no per-request copy or anchor pass.
        prepared: Option<Value>,
    },
    /// `patchesJson6902`: YAML text, substituted before it is parsed; the
    /// operations parsed once when the text has no variables.
    Json6902 {
        text: String,
        ops: Option<Vec<Value>>,
    },
    Foreach(Vec<ForEachMutate>),
}

#[derive(Debug, Clone)]
pub struct ForEachMutate {
    pub list: String,
    /// `list` parsed, when it holds no `{{ }}` to substitute first.
    pub list_expr: Option<Expression>,
    /// `order: Descending`.
    pub descending: bool,
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<Conditions>,
    pub patch: MutatePatch,
}

/// A `mutate.targets[]` entry with its preconditions parsed.
#[derive(Debug, Clone)]
pub struct Target {
    pub spec: TargetResource,
    pub preconditions: Option<Conditions>,
}

#[derive(Debug, Clone)]
pub struct MutateRule {
    pub patch: MutatePatch,
    /// `targets`: mutate existing resources
    /// (docs/kyverno-semantics.md#mutate-existing) instead of the trigger.
    pub targets: Vec<Target>,
    /// Apply to the existing triggers when the policy is created or
    /// changed: the rule's `mutateExistingOnPolicyUpdate`, or else the
    /// policy's (set by the compile step).
    pub on_policy_update: Option<bool>,
}

impl MutateRule {
    pub fn compile(raw: &Value) -> Result<MutateRule, String> {
        let m: Mutation = serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
        let on_policy_update = m.mutate_existing_on_policy_update;
        let patch = compile_patch(
            m.patch_strategic_merge,
            m.patches_json6902,
            Some(m.foreach).filter(|f| !f.is_empty()),
        )?
        .ok_or("empty mutate rule")?;
        let targets = m
            .targets
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let preconditions = spec
                    .preconditions
                    .as_ref()
                    .map(Conditions::parse)
                    .transpose()
                    .map_err(|e| format!("targets[{i}].preconditions: {e}"))?;
                Ok(Target {
                    spec,
                    preconditions,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(MutateRule {
            patch,
            targets,
            on_policy_update,
        })
    }
}

fn compile_patch(
    strategic: Option<Value>,
    json6902: Option<String>,
    foreach: Option<Vec<ForEachMutation>>,
) -> Result<Option<MutatePatch>, String> {
    // kyverno-compat: when both are set, the strategic merge wins.
    if let Some(p) = strategic {
        let has_variables = super::template::has_variables(&p);
        let prepared = if has_variables {
            None
        } else {
            crate::pattern::overlay::resource_independent(&p)
        };
        return Ok(Some(MutatePatch::Strategic {
            overlay: p,
            has_variables,
            prepared,
        }));
    }
    if let Some(text) = json6902 {
        let ops = if text.contains("{{") {
            None
        } else {
            Some(parse_operations(&text)?)
        };
        return Ok(Some(MutatePatch::Json6902 { text, ops }));
    }
    let Some(list) = foreach else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, f) in list.into_iter().enumerate() {
        let nested = match f.foreach {
            Some(v) => Some(
                serde_json::from_value::<Vec<ForEachMutation>>(v)
                    .map_err(|e| format!("foreach[{i}].foreach: {e}"))?,
            ),
            None => None,
        };
        // kyverno-compat: a strategic-merge foreach walks its list from
        // the end unless its order says otherwise (mutateElements).
        let strategic = f.patch_strategic_merge.is_some();
        let patch = compile_patch(f.patch_strategic_merge, f.patches_json6902, nested)?
            .ok_or_else(|| {
                format!("foreach[{i}]: no patchStrategicMerge, patchesJson6902 or foreach")
            })?;
        let preconditions = f
            .preconditions
            .as_ref()
            .map(Conditions::parse)
            .transpose()
            .map_err(|e| format!("foreach[{i}].preconditions: {e}"))?;
        let descending = match f.order.as_deref() {
            None => strategic,
            Some("Ascending") => false,
            Some("Descending") => true,
            Some(o) => return Err(format!("foreach[{i}].order: unknown order {o:?}")),
        };
        out.push(ForEachMutate {
            list_expr: (!f.list.contains("{{"))
                .then(|| Expression::parse(&f.list).ok())
                .flatten(),
            list: f.list,
            descending,
            context: f.context,
            preconditions,
            patch,
        });
    }
    Ok(Some(MutatePatch::Foreach(out)))
}

/// `patchesJson6902` text (YAML or JSON) to its operations.
pub fn parse_operations(text: &str) -> Result<Vec<Value>, String> {
    let docs = crate::policy::load::parse_yaml_documents("patchesJson6902", text)
        .map_err(|e| format!("failed to decode patches: {e}"))?;
    match docs.into_iter().next() {
        Some(Value::Array(ops)) => Ok(ops),
        Some(Value::Null) | None => Ok(Vec::new()),
        Some(other) => Err(format!(
            "failed to decode patches: expected a list of operations, got {other}"
        )),
    }
}

#[derive(Debug, Clone)]
pub struct GenerateRule {
    pub spec: Generation,
    /// Preconditions of each foreach entry, parsed.
    pub foreach_preconditions: Vec<Option<Conditions>>,
    /// Generate for the triggers that exist when the policy is created:
    /// the rule's `generateExisting`, or the policy's deprecated
    /// `spec.generateExisting` / `generateExistingOnPolicyUpdate`.
    pub generate_existing: bool,
}

impl GenerateRule {
    pub fn compile(raw: &Value) -> Result<GenerateRule, String> {
        check_fields(raw, "")?;
        if let Some(Value::Array(list)) = raw.get("foreach") {
            for (i, f) in list.iter().enumerate() {
                check_fields(f, &format!("foreach[{i}].")).map_err(|e| e.to_string())?;
            }
        }
        let spec: Generation = serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
        let p = &spec.pattern;
        let sources = [
            p.data.is_some(),
            p.clone.is_some(),
            p.clone_list.is_some(),
            !spec.foreach.is_empty(),
        ];
        if sources.iter().filter(|s| **s).count() > 1 {
            return Err(
                "only one of generate patterns(data, clone, cloneList, foreach) can be specified"
                    .into(),
            );
        }
        if spec.foreach.is_empty() && p.clone_list.is_none() {
            for (field, v) in [
                ("kind", &p.kind),
                ("name", &p.name),
                ("apiVersion", &p.api_version),
            ] {
                if v.as_deref().is_none_or(str::is_empty) {
                    return Err(format!("{field} is required"));
                }
            }
        }
        let foreach_preconditions = spec
            .foreach
            .iter()
            .enumerate()
            .map(|(i, f)| {
                f.preconditions
                    .as_ref()
                    .map(Conditions::parse)
                    .transpose()
                    .map_err(|e| format!("foreach[{i}].preconditions: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(GenerateRule {
            generate_existing: spec.generate_existing == Some(true),
            spec,
            foreach_preconditions,
        })
    }
}

impl GenerateRule {
    /// The (apiVersion, kind) of every resource the rule can generate:
    /// its own, its foreach entries', or the kinds its cloneList names.
    pub fn downstream_kinds(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let patterns =
            std::iter::once(&self.spec.pattern).chain(self.spec.foreach.iter().map(|f| &f.pattern));
        for p in patterns {
            if let Some(list) = &p.clone_list {
                for k in &list.kinds {
                    let (api, kind) = k.rsplit_once('/').unwrap_or(("v1", k));
                    out.push((api.to_string(), kind.to_string()));
                }
            } else if let (Some(api), Some(kind)) = (&p.api_version, &p.kind) {
                out.push((api.clone(), kind.clone()));
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

fn check_fields(v: &Value, prefix: &str) -> Result<(), String> {
    if let Value::Object(m) = v {
        for k in m.keys() {
            if !GENERATE_FIELDS.contains(&k.as_str()) {
                return Err(format!("unknown field {prefix}{k:?}"));
            }
        }
    }
    Ok(())
}
