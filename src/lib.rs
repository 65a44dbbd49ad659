//! gavel: a Kubernetes admission service that runs Kyverno-compatible policies.
//!
//! The pipeline, in the order data flows through it:
//!
//! - [`policy`]: Kyverno API types, strict loading, and the compile step
//!   (autogen for pod controllers, pre-parsed JMESPath) into immutable
//!   [`policy::CompiledPolicy`] values.
//! - [`matching`]: match/exclude of a resource against a rule.
//! - [`engine`]: evaluation of compiled rules (validate: pattern, anyPattern,
//!   deny, foreach, podSecurity) with variables, preconditions and context
//!   entries; it reaches external objects only through a [`context::Resolver`].
//! - [`jmespath`]: the JMESPath runtime with Kyverno's custom functions.
//! - [`server`]: `gavel serve`, the HTTPS admission webhook: AdmissionReview
//!   in, the engine's verdict out, against a hot-swapped policy snapshot.
//! - [`cli`]: `gavel test` and `gavel apply`, offline front ends to the
//!   engine, and the `serve` command.
//!
//! Supporting modules: [`units`] (quantities, durations, semver) and
//! [`wildcard`] (Kyverno's `*`/`?` matching).

#![forbid(unsafe_code)]

pub mod admission;
pub mod cel;
pub mod cli;
pub mod cluster;
pub mod context;
pub mod controllers;
pub mod engine;
pub mod jmespath;
pub mod json_map;
pub mod kinds;
pub mod matching;
pub mod patch;
pub mod pattern;
pub mod policy;
pub mod server;
pub mod units;
pub mod wildcard;
