//! BTP Manager: installs and manages the SAP BTP service operator, with admission webhooks.
//!
//! - `app`: the `run` command, signals, and the generated artifacts.
//! - `manager`: the one place the manager is wired (reconciler, leader election, webhooks, probes, shutdown),
//!   for `run`, `local`, the tests and the benchmarks.
//! - `tasks`: task plumbing (`AbortOnDrop`, stop signals) below the wiring and the reconciler.
//! - `cli`: flags.
//! - `webhook_certs`: the manager's own webhook certificates in the cluster.
//! - `config`: runtime configuration (the key table: flags, defaults, ConfigMap keys; the settings snapshot a
//!   pass reads).
//! - `credentials_check`: asking the token endpoint with the credentials Secret's values (condition
//!   `CredentialsValid`), beside the reconciler.
//! - `doctor`: `btp-manager doctor`, read-only health checks of a live installation.
//! - `embedded`: the operand's manifests built into the binary (the default module resources);
//!   `manifests`: loading them, built in or from a directory.
//! - `local`: `btp-manager local`, everything against the embedded API server.
//! - `reconciler`: the BtpOperator reconcile loop (pure decisions in its submodules).
//! - `shipped`: what `deploy/` installs, built in (for `local` and `doctor`).
//! - `uninstall`: `btp-manager uninstall --keep-operand`, the way back to the Go BTP Manager.
//! - `ops`: metrics and health endpoints; `telemetry`: logging; `watch_backoff`: how watches retry; `sync`: locks
//!   that outlive a panicking holder.
//! - `fence`: the right to write that leader election grants; `rest_client`: the client every part of the
//!   manager sends through (fencing of writes, request metrics); `first_writes`: the only writes a replica
//!   makes without leading (the first webhook certificate and caBundle, where none exists).

pub mod app;
pub mod cli;
pub mod config;
pub mod credentials_check;
pub mod doctor;
pub mod embedded;
pub mod fence;
pub mod first_writes;
pub mod local;
pub mod manager;
pub mod manifests;
pub mod objects;
pub mod ops;
pub mod reconciler;
pub mod rest_client;
pub mod shipped;
pub mod sync;
pub mod tasks;
pub mod telemetry;
pub mod uninstall;
pub mod watch_backoff;
pub mod webhook_certs;

/// A boxed `Send` future ([`tasks::BoxedFuture`], where the reconciler takes it from without importing the
/// crate root).
pub use tasks::BoxedFuture;

/// The configuration of this crate's property tests: `default_cases` cases unless `PROPTEST_CASES` says
/// otherwise, and no failure files written into the source tree.
#[cfg(test)]
pub(crate) fn proptest_config(default_cases: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    proptest::test_runner::Config {
        cases,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
