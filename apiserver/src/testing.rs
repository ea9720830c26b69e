//! Test support, behind the `testing` feature (the manager's release binary is built without it): fault
//! injection ([`RunningApiServer::faults`](crate::RunningApiServer::faults)), the request log
//! ([`RunningApiServer::request_log`](crate::RunningApiServer::request_log)), the Deployment stand-in that
//! only marks Deployments available, and what tests check webhooks and TLS with.

pub use crate::admission::match_conditions;
pub use crate::faults::{FaultInjector, FaultRule, Held, LatencyRule, RequestLog};
pub use crate::request::RequestRecord;
pub use crate::workloads::{mark_deployment_available, spawn_deployment_controller};

/// Certificates for a webhook server of a test: a CA and a serving certificate signed by it.
pub mod tls {
    pub use crate::tls::{generate, server_config, ServerCerts};
}
