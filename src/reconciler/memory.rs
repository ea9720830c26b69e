//! What the manager remembers about the CR from one pass to the next, in one struct ([`CrMemory`]): whether
//! it is being deleted, the `ReadyTimeout` wait and the hard delete. Pure (the caller gives the time);
//! the context keeps one per leadership term, so a new term, like a restart, starts with nothing: what must
//! survive those is in the CR's status ([`super::deprovision_plan::stage`] reads it).

use super::deprovision_plan::HardDeleteMemory;
use std::time::Instant;

/// The per-CR memory. The clocks belong to one incarnation of the CR (its uid): asked about another, the
/// memory forgets them first (a recreated CR starts afresh).
#[derive(Debug, Default)]
pub struct CrMemory {
    /// Whether the CR is being deleted: ServiceInstance/ServiceBinding deletions wake the reconciler only then.
    deleting: bool,
    /// The incarnation the clocks are about.
    uid: String,
    /// The `ReadyTimeout` wait for the operand Deployment: since when, and whether it began in `Ready`.
    ready_wait: Option<(Instant, bool)>,
    /// The hard delete: when it began, and whether it was given up (soft delete instead).
    hard_delete: Option<(Instant, bool)>,
    /// The state this term last announced with an Event.
    announced: Option<btp_api::State>,
}

impl CrMemory {
    /// The clocks of `uid`, forgetting another incarnation's.
    fn of(&mut self, uid: &str) -> &mut Self {
        if self.uid != uid {
            self.uid = uid.to_string();
            self.ready_wait = None;
            self.hard_delete = None;
            self.announced = None;
        }
        self
    }

    /// Whether the CR `uid` entering `state` is news to announce: not when this term announced it last, so a
    /// state change is announced once whichever copy of the CR the pass started from.
    pub fn announce(&mut self, uid: &str, state: btp_api::State) -> bool {
        let this = self.of(uid);
        this.announced.replace(state) != Some(state)
    }

    /// When the CR `uid` began waiting for the operand Deployment (`now`, on the first call of this wait),
    /// and whether that wait began in `Ready` (a timeout is then `ReconcileFailed`, not `ProvisioningFailed`).
    pub fn start_waiting(&mut self, uid: &str, from_ready: bool, now: Instant) -> (Instant, bool) {
        *self.of(uid).ready_wait.get_or_insert((now, from_ready))
    }

    /// The wait for the operand Deployment is over (or interrupted: the next wait starts a new clock).
    pub fn stop_waiting(&mut self) {
        self.ready_wait = None;
    }

    /// Where the hard delete of the CR `uid` stands, as of `now`.
    pub fn hard_delete(&mut self, uid: &str, now: Instant) -> HardDeleteMemory {
        match self.of(uid).hard_delete {
            None => HardDeleteMemory::NotBegun,
            Some((_, true)) => HardDeleteMemory::GivenUp,
            Some((since, false)) => HardDeleteMemory::Running {
                elapsed: now.saturating_duration_since(since),
            },
        }
    }

    /// The hard delete of the CR `uid` begins `now` (its deletes are issued once per incarnation).
    pub fn begin_hard_delete(&mut self, uid: &str, now: Instant) {
        self.of(uid).hard_delete = Some((now, false));
    }

    /// The hard delete of the CR `uid` failed or timed out: from now on, soft delete.
    pub fn give_up_hard_delete(&mut self, uid: &str, now: Instant) {
        let memory = self.of(uid);
        let since = memory.hard_delete.map_or(now, |(since, _)| since);
        memory.hard_delete = Some((since, true));
    }

    /// Mark the CR as being deleted.
    pub fn set_deleting(&mut self) {
        self.deleting = true;
    }

    /// Whether the CR is being deleted.
    pub fn deleting(&self) -> bool {
        self.deleting
    }

    /// The deletion is over (the CR is gone, or no longer being deleted): its hard delete is forgotten.
    pub fn end_deletion(&mut self) {
        self.hard_delete = None;
        self.deleting = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_ready_wait_keeps_its_start_until_stopped() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(5);
        let mut m = CrMemory::default();
        assert_eq!(m.start_waiting("a", true, t0), (t0, true));
        assert_eq!(m.start_waiting("a", false, later), (t0, true), "the wait goes on");
        m.stop_waiting();
        assert_eq!(m.start_waiting("a", false, later), (later, false), "a new wait");
    }

    #[test]
    fn the_hard_delete_begins_runs_and_is_given_up() {
        let t0 = Instant::now();
        let mut m = CrMemory::default();
        assert_eq!(m.hard_delete("a", t0), HardDeleteMemory::NotBegun);
        m.begin_hard_delete("a", t0);
        assert_eq!(
            m.hard_delete("a", t0 + Duration::from_secs(3)),
            HardDeleteMemory::Running {
                elapsed: Duration::from_secs(3)
            }
        );
        m.give_up_hard_delete("a", t0 + Duration::from_secs(4));
        assert_eq!(m.hard_delete("a", t0), HardDeleteMemory::GivenUp);
        m.end_deletion();
        assert_eq!(m.hard_delete("a", t0), HardDeleteMemory::NotBegun);

        let mut m = CrMemory::default();
        m.give_up_hard_delete("a", t0);
        assert_eq!(
            m.hard_delete("a", t0),
            HardDeleteMemory::GivenUp,
            "given up without having begun"
        );
    }

    #[test]
    fn another_incarnation_starts_afresh_but_the_deletion_flag_stays() {
        let t0 = Instant::now();
        let mut m = CrMemory::default();
        m.set_deleting();
        m.start_waiting("a", true, t0);
        m.give_up_hard_delete("a", t0);
        assert_eq!(m.hard_delete("b", t0), HardDeleteMemory::NotBegun);
        let later = t0 + Duration::from_secs(1);
        assert_eq!(m.start_waiting("b", false, later), (later, false));
        assert!(m.deleting(), "the flag is the pass's to set and clear");
        m.end_deletion();
        assert!(!m.deleting());
    }
}
