//! Kyverno API types (`kyverno.io/v1` ClusterPolicy and Policy,
//! `kyverno.io/v2` PolicyException) as they appear in YAML. Decoding is
//! strict: an unknown field is an error naming its path.
//!
//! Free-form parts (patterns, condition keys and values, patches) stay as
//! JSON values; the compile step turns them into evaluable forms.

pub use crate::matching::types::{
    LabelSelector, LabelSelectorRequirement, MatchResources, ResourceDescription, ResourceFilter,
    Subject,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Server-populated fields (uid, resourceVersion, ...) that policies never read.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A kyverno.io/v1 ClusterPolicy or Policy document.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: Spec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_rules: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_failure_action: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_failure_action_overrides: Vec<FailureActionOverride>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emit_warning: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_timeout_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_configuration: Option<WebhookConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_existing: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_existing_on_policy_update: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutate_existing_on_policy_update: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_server_side_apply: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_validation: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookConfiguration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_conditions: Vec<Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailureActionOverride {
    #[serde(default)]
    pub action: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub name: String,
    #[serde(rename = "match", default)]
    pub match_resources: MatchResources,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<MatchResources>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preconditions: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cel_preconditions: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutate: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validate: Option<Validation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify_images: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_extractors: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_properties: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_background_requests: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextEntry {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_call: Option<ApiCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variable: Option<Variable>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_registry: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_reference: Option<GlobalReference>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigMapReference {
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jmes_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Variable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jmes_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GlobalReference {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jmes_path: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Validation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_action: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_action_overrides: Vec<FailureActionOverride>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_existing_violations: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any_pattern: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<Deny>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach: Option<Vec<ForEachValidation>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security: Option<PodSecurity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assert: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deny {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForEachValidation {
    #[serde(default)]
    pub list: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub element_scope: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preconditions: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any_pattern: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<Deny>,
    /// Nested loops, kept raw as in Kyverno's API (`apiextensions.JSON`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSecurity {
    #[serde(default)]
    pub level: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<PodSecurityExclude>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSecurityExclude {
    pub control_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restricted_field: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A kyverno.io/v2 (or v2beta1/v2alpha1) PolicyException document.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyExceptionDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: PolicyExceptionSpec,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyExceptionSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<bool>,
    #[serde(rename = "match", default)]
    pub match_resources: MatchResources,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Value>,
    #[serde(default)]
    pub exceptions: Vec<ExceptionTarget>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_security: Vec<PodSecurityExclude>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExceptionTarget {
    pub policy_name: String,
    #[serde(default)]
    pub rule_names: Vec<String>,
}

/// `rule.mutate` (docs/kyverno-semantics.md#mutate-rules).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mutation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_strategic_merge: Option<Value>,
    #[serde(
        default,
        rename = "patchesJson6902",
        skip_serializing_if = "Option::is_none"
    )]
    pub patches_json6902: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreach: Vec<ForEachMutation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutate_existing_on_policy_update: Option<bool>,
}

/// One `mutate.targets[]` entry (docs/kyverno-semantics.md#mutate-existing):
/// which existing resources to patch.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TargetResource {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preconditions: Option<Value>,
}

/// One `mutate.foreach[]` entry (docs/kyverno-semantics.md#mutate-foreach).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForEachMutation {
    #[serde(default)]
    pub list: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preconditions: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_strategic_merge: Option<Value>,
    #[serde(
        default,
        rename = "patchesJson6902",
        skip_serializing_if = "Option::is_none"
    )]
    pub patches_json6902: Option<String>,
    /// Nested loops, kept raw as in Kyverno's API (`apiextensions.JSON`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach: Option<Value>,
}

/// `generate.clone`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloneFrom {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
}

/// `generate.cloneList`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloneList {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub kinds: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// What one generated resource is made of: identity and source
/// (docs/kyverno-semantics.md#generate-rules).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GeneratePattern {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone: Option<CloneFrom>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone_list: Option<CloneList>,
}

/// `rule.generate` (docs/kyverno-semantics.md#generate-rules): a
/// [`GeneratePattern`] plus the flags. Unknown fields are checked against
/// both by the compile step (serde cannot flatten and deny unknown fields
/// at once).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Generation {
    #[serde(flatten)]
    pub pattern: GeneratePattern,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronize: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphan_downstream_on_policy_delete: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_existing: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreach: Vec<ForEachGeneration>,
}

/// One `generate.foreach[]` entry.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForEachGeneration {
    #[serde(default)]
    pub list: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preconditions: Option<Value>,
    #[serde(flatten)]
    pub pattern: GeneratePattern,
}

/// The fields `rule.generate` and its foreach entries may have.
pub const GENERATE_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "name",
    "namespace",
    "uid",
    "data",
    "clone",
    "cloneList",
    "synchronize",
    "orphanDownstreamOnPolicyDelete",
    "generateExisting",
    "foreach",
    "list",
    "context",
    "preconditions",
];
