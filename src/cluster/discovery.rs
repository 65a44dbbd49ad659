//! The API server's resources, as discovery lists them: what the cleanup
//! controller resolves a policy's kinds against, and the kinds whose
//! objects may carry the TTL label. Aggregated discovery (two requests)
//! where the server has it, the per-group walk otherwise.

use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Preconditions, PropagationPolicy};
use kube::discovery::{Discovery, Scope};

/// One resource at its group's preferred version.
#[derive(Debug, Clone)]
pub struct Discovered {
    pub api: ApiResource,
    pub namespaced: bool,
    /// The verbs discovery lists (`list`, `watch`, `delete`, ...).
    pub verbs: Vec<String>,
}

impl Discovered {
    pub fn supports(&self, verbs: &[&str]) -> bool {
        verbs.iter().all(|v| self.verbs.iter().any(|x| x == v))
    }

    /// The same resource at another version of its group.
    pub fn at_version(&self, version: &str) -> Discovered {
        let mut out = self.clone();
        out.api.version = version.to_string();
        out.api.api_version = if out.api.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", out.api.group)
        };
        out
    }

    /// `group/version/plural`, `v1/plural` for the core group.
    pub fn id(&self) -> String {
        format!("{}/{}", self.api.api_version, self.api.plural)
    }

    /// Its objects in `namespace`; all of them for a cluster-scoped kind
    /// or an empty namespace.
    pub fn api(&self, client: &Client, namespace: &str) -> Api<DynamicObject> {
        if self.namespaced && !namespace.is_empty() {
            Api::namespaced_with(client.clone(), namespace, &self.api)
        } else {
            Api::all_with(client.clone(), &self.api)
        }
    }
}

/// `Foreground`, `Background` or `Orphan`; None for anything else (the API
/// server's default).
pub fn propagation_policy(name: &str) -> Option<PropagationPolicy> {
    match name {
        "Foreground" => Some(PropagationPolicy::Foreground),
        "Background" => Some(PropagationPolicy::Background),
        "Orphan" => Some(PropagationPolicy::Orphan),
        _ => None,
    }
}

/// Deletes the object `name` only if it is still the one of `uid`, so that
/// repeating the deletion (a deposed leader, a retry) never takes a newer
/// object of that name. Ok(true) when this call deleted it; Ok(false) when
/// it was gone or replaced already.
pub async fn delete_once(
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    propagation: Option<PropagationPolicy>,
) -> Result<bool, kube::Error> {
    let params = DeleteParams {
        propagation_policy: propagation,
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Every top-level resource (no subresources) the server serves.
pub async fn resources(client: &Client) -> Result<Vec<Discovered>, String> {
    let discovery = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(d) => d,
        Err(_) => Discovery::new(client.clone())
            .run()
            .await
            .map_err(|e| format!("discovery: {e}"))?,
    };
    Ok(discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .map(|(api, caps)| Discovered {
            api,
            namespaced: caps.scope == Scope::Namespaced,
            verbs: caps.operations,
        })
        .collect())
}
