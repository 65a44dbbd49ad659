//! The API server's resources, as discovery lists them: what the cleanup
//! controller resolves a policy's kinds against, and the kinds whose
//! objects may carry the TTL label. Aggregated discovery (two requests)
//! where the server has it, the per-group walk otherwise.

use kube::Client;
use kube::api::ApiResource;
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

    /// `group/version/plural`, `v1/plural` for the core group.
    pub fn id(&self) -> String {
        format!("{}/{}", self.api.api_version, self.api.plural)
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
