//! What the integration tests share: the in-process Kubernetes API test
//! server ([`apiserver`]) that stands in for a kube-apiserver, which cannot be
//! installed on these machines.

// Each test target compiles this module on its own and uses only part of it.
#![allow(dead_code)]
// The test server's error path returns the ready `Response` itself.
#![allow(clippy::result_large_err)]

pub mod apiserver;
pub mod balancer;
pub mod cluster;
pub mod gavel;
