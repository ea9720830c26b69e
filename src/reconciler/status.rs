//! Status rules (docs/behaviour.md#the-btpoperator-resource, #status-protocol): one `Ready` condition, upserted by type (first), `lastTransitionTime`
//! changed only when the condition status flips, `observedGeneration` = the CR's generation. Pure.

use btp_api::{BtpOperatorStatus, Condition, Reason, State};

/// The condition type the manager uses.
pub const READY: &str = "Ready";

/// What a reconcile concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The reason (it implies the state and condition status).
    pub reason: Reason,
    /// A message for humans; never a secret value.
    pub message: String,
}

impl Outcome {
    /// An outcome with the given reason and message.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// The status to write for `outcome`, or `None` when the current status already says exactly that
/// (so a steady-state reconcile writes nothing).
pub fn next_status(
    current: Option<&BtpOperatorStatus>,
    outcome: &Outcome,
    generation: Option<i64>,
    now: &str,
) -> Option<BtpOperatorStatus> {
    let state = outcome.reason.state();
    let status = outcome.reason.condition_status();
    let existing = current.and_then(|s| s.conditions.iter().find(|c| c.type_ == READY));
    let unchanged = current.is_some_and(|s| s.state == state)
        && existing.is_some_and(|c| {
            c.reason == outcome.reason.as_str()
                && c.message == outcome.message
                && c.status == status
                && c.observed_generation == generation
        });
    if unchanged {
        return None;
    }
    let last_transition_time = match existing {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now.to_string(),
    };
    let condition = Condition {
        type_: READY.into(),
        status,
        reason: outcome.reason.as_str().into(),
        message: outcome.message.clone(),
        last_transition_time,
        observed_generation: generation,
    };
    // Upserted in place: the other condition (`CredentialsValid`) keeps its place after `Ready`.
    let mut conditions: Vec<Condition> = current.map(|s| s.conditions.clone()).unwrap_or_default();
    match conditions.iter().position(|c| c.type_ == READY) {
        Some(i) => conditions[i] = condition,
        None => conditions.insert(0, condition),
    }
    Some(BtpOperatorStatus { state, conditions })
}

/// The current state, if any.
pub fn current_state(status: Option<&BtpOperatorStatus>) -> Option<State> {
    status.map(|s| s.state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use btp_api::ConditionStatus;

    #[test]
    fn first_status_and_idempotence() {
        let o = Outcome::new(Reason::Initialized, "Initialized");
        let s = next_status(None, &o, Some(1), "t1").unwrap();
        assert_eq!(s.state, State::Processing);
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0].status, ConditionStatus::False);
        assert_eq!(s.conditions[0].observed_generation, Some(1));
        assert_eq!(
            next_status(Some(&s), &o, Some(1), "t2"),
            None,
            "same outcome writes nothing"
        );
    }

    #[test]
    fn transition_time_changes_only_when_the_condition_flips() {
        let processing = next_status(None, &Outcome::new(Reason::Initialized, "Initialized"), Some(1), "t1").unwrap();
        let error = next_status(
            Some(&processing),
            &Outcome::new(Reason::InvalidSecret, "x"),
            Some(1),
            "t2",
        )
        .unwrap();
        assert_eq!(
            error.conditions[0].last_transition_time, "t1",
            "False → False keeps the time"
        );
        let ready = next_status(
            Some(&error),
            &Outcome::new(Reason::ReconcileSucceeded, "Module provisioning succeeded"),
            Some(1),
            "t3",
        )
        .unwrap();
        assert_eq!(ready.state, State::Ready);
        assert_eq!(ready.conditions[0].status, ConditionStatus::True);
        assert_eq!(ready.conditions[0].last_transition_time, "t3");
        assert_eq!(ready.conditions.len(), 1, "upserted by type");
        assert_eq!(ready.conditions[0].reason, "ReconcileSucceeded");
    }

    #[test]
    fn a_new_generation_is_recorded() {
        let o = Outcome::new(Reason::ReconcileSucceeded, "Module provisioning succeeded");
        let s = next_status(None, &o, Some(1), "t1").unwrap();
        let s2 = next_status(Some(&s), &o, Some(2), "t2").unwrap();
        assert_eq!(s2.conditions[0].observed_generation, Some(2));
        assert_eq!(s2.conditions[0].last_transition_time, "t1");
    }
}
