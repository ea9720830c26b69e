//! Deprovisioning as a state machine (docs/behaviour.md#deprovisioning with this project's fixes), pure:
//! [`stage`] says where the deletion of a CR stands, from its status, what this process remembers of the
//! hard delete, and what the pass has seen so far ([`Facts`]). The flow in `deprovision.rs` asks, carries out
//! the stage's step (a status write, a read, a removal), and asks again, until a stage ends the pass: each
//! step changes what the next question sees, so the stages of one pass follow each other, and the next pass
//! (or a restarted manager) picks up where the status says.
//!
//! The stages ([`Stage`]) of a deleted CR that carries our finalizer:
//! 1. `Deleting / HardDeleting` at once ([`Stage::Announce`]).
//! 2. Without the label `force-delete: "true"`, existing ServiceInstances or ServiceBindings block the
//!    deletion ([`Stage::Count`], [`Stage::Blocked`]): `Warning / ServiceInstancesAndBindingsNotCleaned` with
//!    the counts; the operand is kept healthy meanwhile, and the deletion of the last one brings the CR back
//!    (a watch, not a poll).
//! 3. Once unblocked (or forced): `Deleting / HardDeleting` again ([`Stage::Unblocked`]), then the hard
//!    delete ([`Stage::HardDelete`]): every ServiceBinding, then every ServiceInstance, deleted (once per CR
//!    in this process); the operand removes its finalizers from them. [`Stage::CheckHardDelete`] looks at
//!    what is left, and [`hard_delete`] judges it: done, still running ([`Stage::AwaitHardDelete`]), or out
//!    of `HardDeleteTimeout`.
//! 4. When the hard delete fails or times out ([`Stage::GiveUpHardDelete`]): `Deleting / SoftDeleting`, and
//!    the manager removes the operand's workload and the objects' finalizers itself ([`Stage::SoftDelete`]).
//!    A status that says `SoftDeleting` resumes there.
//! 5. Every module resource removed ([`Stage::RemoveResources`]), then our finalizer
//!    ([`Stage::RemoveFinalizer`], then [`Stage::Deprovisioned`]). A failed removal is
//!    `Error / ResourceRemovalFailed` ([`Stage::Restore`]): the operand is restored and the deletion retried
//!    with backoff, from `HardDeleting` (straight to the soft delete when this process gave the hard delete
//!    up).

use super::status::Outcome;
use btp_api::{names, Reason, State};
use std::collections::BTreeMap;
use std::time::Duration;

/// How many ServiceInstances and ServiceBindings exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// ServiceInstances.
    pub instances: usize,
    /// ServiceBindings.
    pub bindings: usize,
}

impl Counts {
    /// None of either.
    pub fn is_zero(&self) -> bool {
        self.instances == 0 && self.bindings == 0
    }
}

/// What this process remembers of the hard delete of the CR ([`super::memory::CrMemory`]); a restart
/// forgets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HardDeleteMemory {
    /// Not begun in this process: its deletes are still to be issued.
    NotBegun,
    /// Begun this long ago.
    Running {
        /// Since it began.
        elapsed: Duration,
    },
    /// Failed or timed out: soft delete.
    GivenUp,
}

/// What a pass has seen and done so far (it starts empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// The ServiceInstances and ServiceBindings, once counted.
    pub counts: Option<Counts>,
    /// Whether any ServiceInstance or ServiceBinding is left, once looked at after the hard delete began.
    pub left: Option<bool>,
    /// What failed in the hard delete (its deletes, or the look at what is left).
    pub hard_delete_failed: Option<String>,
    /// Whether the soft delete's removals are done.
    pub soft_deleted: bool,
    /// Whether every module resource is removed.
    pub removed: bool,
    /// A removal (the soft delete's or the module resources') failed: the outcome to report.
    pub removal_failed: Option<Outcome>,
    /// Whether this pass removed our finalizer.
    pub finalizer_removed: bool,
}

/// What the stage is decided from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The CR's state, as this pass last wrote or read it.
    pub state: Option<State>,
    /// The reason of its `Ready` condition (None when there is none, or it is not one of ours).
    pub reason: Option<Reason>,
    /// Whether the CR carried our finalizer when it was read for this pass.
    pub finalizer: bool,
    /// Whether the CR asks for its ServiceInstances and ServiceBindings to be deleted ([`force_delete`]).
    pub forced: bool,
    /// The hard delete, as this process remembers it.
    pub hard_delete: HardDeleteMemory,
    /// What this pass has seen and done.
    pub pass: Pass,
}

/// Why the hard delete is given up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// `HardDeleteTimeout` has passed with objects left.
    TimedOut,
    /// It failed: what failed.
    Failed(String),
}

/// Where the deletion stands: the step to take next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The CR does not carry our finalizer (never provisioned, or already done): nothing to do, and the
    /// deletion is over for the manager.
    NotOurs,
    /// Report the deletion (`Deleting / HardDeleting`).
    Announce(Outcome),
    /// Count the ServiceInstances and ServiceBindings: they may block the deletion.
    Count,
    /// They block it: keep the operand healthy, report this, and end the pass (back on the periodic re-check,
    /// or at once on a deletion of one of them).
    Blocked(Outcome),
    /// The block an earlier pass reported has cleared: report this.
    Unblocked(Outcome),
    /// Begin the hard delete: delete every ServiceBinding, then every ServiceInstance.
    HardDelete,
    /// Look at what the hard delete has left.
    CheckHardDelete,
    /// Objects are left within `HardDeleteTimeout`: end the pass, back after this long at the latest.
    AwaitHardDelete(Duration),
    /// Give the hard delete up: from now on, soft delete.
    GiveUpHardDelete(GiveUp),
    /// Report `Deleting / SoftDeleting`, then remove the operand's workload, the network policies, and the
    /// ServiceBindings and ServiceInstances without their finalizers.
    SoftDelete,
    /// Remove every module resource.
    RemoveResources,
    /// A removal failed: report this, restore the operand, and fail the pass (retried with backoff).
    Restore(Outcome),
    /// Remove our finalizer: the CR goes.
    RemoveFinalizer,
    /// This pass removed our finalizer: deprovisioned.
    Deprovisioned,
}

/// The stage of the deletion, from `facts`; `timeout` and `check_interval` are `HardDeleteTimeout` and
/// `HardDeleteCheckInterval`.
pub fn stage(facts: &Facts, timeout: Duration, check_interval: Duration) -> Stage {
    let pass = &facts.pass;
    if pass.finalizer_removed {
        return Stage::Deprovisioned;
    }
    if !facts.finalizer {
        return Stage::NotOurs;
    }
    if let Some(outcome) = &pass.removal_failed {
        return Stage::Restore(outcome.clone());
    }
    if pass.removed {
        return Stage::RemoveFinalizer;
    }
    // Soft delete once an earlier pass moved on to it (the status says so) or this process gave the hard
    // delete up.
    if soft_deleting(facts.state, facts.reason) || facts.hard_delete == HardDeleteMemory::GivenUp {
        return if pass.soft_deleted {
            Stage::RemoveResources
        } else {
            Stage::SoftDelete
        };
    }
    if let Some(outcome) = announce(facts.state, facts.reason) {
        return Stage::Announce(outcome);
    }
    if !facts.forced {
        let Some(counts) = pass.counts else {
            return Stage::Count;
        };
        if let Some(outcome) = blocked(counts) {
            return Stage::Blocked(outcome);
        }
    }
    if let Some(outcome) = unblocked(facts.reason) {
        return Stage::Unblocked(outcome);
    }
    if let Some(what) = &pass.hard_delete_failed {
        return Stage::GiveUpHardDelete(GiveUp::Failed(what.clone()));
    }
    match (facts.hard_delete, pass.left) {
        (HardDeleteMemory::NotBegun, _) => Stage::HardDelete,
        (HardDeleteMemory::Running { .. }, None) => Stage::CheckHardDelete,
        (HardDeleteMemory::Running { elapsed }, Some(left)) => {
            match hard_delete(left, elapsed, timeout, check_interval) {
                HardDelete::Done => Stage::RemoveResources,
                HardDelete::Wait(recheck) => Stage::AwaitHardDelete(recheck),
                HardDelete::GiveUp => Stage::GiveUpHardDelete(GiveUp::TimedOut),
            }
        }
        // Answered above, with the soft delete.
        (HardDeleteMemory::GivenUp, _) => Stage::SoftDelete,
    }
}

/// Whether the CR asks for its ServiceInstances and ServiceBindings to be deleted: label `force-delete`
/// exactly `"true"`.
pub fn force_delete(labels: &BTreeMap<String, String>) -> bool {
    labels.get(names::FORCE_DELETE_LABEL).is_some_and(|v| v == "true")
}

/// Whether a previous pass already moved on to soft delete (the status says so).
pub fn soft_deleting(state: Option<State>, reason: Option<Reason>) -> bool {
    state == Some(State::Deleting) && reason == Some(Reason::SoftDeleting)
}

/// The status that announces the deletion, unless the CR already shows it (or shows the block).
pub fn announce(state: Option<State>, reason: Option<Reason>) -> Option<Outcome> {
    let shown = state == Some(State::Deleting) || reason == Some(Reason::ServiceInstancesAndBindingsNotCleaned);
    (!shown).then(|| Outcome::new(Reason::HardDeleting, "BtpOperator is to be deleted"))
}

/// The blocking outcome while ServiceInstances or ServiceBindings exist and deletion is not forced.
pub fn blocked(counts: Counts) -> Option<Outcome> {
    (!counts.is_zero()).then(|| {
        Outcome::new(
            Reason::ServiceInstancesAndBindingsNotCleaned,
            format!(
                "All service instances and bindings must be removed: {} instance(s) and {} binding(s)",
                counts.instances, counts.bindings
            ),
        )
    })
}

/// The status once a block has cleared (the previous pass reported it).
pub fn unblocked(reason: Option<Reason>) -> Option<Outcome> {
    (reason == Some(Reason::ServiceInstancesAndBindingsNotCleaned)).then(|| {
        Outcome::new(
            Reason::HardDeleting,
            "BtpOperator is to be deleted after cleaning service instance and binding resources",
        )
    })
}

/// Where the hard delete stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HardDelete {
    /// Nothing is left: remove the module resources.
    Done,
    /// Objects are left: check again after this long at the latest (their deletions usually come first).
    Wait(Duration),
    /// `HardDeleteTimeout` has passed with objects left: soft delete.
    GiveUp,
}

/// Judge the hard delete: `left` whether any ServiceInstance or ServiceBinding is left, `elapsed` since it
/// began.
pub fn hard_delete(left: bool, elapsed: Duration, timeout: Duration, check_interval: Duration) -> HardDelete {
    if !left {
        return HardDelete::Done;
    }
    if elapsed >= timeout {
        return HardDelete::GiveUp;
    }
    let remaining = timeout - elapsed;
    let check = if check_interval.is_zero() {
        remaining
    } else {
        check_interval.min(remaining)
    };
    HardDelete::Wait(check)
}

/// The outcome of a failed removal, naming what failed.
pub fn removal_failed(what: &str) -> Outcome {
    Outcome::new(
        Reason::ResourceRemovalFailed,
        format!("Unable to remove installed resources: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn force_delete_needs_exactly_true() {
        let labels = |v: &str| BTreeMap::from([(names::FORCE_DELETE_LABEL.to_string(), v.to_string())]);
        assert!(force_delete(&labels("true")));
        for v in ["True", "TRUE", "yes", "", "1"] {
            assert!(!force_delete(&labels(v)), "{v}");
        }
        assert!(!force_delete(&BTreeMap::new()));
    }

    #[test]
    fn the_deletion_is_announced_once() {
        let first = announce(Some(State::Ready), Some(Reason::ReconcileSucceeded)).unwrap();
        assert_eq!(first.reason, Reason::HardDeleting);
        assert_eq!(first.message, "BtpOperator is to be deleted");
        assert_eq!(announce(None, None).map(|o| o.reason), Some(Reason::HardDeleting));
        assert_eq!(announce(Some(State::Deleting), Some(Reason::HardDeleting)), None);
        assert_eq!(announce(Some(State::Deleting), Some(Reason::SoftDeleting)), None);
        assert_eq!(
            announce(
                Some(State::Warning),
                Some(Reason::ServiceInstancesAndBindingsNotCleaned)
            ),
            None,
            "a blocked deletion keeps its warning"
        );
        assert_eq!(
            announce(Some(State::Error), Some(Reason::ResourceRemovalFailed)).map(|o| o.reason),
            Some(Reason::HardDeleting),
            "a retried removal starts over"
        );
    }

    #[test]
    fn counts_block_and_name_the_numbers() {
        assert_eq!(blocked(Counts::default()), None);
        let o = blocked(Counts {
            instances: 2,
            bindings: 1,
        })
        .unwrap();
        assert_eq!(o.reason, Reason::ServiceInstancesAndBindingsNotCleaned);
        assert_eq!(
            o.message,
            "All service instances and bindings must be removed: 2 instance(s) and 1 binding(s)"
        );
        assert_eq!(o.reason.state(), State::Warning);
    }

    #[test]
    fn a_cleared_block_is_reported() {
        assert_eq!(
            unblocked(Some(Reason::ServiceInstancesAndBindingsNotCleaned)).map(|o| o.message),
            Some("BtpOperator is to be deleted after cleaning service instance and binding resources".into())
        );
        assert_eq!(unblocked(Some(Reason::HardDeleting)), None);
        assert_eq!(unblocked(None), None);
    }

    #[test]
    fn soft_delete_is_resumed_from_the_status() {
        assert!(soft_deleting(Some(State::Deleting), Some(Reason::SoftDeleting)));
        assert!(!soft_deleting(Some(State::Deleting), Some(Reason::HardDeleting)));
        assert!(!soft_deleting(Some(State::Error), Some(Reason::SoftDeleting)));
    }

    #[test]
    fn the_hard_delete_waits_within_its_timeout() {
        let (timeout, check) = (Duration::from_secs(60), Duration::from_secs(10));
        assert_eq!(
            hard_delete(false, Duration::from_secs(100), timeout, check),
            HardDelete::Done
        );
        assert_eq!(hard_delete(true, timeout, timeout, check), HardDelete::GiveUp);
        assert_eq!(
            hard_delete(true, Duration::from_secs(5), timeout, check),
            HardDelete::Wait(check)
        );
        assert_eq!(
            hard_delete(true, Duration::from_secs(55), timeout, check),
            HardDelete::Wait(Duration::from_secs(5)),
            "never past the timeout"
        );
        assert_eq!(
            hard_delete(true, Duration::from_secs(20), timeout, Duration::ZERO),
            HardDelete::Wait(Duration::from_secs(40)),
            "a zero check interval waits for the timeout (or a deletion)"
        );
    }

    #[test]
    fn a_removal_failure_names_what_failed() {
        let o = removal_failed("removing ConfigMaps: forbidden (403)");
        assert_eq!(o.reason, Reason::ResourceRemovalFailed);
        assert_eq!(o.reason.state(), State::Error);
        assert!(o.message.starts_with("Unable to remove installed resources: "));
        assert!(o.message.ends_with("forbidden (403)"));
    }

    const TIMEOUT: Duration = Duration::from_secs(60);
    const CHECK: Duration = Duration::from_secs(10);

    /// A CR with our finalizer and this status, nothing remembered, nothing seen yet.
    fn facts(state: Option<State>, reason: Option<Reason>) -> Facts {
        Facts {
            state,
            reason,
            finalizer: true,
            forced: false,
            hard_delete: HardDeleteMemory::NotBegun,
            pass: Pass::default(),
        }
    }

    fn shown(reason: Reason) -> Facts {
        facts(Some(reason.state()), Some(reason))
    }

    fn at(f: &Facts) -> Stage {
        stage(f, TIMEOUT, CHECK)
    }

    fn running(secs: u64) -> HardDeleteMemory {
        HardDeleteMemory::Running {
            elapsed: Duration::from_secs(secs),
        }
    }

    fn some(instances: usize, bindings: usize) -> Option<Counts> {
        Some(Counts { instances, bindings })
    }

    #[test]
    fn a_deletion_is_announced_counted_and_blocked_or_hard_deleted() {
        let mut f = shown(Reason::ReconcileSucceeded);
        assert_eq!(
            at(&f),
            Stage::Announce(Outcome::new(Reason::HardDeleting, "BtpOperator is to be deleted"))
        );
        f = shown(Reason::HardDeleting);
        assert_eq!(at(&f), Stage::Count);
        f.pass.counts = some(2, 1);
        assert_eq!(
            at(&f),
            Stage::Blocked(
                blocked(Counts {
                    instances: 2,
                    bindings: 1
                })
                .unwrap()
            )
        );
        f.pass.counts = some(0, 0);
        assert_eq!(at(&f), Stage::HardDelete);
    }

    #[test]
    fn a_forced_deletion_is_not_counted() {
        let mut f = shown(Reason::HardDeleting);
        f.forced = true;
        assert_eq!(at(&f), Stage::HardDelete);
    }

    #[test]
    fn a_cleared_block_is_reported_before_the_hard_delete() {
        let mut f = shown(Reason::ServiceInstancesAndBindingsNotCleaned);
        assert_eq!(
            at(&f),
            Stage::Count,
            "the block keeps its warning while it is counted again"
        );
        f.pass.counts = some(0, 1);
        assert!(matches!(at(&f), Stage::Blocked(_)));
        f.pass.counts = some(0, 0);
        let cleared = unblocked(f.reason).unwrap();
        assert_eq!(at(&f), Stage::Unblocked(cleared.clone()));
        let mut forced = shown(Reason::ServiceInstancesAndBindingsNotCleaned);
        forced.forced = true;
        assert_eq!(at(&forced), Stage::Unblocked(cleared), "the label lifts the block");
    }

    #[test]
    fn the_hard_delete_is_begun_checked_and_awaited() {
        let mut f = shown(Reason::HardDeleting);
        f.forced = true;
        assert_eq!(at(&f), Stage::HardDelete);
        f.hard_delete = running(0);
        assert_eq!(at(&f), Stage::CheckHardDelete);
        f.pass.left = Some(true);
        assert_eq!(at(&f), Stage::AwaitHardDelete(CHECK));
        f.hard_delete = running(55);
        assert_eq!(
            at(&f),
            Stage::AwaitHardDelete(Duration::from_secs(5)),
            "never past the timeout"
        );
        f.pass.left = Some(false);
        assert_eq!(at(&f), Stage::RemoveResources, "nothing left: done");
        let mut later = shown(Reason::HardDeleting);
        later.forced = true;
        later.hard_delete = running(30);
        assert_eq!(
            at(&later),
            Stage::CheckHardDelete,
            "a later pass in this process looks again without deleting again"
        );
    }

    #[test]
    fn a_timed_out_or_failed_hard_delete_moves_on_to_the_soft_delete() {
        let mut f = shown(Reason::HardDeleting);
        f.forced = true;
        f.hard_delete = running(60);
        f.pass.left = Some(true);
        assert_eq!(at(&f), Stage::GiveUpHardDelete(GiveUp::TimedOut));

        let mut failed = shown(Reason::HardDeleting);
        failed.forced = true;
        failed.hard_delete = running(0);
        failed.pass.hard_delete_failed = Some("deleting ServiceBindings: forbidden (403)".into());
        assert_eq!(
            at(&failed),
            Stage::GiveUpHardDelete(GiveUp::Failed("deleting ServiceBindings: forbidden (403)".into()))
        );

        f.hard_delete = HardDeleteMemory::GivenUp;
        assert_eq!(
            at(&f),
            Stage::SoftDelete,
            "given up: soft delete, whatever the status says"
        );
    }

    #[test]
    fn the_soft_delete_then_the_removal_then_the_finalizer() {
        let mut f = shown(Reason::SoftDeleting);
        assert_eq!(at(&f), Stage::SoftDelete);
        f.pass.soft_deleted = true;
        assert_eq!(at(&f), Stage::RemoveResources);
        f.pass.removed = true;
        assert_eq!(at(&f), Stage::RemoveFinalizer);
        f.pass.finalizer_removed = true;
        assert_eq!(at(&f), Stage::Deprovisioned);
    }

    #[test]
    fn a_failed_removal_restores_the_operand() {
        let failure = removal_failed("removing ConfigMaps: forbidden (403)");
        let mut soft = shown(Reason::SoftDeleting);
        soft.pass.removal_failed = Some(failure.clone());
        assert_eq!(at(&soft), Stage::Restore(failure.clone()), "a failed soft delete");
        let mut hard = shown(Reason::HardDeleting);
        hard.forced = true;
        hard.hard_delete = running(1);
        hard.pass.left = Some(false);
        hard.pass.removal_failed = Some(failure.clone());
        assert_eq!(
            at(&hard),
            Stage::Restore(failure),
            "a failed removal of the module resources"
        );
    }

    #[test]
    fn a_cr_without_our_finalizer_is_not_ours() {
        for reason in [
            Reason::HardDeleting,
            Reason::SoftDeleting,
            Reason::ResourceRemovalFailed,
        ] {
            let mut f = shown(reason);
            f.finalizer = false;
            assert_eq!(at(&f), Stage::NotOurs, "{reason}");
        }
        let mut f = facts(None, None);
        f.finalizer = false;
        assert_eq!(at(&f), Stage::NotOurs);
    }

    #[test]
    fn a_restarted_manager_finds_the_stage_in_the_status_alone() {
        // Nothing remembered, nothing seen: the first question of the first pass after a restart.
        let announce = Stage::Announce(Outcome::new(Reason::HardDeleting, "BtpOperator is to be deleted"));
        assert_eq!(at(&facts(None, None)), announce);
        assert_eq!(at(&shown(Reason::ReconcileSucceeded)), announce);
        assert_eq!(at(&shown(Reason::ProvisioningFailed)), announce);
        assert_eq!(
            at(&shown(Reason::ResourceRemovalFailed)),
            announce,
            "a failed removal starts over at HardDeleting"
        );
        assert_eq!(at(&shown(Reason::HardDeleting)), Stage::Count);
        assert_eq!(at(&shown(Reason::ServiceInstancesAndBindingsNotCleaned)), Stage::Count);
        let mut forced = shown(Reason::HardDeleting);
        forced.forced = true;
        assert_eq!(at(&forced), Stage::HardDelete, "its deletes are issued again");
        assert_eq!(
            at(&shown(Reason::SoftDeleting)),
            Stage::SoftDelete,
            "the soft delete resumes"
        );
        let mut unknown = facts(Some(State::Deleting), None);
        unknown.forced = true;
        assert_eq!(
            at(&unknown),
            Stage::HardDelete,
            "Deleting with a reason not ours: hard delete"
        );
        // Without a restart, a retried removal after a given-up hard delete goes straight to the soft delete.
        let mut retried = shown(Reason::ResourceRemovalFailed);
        retried.hard_delete = HardDeleteMemory::GivenUp;
        assert_eq!(at(&retried), Stage::SoftDelete);
    }

    /// What the cluster answers in [`walk`].
    struct World {
        counts: Counts,
        left: bool,
        removal_fails: bool,
    }

    /// Carry out the stages of one pass from `f` as `deprovision.rs` does (each step's effect on the facts),
    /// until one ends the pass: the stages in order.
    fn walk(mut f: Facts, world: &World) -> Vec<Stage> {
        let mut stages = Vec::new();
        loop {
            let next = at(&f);
            stages.push(next.clone());
            assert!(stages.len() < 20, "a pass must end: {stages:?}");
            let report = |f: &mut Facts, o: &Outcome| {
                f.state = Some(o.reason.state());
                f.reason = Some(o.reason);
            };
            match next {
                Stage::Announce(o) | Stage::Unblocked(o) => report(&mut f, &o),
                Stage::Count => f.pass.counts = Some(world.counts),
                Stage::HardDelete => f.hard_delete = running(0),
                Stage::CheckHardDelete => f.pass.left = Some(world.left),
                Stage::GiveUpHardDelete(_) => f.hard_delete = HardDeleteMemory::GivenUp,
                Stage::SoftDelete => {
                    report(&mut f, &Outcome::new(Reason::SoftDeleting, "Being soft deleted"));
                    f.pass.soft_deleted = true;
                }
                Stage::RemoveResources if world.removal_fails => f.pass.removal_failed = Some(removal_failed("x")),
                Stage::RemoveResources => f.pass.removed = true,
                Stage::RemoveFinalizer => f.pass.finalizer_removed = true,
                Stage::NotOurs
                | Stage::Blocked(_)
                | Stage::AwaitHardDelete(_)
                | Stage::Restore(_)
                | Stage::Deprovisioned => return stages,
            }
        }
    }

    #[test]
    fn whole_passes_follow_the_stages_and_end() {
        let nothing = World {
            counts: Counts::default(),
            left: false,
            removal_fails: false,
        };
        let announce = Stage::Announce(Outcome::new(Reason::HardDeleting, "BtpOperator is to be deleted"));
        assert_eq!(
            walk(shown(Reason::ReconcileSucceeded), &nothing),
            [
                announce.clone(),
                Stage::Count,
                Stage::HardDelete,
                Stage::CheckHardDelete,
                Stage::RemoveResources,
                Stage::RemoveFinalizer,
                Stage::Deprovisioned
            ]
        );
        let some_left = World {
            counts: Counts {
                instances: 1,
                bindings: 0,
            },
            left: true,
            removal_fails: false,
        };
        let blocked_outcome = blocked(some_left.counts).unwrap();
        assert_eq!(
            walk(shown(Reason::ReconcileSucceeded), &some_left),
            [announce.clone(), Stage::Count, Stage::Blocked(blocked_outcome)]
        );
        let mut forced = shown(Reason::ReconcileSucceeded);
        forced.forced = true;
        assert_eq!(
            walk(forced.clone(), &some_left),
            [
                announce.clone(),
                Stage::HardDelete,
                Stage::CheckHardDelete,
                Stage::AwaitHardDelete(CHECK)
            ]
        );
        // The pass after the timeout, in the same process.
        let mut timed_out = forced.clone();
        timed_out.state = Some(State::Deleting);
        timed_out.reason = Some(Reason::HardDeleting);
        timed_out.hard_delete = running(60);
        assert_eq!(
            walk(timed_out, &some_left),
            [
                Stage::CheckHardDelete,
                Stage::GiveUpHardDelete(GiveUp::TimedOut),
                Stage::SoftDelete,
                Stage::RemoveResources,
                Stage::RemoveFinalizer,
                Stage::Deprovisioned
            ]
        );
        let failing = World {
            removal_fails: true,
            ..nothing
        };
        assert_eq!(
            walk(shown(Reason::SoftDeleting), &failing),
            [
                Stage::SoftDelete,
                Stage::RemoveResources,
                Stage::Restore(removal_failed("x"))
            ]
        );
    }
}
