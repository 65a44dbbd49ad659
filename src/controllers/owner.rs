//! The chart's ClusterRole as the owner of what gavel writes at run time:
//! webhook configurations, the Leases of its duties and its certificate
//! Secrets. Deleting the ClusterRole, as `helm uninstall` does, lets the
//! garbage collector delete them, even when no gavel pod runs to clean up
//! (a namespaced object may have a cluster-scoped owner).
//! kyverno-compat: Kyverno owns its webhook configurations by its
//! ClusterRole the same way; its Leases and Secrets outlive an uninstall.

use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Api, Client};

/// The owner reference to the ClusterRole `name`: Ok(None) when it does
/// not exist (the chart is being uninstalled: nothing should be written
/// that would outlive it).
pub async fn cluster_role(
    client: &Client,
    name: &str,
) -> Result<Option<Vec<OwnerReference>>, kube::Error> {
    let role = Api::<ClusterRole>::all(client.clone())
        .get_opt(name)
        .await?;
    Ok(role.and_then(|role| {
        Some(vec![OwnerReference {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "ClusterRole".into(),
            name: name.into(),
            uid: role.metadata.uid?,
            ..Default::default()
        }])
    }))
}
