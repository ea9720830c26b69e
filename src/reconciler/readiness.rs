//! When the operand counts as ready, and the `ReadyTimeout` arithmetic (docs/behaviour.md#readiness, with the
//! one-pass design: the reconcile never polls, it returns and the Deployment watch brings it back). Pure.

use k8s_openapi::api::apps::v1::Deployment;
use std::time::Duration;

/// `Available=True` and `Progressing=True`.
pub fn deployment_ready(d: &Deployment) -> bool {
    let conditions = d.status.as_ref().and_then(|s| s.conditions.as_ref());
    let is_true = |t: &str| conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"));
    is_true("Available") && is_true("Progressing")
}

/// The copy of the operand Deployment a pass judges after its apply: `seen`, what the view knows of it now
/// (`Some(None)`: gone; None: the view has not caught up with the apply's write), when it holds the
/// Deployment, else `applied`, the apply's answer. A Deployment marked available while the rest of the apply
/// was still answering makes that pass end `Ready`, rather than the next. Pure.
pub fn newest(applied: Option<Deployment>, seen: Option<Option<Deployment>>) -> Option<Deployment> {
    match seen {
        Some(Some(now)) => Some(now),
        _ => applied,
    }
}

/// Where the wait for the operand Deployment stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Ready: the wait is over.
    Ready,
    /// Not ready yet: check again after this long at the latest (the watch usually comes first).
    Waiting {
        /// When the timeout would be reached (plus a small margin, so the recheck lands past it).
        recheck_in: Duration,
    },
    /// Not ready within `ReadyTimeout`.
    TimedOut,
}

/// Margin past the deadline for the recheck, so that it finds the timeout reached.
const RECHECK_MARGIN: Duration = Duration::from_millis(50);

/// Judge the wait: `ready` is the Deployment's readiness now, `waited` how long this wait has lasted.
pub fn judge(ready: bool, waited: Duration, timeout: Duration) -> Wait {
    if ready {
        Wait::Ready
    } else if waited >= timeout {
        Wait::TimedOut
    } else {
        Wait::Waiting {
            recheck_in: timeout - waited + RECHECK_MARGIN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(conditions: &[(&str, &str)]) -> Deployment {
        let conditions: Vec<_> = conditions
            .iter()
            .map(|(t, s)| serde_json::json!({"type": t, "status": s}))
            .collect();
        serde_json::from_value(serde_json::json!({"metadata": {"name": "d"}, "status": {"conditions": conditions}}))
            .unwrap()
    }

    #[test]
    fn ready_needs_available_and_progressing() {
        assert!(deployment_ready(&deployment(&[
            ("Available", "True"),
            ("Progressing", "True")
        ])));
        assert!(!deployment_ready(&deployment(&[("Available", "True")])));
        assert!(!deployment_ready(&deployment(&[
            ("Available", "False"),
            ("Progressing", "True")
        ])));
        assert!(!deployment_ready(&deployment(&[])));
    }

    #[test]
    fn the_view_s_copy_is_judged_once_it_has_caught_up_with_the_apply() {
        let applied = deployment(&[]);
        let available = deployment(&[("Available", "True"), ("Progressing", "True")]);
        let judged = |seen| newest(Some(applied.clone()), seen).is_some_and(|d| deployment_ready(&d));
        assert!(
            judged(Some(Some(available.clone()))),
            "available since the apply answered"
        );
        assert!(
            !judged(None),
            "the view has not shown the apply's write: its answer counts"
        );
        assert!(!judged(Some(None)), "gone meanwhile: the apply's answer counts");
        assert!(!judged(Some(Some(applied.clone()))));
        assert_eq!(newest(None, Some(Some(available.clone()))), Some(available));
        assert_eq!(newest(None, None), None);
    }

    #[test]
    fn the_wait_times_out_exactly_at_the_timeout() {
        let t = Duration::from_secs(10);
        assert_eq!(judge(true, Duration::from_secs(99), t), Wait::Ready);
        assert_eq!(judge(false, t, t), Wait::TimedOut);
        assert_eq!(
            judge(false, Duration::from_secs(4), t),
            Wait::Waiting {
                recheck_in: Duration::from_secs(6) + RECHECK_MARGIN
            }
        );
        assert_eq!(
            judge(false, Duration::ZERO, t),
            Wait::Waiting {
                recheck_in: t + RECHECK_MARGIN
            }
        );
    }
}
