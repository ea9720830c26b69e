//! Every API read and write of the reconciler. The flows (`provision`, `deprovision`) decide; this module
//! does. Failures carry what was attempted ([`ApiError`](super::error::ApiError)); the flows decide which
//! reason reports them. Every read goes through the term's view ([`super::view::read_through`]) and every
//! write and delete is told to it, so that no read answers from a store behind this process's own write.
//!
//! [`Cluster`] and the CR's own reads and writes are in `api.rs`; the apply, the drift reads, the removal and
//! the ServiceInstances/ServiceBindings each add theirs in a file of their own; [`retry`] is the one retry
//! layer under all of them.

mod api;
mod apply;
mod drift;
mod endpoints;
mod kinds;
mod removal;
pub mod retry;
mod services;

pub use api::{api_resource, ignoring_not_found, Cluster};
pub use apply::{Applied, ApplyError, ModuleReads};
pub use drift::DriftObservation;
pub use retry::{
    client_config, is_transient, retry_pause, retrying, retrying_within, OutOfTime, CALL_BUDGET, CALL_RETRIES,
    FIRST_RETRY_PAUSE,
};
pub use services::{services_resource, SERVICE_BINDING, SERVICE_INSTANCE};
