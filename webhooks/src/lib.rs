//! The manager's admission webhooks.
//!
//! - [`rules`]: what is allowed, denied, warned about and patched (pure functions).
//! - [`review`]: decoding an `AdmissionReview` body, with a 4xx for every kind of bad input.
//! - [`handlers`]: the axum router that connects the two; [`endpoint`]: which webhook a request is for
//!   (the handlers dispatch on it, [`metrics`] label by it).
//! - [`server`] and [`tls`]: HTTPS (rustls, TLS 1.2+, HTTP/1.1 and HTTP/2) with a certificate that can
//!   be swapped while serving.
//! - [`manifests`]: the manager's own Validating/MutatingWebhookConfiguration objects.

pub mod client;
pub mod endpoint;
pub mod handlers;
pub mod manifests;
pub mod metrics;
pub mod object;
pub mod review;
pub mod rules;
pub mod server;
pub mod tls;

pub use handlers::{router, FixedServiceCounter, KubeServiceCounter, ServiceCounter, WebhookState};
pub use rules::RulesConfig;
