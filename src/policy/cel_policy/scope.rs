//! Which requests a CEL policy applies to: its matchConstraints and
//! matchConditions, the Pod controllers autogen extends a Pod policy to
//! (through their Pod templates), and, for the Kubernetes admission
//! kinds, the bindings that select requests and name the params.

use super::{CelCompileError, CompiledNamed, NamedExpression, ParamKind, ParamRef, compile_named};
use serde::Deserialize;

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
pub(super) fn bindings_for(
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
    /// The policy's kind (ValidatingPolicy, NamespacedMutatingPolicy, ...):
    /// what exceptions name it by.
    pub kind: String,
    /// The PolicyExceptions (policies.kyverno.io) that name this policy,
    /// attached once every document is read.
    pub exceptions: Vec<std::sync::Arc<super::CompiledCelException>>,
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
    /// What decides whether the policy's own constraints select a request
    /// (namespace, matchConstraints, controllers), interned: policies with
    /// the same key have the same answer on a request, which the request
    /// then computes once (the Pod Security policies share one).
    pub selection_key: std::sync::Arc<str>,
}

impl PolicyScope {
    pub(in crate::policy) fn compile(
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
        let namespace = kind.starts_with("Namespaced").then(|| {
            metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into())
        });
        let selection_key = crate::cel::intern_key(format!(
            "{namespace:?} {match_constraints:?} {controllers:?}"
        ));
        Ok(PolicyScope {
            name: metadata.name.clone(),
            kind: kind.to_string(),
            exceptions: Vec::new(),
            namespace,
            selection_key,
            match_conditions: compile_named(match_conditions, "spec.matchConditions")?,
            failure_policy_ignore: failure_policy == Some("Ignore"),
            match_constraints,
            controllers,
            bindings: Bindings::Own,
            param_kind: None,
        })
    }
}
