//! The reconciler's two ways to end a step early: an outcome to report in the status ([`Stop::Report`]), or
//! a failure the controller retries with backoff ([`Stop::Fail`]). Every step returns `Result<_, Stop>`, so
//! the flows read as a list of `?`s and one place writes the final status.

use super::status::Outcome;
use btp_api::Reason;

/// A failed API call, with what was attempted. Its `Display` is fit for a status message: the API server's
/// message and code, never an object body (so never a secret value).
#[derive(Debug, thiserror::Error)]
#[error("{action}: {}", summary(.source))]
pub struct ApiError {
    /// What was attempted ("reading Secret kyma-system/sap-btp-manager").
    pub action: String,
    /// The error.
    #[source]
    pub source: kube::Error,
}

impl ApiError {
    /// Whether the API answered 404.
    pub fn is_not_found(&self) -> bool {
        matches!(&self.source, kube::Error::Api(s) if s.code == 404)
    }
}

/// `map_err` helper: an [`ApiError`] for `action`.
pub fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> ApiError {
    let action = action.into();
    move |source| ApiError { action, source }
}

/// The API server's message and code, or the client error.
pub fn summary(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

/// Why a reconcile returned an error: the controller's error policy retries it with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// An API call failed (nothing reported in the status).
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A failure already reported in the status (e.g. `ResourceRemovalFailed`), retried with backoff.
    #[error("{reason}: {message}")]
    Reported {
        /// The reason written.
        reason: Reason,
        /// The message written.
        message: String,
    },
    /// The pass ran out of its time budget ([`super::pass::pass_budget`]).
    #[error("the pass did not finish within its budget of {budget:?}")]
    OutOfTime {
        /// The budget.
        budget: std::time::Duration,
    },
}

/// How a step ends a pass early.
#[derive(Debug)]
pub enum Stop {
    /// Report this outcome in the status and end the pass (a status-reported problem is not an error).
    Report(Outcome),
    /// Report this outcome in the status, then fail the pass: the controller retries it with backoff. For a
    /// failure to talk to the API server that the status contract names a reason for (the message says what
    /// could not be read or written): it is not a verdict about the cluster's content.
    Retry(Outcome),
    /// Fail the pass: the controller retries with backoff.
    Fail(ReconcileError),
}

impl From<ApiError> for Stop {
    fn from(e: ApiError) -> Self {
        Stop::Fail(ReconcileError::Api(e))
    }
}

impl From<ReconcileError> for Stop {
    fn from(e: ReconcileError) -> Self {
        Stop::Fail(e)
    }
}

/// `map_err` helper: report any error as `reason` with the error's text as the message.
pub fn report<E: std::fmt::Display>(reason: Reason) -> impl FnOnce(E) -> Stop {
    move |e| Stop::Report(Outcome::new(reason, e.to_string()))
}

/// `map_err` helper for a failed API call: report it as `reason` and retry the pass with backoff.
pub fn retry<E: std::fmt::Display>(reason: Reason) -> impl FnOnce(E) -> Stop {
    move |e| Stop::Retry(Outcome::new(reason, e.to_string()))
}

impl From<Outcome> for ReconcileError {
    fn from(outcome: Outcome) -> Self {
        ReconcileError::Reported {
            reason: outcome.reason,
            message: outcome.message,
        }
    }
}
