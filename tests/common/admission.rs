//! Whether BtpOperator writes get through admission, asked every 100 ms for as long as a test runs: a server-side
//! dry run of a misnamed BtpOperator (`default/btp-manager-admission-probe`, never stored), as `btp-manager
//! check admission` sends it. Each answer is one of: refused by our validating webhook (admission works), accepted
//! (no webhook of ours is registered), or failed (a webhook is registered and nothing answered it: every
//! BtpOperator write is refused meanwhile). The stretches of failed answers are the admission gaps.
#![allow(dead_code)]

use btp_api::BtpOperator;
use kube::api::{Api, PostParams};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often it asks.
pub const EVERY: Duration = Duration::from_millis(100);

/// One answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Our validating webhook refused the misnamed BtpOperator.
    Refused,
    /// Accepted: no webhook of ours looked at it.
    Accepted,
    /// The API server could not call a registered webhook (the message).
    Failed(String),
}

/// The probe; stops when dropped.
pub struct AdmissionProbe {
    answers: Arc<Mutex<Vec<(Instant, Answer)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AdmissionProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AdmissionProbe {
    /// Start asking with `client` (any user that may create BtpOperators in `default`).
    pub fn start(client: kube::Client) -> Self {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let sink = answers.clone();
        let task = tokio::spawn(async move {
            let crs: Api<BtpOperator> = Api::namespaced(client, "default");
            let probe = BtpOperator::new("btp-manager-admission-probe");
            let params = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let asked = Instant::now();
                let answer = match crs.create(&params, &probe).await {
                    Ok(_) => Answer::Accepted,
                    Err(kube::Error::Api(s)) if s.message.contains("denied the request") => Answer::Refused,
                    Err(e) => Answer::Failed(e.to_string()),
                };
                super::sync_lock(&sink).push((asked, answer));
            }
        });
        Self { answers, task }
    }

    /// Every answer so far, with when it was asked.
    pub fn answers(&self) -> Vec<(Instant, Answer)> {
        super::sync_lock(&self.answers).clone()
    }

    /// The stretches of failed answers: when the first of each was asked, and how long until the next answer
    /// that was not a failure was asked (a stretch still open lasts until the last answer).
    pub fn gaps(&self) -> Vec<(Instant, Duration)> {
        gaps(&self.answers())
    }

    /// When our webhook first refused the probe at or after `since`.
    pub fn first_refusal_since(&self, since: Instant) -> Option<Instant> {
        self.answers()
            .into_iter()
            .find(|(at, a)| *at >= since && *a == Answer::Refused)
            .map(|(at, _)| at)
    }
}

/// The stretches of failed answers of `answers` (in the order asked).
pub fn gaps(answers: &[(Instant, Answer)]) -> Vec<(Instant, Duration)> {
    let mut out = Vec::new();
    let mut open: Option<Instant> = None;
    for (at, answer) in answers {
        match (answer, open) {
            (Answer::Failed(_), None) => open = Some(*at),
            (Answer::Failed(_), Some(_)) => {}
            (_, Some(start)) => {
                out.push((start, at.duration_since(start)));
                open = None;
            }
            (_, None) => {}
        }
    }
    if let (Some(start), Some((last, _))) = (open, answers.last()) {
        out.push((start, last.duration_since(start)));
    }
    out
}
