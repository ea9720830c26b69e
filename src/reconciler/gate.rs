//! The trigger gate (docs/behaviour.md#watches-and-triggers), as a pure rule: while a failed pass waits for
//! its retry, a change that echoes the manager's own write ([`Cause::Ours`]) does not bring the CR back at
//! once (a failing pass that restores the operand would otherwise trigger itself and bypass the backoff), but
//! it is never dropped: it is deferred. The next pass to begin covers it (it reads everything after it
//! begins); a pass that was already running when it came, and then succeeds, is followed at once by another.
//! A change someone else made ([`Cause::Theirs`]: a person fixing the cause, a controller) brings a pass at
//! once, backoff or not.

use std::time::Instant;

/// Who caused a secondary trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The echo of a write or delete of this process (the view's pending writes), or a change that cannot
    /// be told apart from one (a watch's relist).
    Ours,
    /// A change this process did not make.
    Theirs,
}

/// The gate's state: when the retry of a failed pass is due, and whether a trigger was deferred.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gate {
    retry_at: Option<Instant>,
    deferred: bool,
}

impl Gate {
    /// A secondary trigger at `now` caused as `cause`: true to pass it on to the controller, false when it is
    /// an echo of ours deferred to the retry that a failed pass waits for.
    pub fn admit(&mut self, now: Instant, cause: Cause) -> bool {
        if cause == Cause::Ours && self.backing_off(now) {
            self.deferred = true;
            false
        } else {
            true
        }
    }

    /// Whether a failed pass waits for its retry at `now`.
    pub fn backing_off(&self, now: Instant) -> bool {
        self.retry_at.is_some_and(|at| now < at)
    }

    /// A pass begins: it reads the state after every trigger deferred so far, which it therefore covers.
    pub fn begin_pass(&mut self) {
        self.deferred = false;
    }

    /// The pass succeeded: the backoff is over. True when a trigger was deferred while it ran: the pass may
    /// have read the state before that change, so another pass must follow at once.
    pub fn succeeded(&mut self) -> bool {
        self.retry_at = None;
        std::mem::take(&mut self.deferred)
    }

    /// The pass failed: its retry is due at `retry_at`. A deferred trigger stays deferred: the retry, or any
    /// pass that begins before it, covers it.
    pub fn failed(&mut self, retry_at: Instant) {
        self.retry_at = Some(retry_at);
    }

    /// When the retry is due, if a failed pass waits for one.
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn triggers_pass_when_no_retry_is_pending() {
        let mut g = Gate::default();
        let now = Instant::now();
        assert!(g.admit(now, Cause::Ours));
        assert!(!g.succeeded(), "nothing was deferred");
    }

    #[test]
    fn a_trigger_during_the_backoff_is_deferred_and_a_succeeding_early_pass_reruns() {
        let mut g = Gate::default();
        let now = Instant::now();
        g.failed(now + Duration::from_secs(64));
        // A pass runs early (a pending rerun, a CR change): it begins, then the Secret changes.
        g.begin_pass();
        assert!(
            !g.admit(now + Duration::from_secs(1), Cause::Ours),
            "deferred, not passed on"
        );
        assert!(g.succeeded(), "the change came while the pass ran: run again at once");
        assert!(
            g.admit(now + Duration::from_secs(2), Cause::Ours),
            "the backoff is over"
        );
    }

    #[test]
    fn a_pass_that_begins_after_a_deferred_trigger_covers_it() {
        let mut g = Gate::default();
        let now = Instant::now();
        g.failed(now + Duration::from_secs(8));
        assert!(!g.admit(now, Cause::Ours));
        g.begin_pass();
        assert!(!g.succeeded(), "the pass began after the change and read it");
    }

    #[test]
    fn a_failed_pass_keeps_what_was_deferred_for_its_retry() {
        let mut g = Gate::default();
        let now = Instant::now();
        g.failed(now + Duration::from_secs(4));
        g.begin_pass();
        assert!(!g.admit(now + Duration::from_secs(1), Cause::Ours));
        g.failed(now + Duration::from_secs(9));
        assert!(g.backing_off(now + Duration::from_secs(8)));
        assert!(!g.backing_off(now + Duration::from_secs(9)));
        assert!(
            g.admit(now + Duration::from_secs(9), Cause::Ours),
            "after the retry time, triggers pass"
        );
        assert!(
            g.succeeded(),
            "the trigger deferred during the failed pass was not yet covered by a pass"
        );
    }

    #[test]
    fn someone_elses_change_passes_during_the_backoff_and_an_echo_waits() {
        let mut g = Gate::default();
        let now = Instant::now();
        g.failed(now + Duration::from_secs(300));
        assert!(
            g.admit(now + Duration::from_secs(1), Cause::Theirs),
            "a person's fix: at once"
        );
        assert!(
            !g.admit(now + Duration::from_secs(1), Cause::Ours),
            "our own echo: deferred"
        );
        assert!(
            g.backing_off(now + Duration::from_secs(2)),
            "the backoff stays for our echoes"
        );
        g.begin_pass();
        assert!(!g.succeeded(), "the pass it brought covers the deferred echo");
    }
}
