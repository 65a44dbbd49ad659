//! Cluster mode: the kube client with client-side rate limits
//! ([`client`]), the reflector stores the admission path reads instead of
//! calling the API server ([`stores`]), the resolvers over them
//! ([`informer`] first, then the API fallback with its cache in [`api`],
//! `apiCall.service` in [`service`], [`global_context`] entries), and the
//! policy snapshot kept in step with the stores ([`policy_sync`]).

pub mod api;
pub mod client;
pub mod config_maps;
pub mod discovery;
pub mod events;
pub mod global_context;
pub mod informer;
pub mod policy_reports;
pub mod policy_sync;
pub mod service;
pub mod stores;
pub mod update_requests;
pub mod watch_backoff;
