//! Fencing (docs/behaviour.md#leader-election): with leader election, the manager writes only while it knows
//! its Lease is valid. The elector opens the fence after every acquire or renewal that succeeded, until the
//! instant that request was *sent* plus the validity window, on the monotonic clock; every write the
//! manager's client sends checks it ([`crate::rest_client`]). A process paused past the window (SIGSTOP, a
//! frozen node) finds it shut when it resumes, before it has learnt anything from the API server.
//!
//! It imports nothing of this crate, so the reconciler and the wiring can both hold one.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Whether this process may write, shared by everything that writes. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Fence(Arc<watch::Sender<Right>>);

/// The right to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Right {
    /// No leader election: this process is the only writer it knows of.
    Always,
    /// Until this instant (in the past: none).
    Until(Instant),
}

impl Fence {
    /// A fence that never closes (no leader election: `local`, in-process tests, `--leader-elect=false`).
    pub fn open() -> Self {
        Self(Arc::new(watch::Sender::new(Right::Always)))
    }

    /// A fence shut until the elector first opens it.
    pub fn shut() -> Self {
        Self(Arc::new(watch::Sender::new(Right::Until(Instant::now()))))
    }

    /// Whether a write may be sent now.
    pub fn valid(&self) -> bool {
        self.valid_at(Instant::now())
    }

    fn valid_at(&self, now: Instant) -> bool {
        match *self.0.borrow() {
            Right::Always => true,
            Right::Until(until) => now < until,
        }
    }

    /// An acquire or renewal sent at `sent` succeeded: writes are allowed until `sent + window`. Never
    /// shortens the right (an older renewal answered late does not undo a newer one).
    pub fn renewed(&self, sent: Instant, window: Duration) {
        let until = sent + window;
        self.0.send_if_modified(|right| match right {
            Right::Until(current) if *current < until => {
                *right = Right::Until(until);
                true
            }
            _ => false,
        });
    }

    /// The Lease was lost or released: no more writes until the next acquire.
    pub fn shut_now(&self) {
        self.0.send_if_modified(|right| match right {
            Right::Until(until) => {
                let now = Instant::now();
                let changed = *until > now;
                *until = (*until).min(now);
                changed
            }
            Right::Always => false,
        });
    }

    /// Wait until a write may be sent (at once when it may now). A fence that stays shut keeps this waiting:
    /// race it with whatever ends the wait (the end of a leadership term).
    pub async fn wait_valid(&self) {
        let mut changes = self.0.subscribe();
        loop {
            if self.valid() {
                return;
            }
            if changes.changed().await.is_err() {
                // The sender lives as long as `self`: unreachable, but never spin.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The error a write refused by the fence ends with (inside `kube::Error::Service`).
#[derive(Debug, thiserror::Error)]
#[error("not sent: this replica does not hold a valid leader Lease (fenced; see docs/behaviour.md#leader-election)")]
pub struct Fenced;

/// Whether `e` is a write the fence refused.
pub fn is_fenced(e: &kube::Error) -> bool {
    match e {
        kube::Error::Service(inner) => inner.downcast_ref::<Fenced>().is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_fence_always_allows() {
        let fence = Fence::open();
        assert!(fence.valid());
        fence.shut_now();
        assert!(fence.valid(), "no leader election: nothing to lose");
    }

    #[test]
    fn a_renewal_allows_writes_until_its_send_time_plus_the_window() {
        let fence = Fence::shut();
        assert!(!fence.valid(), "nothing allowed before the first acquire");
        let sent = Instant::now();
        fence.renewed(sent, Duration::from_secs(10));
        assert!(fence.valid_at(sent + Duration::from_secs(9)));
        assert!(
            !fence.valid_at(sent + Duration::from_secs(10)),
            "the window ends the right"
        );
        // A late answer to an older renewal does not shorten it.
        fence.renewed(sent - Duration::from_secs(5), Duration::from_secs(10));
        assert!(fence.valid_at(sent + Duration::from_secs(9)));
        fence.shut_now();
        assert!(!fence.valid());
    }

    #[tokio::test]
    async fn waiting_ends_with_the_next_renewal() {
        let fence = Fence::shut();
        let waiter = tokio::spawn({
            let fence = fence.clone();
            async move { fence.wait_valid().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        fence.renewed(Instant::now(), Duration::from_secs(60));
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the wait ends")
            .expect("no panic");
    }
}
