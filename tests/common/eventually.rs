//! Waiting, with a deadline: [`eventually`] polls a condition until it holds (never a sleep as a
//! synchronization), and the BtpOperator conditions the suites wait for. Standalone (no harness), so that
//! the benchmarks' support includes it too (`#[path]`).
#![allow(dead_code)]

use btp_api::{names, BtpOperator, Reason, State};
use kube::api::{Api, Patch, PatchParams};
use std::future::Future;
use std::time::Duration;

/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(20);

/// What a polled condition gives: `true`, `Some(value)` or `Ok(value)` when it holds; otherwise what it saw
/// (an `Err`'s value is shown when the wait times out).
pub trait Outcome {
    type Value;
    type Miss: std::fmt::Debug;
    fn outcome(self) -> Result<Self::Value, Self::Miss>;
    /// How a timeout reports the last miss (nothing but for an `Err`).
    fn last_seen(_miss: &Self::Miss) -> String {
        String::new()
    }
}

impl Outcome for bool {
    type Value = ();
    type Miss = ();
    fn outcome(self) -> Result<(), ()> {
        if self {
            Ok(())
        } else {
            Err(())
        }
    }
}

impl<T> Outcome for Option<T> {
    type Value = T;
    type Miss = ();
    fn outcome(self) -> Result<T, ()> {
        self.ok_or(())
    }
}

impl<T, E: std::fmt::Debug> Outcome for Result<T, E> {
    type Value = T;
    type Miss = E;
    fn outcome(self) -> Result<T, E> {
        self
    }
    fn last_seen(miss: &E) -> String {
        format!("; last seen: {miss:?}")
    }
}

/// Poll `check` (at once, then every [`POLL`]) until it holds, and give its value; once `within` has passed,
/// what it saw last instead. For a caller that reports the timeout itself; others use [`eventually`].
pub async fn try_eventually<F, Fut, O>(within: Duration, check: F) -> Result<O::Value, O::Miss>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
    O: Outcome,
{
    try_eventually_every(POLL, within, check).await
}

/// [`try_eventually`], polling every `every`: for a check that is itself an attempt paced as the real world
/// paces it (a crash-looping pod's restart delay).
pub async fn try_eventually_every<F, Fut, O>(
    every: Duration,
    within: Duration,
    mut check: F,
) -> Result<O::Value, O::Miss>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
    O: Outcome,
{
    let end = tokio::time::Instant::now() + within;
    loop {
        match check().await.outcome() {
            Ok(value) => return Ok(value),
            Err(miss) if tokio::time::Instant::now() >= end => return Err(miss),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

/// Poll `check` until it holds (`true`, `Some`, `Ok`) and give its value; panic naming `what` (and, for a
/// `Result`, the last `Err`) once `within` has passed.
pub async fn eventually<F, Fut, O>(within: Duration, what: &str, check: F) -> O::Value
where
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
    O: Outcome,
{
    match try_eventually(within, check).await {
        Ok(value) => value,
        Err(miss) => panic!("timed out after {within:?} waiting for: {what}{}", O::last_seen(&miss)),
    }
}

/// Whether `cr` shows `reason`: the state the reason goes with, and a `Ready` condition with the reason.
pub fn shows(cr: &BtpOperator, reason: Reason) -> bool {
    cr.status.as_ref().is_some_and(|s| {
        s.state == reason.state()
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.reason == reason.as_str())
    })
}

/// Wait until the BtpOperator `ns/name` shows `reason`; the CR as it was seen then (not read again: the next
/// pass may already have moved on). A timeout shows the last status seen.
pub async fn wait_cr_in(client: &kube::Client, ns: &str, name: &str, reason: Reason, within: Duration) -> BtpOperator {
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), ns);
    let what = format!("{ns}/{name} to reach {:?}/{reason}", reason.state());
    eventually(within, &what, || async {
        match crs.get_opt(name).await.ok().flatten() {
            Some(cr) if shows(&cr, reason) => Ok(cr),
            cr => Err(cr.and_then(|c| c.status)),
        }
    })
    .await
}

/// Whether `kyma-system/btpoperator` of `crs` is in state Ready (false while it cannot be read).
pub async fn cr_ready(crs: &Api<BtpOperator>) -> bool {
    crs.get_opt(names::BTP_OPERATOR_NAME)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.status)
        .is_some_and(|s| s.state == State::Ready)
}

/// Whether `kyma-system/btpoperator` of `crs` is gone (a failed read fails the test).
pub async fn cr_gone(crs: &Api<BtpOperator>) -> bool {
    crs.get_opt(names::BTP_OPERATOR_NAME).await.unwrap().is_none()
}

/// Force one reconcile of `kyma-system/btpoperator` of `crs` (the `operation: reconcile` annotation) and wait
/// until it has run: the manager removes the annotation when the pass is over.
pub async fn reconcile_now_in(crs: &Api<BtpOperator>, within: Duration) {
    let patch = serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: "reconcile"}}});
    crs.patch(names::BTP_OPERATOR_NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually(within, "the reconcile annotation is consumed", || async {
        reconcile_annotation_consumed(crs).await
    })
    .await;
}

/// Whether `kyma-system/btpoperator` of `crs` carries no `operation` annotation (a failed read fails the test).
pub async fn reconcile_annotation_consumed(crs: &Api<BtpOperator>) -> bool {
    let cr = crs.get(names::BTP_OPERATOR_NAME).await.unwrap();
    !cr.metadata
        .annotations
        .unwrap_or_default()
        .contains_key(names::OPERATION_ANNOTATION)
}
