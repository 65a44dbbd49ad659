//! The leader's webhook registration duty
//! (docs/kyverno-semantics.md#webhook-registration): a
//! ValidatingWebhookConfiguration and a MutatingWebhookConfiguration, each
//! with a `Fail` and an `Ignore` webhook whose rules cover the kinds
//! (resolved to resources through discovery) and operations the current
//! policies match. Both are created when missing, rewritten when they
//! differ, and checked again every `resync`, so a deleted or edited
//! configuration comes back. Writes carry the resourceVersion they read;
//! running twice yields the same objects.

mod coverage;
use coverage::*;

use crate::admission::policies::Snapshot;
use crate::policy::cel_policy::EvaluationMode;
use crate::policy::compile::FailurePolicy;
use arc_swap::ArcSwap;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, OwnerReference,
};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Label on every configuration gavel manages.
pub const MANAGED_BY: (&str, &str) = ("webhook.gavel.dev/managed-by", "gavel");

/// How often the leader looks for a new policy snapshot to register.
const POLICY_CHECK: Duration = Duration::from_millis(500);

/// Where the API server reaches gavel.
#[derive(Debug, Clone)]
pub enum WebhookTarget {
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
    /// `https://host:port`, for gavel outside the cluster.
    Url(String),
}

#[derive(Debug, Clone)]
pub struct WebhookOptions {
    pub validating_name: String,
    pub mutating_name: String,
    /// The configuration of the policy and TTL label checks.
    pub policy_validating_name: String,
    pub target: WebhookTarget,
    /// PEM of the CAs that sign gavel's serving certificate; empty until
    /// known, and nothing is registered before.
    pub ca_bundle: watch::Receiver<String>,
    /// timeoutSeconds for policies that do not set webhookTimeoutSeconds.
    pub timeout_seconds: i32,
    /// Which requests reach gavel, and how the configurations are marked.
    pub selection: WebhookSelection,
    pub resync: Duration,
    /// The ClusterRole that owns both configurations. Deleting it (as `helm
    /// uninstall` does) lets the garbage collector delete them, so a cluster
    /// is never left with webhooks that point at nothing, even when no gavel
    /// pod runs to clean up. While it is missing nothing is written: an
    /// unowned configuration created during an uninstall would outlive it.
    /// kyverno-compat: Kyverno's webhook controller owns its configurations
    /// by its `*:webhook` ClusterRole the same way.
    pub owner_cluster_role: Option<String>,
}

/// Which requests the API server sends gavel, and what the configurations
/// carry besides their webhooks: Kyverno's `config.webhooks`,
/// `webhookAnnotations`, `webhookLabels` and `forceFailurePolicyIgnore`.
#[derive(Debug, Clone, Default)]
pub struct WebhookSelection {
    /// Every webhook's namespaceSelector, with the namespaces that must
    /// never be sent (gavel's own, so that a broken gavel cannot block its
    /// own recovery) already excluded ([`WebhookSelection::excluding`]).
    pub namespace_selector: LabelSelector,
    /// The objectSelector of the webhooks of policies (the TTL label check
    /// keeps its own).
    pub object_selector: LabelSelector,
    /// Every webhook of policies with failurePolicy Ignore, whatever the
    /// policies say (Kyverno's `--forceFailurePolicyIgnore`).
    pub force_failure_policy_ignore: bool,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

impl WebhookSelection {
    /// `selector` with `namespaces` excluded as well: added to its
    /// `kubernetes.io/metadata.name NotIn` expression, or as one.
    pub fn excluding(mut selector: LabelSelector, namespaces: &[String]) -> LabelSelector {
        if namespaces.is_empty() {
            return selector;
        }
        let expressions = selector.match_expressions.get_or_insert_with(Vec::new);
        let not_in = expressions
            .iter_mut()
            .find(|e| e.key == NAMESPACE_NAME_LABEL && e.operator == "NotIn");
        match not_in {
            Some(e) => {
                let values = e.values.get_or_insert_with(Vec::new);
                for ns in namespaces {
                    if !values.contains(ns) {
                        values.push(ns.clone());
                    }
                }
            }
            None => expressions.push(LabelSelectorRequirement {
                key: NAMESPACE_NAME_LABEL.into(),
                operator: "NotIn".into(),
                values: Some(namespaces.to_vec()),
            }),
        }
        selector
    }
}

/// The label the API server sets on every Namespace to its name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// One webhook of either side, before it becomes the API type.
struct Hook {
    name: String,
    path: &'static str,
    failure_policy: &'static str,
    rules: Vec<RuleWithOperations>,
    timeout_seconds: i32,
    /// Only objects with these labels (all objects when None).
    object_selector: Option<LabelSelector>,
}

/// The resources of every policy kind gavel checks when written.
const POLICY_RESOURCES: [(&str, &[&str]); 2] = [
    (
        "kyverno.io",
        &[
            "clusterpolicies",
            "policies",
            "policyexceptions",
            "cleanuppolicies",
            "clustercleanuppolicies",
        ],
    ),
    (
        "policies.kyverno.io",
        &[
            "validatingpolicies",
            "namespacedvalidatingpolicies",
            "mutatingpolicies",
            "namespacedmutatingpolicies",
            "generatingpolicies",
            "namespacedgeneratingpolicies",
            "deletingpolicies",
            "namespaceddeletingpolicies",
            "imagevalidatingpolicies",
            "namespacedimagevalidatingpolicies",
            "policyexceptions",
        ],
    ),
];

/// The webhooks of the policy configuration, as Kyverno registers its
/// own: every policy kind on CREATE and UPDATE (failurePolicy Fail: a
/// policy is not written unchecked), and every object that carries the
/// TTL label (Ignore: it only warns).
fn policy_hooks(opts: &WebhookOptions) -> Vec<Hook> {
    let create_update = || Some(vec!["CREATE".to_string(), "UPDATE".to_string()]);
    let policies = POLICY_RESOURCES
        .iter()
        .map(|(group, resources)| RuleWithOperations {
            api_groups: Some(vec![group.to_string()]),
            api_versions: Some(vec!["*".into()]),
            resources: Some(resources.iter().map(|r| r.to_string()).collect()),
            operations: create_update(),
            scope: Some("*".into()),
        })
        .collect();
    let everything = RuleWithOperations {
        api_groups: Some(vec!["*".into()]),
        api_versions: Some(vec!["*".into()]),
        resources: Some(vec!["*".into()]),
        operations: create_update(),
        scope: Some("*".into()),
    };
    vec![
        Hook {
            name: "policy.validate.gavel.svc".into(),
            path: "/policyvalidate",
            failure_policy: "Fail",
            rules: policies,
            timeout_seconds: opts.timeout_seconds.clamp(1, 30),
            object_selector: None,
        },
        Hook {
            name: "ttl.validate.gavel.svc".into(),
            path: "/verifyttl",
            failure_policy: "Ignore",
            rules: vec![everything],
            timeout_seconds: opts.timeout_seconds.clamp(1, 30),
            object_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: crate::policy::cleanup::TTL_LABEL.into(),
                    operator: "Exists".into(),
                    values: None,
                }]),
                match_labels: None,
            }),
        },
    ]
}

/// The webhooks of each side the policies of `snapshot` need.
fn desired(
    snapshot: &Snapshot,
    kinds: &KindMap,
    opts: &WebhookOptions,
) -> BTreeMap<Side, Vec<Hook>> {
    let mut coverage: BTreeMap<(Side, bool), Coverage> = BTreeMap::new();
    for policy in snapshot.policies.iter().filter(|p| p.admission) {
        let fail = policy.failure_policy == FailurePolicy::Fail;
        for rule in &policy.rules {
            for &side in sides(rule) {
                let c = coverage.entry((side, fail)).or_default();
                let before = (c.everything.len(), c.resources.len());
                c.add(rule, side, kinds);
                if side == Side::Validating {
                    c.add_downstream(rule, kinds);
                }
                if (c.everything.len(), c.resources.len()) != before || c.timeout.is_none() {
                    let t = policy
                        .webhook_timeout_seconds
                        .unwrap_or(opts.timeout_seconds);
                    c.timeout = Some(c.timeout.map_or(t, |old| old.max(t)));
                }
            }
        }
    }
    let cel = snapshot
        .validating
        .iter()
        // A JSON-mode policy sees no Kubernetes requests.
        .filter(|p| p.admission && p.mode == EvaluationMode::Kubernetes)
        .map(|p| (&p.scope, Side::Validating))
        .chain(
            snapshot
                .image_validating
                .iter()
                .filter(|p| p.admission && p.mode == EvaluationMode::Kubernetes)
                .map(|p| (&p.scope, Side::Validating)),
        )
        .chain(snapshot.mutating.iter().map(|p| (&p.scope, Side::Mutating)));
    for (scope, side) in cel {
        let c = coverage
            .entry((side, !scope.failure_policy_ignore))
            .or_default();
        c.add_cel(scope, side, false);
        c.timeout.get_or_insert(opts.timeout_seconds);
    }
    // GeneratingPolicies have no failurePolicy: Kyverno registers them as
    // Ignore.
    for policy in snapshot.generating.iter().filter(|p| p.settings.admission) {
        let c = coverage.entry((Side::Validating, false)).or_default();
        c.add_cel(&policy.scope, Side::Validating, true);
        let t = policy.timeout_seconds.unwrap_or(opts.timeout_seconds);
        c.timeout = Some(c.timeout.map_or(t, |old| old.max(t)));
    }
    let mut out: BTreeMap<Side, Vec<Hook>> = BTreeMap::new();
    for side in [Side::Validating, Side::Mutating] {
        for fail in [true, false] {
            let Some(c) = coverage.get(&(side, fail)) else {
                continue;
            };
            let rules = c.rules();
            if rules.is_empty() {
                continue;
            }
            let (prefix, suffix) = (
                if side == Side::Validating {
                    "validate"
                } else {
                    "mutate"
                },
                if fail { "fail" } else { "ignore" },
            );
            let path = match (side, fail) {
                (Side::Validating, true) => "/validate/fail",
                (Side::Validating, false) => "/validate/ignore",
                (Side::Mutating, true) => "/mutate/fail",
                (Side::Mutating, false) => "/mutate/ignore",
            };
            // Forced to Ignore, the webhook keeps its name and path: the
            // replicas answer both paths the same way.
            let fail_closed = fail && !opts.selection.force_failure_policy_ignore;
            out.entry(side).or_default().push(Hook {
                name: format!("{prefix}.gavel.svc-{suffix}"),
                path,
                failure_policy: if fail_closed { "Fail" } else { "Ignore" },
                rules,
                timeout_seconds: c.timeout.unwrap_or(opts.timeout_seconds).clamp(1, 30),
                object_selector: Some(opts.selection.object_selector.clone()),
            });
        }
    }
    out
}

fn client_config(target: &WebhookTarget, path: &str, ca_bundle: &str) -> WebhookClientConfig {
    let ca_bundle = Some(ByteString(ca_bundle.as_bytes().to_vec()));
    match target {
        WebhookTarget::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path.into()),
                port: Some(*port),
            }),
            ca_bundle,
            url: None,
        },
        WebhookTarget::Url(base) => WebhookClientConfig {
            url: Some(format!("{base}{path}")),
            ca_bundle,
            service: None,
        },
    }
}

fn validating(hook: Hook, opts: &WebhookOptions, ca_bundle: &str) -> ValidatingWebhook {
    ValidatingWebhook {
        name: hook.name,
        client_config: client_config(&opts.target, hook.path, ca_bundle),
        rules: Some(hook.rules),
        failure_policy: Some(hook.failure_policy.into()),
        match_policy: Some("Equivalent".into()),
        side_effects: "None".into(),
        admission_review_versions: vec!["v1".into()],
        timeout_seconds: Some(hook.timeout_seconds),
        namespace_selector: Some(opts.selection.namespace_selector.clone()),
        object_selector: Some(hook.object_selector.unwrap_or_default()),
        match_conditions: None,
    }
}

fn mutating(hook: Hook, opts: &WebhookOptions, ca_bundle: &str) -> MutatingWebhook {
    MutatingWebhook {
        name: hook.name,
        client_config: client_config(&opts.target, hook.path, ca_bundle),
        rules: Some(hook.rules),
        failure_policy: Some(hook.failure_policy.into()),
        match_policy: Some("Equivalent".into()),
        side_effects: "NoneOnDryRun".into(),
        admission_review_versions: vec!["v1".into()],
        timeout_seconds: Some(hook.timeout_seconds),
        namespace_selector: Some(opts.selection.namespace_selector.clone()),
        object_selector: Some(hook.object_selector.unwrap_or_default()),
        reinvocation_policy: Some("IfNeeded".into()),
        match_conditions: None,
    }
}

/// What reconcile needs of either configuration type.
trait Configuration:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    type Webhook: PartialEq + Clone;
    fn webhooks(&mut self) -> &mut Option<Vec<Self::Webhook>>;
    fn named(meta: ObjectMeta) -> Self;
}

impl Configuration for ValidatingWebhookConfiguration {
    type Webhook = ValidatingWebhook;
    fn webhooks(&mut self) -> &mut Option<Vec<ValidatingWebhook>> {
        &mut self.webhooks
    }
    fn named(metadata: ObjectMeta) -> Self {
        ValidatingWebhookConfiguration {
            metadata,
            webhooks: None,
        }
    }
}

impl Configuration for MutatingWebhookConfiguration {
    type Webhook = MutatingWebhook;
    fn webhooks(&mut self) -> &mut Option<Vec<MutatingWebhook>> {
        &mut self.webhooks
    }
    fn named(metadata: ObjectMeta) -> Self {
        MutatingWebhookConfiguration {
            metadata,
            webhooks: None,
        }
    }
}

/// Makes configuration `name` hold `hooks`, the labels and annotations of
/// `selection` (others' are kept) and `owners`, when given; Ok(true) when
/// it wrote.
async fn reconcile<C: Configuration>(
    api: &Api<C>,
    name: &str,
    hooks: Vec<C::Webhook>,
    owners: Option<&[OwnerReference]>,
    selection: &WebhookSelection,
) -> Result<bool, kube::Error> {
    let mut labels = selection.labels.clone();
    labels.insert(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string());
    let annotations = &selection.annotations;
    let holds = |have: &Option<BTreeMap<String, String>>, want: &BTreeMap<String, String>| {
        want.iter()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let result = match api.get_opt(name).await? {
        None => {
            let mut config = C::named(ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels),
                annotations: (!annotations.is_empty()).then(|| annotations.clone()),
                owner_references: owners.map(<[_]>::to_vec),
                ..Default::default()
            });
            *config.webhooks() = Some(hooks);
            api.create(&PostParams::default(), &config).await
        }
        Some(mut existing) => {
            let marked = holds(&existing.meta().labels, &labels)
                && holds(&existing.meta().annotations, annotations);
            // The API drops an empty list: none and empty are the same.
            let same = existing.webhooks().as_deref().unwrap_or_default() == hooks.as_slice();
            let owned =
                owners.is_none_or(|o| existing.meta().owner_references.as_deref() == Some(o));
            if same && marked && owned {
                return Ok(false);
            }
            *existing.webhooks() = Some(hooks);
            if let Some(owners) = owners {
                existing.meta_mut().owner_references = Some(owners.to_vec());
            }
            existing
                .meta_mut()
                .labels
                .get_or_insert_with(Default::default)
                .extend(labels);
            if !annotations.is_empty() {
                existing
                    .meta_mut()
                    .annotations
                    .get_or_insert_with(Default::default)
                    .extend(annotations.clone());
            }
            api.replace(name, &PostParams::default(), &existing).await
        }
    };
    match result {
        Ok(_) => Ok(true),
        // Another replica (a deposed leader) wrote first: the next round compares.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Runs the duty while `leading` says this replica leads.
pub async fn run(
    client: Client,
    mut opts: WebhookOptions,
    snapshot: Arc<ArcSwap<Snapshot>>,
    mut leading: watch::Receiver<bool>,
) {
    let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut kinds: Option<(u64, KindMap)> = None;
    loop {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        if opts.ca_bundle.wait_for(|b| !b.is_empty()).await.is_err() {
            return;
        }
        let ca_bundle = opts.ca_bundle.borrow_and_update().clone();
        let current = snapshot.load_full();
        // Discovery again only when the policies name a kind the last one
        // did not find (a CRD installed since): a full discovery is a few
        // dozen requests, too many to repeat on every policy change.
        let stale = match &kinds {
            None => true,
            Some((g, map)) => *g != current.generation && names_unknown_kind(&current, map),
        };
        if stale {
            match discover(&client).await {
                Ok(map) => kinds = Some((current.generation, map)),
                Err(e) => {
                    tracing::warn!(error = %e, "discovery failed; webhook rules not refreshed")
                }
            }
        }
        // The owner's uid is read each round: a reinstalled chart has a new one.
        let owners = match &opts.owner_cluster_role {
            None => Ok(None),
            Some(name) => match super::owner::cluster_role(&client, name).await {
                Ok(Some(owners)) => Ok(Some(owners)),
                Ok(None) => Err(format!("ClusterRole {name} (the owner) does not exist")),
                Err(e) => Err(format!("reading ClusterRole {name} (the owner): {e}")),
            },
        };
        if let Err(e) = &owners {
            tracing::warn!(error = %e, "webhook configurations not written");
        }
        if let (Some((_, map)), Ok(owners)) = (&kinds, &owners) {
            let mut hooks = desired(&current, map, &opts);
            let v: Vec<_> = hooks
                .remove(&Side::Validating)
                .unwrap_or_default()
                .into_iter()
                .map(|h| validating(h, &opts, &ca_bundle))
                .collect();
            let m: Vec<_> = hooks
                .remove(&Side::Mutating)
                .unwrap_or_default()
                .into_iter()
                .map(|h| mutating(h, &opts, &ca_bundle))
                .collect();
            let p: Vec<_> = policy_hooks(&opts)
                .into_iter()
                .map(|h| validating(h, &opts, &ca_bundle))
                .collect();
            for (name, written) in [
                (
                    &opts.validating_name,
                    reconcile(
                        &validating_api,
                        &opts.validating_name,
                        v,
                        owners.as_deref(),
                        &opts.selection,
                    )
                    .await,
                ),
                (
                    &opts.policy_validating_name,
                    reconcile(
                        &validating_api,
                        &opts.policy_validating_name,
                        p,
                        owners.as_deref(),
                        &opts.selection,
                    )
                    .await,
                ),
                (
                    &opts.mutating_name,
                    reconcile(
                        &mutating_api,
                        &opts.mutating_name,
                        m,
                        owners.as_deref(),
                        &opts.selection,
                    )
                    .await,
                ),
            ] {
                match written {
                    Ok(true) => tracing::info!(name, "webhook configuration written"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(name, error = %e, "webhook reconcile failed; retrying")
                    }
                }
            }
        }
        // A new policy snapshot is registered at once: a policy a user
        // applies must not wait for the resync to be enforced. The snapshot
        // is an ArcSwap without notifications; reading its generation twice
        // a second costs nothing.
        let generation = current.generation;
        let changed_policies = async {
            loop {
                tokio::time::sleep(POLICY_CHECK).await;
                if snapshot.load().generation != generation {
                    return;
                }
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(opts.resync) => {}
            _ = changed_policies => {}
            _ = leading.changed() => {}
            _ = opts.ca_bundle.changed() => {}
        }
    }
}

#[cfg(test)]
mod tests;
