//! Deprovisioning decisions (docs/behaviour.md#deprovisioning with this project's fixes), pure. The flow in `deprovision.rs`
//! reads the cluster, asks these functions what to do, and does it.
//!
//! The stages of a deleted CR that carries our finalizer:
//! 1. `Deleting / HardDeleting` at once ([`announce`]).
//! 2. Without the label `force-delete: "true"`, existing ServiceInstances or ServiceBindings block the
//!    deletion: `Warning / ServiceInstancesAndBindingsNotCleaned` with the counts ([`blocked`]); the operand is
//!    kept healthy meanwhile, and the deletion of the last one brings the CR back (a watch, not a poll).
//! 3. Once unblocked (or forced): `Deleting / HardDeleting` again ([`unblocked`]), then the hard delete: every
//!    ServiceBinding, then every ServiceInstance, deleted; the operand removes its finalizers from them.
//!    [`hard_delete`] says whether it is done, still running, or has run out of `HardDeleteTimeout`.
//! 4. When the hard delete fails or times out: `Deleting / SoftDeleting`, and the manager removes the
//!    operand's workload and the objects' finalizers itself.
//! 5. Every module resource removed, then our finalizer. A failure is `Error / ResourceRemovalFailed`: the
//!    operand is restored and the deletion retried with backoff.

use super::cluster::Counts;
use super::status::Outcome;
use btp_api::{names, Reason, State};
use std::collections::BTreeMap;
use std::time::Duration;

/// Whether the CR asks for its ServiceInstances and ServiceBindings to be deleted: label `force-delete`
/// exactly `"true"`.
pub fn force_delete(labels: &BTreeMap<String, String>) -> bool {
    labels.get(names::FORCE_DELETE_LABEL).is_some_and(|v| v == "true")
}

/// Whether a previous pass already moved on to soft delete (the status says so).
pub fn soft_deleting(state: Option<State>, reason: Option<&str>) -> bool {
    state == Some(State::Deleting) && reason == Some(Reason::SoftDeleting.as_str())
}

/// The status that announces the deletion, unless the CR already shows it (or shows the block).
pub fn announce(state: Option<State>, reason: Option<&str>) -> Option<Outcome> {
    let shown =
        state == Some(State::Deleting) || reason == Some(Reason::ServiceInstancesAndBindingsNotCleaned.as_str());
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
pub fn unblocked(reason: Option<&str>) -> Option<Outcome> {
    (reason == Some(Reason::ServiceInstancesAndBindingsNotCleaned.as_str())).then(|| {
        Outcome::new(
            Reason::HardDeleting,
            "BtpOperator is to be deleted after cleaning service instance and binding resources",
        )
    })
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
        let first = announce(Some(State::Ready), Some("ReconcileSucceeded")).unwrap();
        assert_eq!(first.reason, Reason::HardDeleting);
        assert_eq!(first.message, "BtpOperator is to be deleted");
        assert_eq!(announce(None, None).map(|o| o.reason), Some(Reason::HardDeleting));
        assert_eq!(announce(Some(State::Deleting), Some("HardDeleting")), None);
        assert_eq!(announce(Some(State::Deleting), Some("SoftDeleting")), None);
        assert_eq!(
            announce(Some(State::Warning), Some("ServiceInstancesAndBindingsNotCleaned")),
            None,
            "a blocked deletion keeps its warning"
        );
        assert_eq!(
            announce(Some(State::Error), Some("ResourceRemovalFailed")).map(|o| o.reason),
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
            unblocked(Some("ServiceInstancesAndBindingsNotCleaned")).map(|o| o.message),
            Some("BtpOperator is to be deleted after cleaning service instance and binding resources".into())
        );
        assert_eq!(unblocked(Some("HardDeleting")), None);
        assert_eq!(unblocked(None), None);
    }

    #[test]
    fn soft_delete_is_resumed_from_the_status() {
        assert!(soft_deleting(Some(State::Deleting), Some("SoftDeleting")));
        assert!(!soft_deleting(Some(State::Deleting), Some("HardDeleting")));
        assert!(!soft_deleting(Some(State::Error), Some("SoftDeleting")));
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
}
