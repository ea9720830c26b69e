//! The `CredentialsValid` condition (docs/behaviour.md#credentials-check): the credentials check's verdict as
//! the CR's second condition. [`apply`] is the pure rule (upserted by type in place, `lastTransitionTime`
//! changed only when the status flips, nothing when it already says it); [`hand_over`] gives the check what a
//! pass read. The status writer writes it with the `Ready` condition ([`super::status_writer`]).

use super::context::Context;
use super::credentials::{self, Observed};
use crate::config::Settings;
use crate::credentials_check::{Input, Verdict};
use btp_api::{names, BtpOperatorStatus, Condition, CREDENTIALS_VALID};

/// `base` with the condition for `verdict`, or None when there is nothing to write: no status yet (the
/// `Ready` condition goes first), no verdict yet, or the condition already says it.
pub fn apply(base: Option<&BtpOperatorStatus>, verdict: Option<&Verdict>, now: &str) -> Option<BtpOperatorStatus> {
    let (base, verdict) = (base?, verdict?);
    let status = verdict.status();
    let existing = base.conditions.iter().position(|c| c.type_ == CREDENTIALS_VALID);
    let old = existing.map(|i| &base.conditions[i]);
    if old.is_some_and(|c| c.status == status && c.reason == verdict.reason.as_str() && c.message == verdict.message) {
        return None;
    }
    let condition = Condition {
        type_: CREDENTIALS_VALID.into(),
        status,
        reason: verdict.reason.as_str().into(),
        message: verdict.message.clone(),
        last_transition_time: match old {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => now.to_string(),
        },
        observed_generation: None,
    };
    let mut next = base.clone();
    match existing {
        Some(i) => next.conditions[i] = condition,
        None => next.conditions.push(condition),
    }
    Some(next)
}

/// The reason the condition of `status` has, if any.
pub fn reason(status: Option<&BtpOperatorStatus>) -> Option<&str> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == CREDENTIALS_VALID)
        .map(|c| c.reason.as_str())
}

/// Hand the credentials check what this pass saw: the credentials Secret as the pass reads it (validated
/// as the pass validates it) and the settings. Nothing when it cannot be read.
pub async fn hand_over(ctx: &Context, settings: &Settings) {
    let config = &settings.config;
    let secret = match super::cluster::Cluster::new(ctx, settings).required_secret().await {
        Ok(secret) => secret,
        Err(e) => {
            tracing::debug!(error = %e, "the credentials check gets nothing from this pass");
            return;
        }
    };
    let data = secret.as_ref().map(crate::objects::secret_data).unwrap_or_default();
    let observed = match &secret {
        None => Observed::Absent,
        Some(s) if !names::visible_to_manager(s.metadata.labels.as_ref()) => Observed::Unlabelled,
        Some(_) => Observed::Present(&data),
    };
    let credentials = credentials::validate(observed, &config.secret_name, &config.chart_namespace).ok();
    ctx.credentials_check().submit(Input::new(credentials.as_ref(), config));
}

#[cfg(test)]
mod tests {
    use super::*;
    use btp_api::{ConditionStatus, CredentialsReason, State};

    fn ready() -> BtpOperatorStatus {
        BtpOperatorStatus {
            state: State::Ready,
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ConditionStatus::True,
                reason: "ReconcileSucceeded".into(),
                message: "Module provisioning succeeded".into(),
                last_transition_time: "t0".into(),
                observed_generation: Some(1),
            }],
        }
    }

    fn verdict(reason: CredentialsReason) -> Verdict {
        Verdict::new(reason, "test")
    }

    #[test]
    fn the_condition_goes_after_ready_and_keeps_its_place() {
        let issued = verdict(CredentialsReason::TokenIssued);
        let s = apply(Some(&ready()), Some(&issued), "t1").unwrap();
        assert_eq!(s.state, State::Ready, "the state is not the check's");
        assert_eq!(s.conditions.len(), 2);
        assert_eq!(s.conditions[0], ready().conditions[0], "Ready is untouched, first");
        assert_eq!(s.conditions[1].type_, "CredentialsValid");
        assert_eq!(s.conditions[1].status, ConditionStatus::True);
        assert_eq!(s.conditions[1].last_transition_time, "t1");
        assert_eq!(
            apply(Some(&s), Some(&issued), "t2"),
            None,
            "nothing new: nothing to write"
        );
        let refused = apply(Some(&s), Some(&verdict(CredentialsReason::Unauthorized)), "t3").unwrap();
        assert_eq!(refused.conditions.len(), 2);
        assert_eq!(refused.conditions[1].reason, "Unauthorized");
        assert_eq!(refused.conditions[1].last_transition_time, "t3", "True to False flips");
        let unreachable = apply(Some(&refused), Some(&verdict(CredentialsReason::Unreachable)), "t4").unwrap();
        assert_eq!(
            unreachable.conditions[1].last_transition_time, "t3",
            "False to False keeps the time"
        );
        assert_eq!(reason(Some(&unreachable)), Some("Unreachable"));
    }

    #[test]
    fn nothing_is_written_before_a_status_or_a_verdict() {
        assert_eq!(apply(None, Some(&verdict(CredentialsReason::TokenIssued)), "t"), None);
        assert_eq!(apply(Some(&ready()), None, "t"), None);
    }
}
