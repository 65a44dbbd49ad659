//! Patches on JSON documents, independent of Kyverno: RFC 6902 JSON Patch
//! (apply, and the diff between two documents) and Kubernetes strategic
//! merge with the merge keys of the built-in kinds, and server-side apply's
//! merge with their list types, and apply's typed conversion of an apply
//! configuration (all from [`crate::kinds::schema`]).

pub mod apply;
pub mod json_patch;
pub mod strategic;
pub mod typed;
