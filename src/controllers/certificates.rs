//! Serving certificates kept in Secrets, as Kyverno keeps them: a CA
//! Secret and a serving pair Secret (`kubernetes.io/tls`) in gavel's
//! namespace.
//!
//! The leader's duty ([`run`]) creates them when missing and renews them
//! `renew_before` their expiry: a renewed CA is put in front of the old one,
//! which stays in the bundle until it expires, so clients trusting either
//! keep working during the rotation; a pair not signed by the current CA is
//! reissued. Secrets without gavel's label were provided by the operator and
//! are used as they are. Every write carries the resourceVersion it read, so
//! two leaders during a handover cannot both win.
//!
//! Every replica ([`watch_secrets`]) watches both Secrets: a new pair is
//! swapped into the TLS resolver (new handshakes only; open connections
//! stay), and a new CA bundle goes to the webhook duty's caBundle.

use crate::server::tls::{self, KeyedCert, SwappableCert};
use futures_util::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{Notify, watch};

/// Label on the Secrets gavel manages (and may therefore renew).
pub const MANAGED_BY: (&str, &str) = ("cert.gavel.dev/managed-by", "gavel");
/// The SANs a pair was issued for, so a change of them reissues it.
const SANS_ANNOTATION: &str = "cert.gavel.dev/sans";

#[derive(Debug, Clone)]
pub struct CertOptions {
    pub namespace: String,
    pub ca_secret: String,
    pub pair_secret: String,
    /// Names the serving certificate is valid for.
    pub sans: Vec<String>,
    pub ca_validity: Duration,
    pub cert_validity: Duration,
    /// Renew a certificate this long before it expires.
    pub renew_before: Duration,
    /// How often the leader checks expiry besides Secret changes.
    pub resync: Duration,
    /// The ClusterRole that owns the Secrets gavel writes ([`super::owner`]):
    /// `helm uninstall` leaves none behind. While it is missing, nothing is
    /// written.
    pub owner_cluster_role: Option<String>,
}

impl CertOptions {
    /// Kyverno's Secret names: `<service>.<namespace>.svc.<prefix>-tls-ca|pair`.
    pub fn secret_names(service: &str, namespace: &str) -> (String, String) {
        let base = format!("{service}.{namespace}.svc.gavel-tls");
        (format!("{base}-ca"), format!("{base}-pair"))
    }
}

fn data(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

fn keyed(secret: &Secret) -> Option<KeyedCert> {
    Some(KeyedCert {
        cert_pem: data(secret, "tls.crt")?,
        key_pem: data(secret, "tls.key")?,
    })
}

fn managed(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY.0))
        .is_some_and(|v| v == MANAGED_BY.1)
}

fn tls_secret(name: &str, pair: &KeyedCert, annotations: BTreeMap<String, String>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY.0.to_string(),
                MANAGED_BY.1.to_string(),
            )])),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".into(),
                ByteString(pair.cert_pem.clone().into_bytes()),
            ),
            (
                "tls.key".into(),
                ByteString(pair.key_pem.clone().into_bytes()),
            ),
        ])),
        ..Default::default()
    }
}

/// Whether the first certificate of `pem` is unreadable or expires within
/// `renew_before` of `now`.
fn due(pem: &str, now: SystemTime, renew_before: Duration) -> bool {
    let Some(first) = tls::certificates(pem)
        .ok()
        .and_then(|c| c.into_iter().next())
    else {
        return true;
    };
    tls::not_after(&first).map_or(true, |end| end <= now + renew_before)
}

/// A renewed CA bundle: the new CA first (it signs), then the old CAs that
/// are still valid, so trust in the old one lasts through the rotation.
fn rotated_bundle(new_ca: &str, old_bundle: &str, now: SystemTime) -> String {
    let mut bundle = new_ca.trim_end().to_string();
    bundle.push('\n');
    let mut kept = tls::certificates(new_ca).unwrap_or_default();
    for der in tls::certificates(old_bundle).unwrap_or_default() {
        if !kept.contains(&der) && tls::not_after(&der).is_ok_and(|end| end > now) {
            kept.push(der.clone());
            let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &der);
            bundle.push_str("-----BEGIN CERTIFICATE-----\n");
            for line in b64.as_bytes().chunks(64) {
                bundle.push_str(std::str::from_utf8(line).unwrap_or_default());
                bundle.push('\n');
            }
            bundle.push_str("-----END CERTIFICATE-----\n");
        }
    }
    bundle
}

/// What a write did; a conflict means another replica wrote first, and the
/// next round reads its result.
enum Wrote {
    Yes,
    Conflict,
}

async fn write(
    api: &Api<Secret>,
    existing: Option<&Secret>,
    mut secret: Secret,
    owners: Option<&[OwnerReference]>,
) -> kube::Result<Wrote> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    secret.metadata.owner_references = owners.map(<[_]>::to_vec);
    let result = match existing {
        None => api.create(&PostParams::default(), &secret).await,
        Some(old) => {
            let mut secret = secret;
            secret.metadata.resource_version = old.metadata.resource_version.clone();
            api.replace(&name, &PostParams::default(), &secret).await
        }
    };
    match result {
        Ok(_) => Ok(Wrote::Yes),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Wrote::Conflict),
        Err(e) => Err(e),
    }
}

/// Gives a managed Secret written before it had an owner (an older gavel)
/// its owner; no write when it has it.
async fn adopt(
    api: &Api<Secret>,
    secret: Option<&Secret>,
    owners: Option<&[OwnerReference]>,
) -> kube::Result<()> {
    let (Some(secret), Some(owners)) = (secret, owners) else {
        return Ok(());
    };
    if !managed(secret) || secret.metadata.owner_references.as_deref() == Some(owners) {
        return Ok(());
    }
    let name = secret.metadata.name.clone().unwrap_or_default();
    let patch = serde_json::json!({"metadata": {"ownerReferences": owners}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Why a round of the certificate duty did not finish.
#[derive(Debug, thiserror::Error)]
enum RenewalError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("CA Secret {0} is not managed by gavel and lacks tls.crt or tls.key")]
    ForeignCa(String),
}

/// One round of the duty: makes both Secrets current. Idempotent.
async fn reconcile(
    client: &Client,
    api: &Api<Secret>,
    opts: &CertOptions,
) -> Result<(), RenewalError> {
    let owners = match &opts.owner_cluster_role {
        None => None,
        Some(role) => match super::owner::cluster_role(client, role).await? {
            Some(owners) => Some(owners),
            None => {
                tracing::warn!(
                    role,
                    "ClusterRole (the owner) missing; certificates not written"
                );
                return Ok(());
            }
        },
    };
    let owners = owners.as_deref();
    let now = SystemTime::now();
    let ca_secret = api.get_opt(&opts.ca_secret).await?;
    let ca = match &ca_secret {
        Some(s) if !managed(s) => {
            keyed(s).ok_or_else(|| RenewalError::ForeignCa(opts.ca_secret.clone()))?
        }
        Some(s) if keyed(s).is_some_and(|ca| !due(&ca.cert_pem, now, opts.renew_before)) => {
            adopt(api, Some(s), owners).await?;
            keyed(s).unwrap_or_else(|| unreachable!("checked above"))
        }
        existing => {
            let fresh = tls::generate_ca(opts.ca_validity)?;
            let old_bundle = existing
                .as_ref()
                .and_then(|s| data(s, "tls.crt"))
                .unwrap_or_default();
            let ca = KeyedCert {
                cert_pem: rotated_bundle(&fresh.cert_pem, &old_bundle, now),
                key_pem: fresh.key_pem,
            };
            let secret = tls_secret(&opts.ca_secret, &ca, BTreeMap::new());
            match write(api, existing.as_ref(), secret, owners).await? {
                Wrote::Yes => tracing::info!(secret = opts.ca_secret, "CA written"),
                Wrote::Conflict => return Ok(()),
            }
            ca
        }
    };
    let ca_der = tls::certificates(&ca.cert_pem)?.remove(0);

    let sans = opts.sans.join(",");
    let pair_secret = api.get_opt(&opts.pair_secret).await?;
    let current = match &pair_secret {
        Some(s) if !managed(s) => return Ok(()),
        Some(s) => keyed(s).filter(|pair| {
            let issued_for = s
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SANS_ANNOTATION));
            let signed = tls::certificates(&pair.cert_pem)
                .ok()
                .and_then(|c| c.into_iter().next())
                .is_some_and(|der| tls::signed_by(&der, &ca_der));
            signed
                && issued_for == Some(&sans)
                && !due(&pair.cert_pem, now, opts.renew_before)
                && tls::certified_key(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes()).is_ok()
        }),
        None => None,
    };
    if current.is_none() {
        let pair = tls::issue(&ca, &opts.sans, opts.cert_validity)?;
        let annotations = BTreeMap::from([(SANS_ANNOTATION.to_string(), sans)]);
        let secret = tls_secret(&opts.pair_secret, &pair, annotations);
        if let Wrote::Yes = write(api, pair_secret.as_ref(), secret, owners).await? {
            tracing::info!(secret = opts.pair_secret, "serving certificate written");
        }
    } else {
        adopt(api, pair_secret.as_ref(), owners).await?;
    }
    Ok(())
}

/// Runs the duty while `leading` says this replica leads: every `resync`,
/// and whenever a watched Secret changes (`changed`).
pub async fn run(
    client: Client,
    opts: CertOptions,
    mut leading: watch::Receiver<bool>,
    changed: Arc<Notify>,
) {
    let api: Api<Secret> = Api::namespaced(client.clone(), &opts.namespace);
    loop {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        if let Err(e) = reconcile(&client, &api, &opts).await {
            tracing::warn!(error = %e, "certificate renewal failed; retrying");
        }
        tokio::select! {
            _ = tokio::time::sleep(opts.resync) => {}
            _ = leading.changed() => {}
            _ = changed.notified() => {}
        }
    }
}

/// What every replica learns from the Secrets.
pub struct Watched {
    /// The CA bundle (PEM) for caBundle; empty until the CA Secret is seen.
    pub ca_bundle: watch::Receiver<String>,
    /// True once a serving certificate from the pair Secret is being served.
    pub serving: watch::Receiver<bool>,
    /// Signalled on every change of either Secret.
    pub changed: Arc<Notify>,
}

/// Watches both Secrets; a new pair goes into `resolver`.
pub fn watch_secrets(client: Client, opts: &CertOptions, resolver: Arc<SwappableCert>) -> Watched {
    let api: Api<Secret> = Api::namespaced(client, &opts.namespace);
    let (ca_tx, ca_bundle) = watch::channel(String::new());
    let (serving_tx, serving) = watch::channel(false);
    let changed = Arc::new(Notify::new());
    let config = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = futures_util::stream::select(
        watcher(api.clone(), config(&opts.ca_secret)),
        watcher(api, config(&opts.pair_secret)),
    );
    let (ca_name, pair_name) = (opts.ca_secret.clone(), opts.pair_secret.clone());
    let notify = changed.clone();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        let mut served: Option<KeyedCert> = None;
        while let Some(event) = events.next().await {
            let secret = match event {
                Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => s,
                Ok(watcher::Event::Delete(_)) => {
                    // Keep serving what we have; the leader writes a new one.
                    notify.notify_one();
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "watching the certificate Secrets");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            notify.notify_one();
            let name = secret.metadata.name.as_deref().unwrap_or_default();
            if name == ca_name {
                if let Some(bundle) = data(&secret, "tls.crt") {
                    ca_tx.send_if_modified(|b| {
                        let differs = *b != bundle;
                        if differs {
                            *b = bundle;
                        }
                        differs
                    });
                }
            } else if name == pair_name {
                let Some(pair) = keyed(&secret) else {
                    tracing::error!(secret = name, "serving Secret lacks tls.crt or tls.key");
                    continue;
                };
                if served.as_ref() == Some(&pair) {
                    continue;
                }
                match tls::certified_key(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes()) {
                    Ok(key) => {
                        resolver.0.store(Arc::new(key));
                        served = Some(pair);
                        serving_tx.send_replace(true);
                        tracing::info!(secret = name, "serving certificate loaded from its Secret");
                    }
                    Err(e) => {
                        tracing::error!(secret = name, error = %e, "unusable serving certificate; keeping the current one")
                    }
                }
            }
        }
    });
    Watched {
        ca_bundle,
        serving,
        changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewed_bundle_keeps_valid_old_cas_after_the_new_one() {
        let day = Duration::from_secs(24 * 3600);
        let old = tls::generate_ca(30 * day).unwrap();
        let new = tls::generate_ca(365 * day).unwrap();
        let now = SystemTime::now();
        let bundle = rotated_bundle(&new.cert_pem, &old.cert_pem, now);
        let certs = tls::certificates(&bundle).unwrap();
        assert_eq!(certs.len(), 2);
        assert_eq!(certs[0], tls::certificates(&new.cert_pem).unwrap()[0]);
        assert_eq!(certs[1], tls::certificates(&old.cert_pem).unwrap()[0]);
        // Forty days on, the old CA has expired and leaves the bundle.
        let later = rotated_bundle(&new.cert_pem, &bundle, now + 40 * day);
        assert_eq!(tls::certificates(&later).unwrap().len(), 1);
        // The new CA still signs: the first certificate is the signer.
        let pair = tls::issue(
            &KeyedCert {
                cert_pem: bundle,
                key_pem: new.key_pem,
            },
            &["gavel-svc.gavel.svc".into()],
            day,
        )
        .unwrap();
        let der = tls::certificates(&pair.cert_pem).unwrap().remove(0);
        assert!(tls::signed_by(&der, &certs[0]));
    }

    #[test]
    fn certificates_are_due_within_renew_before() {
        let day = Duration::from_secs(24 * 3600);
        let ca = tls::generate_ca(20 * day).unwrap();
        let now = SystemTime::now();
        assert!(!due(&ca.cert_pem, now, 15 * day));
        assert!(due(&ca.cert_pem, now + 6 * day, 15 * day));
        assert!(due("garbage", now, day));
    }
}
