//! CEL in policies: `validate.cel` of ClusterPolicy/Policy rules and the
//! CEL policy kinds (policies.kyverno.io ValidatingPolicy, MutatingPolicy,
//! GeneratingPolicy; admissionregistration.k8s.io ValidatingAdmissionPolicy
//! and MutatingAdmissionPolicy). Every expression is compiled here, once.

use crate::cel::Program;
use serde::Deserialize;
use serde_json::Value;

/// Why a CEL policy or rule did not compile.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CelCompileError {
    /// A field gavel does not evaluate yet: the rule or policy reports it
    /// as `unsupported: <field>` rather than being rejected as invalid.
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("{0}")]
    Invalid(String),
}

impl From<String> for CelCompileError {
    fn from(message: String) -> CelCompileError {
        CelCompileError::Invalid(message)
    }
}

/// `{name, expression}`: variables, matchConditions, celPreconditions.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamedExpression {
    pub name: String,
    pub expression: String,
}

/// One validation: `{expression, message, messageExpression, reason}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidationExpression {
    pub expression: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub message_expression: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditAnnotation {
    pub key: String,
    pub value_expression: String,
}

/// `paramKind`: the kind of the objects a policy is parameterised with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParamKind {
    pub api_version: String,
    pub kind: String,
}

/// `paramRef`: which objects of the paramKind one binding (or one
/// `validate.cel` rule) evaluates with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParamRef {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub selector: Option<crate::policy::types::LabelSelector>,
    #[serde(default)]
    pub parameter_not_found_action: Option<String>,
}

impl ParamRef {
    /// As the API server validates a paramRef: a name or a selector, and
    /// an action of Allow or Deny.
    fn check(&self, field: &str) -> Result<(), String> {
        let named = self.name.as_deref().is_some_and(|n| !n.is_empty());
        if named == self.selector.is_some() {
            return Err(format!(
                "{field}: exactly one of name and selector must be set"
            ));
        }
        match self.parameter_not_found_action.as_deref() {
            None | Some("Allow" | "Deny") => Ok(()),
            Some(other) => Err(format!(
                "{field}.parameterNotFoundAction: {other:?} is not Allow or Deny"
            )),
        }
    }

    /// Whether finding no params denies (`parameterNotFoundAction: Deny`)
    /// rather than leaving the request alone.
    pub fn deny_when_missing(&self) -> bool {
        self.parameter_not_found_action.as_deref() == Some("Deny")
    }
}

/// Where a policy's `params` come from: the paramKind and, from the
/// binding (or the `validate.cel` rule), the paramRef. A paramKind without
/// a paramRef is an evaluation error, as in the API server.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub kind: ParamKind,
    pub reference: Option<ParamRef>,
}

/// `validate.cel` of a ClusterPolicy rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CelValidation {
    #[serde(default)]
    pub expressions: Vec<ValidationExpression>,
    #[serde(default)]
    pub param_kind: Option<ParamKind>,
    #[serde(default)]
    pub param_ref: Option<ParamRef>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default)]
    pub audit_annotations: Vec<AuditAnnotation>,
    #[serde(default)]
    pub generate: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct CompiledNamed {
    pub name: String,
    pub program: Program,
}

#[derive(Debug, Clone)]
pub struct CompiledValidation {
    pub program: Program,
    pub message: Option<String>,
    pub message_expression: Option<Program>,
    pub reason: Option<String>,
}

/// The compiled checks shared by `validate.cel` and the validating kinds.
#[derive(Debug, Clone, Default)]
pub struct CelChecks {
    pub variables: Vec<CompiledNamed>,
    pub validations: Vec<CompiledValidation>,
    pub audit_annotations: Vec<CompiledNamed>,
    /// `validate.cel` with paramKind: evaluated once per param object.
    pub params: Option<Params>,
}

fn compile(source: &str, field: &str) -> Result<Program, String> {
    Program::compile(source).map_err(|e| format!("{field}: {e}"))
}

pub fn compile_named(list: &[NamedExpression], field: &str) -> Result<Vec<CompiledNamed>, String> {
    list.iter()
        .enumerate()
        .map(|(i, n)| {
            Ok(CompiledNamed {
                name: n.name.clone(),
                program: compile(&n.expression, &format!("{field}[{i}].expression"))?,
            })
        })
        .collect()
}

pub fn compile_validations(
    list: &[ValidationExpression],
    field: &str,
) -> Result<Vec<CompiledValidation>, String> {
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            Ok(CompiledValidation {
                program: compile(&v.expression, &format!("{field}[{i}].expression"))?,
                message: v.message.clone(),
                message_expression: v
                    .message_expression
                    .as_deref()
                    .map(|m| compile(m, &format!("{field}[{i}].messageExpression")))
                    .transpose()?,
                reason: v.reason.clone(),
            })
        })
        .collect()
}

fn compile_annotations(
    list: &[AuditAnnotation],
    field: &str,
) -> Result<Vec<CompiledNamed>, String> {
    list.iter()
        .enumerate()
        .map(|(i, a)| {
            Ok(CompiledNamed {
                name: a.key.clone(),
                program: compile(
                    &a.value_expression,
                    &format!("{field}[{i}].valueExpression"),
                )?,
            })
        })
        .collect()
}

impl CelChecks {
    /// Compiles `validate.cel` (at `field`). A paramRef without a
    /// paramKind has nothing to select and is ignored, as Kyverno does.
    pub fn compile_rule(raw: &Value, field: &str) -> Result<CelChecks, CelCompileError> {
        let v: CelValidation = serde_path_to_error::deserialize(raw.clone())
            .map_err(|e| format!("{field}.{}: {}", e.path(), e.inner()))?;
        if let Some(r) = &v.param_ref {
            r.check(&format!("{field}.paramRef"))?;
        }
        Ok(CelChecks {
            params: v.param_kind.map(|kind| Params {
                kind,
                reference: v.param_ref,
            }),
            variables: compile_named(&v.variables, &format!("{field}.variables"))?,
            validations: compile_validations(&v.expressions, &format!("{field}.expressions"))?,
            audit_annotations: compile_annotations(
                &v.audit_annotations,
                &format!("{field}.auditAnnotations"),
            )?,
        })
    }

    pub fn compile_parts(
        variables: &[NamedExpression],
        validations: &[ValidationExpression],
        audit_annotations: &[AuditAnnotation],
    ) -> Result<CelChecks, String> {
        Ok(CelChecks {
            variables: compile_named(variables, "spec.variables")?,
            validations: compile_validations(validations, "spec.validations")?,
            audit_annotations: compile_annotations(audit_annotations, "spec.auditAnnotations")?,
            params: None,
        })
    }
}

/// `matchConstraints.resourceRules[]` (admissionregistration's NamedRuleWithOperations).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceRule {
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub api_versions: Vec<String>,
    #[serde(default)]
    pub operations: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
    #[serde(default)]
    pub scope: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatchConstraints {
    #[serde(default)]
    pub resource_rules: Vec<ResourceRule>,
    #[serde(default)]
    pub exclude_resource_rules: Vec<ResourceRule>,
    #[serde(default)]
    pub namespace_selector: Option<crate::policy::types::LabelSelector>,
    #[serde(default)]
    pub object_selector: Option<crate::policy::types::LabelSelector>,
    #[serde(default)]
    pub match_policy: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodControllers {
    #[serde(default)]
    pub controllers: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Autogen {
    #[serde(default)]
    pub pod_controllers: Option<PodControllers>,
}

/// The spec of a ValidatingPolicy / NamespacedValidatingPolicy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidatingPolicySpec {
    #[serde(default)]
    pub match_constraints: Option<MatchConstraints>,
    #[serde(default)]
    pub match_conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default)]
    pub validations: Vec<ValidationExpression>,
    #[serde(default)]
    pub validation_actions: Vec<String>,
    #[serde(default)]
    pub audit_annotations: Vec<AuditAnnotation>,
    #[serde(default)]
    pub failure_policy: Option<String>,
    #[serde(default)]
    pub evaluation: Option<Value>,
    #[serde(default)]
    pub webhook_configuration: Option<Value>,
    #[serde(default)]
    pub autogen: Option<Autogen>,
    #[serde(default)]
    pub param_kind: Option<ParamKind>,
    #[serde(default)]
    pub validation_configurations: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidatingPolicyDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: crate::policy::types::ObjectMeta,
    pub spec: ValidatingPolicySpec,
    #[serde(default)]
    pub status: Option<Value>,
}

/// Where a Pod controller keeps its Pod template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodTemplate {
    /// `spec.template`: Deployment, DaemonSet, Job, ...
    Spec,
    /// `spec.jobTemplate.spec.template`: CronJob.
    CronJob,
}

impl PodTemplate {
    pub fn path(self) -> &'static [&'static str] {
        match self {
            PodTemplate::Spec => &["spec", "template"],
            PodTemplate::CronJob => &["spec", "jobTemplate", "spec", "template"],
        }
    }
}

/// A Pod controller the policy also applies to, through its Pod template.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerView {
    pub group: &'static str,
    pub resource: &'static str,
    pub template: PodTemplate,
}

const fn controller(
    group: &'static str,
    resource: &'static str,
    template: PodTemplate,
) -> ControllerView {
    ControllerView {
        group,
        resource,
        template,
    }
}

/// The controllers Kyverno's autogen covers.
const CONTROLLERS: &[ControllerView] = &[
    controller("apps", "daemonsets", PodTemplate::Spec),
    controller("apps", "deployments", PodTemplate::Spec),
    controller("apps", "replicasets", PodTemplate::Spec),
    controller("apps", "statefulsets", PodTemplate::Spec),
    controller("batch", "jobs", PodTemplate::Spec),
    controller("", "replicationcontrollers", PodTemplate::Spec),
    controller("batch", "cronjobs", PodTemplate::CronJob),
];

/// `spec` of a ValidatingAdmissionPolicyBinding or
/// MutatingAdmissionPolicyBinding.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BindingSpec {
    pub policy_name: String,
    #[serde(default)]
    pub param_ref: Option<ParamRef>,
    #[serde(default)]
    pub match_resources: Option<MatchConstraints>,
    #[serde(default)]
    pub validation_actions: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BindingDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: crate::policy::types::ObjectMeta,
    pub spec: BindingSpec,
}

/// Admission policies and bindings as loaded, compiled together once every
/// file is read (a binding may come before or after its policy).
#[derive(Debug, Clone, Default)]
pub struct AdmissionDocs {
    pub validating: Vec<ValidatingPolicyDoc>,
    pub mutating: Vec<MutatingPolicyDoc>,
    pub bindings: Vec<BindingDoc>,
}

/// One binding of a Kubernetes admission policy.
#[derive(Debug, Clone, Default)]
pub struct CompiledBinding {
    pub match_resources: Option<MatchConstraints>,
    pub param_ref: Option<ParamRef>,
}

/// How a Kubernetes admission policy's bindings select requests, the way
/// Kyverno's CLI applies them offline.
#[derive(Debug, Clone, Default)]
pub enum Bindings {
    /// A Kyverno kind, or an admission policy with no binding: the
    /// policy's own matchConstraints.
    #[default]
    Own,
    /// ValidatingAdmissionPolicy: the first binding with no matchResources
    /// or with matching ones (the policy's own constraints are not
    /// consulted, as in Kyverno's CLI).
    Validating(Vec<CompiledBinding>),
    /// MutatingAdmissionPolicy: the policy's constraints, and the
    /// matchResources of some binding (one without them is passed over).
    Mutating(Vec<CompiledBinding>),
}

/// The bindings of `kind` that name `policy`, compiled.
fn bindings_for(
    bindings: &[BindingDoc],
    kind: &str,
    policy: &str,
) -> Result<Vec<CompiledBinding>, CelCompileError> {
    bindings
        .iter()
        .filter(|b| b.kind == format!("{kind}Binding") && b.spec.policy_name == policy)
        .map(|b| {
            if let Some(r) = &b.spec.param_ref {
                r.check(&format!("{kind}Binding {}: spec.paramRef", b.metadata.name))?;
            }
            Ok(CompiledBinding {
                match_resources: b.spec.match_resources.clone(),
                param_ref: b.spec.param_ref.clone(),
            })
        })
        .collect()
}

/// What every CEL policy kind shares: the requests it applies to.
#[derive(Debug, Clone)]
pub struct PolicyScope {
    pub name: String,
    /// Set for a Namespaced* kind: it applies only there.
    pub namespace: Option<String>,
    pub match_constraints: MatchConstraints,
    pub match_conditions: Vec<CompiledNamed>,
    /// Pod controllers evaluated through their template (autogen).
    pub controllers: Vec<ControllerView>,
    pub failure_policy_ignore: bool,
    pub bindings: Bindings,
    /// An admission policy's paramKind.
    pub param_kind: Option<ParamKind>,
}

impl PolicyScope {
    fn compile(
        kind: &str,
        metadata: &crate::policy::types::ObjectMeta,
        match_constraints: Option<&MatchConstraints>,
        match_conditions: &[NamedExpression],
        autogen: Option<&Autogen>,
        failure_policy: Option<&str>,
    ) -> Result<PolicyScope, CelCompileError> {
        let match_constraints = match_constraints
            .cloned()
            .ok_or_else(|| "spec.matchConstraints is required".to_string())?;
        let matches_pods = match_constraints.resource_rules.iter().any(|r| {
            r.resources.iter().any(|x| x == "pods")
                && r.api_groups.iter().any(|g| g.is_empty() || g == "*")
        });
        let wanted: Option<Vec<String>> = autogen
            .and_then(|a| a.pod_controllers.as_ref())
            .and_then(|p| p.controllers.clone())
            .map(|list| list.iter().map(|c| c.to_ascii_lowercase()).collect());
        let controllers = if matches_pods {
            // `controllers` names kinds or resources: Deployment, deployments.
            CONTROLLERS
                .iter()
                .filter(|c| {
                    wanted.as_ref().is_none_or(|w| {
                        w.iter().any(|x| {
                            x == c.resource || Some(x.as_str()) == c.resource.strip_suffix('s')
                        })
                    })
                })
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        Ok(PolicyScope {
            name: metadata.name.clone(),
            namespace: kind.starts_with("Namespaced").then(|| {
                metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into())
            }),
            match_conditions: compile_named(match_conditions, "spec.matchConditions")?,
            failure_policy_ignore: failure_policy == Some("Ignore"),
            match_constraints,
            controllers,
            bindings: Bindings::Own,
            param_kind: None,
        })
    }
}

/// A compiled ValidatingPolicy (cluster or namespaced).
#[derive(Debug, Clone)]
pub struct CompiledValidatingPolicy {
    pub scope: PolicyScope,
    pub checks: CelChecks,
    /// `validationActions` contains Deny.
    pub deny: bool,
    /// `validationActions` contains Warn.
    pub warn: bool,
}

impl CompiledValidatingPolicy {
    pub fn compile(doc: &ValidatingPolicyDoc) -> Result<CompiledValidatingPolicy, CelCompileError> {
        let spec = &doc.spec;
        // Only the admission kinds have bindings to name the params.
        if spec.param_kind.is_some() && doc.kind != "ValidatingAdmissionPolicy" {
            return Err(CelCompileError::Unsupported("spec.paramKind".into()));
        }
        Ok(CompiledValidatingPolicy {
            scope: PolicyScope::compile(
                &doc.kind,
                &doc.metadata,
                spec.match_constraints.as_ref(),
                &spec.match_conditions,
                spec.autogen.as_ref(),
                spec.failure_policy.as_deref(),
            )?,
            checks: CelChecks::compile_parts(
                &spec.variables,
                &spec.validations,
                &spec.audit_annotations,
            )?,
            deny: spec.validation_actions.is_empty()
                || spec.validation_actions.iter().any(|a| a == "Deny"),
            warn: spec.validation_actions.iter().any(|a| a == "Warn"),
        })
    }

    /// A ValidatingAdmissionPolicy with its bindings (of every loaded
    /// binding, those naming it): no autogen, and failures deny.
    pub fn compile_admission(
        doc: &ValidatingPolicyDoc,
        bindings: &[BindingDoc],
    ) -> Result<CompiledValidatingPolicy, CelCompileError> {
        let mut policy = CompiledValidatingPolicy::compile(doc)?;
        policy.scope.controllers.clear();
        policy.scope.param_kind = doc.spec.param_kind.clone();
        policy.deny = true;
        let mine = bindings_for(bindings, &doc.kind, &doc.metadata.name)?;
        if !mine.is_empty() {
            policy.scope.bindings = Bindings::Validating(mine);
        }
        Ok(policy)
    }

    pub fn name(&self) -> &str {
        &self.scope.name
    }
}

/// `{expression}` of a mutation.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MutationExpression {
    pub expression: String,
}

/// One of `spec.mutations[]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mutation {
    pub patch_type: String,
    #[serde(default)]
    pub apply_configuration: Option<MutationExpression>,
    #[serde(default)]
    pub json_patch: Option<MutationExpression>,
}

/// The spec of a MutatingPolicy / NamespacedMutatingPolicy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MutatingPolicySpec {
    #[serde(default)]
    pub match_constraints: Option<MatchConstraints>,
    #[serde(default)]
    pub match_conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default)]
    pub mutations: Vec<Mutation>,
    #[serde(default)]
    pub failure_policy: Option<String>,
    #[serde(default)]
    pub reinvocation_policy: Option<String>,
    #[serde(default)]
    pub evaluation: Option<Value>,
    #[serde(default)]
    pub webhook_configuration: Option<Value>,
    #[serde(default)]
    pub autogen: Option<Autogen>,
    #[serde(default)]
    pub param_kind: Option<ParamKind>,
    #[serde(default)]
    pub target_match_constraints: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MutatingPolicyDoc {
    pub api_version: String,
    pub kind: String,
    pub metadata: crate::policy::types::ObjectMeta,
    pub spec: MutatingPolicySpec,
    #[serde(default)]
    pub status: Option<Value>,
}

/// A compiled mutation: its expression gives either an object merged in
/// the way server-side apply merges, or a list of JSON Patch operations.
#[derive(Debug, Clone)]
pub enum CompiledMutation {
    ApplyConfiguration(Program),
    JsonPatch(Program),
}

/// A compiled MutatingPolicy (cluster or namespaced).
#[derive(Debug, Clone)]
pub struct CompiledMutatingPolicy {
    pub scope: PolicyScope,
    pub variables: Vec<CompiledNamed>,
    pub mutations: Vec<CompiledMutation>,
    /// A Kubernetes MutatingAdmissionPolicy: lists merge atomically (no
    /// schema, as Kyverno's CLI applies them) and each mutation reports
    /// its own result.
    pub admission_policy: bool,
}

impl CompiledMutatingPolicy {
    pub fn compile(doc: &MutatingPolicyDoc) -> Result<CompiledMutatingPolicy, CelCompileError> {
        let spec = &doc.spec;
        let unsupported = |field: &str| Err(CelCompileError::Unsupported(field.into()));
        // Only the admission kinds have bindings to name the params.
        if spec.param_kind.is_some() && doc.kind != "MutatingAdmissionPolicy" {
            return unsupported("spec.paramKind");
        }
        if spec.target_match_constraints.is_some() {
            return unsupported("spec.targetMatchConstraints (mutate existing)");
        }
        let enabled = |path: &str| {
            spec.evaluation
                .as_ref()
                .and_then(|e| e.pointer(path))
                .and_then(Value::as_bool)
        };
        if enabled("/mutateExisting/enabled") == Some(true) {
            return unsupported("spec.evaluation.mutateExisting");
        }
        let mutations = spec
            .mutations
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let field = format!("spec.mutations[{i}]");
                match (m.patch_type.as_str(), &m.apply_configuration, &m.json_patch) {
                    ("ApplyConfiguration", Some(a), None) => {
                        Ok(CompiledMutation::ApplyConfiguration(compile(
                            &a.expression,
                            &format!("{field}.applyConfiguration.expression"),
                        )?))
                    }
                    ("JSONPatch", None, Some(j)) => Ok(CompiledMutation::JsonPatch(compile(
                        &j.expression,
                        &format!("{field}.jsonPatch.expression"),
                    )?)),
                    (t, _, _) => Err(CelCompileError::Invalid(format!(
                        "{field}: patchType {t:?} needs exactly its own field \
                         (applyConfiguration for ApplyConfiguration, jsonPatch for JSONPatch)"
                    ))),
                }
            })
            .collect::<Result<Vec<_>, CelCompileError>>()?;
        Ok(CompiledMutatingPolicy {
            scope: PolicyScope::compile(
                &doc.kind,
                &doc.metadata,
                spec.match_constraints.as_ref(),
                &spec.match_conditions,
                spec.autogen.as_ref(),
                spec.failure_policy.as_deref(),
            )?,
            variables: compile_named(&spec.variables, "spec.variables")?,
            mutations,
            admission_policy: false,
        })
    }

    /// A MutatingAdmissionPolicy with its bindings (of every loaded
    /// binding, those naming it).
    pub fn compile_admission(
        doc: &MutatingPolicyDoc,
        bindings: &[BindingDoc],
    ) -> Result<CompiledMutatingPolicy, CelCompileError> {
        let mut policy = CompiledMutatingPolicy::compile(doc)?;
        policy.scope.controllers.clear();
        policy.scope.param_kind = doc.spec.param_kind.clone();
        policy.admission_policy = true;
        let mine = bindings_for(bindings, &doc.kind, &doc.metadata.name)?;
        if !mine.is_empty() {
            policy.scope.bindings = Bindings::Mutating(
                mine.into_iter()
                    .filter(|b| b.match_resources.is_some())
                    .collect(),
            );
        }
        Ok(policy)
    }

    pub fn name(&self) -> &str {
        &self.scope.name
    }
}

/// One of `spec.generate[]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerateExpression {
    pub expression: String,
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
    pub evaluation: Option<Value>,
    #[serde(default)]
    pub webhook_configuration: Option<Value>,
    #[serde(default)]
    pub use_server_side_apply: Option<bool>,
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
    /// Expressions that call `generator.Apply`.
    pub generate: Vec<Program>,
}

impl CompiledGeneratingPolicy {
    pub fn compile(doc: &GeneratingPolicyDoc) -> Result<CompiledGeneratingPolicy, CelCompileError> {
        let spec = &doc.spec;
        let generate = spec
            .generate
            .iter()
            .enumerate()
            .map(|(i, g)| compile(&g.expression, &format!("spec.generate[{i}].expression")))
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
        Ok(CompiledGeneratingPolicy {
            scope,
            variables: compile_named(&spec.variables, "spec.variables")?,
            generate,
        })
    }

    pub fn name(&self) -> &str {
        &self.scope.name
    }
}
