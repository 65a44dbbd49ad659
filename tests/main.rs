//! The integration tests, one module per file beside this one, built as one
//! test binary (`autotests = false` and one `[[test]]` in Cargo.toml).
//!
//! One binary rather than a binary per file because of the link: with the
//! release profile's thin LTO each test binary re-optimises the crate graph
//! it links, 30-170 s of a core per binary on these 2-core machines. The 28
//! binaries took 32 minutes of a 58-minute CI run; as one binary the build
//! takes 16 (`cargo test --release --timings` on a clean clone, 2026-11-29).
//! libtest runs the tests two at a time either way, so only which tests
//! share the machine changes; the tests that start a real control plane or
//! build with the nightly toolchain take [`support::heavy`] so that two of
//! them never overlap.
//!
//! One file's tests: `cargo test --release --test integration -- e2e::`.

mod corpus;
mod support;

mod apply;
mod architecture;
mod background;
mod cel_direct;
mod cel_go;
mod cel_spec;
mod chart;
mod cleanup;
mod cluster;
mod conformance;
mod differential;
mod docs;
mod documents;
mod e2e;
mod engine;
mod examples;
mod fuzz;
mod golden;
mod image;
mod kubectl_plugin;
mod kwok;
mod kyverno_cli_corpus;
mod kyverno_live;
mod limits;
mod peers;
mod plan;
mod reports_scale;
mod scale;
mod serve;
mod side_by_side;
mod test_command;
mod type_checking;
