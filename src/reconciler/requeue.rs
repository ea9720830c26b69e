//! When a reconcile comes back by itself (docs/behaviour.md#watches-and-triggers), as a pure rule. Watches bring it back on every
//! change that matters; these periodic requeues are the safety net (and how certificate expiry is noticed).
//! A zero interval means "no periodic requeue", as upstream: no configuration can make the manager spin.

use super::end::End;
use crate::config::Config;
use btp_api::{Reason, State};
use std::time::Duration;

/// The controller's action after a successful pass that comes back after `delay` (None: only on a watch
/// event).
pub fn action(delay: Option<Duration>) -> kube::runtime::controller::Action {
    match delay {
        Some(d) => kube::runtime::controller::Action::requeue(d),
        None => kube::runtime::controller::Action::await_change(),
    }
}

/// The `result` label controller-runtime counts a successful pass under: `requeue_after` when it comes back
/// after a delay, `success` otherwise (errors are counted as `error`).
pub fn result_label(delay: Option<Duration>) -> &'static str {
    if delay.is_some() {
        "requeue_after"
    } else {
        "success"
    }
}

/// The delay before the pass that follows `end`, or `None` for "only on a watch event" (also for a failed
/// pass: the error policy retries it, [`error_backoff`]).
pub fn delay(end: &End, config: &Config) -> Option<Duration> {
    let interval = match end {
        End::AwaitChange | End::Fail(_) => return None,
        End::Recheck(_, d) => *d,
        End::Report(outcome) => match (outcome.reason.state(), outcome.reason) {
            (_, Reason::WrongNamespaceOrName) => return None,
            (State::Ready, _) | (State::Warning, _) | (State::Deleting, _) => config.ready_state_requeue_interval,
            // A Secret problem is fixed by editing the Secret, which the watch sees.
            (State::Error, Reason::InvalidSecret) => config.ready_state_requeue_interval,
            (State::Error, _) | (State::Processing, _) => config.processing_state_requeue_interval,
        },
    };
    (!interval.is_zero()).then_some(interval)
}

/// A number in [0, 1) that differs between calls (for jitter; not for anything that must be random).
pub fn jitter() -> f64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// First retry after a failure.
pub const ERROR_BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest wait between retries (minutes, not hours).
pub const ERROR_BACKOFF_CAP: Duration = Duration::from_secs(5 * 60);

/// The wait before retrying after `failures` consecutive failures (1 for the first): doubling from
/// [`ERROR_BACKOFF_BASE`], capped at [`ERROR_BACKOFF_CAP`], spread by `jitter` in [0, 1) over ±20 % so that
/// retries of several managers do not line up.
pub fn error_backoff(failures: u32, jitter: f64) -> Duration {
    let exponent = failures.saturating_sub(1).min(16);
    let nominal = ERROR_BACKOFF_BASE.saturating_mul(1 << exponent).min(ERROR_BACKOFF_CAP);
    nominal.mul_f64(0.8 + 0.4 * jitter.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconciler::status::Outcome;

    #[test]
    fn result_labels_follow_controller_runtime() {
        assert_eq!(result_label(Some(Duration::from_secs(1))), "requeue_after");
        assert_eq!(result_label(None), "success");
    }

    #[test]
    fn error_backoff_doubles_up_to_the_cap_with_jitter() {
        assert_eq!(error_backoff(1, 0.5), Duration::from_secs(1));
        assert_eq!(
            error_backoff(0, 0.5),
            Duration::from_secs(1),
            "0 counts as the first failure"
        );
        assert_eq!(error_backoff(2, 0.5), Duration::from_secs(2));
        assert_eq!(error_backoff(5, 0.5), Duration::from_secs(16));
        assert_eq!(error_backoff(30, 0.5), ERROR_BACKOFF_CAP);
        assert_eq!(error_backoff(u32::MAX, 0.5), ERROR_BACKOFF_CAP);
        assert_eq!(error_backoff(3, 0.0), Duration::from_millis(3200));
        assert_eq!(error_backoff(3, 1.0), Duration::from_millis(4800));
    }

    #[test]
    fn periodic_requeues_follow_the_state() {
        let c = Config::default();
        let d = |r| delay(&End::Report(Outcome::new(r, "")), &c);
        assert_eq!(d(Reason::ReconcileSucceeded), Some(c.ready_state_requeue_interval));
        assert_eq!(d(Reason::MissingSecret), Some(c.ready_state_requeue_interval));
        assert_eq!(d(Reason::InvalidSecret), Some(c.ready_state_requeue_interval));
        assert_eq!(
            d(Reason::ServiceInstancesAndBindingsNotCleaned),
            Some(c.ready_state_requeue_interval)
        );
        assert_eq!(d(Reason::HardDeleting), Some(c.ready_state_requeue_interval));
        assert_eq!(d(Reason::ProvisioningFailed), Some(c.processing_state_requeue_interval));
        assert_eq!(d(Reason::Updated), Some(c.processing_state_requeue_interval));
        assert_eq!(d(Reason::WrongNamespaceOrName), None);
    }

    #[test]
    fn explicit_delays_win_and_zero_means_never() {
        let mut c = Config::default();
        let recheck = |d| End::Recheck(Some(Outcome::new(Reason::Updated, "")), d);
        assert_eq!(
            delay(&recheck(Duration::from_secs(3)), &c),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            delay(&End::Recheck(None, Duration::from_secs(3)), &c),
            Some(Duration::from_secs(3))
        );
        assert_eq!(delay(&End::AwaitChange, &c), None);
        assert_eq!(
            delay(&End::Fail(Outcome::new(Reason::ResourceRemovalFailed, "").into()), &c),
            None
        );
        c.ready_state_requeue_interval = Duration::ZERO;
        c.processing_state_requeue_interval = Duration::ZERO;
        for r in [
            Reason::ReconcileSucceeded,
            Reason::ProvisioningFailed,
            Reason::HardDeleting,
        ] {
            assert_eq!(delay(&End::Report(Outcome::new(r, "")), &c), None, "{r}");
        }
        assert_eq!(delay(&recheck(Duration::ZERO), &c), None);
    }
}
