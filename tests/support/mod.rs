//! What the integration tests share: the in-process Kubernetes API test
//! server ([`apiserver`]) for fast tests, the real control plane of
//! `e2e/cluster.sh` ([`cluster`]), a loopback balancer, `gavel serve` as a
//! child process, Kyverno as the peer of the benchmarks ([`kyverno`], with
//! their shared rounds in [`bench`]), and the tools the tests run ([`tools`]).

// Each test target compiles this module on its own and uses only part of it.
#![allow(dead_code)]
// The test server's error path returns the ready `Response` itself.
#![allow(clippy::result_large_err)]

pub mod apiserver;
pub mod balancer;
pub mod bench;
pub mod cluster;
pub mod gavel;
pub mod kyverno;
pub mod release;
pub mod tools;
