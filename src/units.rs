//! Kubernetes quantities and Go durations: the two unit-bearing scalar types
//! that Kyverno compares in patterns, conditions and JMESPath arithmetic.

pub mod duration;
pub mod quantity;

pub use duration::Duration;
pub use quantity::Quantity;
pub mod semver;
pub mod time;
