//! How a pass ends: [`End`], the one type for it. A pass ends with what to report in the status and when the
//! CR comes back, or with a failure ([`ReconcileError`], the other type) that the controller retries with
//! backoff. Every step returns `Result<_, End>`: `Ok` goes on, `Err(end)` ends the pass there, so the flows
//! read as a list of `?`s, and one place ([`super::pass`]) writes the final status and turns the end into
//! the controller's action ([`super::requeue::delay`]).

use super::error::{ApiError, ReconcileError};
use super::status::Outcome;
use btp_api::Reason;
use std::time::Duration;

/// How a pass (or a step that ends it early) ends.
#[derive(Debug)]
pub enum End {
    /// Report this outcome; the periodic re-check of the state it implies brings the CR back. A problem the
    /// status reports is not a failure of the pass.
    Report(Outcome),
    /// Report this outcome (nothing when None: the status already says it) and come back after this long at
    /// the latest, whatever the state (a wait with a deadline: `ReadyTimeout`, `HardDeleteTimeout`).
    Recheck(Option<Outcome>, Duration),
    /// Nothing to report; only a watch event brings the CR back.
    AwaitChange,
    /// The pass failed: the controller retries it with backoff. A [`ReconcileError::Reported`] failure is
    /// reported in the status first.
    Fail(ReconcileError),
}

impl End {
    /// The outcome to write in the status, if any.
    pub fn report(&self) -> Option<&Outcome> {
        match self {
            End::Report(outcome) | End::Recheck(Some(outcome), _) => Some(outcome),
            End::Fail(ReconcileError::Reported(outcome)) => Some(outcome),
            End::Recheck(None, _) | End::AwaitChange | End::Fail(_) => None,
        }
    }
}

impl From<ApiError> for End {
    fn from(e: ApiError) -> Self {
        End::Fail(ReconcileError::Api(e))
    }
}

impl From<ReconcileError> for End {
    fn from(e: ReconcileError) -> Self {
        End::Fail(e)
    }
}

/// `map_err` helper: report any error as `reason` with the error's text as the message.
pub fn report<E: std::fmt::Display>(reason: Reason) -> impl FnOnce(E) -> End {
    move |e| End::Report(Outcome::new(reason, e.to_string()))
}

/// `map_err` helper for a failed API call that the status contract names a reason for (the message says
/// what could not be read or written; it is not a verdict about the cluster's content): report it as
/// `reason`, and fail the pass, to be retried with backoff.
pub fn retry<E: std::fmt::Display>(reason: Reason) -> impl FnOnce(E) -> End {
    move |e| End::Fail(ReconcileError::Reported(Outcome::new(reason, e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_end_reports() {
        let outcome = || Outcome::new(Reason::Updated, "waiting");
        assert_eq!(End::Report(outcome()).report(), Some(&outcome()));
        assert_eq!(
            End::Recheck(Some(outcome()), Duration::from_secs(1)).report(),
            Some(&outcome())
        );
        assert_eq!(End::Recheck(None, Duration::from_secs(1)).report(), None);
        assert_eq!(End::AwaitChange.report(), None);
        let reported = retry(Reason::AnnotatingSecretFailed)("patching the Secret: forbidden (403)");
        assert_eq!(
            reported.report().map(|o| o.reason),
            Some(Reason::AnnotatingSecretFailed),
            "a reported failure is written before the pass fails"
        );
        let failed = End::Fail(ReconcileError::OutOfTime {
            budget: Duration::from_secs(60),
        });
        assert_eq!(failed.report(), None);
    }
}
