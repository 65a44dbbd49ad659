//! The `cleanup.kyverno.io/ttl` label (docs/kyverno-semantics.md#ttl-label):
//! an object that carries it is deleted once its time has come, a duration
//! after its creation (`5m`, `4h`, `1d`) or at a time (`2026-10-04T003000Z`,
//! `2026-10-04`).
//! One metadata-only watch per kind the controller may list, watch and
//! delete, filtered on the label, as Kyverno's TTL manager runs them; the
//! kinds are discovered again every reconciliation interval.

use super::metrics::{CleanupMetrics, TtlLabels};
use super::watched::{self, Objects, Watch};
use crate::cluster::client::short;
use crate::cluster::discovery::{Discovered, delete_once, propagation_policy};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PropagationPolicy};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub use crate::policy::cleanup::{PROPAGATION_ANNOTATION, TTL_LABEL as LABEL, deletion_time};

/// When and how one labelled object goes.
#[derive(Debug, Clone)]
pub struct Expiry {
    uid: String,
    /// The deletion time, or why the label cannot be read (left alone).
    at: Result<DateTime<Utc>, String>,
    propagation: Option<PropagationPolicy>,
    /// Deleted already, waiting on finalizers.
    terminating: bool,
}

fn expiry(meta: &ObjectMeta) -> Option<Expiry> {
    let value = meta.labels.as_ref()?.get(LABEL)?;
    let created = meta.creation_timestamp.as_ref().map(|t| {
        DateTime::<Utc>::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
            .unwrap_or_default()
    });
    let propagation = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROPAGATION_ANNOTATION))
        .and_then(|p| propagation_policy(p));
    Some(Expiry {
        uid: meta.uid.clone().unwrap_or_default(),
        at: deletion_time(value, created),
        propagation,
        terminating: meta.deletion_timestamp.is_some(),
    })
}

/// Whether the controller may delete objects of `resource` anywhere (a
/// SelfSubjectAccessReview, as Kyverno's permission check): kinds it may
/// read but not delete get no watch.
async fn may_delete(client: &Client, resource: &Discovered) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(resource.api.group.clone()),
                version: Some(resource.api.version.clone()),
                resource: Some(resource.api.plural.clone()),
                verb: Some("delete".into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    match api.create(&kube::api::PostParams::default(), &review).await {
        Ok(r) => r.status.is_some_and(|s| s.allowed),
        Err(e) => {
            tracing::debug!(
                resource = resource.id(),
                error = short(&e),
                "access review failed"
            );
            false
        }
    }
}

/// The TTL watches of one leadership term.
#[derive(Default)]
pub struct Ttl {
    watches: HashMap<String, (Discovered, Watch)>,
    objects: Objects<Expiry>,
    /// Failed deletions wait before the next try.
    retry_at: HashMap<(String, String), (Instant, u32)>,
    /// Unreadable labels, logged once per value.
    reported: HashMap<(String, String), String>,
}

impl Ttl {
    /// Watches every discovered kind that can be listed, watched and
    /// deleted and that the controller may read (a list of one, as
    /// Kyverno's preflight check); drops the watches of kinds gone.
    pub async fn reconcile(&mut self, client: &Client, resources: &[Discovered]) {
        let wanted: HashMap<String, &Discovered> = resources
            .iter()
            .filter(|r| r.supports(&["list", "watch", "delete"]))
            .map(|r| (r.id(), r))
            .collect();
        self.watches.retain(|id, _| wanted.contains_key(id));
        watched::lock(&self.objects).retain(|id, _| wanted.contains_key(id));
        for (id, resource) in wanted {
            if self.watches.contains_key(&id) {
                continue;
            }
            // Metadata only: the label and the times are all it reads.
            let api: Api<PartialObjectMeta<DynamicObject>> =
                Api::all_with(client.clone(), &resource.api);
            let probe = ListParams::default().labels(LABEL).limit(1);
            match api.list(&probe).await {
                Ok(_) => {}
                // Not the controller's to delete (RBAC), or gone meanwhile.
                Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 || s.code == 405 => {
                    continue;
                }
                Err(e) => {
                    tracing::warn!(
                        resource = id,
                        error = short(&e),
                        "TTL preflight failed; tried again later"
                    );
                    continue;
                }
            }
            if !may_delete(client, resource).await {
                continue;
            }
            let events = watcher(api, watcher::Config::default().labels(LABEL));
            let watch = watched::spawn(id.clone(), events, self.objects.clone(), |o| {
                expiry(&o.metadata)
            });
            self.watches.insert(id, (resource.clone(), watch));
        }
    }

    /// Deletes the objects whose time has come (each once: the uid is a
    /// precondition, so a recreated object of the same name stays).
    pub async fn delete_expired(&mut self, client: &Client, metrics: &CleanupMetrics) {
        let now = Utc::now();
        let instant = Instant::now();
        let mut due = Vec::new();
        let mut labelled = 0;
        {
            let all = watched::lock(&self.objects);
            for (id, set) in all.iter() {
                labelled += set.len();
                for (key, e) in set {
                    let at = match &e.at {
                        Ok(at) => *at,
                        Err(why) => {
                            let seen = (id.clone(), key.clone());
                            if self.reported.get(&seen) != Some(why) {
                                tracing::warn!(
                                    resource = id,
                                    object = key,
                                    error = why,
                                    "TTL label not understood; object kept"
                                );
                                self.reported.insert(seen, why.clone());
                            }
                            continue;
                        }
                    };
                    let waiting = self
                        .retry_at
                        .get(&(id.clone(), key.clone()))
                        .is_some_and(|(t, _)| *t > instant);
                    if at <= now && !e.terminating && !waiting {
                        due.push((id.clone(), key.clone(), e.clone()));
                    }
                }
            }
        }
        metrics.ttl_objects.set(labelled as i64);
        for (id, key, e) in due {
            let Some((resource, _)) = self.watches.get(&id) else {
                continue;
            };
            let (namespace, name) = key.split_once('/').unwrap_or(("", &key));
            let labels = TtlLabels {
                resource_group: resource.api.group.clone(),
                resource_version: resource.api.version.clone(),
                resource_resource: resource.api.plural.clone(),
                resource_namespace: namespace.to_string(),
            };
            let api = resource.api(client, namespace);
            let done = match delete_once(&api, name, &e.uid, e.propagation.clone()).await {
                Ok(deleted) => {
                    if deleted {
                        metrics.ttl_deleted.get_or_create(&labels).inc();
                        tracing::info!(resource = id, object = key, "deleted: its TTL expired");
                    }
                    // Else gone already, or another object of that name now.
                    true
                }
                Err(err) => {
                    metrics.ttl_errors.get_or_create(&labels).inc();
                    let k = (id.clone(), key.clone());
                    let tries = self.retry_at.get(&k).map_or(0, |(_, n)| *n) + 1;
                    let wait = Duration::from_secs((1u64 << tries.min(8)).min(300));
                    tracing::warn!(
                        resource = id,
                        object = key,
                        error = short(&err),
                        "TTL deletion failed; tried again"
                    );
                    self.retry_at.insert(k, (Instant::now() + wait, tries));
                    false
                }
            };
            if done {
                self.retry_at.remove(&(id.clone(), key.clone()));
                // Until the watch reports the deletion, not due again.
                if let Some(set) = watched::lock(&self.objects).get_mut(&id) {
                    set.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_values_read_as_kyverno_reads_them() {
        let created: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        let at = |v: &str| deletion_time(v, Some(created)).map(|t| t.to_rfc3339());
        assert_eq!(at("5m").as_deref(), Ok("2026-01-01T00:05:00+00:00"));
        assert_eq!(at("1h30m").as_deref(), Ok("2026-01-01T01:30:00+00:00"));
        assert_eq!(at("1d").as_deref(), Ok("2026-01-02T00:00:00+00:00"));
        assert_eq!(at("2w").as_deref(), Ok("2026-01-15T00:00:00+00:00"));
        assert_eq!(at("3 days").as_deref(), Ok("2026-01-04T00:00:00+00:00"));
        assert_eq!(
            at("2026-10-04T003000Z").as_deref(),
            Ok("2026-10-04T00:30:00+00:00")
        );
        assert_eq!(at("2026-10-04").as_deref(), Ok("2026-10-04T00:00:00+00:00"));
        for bad in ["soon", "", "2026-13-01", "5 fortnights"] {
            assert!(at(bad).is_err(), "{bad:?}");
        }
    }
}
