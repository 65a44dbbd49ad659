//! Policies: Kyverno API types, strict loading from YAML, and the compile
//! step that turns a policy document into an immutable [`CompiledPolicy`].

pub mod autogen;
pub mod cel_policy;
pub mod cleanup;
pub mod compile;
pub mod conditions;
pub mod load;
pub mod mutation;
pub mod template;
pub mod types;

pub use compile::{
    CompiledException, CompiledPolicy, CompiledRule, ExprCache, FailureAction, FailurePolicy,
    RuleBody, ValidateCheck,
};
pub use conditions::{Condition, Conditions};
pub use load::{LoadError, LoadedDocument};
