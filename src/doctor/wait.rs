//! `btp-manager check admission [--wait[=DURATION]] [-v]`: does admission work end to end, for a script? After
//! `kubectl rollout status` a replica is ready, but the API server may not reach it through its Service yet
//! (the EndpointSlice and every node's proxy catch up within seconds), and a BtpOperator created then is refused.
//! This waits until the probe that `doctor`'s `admission` line sends (a dry run of a misnamed BtpOperator) is
//! refused by the manager's validating webhook. The decision is [`checks::classify`]; here are only the
//! attempts and the clock.

use super::checks::{self, Admission, DryRun};
use super::observe;
use std::time::Duration;
use tokio::time::Instant;

/// The pause after the first failed attempt; it doubles up to [`MAX_PAUSE`]. Admission through a Service
/// typically starts working within 0.1 to 3 s after `rollout status`, so a short pause is what lets the
/// install go on at once; an attempt is one dry-run request.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between attempts.
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// Admission did not work: after one attempt, or when the wait ended.
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(*.waited, *.attempts, .last))]
pub struct NotWorking {
    /// How long it waited (zero: one attempt, no wait).
    pub waited: Duration,
    /// Attempts made.
    pub attempts: u32,
    /// The last answer, classified.
    pub last: Admission,
}

fn describe(waited: Duration, attempts: u32, last: &Admission) -> String {
    if waited.is_zero() {
        format!("admission does not work: {last}")
    } else {
        format!("admission did not work within {waited:?} ({attempts} attempts); the last answer: {last}")
    }
}

/// The lines `-v` prints: one per change of the classified answer, none while it stays the same.
#[derive(Debug, Default)]
pub struct Changes {
    last: Option<Admission>,
}

impl Changes {
    /// The line for `now`, `elapsed` after the start, if it differs from the answer before.
    pub fn line(&mut self, elapsed: Duration, now: &Admission) -> Option<String> {
        if self.last.as_ref() == Some(now) {
            return None;
        }
        self.last = Some(now.clone());
        Some(format!("{:>6.1}s {now}", elapsed.as_secs_f64()))
    }
}

/// Probe until admission works, at most `within` (zero: one attempt); `on_answer` sees every answer with the
/// time since the start. An attempt still unanswered when `within` ends is abandoned; the answer before it is
/// the last one.
pub async fn until_admission_works(
    client: &kube::Client,
    within: Duration,
    mut on_answer: impl FnMut(Duration, &Admission),
) -> Result<Admission, NotWorking> {
    let start = Instant::now();
    let deadline = start + within;
    let mut pause = FIRST_PAUSE;
    let mut last: Option<Admission> = None;
    let mut attempts = 0;
    loop {
        let answer = if within.is_zero() {
            Some(observe::admission_probe(client).await)
        } else {
            tokio::time::timeout_at(deadline, observe::admission_probe(client))
                .await
                .ok()
        };
        let Some(answer) = answer else {
            // The wait ended during this attempt.
            let last =
                last.unwrap_or_else(|| checks::classify(&DryRun::NoAnswer(format!("no answer within {within:?}"))));
            return Err(NotWorking {
                waited: within,
                attempts,
                last,
            });
        };
        attempts += 1;
        let now = checks::classify(&answer);
        on_answer(start.elapsed(), &now);
        if now.works() {
            return Ok(now);
        }
        if Instant::now() >= deadline {
            return Err(NotWorking {
                waited: within,
                attempts,
                last: now,
            });
        }
        last = Some(now);
        tokio::time::sleep_until((Instant::now() + pause).min(deadline)).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// `btp-manager check admission`: quiet unless `--verbose`; the error names the last answer.
pub async fn run(args: crate::cli::CheckAdmissionArgs) -> anyhow::Result<()> {
    let client = crate::manager::kubeconfig_client(args.kubeconfig.as_deref(), "check admission").await?;
    let mut changes = Changes::default();
    until_admission_works(&client, args.wait.unwrap_or_default(), |elapsed, now| {
        if let Some(line) = changes.line(elapsed, now).filter(|_| args.verbose) {
            println!("{line}");
        }
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::checks::NotYet;

    #[test]
    fn a_line_per_change_of_the_answer() {
        let unreachable = |m: &str| Admission::NotYet(NotYet::WebhookUnreachable, m.into());
        let mut changes = Changes::default();
        let s = Duration::from_secs;
        let crd = Admission::NotYet(
            NotYet::NotServed,
            "the server could not find the requested resource".into(),
        );
        assert_eq!(
            changes.line(s(0), &crd).as_deref(),
            Some("   0.0s BtpOperators are not served (is the CRD installed?): the server could not find the requested resource")
        );
        assert_eq!(changes.line(s(1), &crd), None, "the same answer again");
        assert!(changes.line(s(2), &unreachable("no endpoints available")).is_some());
        assert!(
            changes.line(s(3), &unreachable("EOF")).is_some(),
            "another message is another state"
        );
        assert_eq!(changes.line(s(4), &unreachable("EOF")), None);
        let works = changes.line(s(5), &Admission::RefusedByUs("admission webhook ... denied".into()));
        assert!(works.is_some_and(|l| l.starts_with("   5.0s admission works")));
    }

    #[test]
    fn the_error_says_how_long_it_waited_and_the_last_answer() {
        let last = Admission::NotYet(NotYet::WebhookUnreachable, "failed calling webhook \"m\": EOF".into());
        let once = NotWorking {
            waited: Duration::ZERO,
            attempts: 1,
            last: last.clone(),
        };
        assert_eq!(
            once.to_string(),
            "admission does not work: the API server cannot call the webhooks: failed calling webhook \"m\": EOF"
        );
        let waited = NotWorking {
            waited: Duration::from_secs(2),
            attempts: 7,
            last,
        };
        assert_eq!(
            waited.to_string(),
            "admission did not work within 2s (7 attempts); the last answer: the API server cannot call the \
             webhooks: failed calling webhook \"m\": EOF"
        );
    }
}
