//! Work that must run once per cluster rather than once per replica: it
//! runs on the leader of a Lease ([`leader`]), one Lease per duty as in
//! Kyverno, and every action is idempotent because leader election gives
//! no fencing.

pub mod background;
pub mod certificates;
pub mod cleanup;
pub mod leader;
pub mod owner;
pub mod policy_status;
pub mod reports;
pub mod webhooks;
