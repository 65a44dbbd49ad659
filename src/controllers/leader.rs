//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does
//! it: every `retry_period` the candidate reads the Lease and either renews
//! it (when it holds it), takes it over (when its holder has not renewed
//! for `lease_duration`, measured on this replica's clock from when the
//! record last changed, so clock skew between replicas does not matter), or
//! waits. Every write carries the resourceVersion it read, so two
//! candidates cannot both win a round: one gets 409 Conflict.
//!
//! A leader that cannot renew within `renew_deadline` steps down. A
//! replica that is stopping steps down and releases the Lease (an empty
//! holder, as client-go's `ReleaseOnCancel` does), so that another takes
//! over at its next round instead of after `lease_duration`. Leader
//! election gives no fencing: a deposed leader may still finish an action,
//! so every duty run under a lease is idempotent.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The Lease of a duty, as `gavel_leader` labels it.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabel {
    pub lease: String,
}

/// `gavel_leader`: 1 while this replica holds a duty's Lease, else 0.
pub type LeadingGauge = Family<LeaseLabel, Gauge>;

/// Timing of an election (Kyverno's and client-go's defaults).
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    /// Where the Leases live (gavel's namespace).
    pub namespace: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Where each election reports whether this replica leads.
    pub leading: LeadingGauge,
    /// The ClusterRole that owns the Leases ([`super::owner`]): `helm
    /// uninstall` leaves none behind. While it is missing, no Lease is
    /// created.
    pub owner_cluster_role: Option<String>,
}

impl LeaseOptions {
    pub fn new(namespace: &str, identity: &str) -> LeaseOptions {
        LeaseOptions {
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            leading: LeadingGauge::default(),
            owner_cluster_role: None,
        }
    }
}

/// The Lease record as last seen, and when this replica saw it change.
struct Observed {
    holder: String,
    renew_time: Option<MicroTime>,
    at: Instant,
}

struct Elector {
    client: Client,
    api: Api<Lease>,
    name: String,
    opts: LeaseOptions,
    observed: Option<Observed>,
    /// When this replica last renewed successfully, while leading.
    renewed: Option<Instant>,
    /// The owner was found missing, and that was logged (once, not every
    /// round).
    owner_missing: bool,
}

/// Starts an election for `name`; the receiver says whether this replica
/// leads. The election runs until `stopping` turns true (then this
/// replica steps down and releases the Lease) or the runtime stops.
pub fn elect(
    client: Client,
    name: &str,
    opts: LeaseOptions,
    stopping: watch::Receiver<bool>,
) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    let elector = Elector {
        api: Api::namespaced(client.clone(), &opts.namespace),
        client,
        name: name.into(),
        opts,
        observed: None,
        renewed: None,
        owner_missing: false,
    };
    tokio::spawn(elector.run(tx, stopping));
    rx
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Elector {
    async fn run(mut self, leading: watch::Sender<bool>, mut stopping: watch::Receiver<bool>) {
        let gauge = self
            .opts
            .leading
            .get_or_create(&LeaseLabel {
                lease: self.name.clone(),
            })
            .clone();
        gauge.set(0);
        loop {
            if *stopping.borrow() {
                break;
            }
            let lead = match self.round().await {
                Ok(lead) => {
                    if lead {
                        self.renewed = Some(Instant::now());
                    }
                    lead
                }
                Err(e) => {
                    tracing::debug!(lease = self.name, error = %e, "lease round failed");
                    // Still the leader until the renew deadline passes.
                    *leading.borrow()
                        && self
                            .renewed
                            .is_some_and(|r| r.elapsed() < self.opts.renew_deadline)
                }
            };
            gauge.set(i64::from(lead));
            if lead != *leading.borrow() {
                tracing::info!(
                    lease = self.name,
                    identity = self.opts.identity,
                    leading = lead,
                    "leadership changed"
                );
                leading.send_replace(lead);
            }
            if !lead {
                self.renewed = None;
            }
            if leading.is_closed() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.opts.retry_period) => {}
                _ = stopping.changed() => {}
            }
        }
        // Duties stop before the Lease is let go, so no two leaders act at once.
        let was_leading = leading.send_replace(false);
        gauge.set(0);
        if was_leading {
            match self.release().await {
                Ok(()) => tracing::info!(
                    lease = self.name,
                    identity = self.opts.identity,
                    "stopping: lease released"
                ),
                Err(e) => tracing::warn!(lease = self.name, error = %e, "releasing the lease"),
            }
        }
    }

    /// Empties the holder if this replica still holds the Lease. The write
    /// carries the resourceVersion read, so a Lease someone else took
    /// meanwhile is left alone (409).
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.opts.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// One read-and-write round: Ok(true) when this replica holds the Lease
    /// after it.
    async fn round(&mut self) -> Result<bool, kube::Error> {
        let me = self.opts.identity.clone();
        let duration = self.opts.lease_duration.as_secs() as i32;
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let owner_references = match &self.opts.owner_cluster_role {
                None => None,
                Some(role) => match super::owner::cluster_role(&self.client, role).await? {
                    Some(owners) => {
                        self.owner_missing = false;
                        Some(owners)
                    }
                    None => {
                        if !std::mem::replace(&mut self.owner_missing, true) {
                            tracing::warn!(
                                lease = self.name,
                                role,
                                "ClusterRole (the owner) missing: the Lease is not created"
                            );
                        }
                        return Ok(false);
                    }
                },
            };
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.opts.namespace.clone()),
                    owner_references,
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| o.holder != holder || o.renew_time != spec.renew_time);
        if changed {
            self.observed = Some(Observed {
                holder: holder.clone(),
                renew_time: spec.renew_time.clone(),
                at: Instant::now(),
            });
        }
        let held_for =
            Duration::from_secs(spec.lease_duration_seconds.unwrap_or(duration).max(1) as u64);
        let expired = holder.is_empty()
            || self
                .observed
                .as_ref()
                .is_some_and(|o| o.at.elapsed() > held_for);
        if holder != me && !expired {
            return Ok(false);
        }
        if holder != me {
            spec.holder_identity = Some(me);
            spec.acquire_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(now());
        spec.lease_duration_seconds = Some(duration);
        // A Lease written before it had an owner (an older gavel) is
        // adopted by the leader, once.
        if lease
            .metadata
            .owner_references
            .as_ref()
            .is_none_or(|o| o.is_empty())
            && let Some(role) = &self.opts.owner_cluster_role
            && let Some(owners) = super::owner::cluster_role(&self.client, role).await?
        {
            lease.metadata.owner_references = Some(owners);
        }
        // The resourceVersion read above makes this a compare-and-swap.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Runs `work` each time this replica becomes the leader of `leading`,
/// and drops it as soon as the lead is lost, until the election ends.
pub async fn while_leading<F, Fut>(mut leading: watch::Receiver<bool>, duty: &str, mut work: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        tracing::info!(duty, "leading");
        tokio::select! {
            _ = work() => {}
            _ = leading.wait_for(|l| !*l) => {}
        }
        tracing::info!(duty, "no longer leading");
    }
}
