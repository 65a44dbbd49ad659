//! Cluster mode: the kube client with client-side rate limits
//! ([`client`]), the reflector stores the admission path reads instead of
//! calling the API server ([`stores`]), and the policy snapshot kept in step
//! with them ([`policy_sync`]).

pub mod client;
pub mod config_maps;
pub mod global_context;
pub mod policy_sync;
pub mod stores;
pub mod watch_backoff;
