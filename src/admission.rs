//! Admission: one AdmissionReview in, one answer out. [`review`] decodes
//! the review (keeping the request's own kind, resource and subresource),
//! [`pipeline`] runs the policies of a [`policies::Snapshot`] through the
//! [`evaluation`] in Kyverno's phase order (the webhook's two routes:
//! classic validate, then ValidatingPolicies and ImageValidatingPolicies;
//! classic mutate, then MutatingPolicies), and [`verdict`] decides and
//! writes the answer with Kyverno's denial text ([`yaml_text`],
//! [`json_text`]). `gavel test`, `gavel apply` and the background scan run
//! the same evaluation in their own [`evaluation::Mode`]. The per-rule
//! result counters of a snapshot are in [`rule_table`].
//!
//! It knows nothing of HTTP: `server` hands it bodies and sends back what
//! it returns.

pub mod evaluation;
pub mod events;
pub mod json_text;
pub mod pipeline;
pub mod policies;
pub mod policy_checks;
pub mod policy_validation;
pub mod reports;
pub mod review;
pub mod rule_table;
pub mod update_requests;
pub mod verdict;
pub mod yaml_text;
