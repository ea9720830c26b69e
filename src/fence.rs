//! Fencing (docs/behaviour.md#leader-election): with leader election, the manager writes only while it knows
//! its Lease is valid. The elector opens the fence after every acquire or renewal that succeeded, until the
//! instant that request was *sent* plus the validity window, on the monotonic clock; every write the
//! manager's client sends checks it ([`crate::rest_client`]). A process paused past the window (SIGSTOP, a
//! frozen node) finds it shut when it resumes, before it has learnt anything from the API server.
//!
//! A write that passed the check holds a [`Write`] until it is answered or abandoned: it carries the
//! instant the right ends (the client abandons the request then), and the elector waits for every write
//! in flight to end ([`Fence::writes_done`]) before it releases the Lease.
//!
//! It imports nothing of this crate, so the reconciler and the wiring can both hold one.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Whether this process may write, shared by everything that writes. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Fence {
    right: Arc<watch::Sender<Right>>,
    /// Writes that passed the check and are not answered or abandoned yet.
    writes: Arc<watch::Sender<usize>>,
}

/// One write in flight, admitted by [`Fence::admit`]; dropping it ends it.
#[derive(Debug)]
pub struct Write {
    writes: Arc<watch::Sender<usize>>,
    /// When the right to write ends (None: without leader election, never): the write is abandoned then.
    pub until: Option<Instant>,
}

impl Drop for Write {
    fn drop(&mut self) {
        self.writes.send_modify(|n| *n = n.saturating_sub(1));
    }
}

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
        Self::with(Right::Always)
    }

    /// A fence shut until the elector first opens it.
    pub fn shut() -> Self {
        Self::with(Right::Until(Instant::now()))
    }

    fn with(right: Right) -> Self {
        Self {
            right: Arc::new(watch::Sender::new(right)),
            writes: Arc::new(watch::Sender::new(0)),
        }
    }

    /// Whether a write may be sent now.
    pub fn valid(&self) -> bool {
        self.valid_at(Instant::now())
    }

    fn valid_at(&self, now: Instant) -> bool {
        match *self.right.borrow() {
            Right::Always => true,
            Right::Until(until) => now < until,
        }
    }

    /// A write that may be sent now, with the instant the right ends; None when it may not. It counts as
    /// in flight until the returned [`Write`] is dropped. Counted before the check, so that a
    /// [`Fence::shut_now`] followed by [`Fence::writes_done`] waits for every write that passed it.
    pub fn admit(&self) -> Option<Write> {
        self.writes.send_modify(|n| *n = n.saturating_add(1));
        let write = Write {
            writes: self.writes.clone(),
            until: match *self.right.borrow() {
                Right::Always => None,
                Right::Until(until) => Some(until),
            },
        };
        match write.until {
            Some(until) if Instant::now() >= until => None,
            _ => Some(write),
        }
    }

    /// Resolves once no write admitted by [`Fence::admit`] is in flight.
    pub async fn writes_done(&self) {
        let mut writes = self.writes.subscribe();
        let _ = writes.wait_for(|n| *n == 0).await;
    }

    /// Writes in flight now.
    pub fn writes_in_flight(&self) -> usize {
        *self.writes.borrow()
    }

    /// An acquire or renewal sent at `sent` succeeded: writes are allowed until `sent + window`. Never
    /// shortens the right (an older renewal answered late does not undo a newer one).
    pub fn renewed(&self, sent: Instant, window: Duration) {
        let until = sent + window;
        self.right.send_if_modified(|right| match right {
            Right::Until(current) if *current < until => {
                *right = Right::Until(until);
                true
            }
            _ => false,
        });
    }

    /// The Lease was lost or released: no more writes until the next acquire.
    pub fn shut_now(&self) {
        self.right.send_if_modified(|right| match right {
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
        let mut changes = self.right.subscribe();
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

/// The error a write ends with when the right to write ended before the API server answered it: the client
/// abandoned it (inside `kube::Error::Service`). The API server may still have committed it
/// (docs/behaviour.md#leader-election).
#[derive(Debug, thiserror::Error)]
#[error("abandoned: the right to write ended before the API server answered (see docs/behaviour.md#leader-election)")]
pub struct RightEnded;

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

    #[test]
    fn a_write_is_admitted_only_while_the_right_holds_and_carries_its_end() {
        let open = Fence::open();
        let write = open.admit().expect("no leader election: always");
        assert_eq!(write.until, None);
        assert_eq!(open.writes_in_flight(), 1);
        drop(write);
        assert_eq!(open.writes_in_flight(), 0);

        let fence = Fence::shut();
        assert!(fence.admit().is_none(), "nothing before the first acquire");
        assert_eq!(fence.writes_in_flight(), 0, "a refused write is not in flight");
        let sent = Instant::now();
        fence.renewed(sent, Duration::from_secs(60));
        let write = fence.admit().expect("within the right");
        assert_eq!(write.until, Some(sent + Duration::from_secs(60)));
        fence.shut_now();
        assert!(fence.admit().is_none());
        assert_eq!(fence.writes_in_flight(), 1, "the admitted one is still in flight");
        drop(write);
        assert_eq!(fence.writes_in_flight(), 0);
    }

    #[tokio::test]
    async fn the_writes_in_flight_are_waited_for() {
        let fence = Fence::shut();
        fence.renewed(Instant::now(), Duration::from_secs(60));
        let write = fence.admit().expect("within the right");
        fence.shut_now();
        let done = tokio::spawn({
            let fence = fence.clone();
            async move { fence.writes_done().await }
        });
        tokio::task::yield_now().await;
        assert!(!done.is_finished(), "one write is in flight");
        drop(write);
        tokio::time::timeout(Duration::from_secs(10), done)
            .await
            .expect("the wait ends")
            .expect("no panic");
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
