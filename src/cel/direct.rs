//! CEL evaluated directly on the request's JSON.
//!
//! The cel crate's interpreter works on its own value maps: binding a
//! request converts it, and every field selection copies the selected
//! subtree (`perf-results/2026-11-22-pod-security-flavours.md`). This
//! evaluator reads the JSON where it lies: selecting `object.spec` is a
//! reference to the decoded document, a comprehension walks its array in
//! place, and only what an expression builds is allocated.
//!
//! It is an accelerator, not a second CEL: an expression is compiled here
//! only when every construct in it is one this evaluator implements
//! ([`compile`]), and at run time any error, or any value it does not
//! handle, hands the whole expression to the interpreter ([`Fail`]). So
//! answers and error messages are the interpreter's; the differential test
//! (`tests/cel_direct.rs`) holds the two to that on the corpora.

mod compile;
mod eval;
mod functions;
pub mod set;
mod time;
pub mod value;

pub use compile::{
    Compiled, KNOWN_ROOTS, Node, OBJECT, OLD_OBJECT, PARAMS, RuleVariable, RuleVariables,
    VariableRef, compile, compile_in_rule, known_root,
};
pub use eval::{Bindings, evaluate, evaluate_bool};
pub use value::{Fail, Val};

#[cfg(test)]
mod tests;
