//! What the integration tests share: the in-process Kubernetes API test
//! server ([`apiserver`]) for fast tests, the real control plane of
//! `e2e/cluster.sh` ([`cluster`]), a loopback balancer, `gavel serve` as a
//! child process, Kyverno as the peer of the benchmarks ([`kyverno`], with
//! their shared rounds in [`bench`]), and the tools the tests run ([`tools`]).

// Each test module uses only part of it.
#![allow(dead_code)]
// The test server's error path returns the ready `Response` itself.
#![allow(clippy::result_large_err)]

pub mod apiserver;
pub mod balancer;
pub mod bench;
pub mod cluster;
pub mod gatekeeper;
pub mod gavel;
pub mod kyverno;
pub mod release;
pub mod tools;

/// Held for their whole run by the tests that start a real control plane or
/// build with the nightly toolchain. The integration tests are one binary
/// (`tests/main.rs`) whose tests run two at a time; two of these at once
/// would share 2 cores and several GiB, and their deadlines with them.
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // One that panicked leaves the lock poisoned; the next runs all the same.
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}
