//! The leader's webhook registration duty: one ValidatingWebhookConfiguration
//! with a `Fail` and an `Ignore` webhook, whose rules cover the kinds the
//! current policies match (resolved to resources through discovery). It is
//! created when missing, rewritten when it differs, and checked again every
//! `resync`, so a deleted or edited configuration comes back. Writes carry
//! the resourceVersion they read; running twice yields the same object.

use crate::policy::compile::FailurePolicy;
use crate::server::policies::Snapshot;
use arc_swap::ArcSwap;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration,
    WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Label on every configuration gavel manages.
pub const MANAGED_BY: (&str, &str) = ("webhook.gavel.dev/managed-by", "gavel");

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
    pub name: String,
    pub target: WebhookTarget,
    /// PEM of the CAs that sign gavel's serving certificate; empty until
    /// known, and nothing is registered before.
    pub ca_bundle: watch::Receiver<String>,
    pub timeout_seconds: i32,
    /// Namespaces never sent to gavel (its own and kube-system), so that a
    /// broken gavel cannot block its own recovery.
    pub excluded_namespaces: Vec<String>,
    pub resync: Duration,
}

/// (group, version, resource) of every kind, from discovery.
type KindMap = BTreeMap<String, Vec<(String, String, String)>>;

async fn discover(client: &Client) -> Result<KindMap, kube::Error> {
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await?;
    let mut kinds = KindMap::new();
    for group in discovery.groups() {
        for (resource, _) in group.recommended_resources() {
            kinds.entry(resource.kind.clone()).or_default().push((
                resource.group.clone(),
                resource.version.clone(),
                resource.plural.clone(),
            ));
        }
    }
    Ok(kinds)
}

/// The webhooks the policies of `snapshot` need.
fn desired(
    snapshot: &Snapshot,
    kinds: &KindMap,
    opts: &WebhookOptions,
    ca_bundle: &str,
) -> Vec<ValidatingWebhook> {
    let mut hooks = Vec::new();
    for (policy, suffix, path) in [
        (FailurePolicy::Fail, "fail", "/validate/fail"),
        (FailurePolicy::Ignore, "ignore", "/validate/ignore"),
    ] {
        let mut everything = false;
        let mut resources: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for &i in snapshot.validate_indexes(Some(policy)) {
            for rule in &snapshot.policies[i].rules {
                match &rule.kinds {
                    None => everything = true,
                    Some(ks) => {
                        for k in ks {
                            let Some(found) = kinds.get(k.rsplit('/').next().unwrap_or(k)) else {
                                tracing::warn!(
                                    kind = k,
                                    "kind not served by the API server; not registered"
                                );
                                continue;
                            };
                            for (g, v, r) in found {
                                let set = resources.entry((g.clone(), v.clone())).or_default();
                                set.insert(r.clone());
                                if r == "pods" {
                                    set.insert("pods/ephemeralcontainers".into());
                                }
                            }
                        }
                    }
                }
            }
        }
        let operations: Vec<String> = ["CREATE", "UPDATE", "DELETE", "CONNECT"]
            .map(String::from)
            .to_vec();
        let rules: Vec<RuleWithOperations> = if everything {
            vec![RuleWithOperations {
                api_groups: Some(vec!["*".into()]),
                api_versions: Some(vec!["*".into()]),
                resources: Some(vec!["*/*".into()]),
                operations: Some(operations),
                scope: Some("*".into()),
            }]
        } else {
            resources
                .into_iter()
                .map(|((g, v), rs)| RuleWithOperations {
                    api_groups: Some(vec![g]),
                    api_versions: Some(vec![v]),
                    resources: Some(rs.into_iter().collect()),
                    operations: Some(operations.clone()),
                    scope: Some("*".into()),
                })
                .collect()
        };
        if rules.is_empty() {
            continue;
        }
        let client_config = match &opts.target {
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
                ca_bundle: Some(ByteString(ca_bundle.as_bytes().to_vec())),
                url: None,
            },
            WebhookTarget::Url(base) => WebhookClientConfig {
                url: Some(format!("{base}{path}")),
                ca_bundle: Some(ByteString(ca_bundle.as_bytes().to_vec())),
                service: None,
            },
        };
        hooks.push(ValidatingWebhook {
            name: format!("validate.gavel.svc-{suffix}"),
            client_config,
            rules: Some(rules),
            failure_policy: Some(
                if policy == FailurePolicy::Fail {
                    "Fail"
                } else {
                    "Ignore"
                }
                .into(),
            ),
            match_policy: Some("Equivalent".into()),
            side_effects: "None".into(),
            admission_review_versions: vec!["v1".into()],
            timeout_seconds: Some(opts.timeout_seconds.clamp(1, 30)),
            namespace_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "kubernetes.io/metadata.name".into(),
                    operator: "NotIn".into(),
                    values: Some(opts.excluded_namespaces.clone()),
                }]),
                match_labels: None,
            }),
            object_selector: Some(LabelSelector::default()),
            match_conditions: None,
        });
    }
    hooks
}

/// Makes the configuration match `hooks`; Ok(true) when it wrote.
async fn reconcile(
    api: &Api<ValidatingWebhookConfiguration>,
    opts: &WebhookOptions,
    hooks: Vec<ValidatingWebhook>,
) -> Result<bool, kube::Error> {
    let labels = BTreeMap::from([(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string())]);
    match api.get_opt(&opts.name).await? {
        None => {
            let config = ValidatingWebhookConfiguration {
                metadata: ObjectMeta {
                    name: Some(opts.name.clone()),
                    labels: Some(labels),
                    ..Default::default()
                },
                webhooks: Some(hooks),
            };
            match api.create(&PostParams::default(), &config).await {
                Ok(_) => Ok(true),
                // Another replica (a deposed leader) created it: next round compares.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut existing) => {
            let has_label = existing
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1));
            if existing.webhooks.as_ref() == Some(&hooks) && has_label {
                return Ok(false);
            }
            existing.webhooks = Some(hooks);
            existing
                .metadata
                .labels
                .get_or_insert_with(Default::default)
                .extend(labels);
            match api
                .replace(&opts.name, &PostParams::default(), &existing)
                .await
            {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Runs the duty while `leading` says this replica leads.
pub async fn run(
    client: Client,
    mut opts: WebhookOptions,
    snapshot: Arc<ArcSwap<Snapshot>>,
    mut leading: watch::Receiver<bool>,
) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
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
        // Discovery again when the policies change (a new kind may be needed).
        if kinds.as_ref().is_none_or(|(g, _)| *g != current.generation) {
            match discover(&client).await {
                Ok(map) => kinds = Some((current.generation, map)),
                Err(e) => {
                    tracing::warn!(error = %e, "discovery failed; webhook rules not refreshed")
                }
            }
        }
        if let Some((_, map)) = &kinds {
            let hooks = desired(&current, map, &opts, &ca_bundle);
            match reconcile(&api, &opts, hooks).await {
                Ok(true) => tracing::info!(name = opts.name, "webhook configuration written"),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "webhook reconcile failed; retrying"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(opts.resync) => {}
            _ = leading.changed() => {}
            _ = opts.ca_bundle.changed() => {}
        }
    }
}
