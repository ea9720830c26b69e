//! How a pass fails: [`ReconcileError`], retried by the controller with backoff, and the failed API call it
//! most often carries ([`ApiError`]). How a pass ends otherwise is [`super::end::End`].

use super::status::Outcome;

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
    /// A failure reported in the status (e.g. `ResourceRemovalFailed`, or an API call the status contract
    /// names a reason for), retried with backoff: the pass writes this outcome before it fails.
    #[error("{}: {}", .0.reason, .0.message)]
    Reported(Outcome),
    /// The pass ran out of its time budget ([`super::pass::pass_budget`]).
    #[error("the pass did not finish within its budget of {budget:?}")]
    OutOfTime {
        /// The budget.
        budget: std::time::Duration,
    },
}

impl From<Outcome> for ReconcileError {
    fn from(outcome: Outcome) -> Self {
        ReconcileError::Reported(outcome)
    }
}
