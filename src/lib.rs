//! gavel: a Kubernetes admission service that runs Kyverno-compatible policies.
//!
//! The modules, bottom floor first (ARCHITECTURE.md; each imports only
//! from floors below it, checked by `tests/architecture.rs`):
//!
//! - [`units`], [`wildcard`], [`glob`], [`json_map`], [`image_reference`]:
//!   quantities, durations, semver, Kyverno's `*`/`?` matching, gobwas
//!   globs, JSON map lookups, image references.
//! - [`kinds`], [`json_doc`]: Kubernetes kinds, resources, scopes and
//!   schemas; a decoded JSON document in contiguous buffers, and the view
//!   the evaluators read it and a `serde_json::Value` through.
//! - [`jmespath`], [`cel`], [`pattern`], [`patch`]: the expression
//!   languages, Kyverno's patterns and anchors, JSON Patch and strategic
//!   merge; none knows a policy.
//! - [`matching`]: match/exclude blocks, compiled and matched.
//! - [`policy`]: Kyverno API types, strict loading, and the compile step
//!   into immutable [`policy::CompiledPolicy`] plans.
//! - [`context`]: the [`context::Resolver`] the engine reads the world
//!   through.
//! - [`engine`]: evaluation of compiled rules.
//! - [`admission`]: one AdmissionReview in, one answer out: the pipeline,
//!   the verdict, Kyverno's denial text, the policy snapshot.
//! - [`cluster`]: cluster mode: rate-limited client, reflector stores, the
//!   resolvers over them, the policy sync.
//! - [`server`]: the HTTPS transport.
//! - [`controllers`]: leader-only duties under Leases.
//! - [`cli`]: `gavel serve`, `gavel test`, `gavel apply`.

#![forbid(unsafe_code)]

pub mod admission;
pub mod cel;
pub mod cli;
pub mod cluster;
pub mod context;
pub mod controllers;
pub mod engine;
pub mod glob;
pub mod image_reference;
pub mod jmespath;
pub mod json_doc;
pub mod json_map;
pub mod kinds;
pub mod matching;
pub mod patch;
pub mod pattern;
pub mod policy;
pub mod server;
pub mod text;
pub mod units;
pub mod wildcard;

#[cfg(test)]
mod test_random;
