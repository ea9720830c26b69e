//! One pass over a `BtpOperator`, the top-level flow: an ignored CR is left alone, a misnamed one gets a
//! warning, a deleted one is deprovisioned ([`deprovision`]), any other is provisioned ([`provision`]). The
//! flows end the pass with an [`End`]; this writes the status it reports and turns it into the controller's
//! action, or into the error the controller retries with backoff.

use super::cluster;
use super::context::Context;
use super::deprovision;
use super::end::End;
use super::error::ReconcileError;
use super::provision;
use super::requeue;
use super::status::Outcome;
use super::status_writer::StatusWriter;
use crate::config::Settings;
use btp_api::{names, BtpOperator, Reason};
use kube::runtime::controller::Action;
use kube::{Resource as _, ResourceExt as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one pass may take, every API call and its retries included (docs/behaviour.md#retries-and-budgets):
/// a pass that runs out of it fails, and is retried with backoff (every step is idempotent, so the next pass
/// continues where this one stopped).
pub const PASS_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// The budget of a pass over `cr`: [`PASS_BUDGET`], and for a CR being deleted also the hard delete's
/// delete requests, which have a budget of their own (`DeleteRequestTimeout` for each of the two kinds).
pub fn pass_budget(cr: &BtpOperator, config: &crate::config::Config) -> std::time::Duration {
    if cr.meta().deletion_timestamp.is_some() {
        PASS_BUDGET.saturating_add(config.delete_request_timeout.saturating_mul(2))
    } else {
        PASS_BUDGET
    }
}

/// Reconcile one `BtpOperator`.
pub async fn reconcile(cr: Arc<BtpOperator>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    // A pass begins only while this replica may write: after a pause past its Lease it waits for a renewal
    // (or the end of its term, which drops this pass) without sending anything.
    if !ctx.fence.valid() {
        tracing::info!("no valid leader Lease: the pass waits for a renewal before it writes anything");
        ctx.fence.wait_valid().await;
    }
    let started = Instant::now();
    ctx.begin_pass();
    // One snapshot of the settings for the whole pass: a change published meanwhile applies to the next.
    let settings = ctx.settings();
    // The CR as new as this process's own last write of it: a copy from before the last status write would
    // write that status again.
    let Some(cr) = cluster::Cluster::new(&ctx, &settings).current_cr(cr).await? else {
        tracing::debug!("the BtpOperator is gone");
        return Ok(Action::await_change());
    };
    let budget = pass_budget(&cr, &settings.config);
    let result = match tokio::time::timeout(budget, reconcile_once(&cr, &ctx, &settings)).await {
        Ok(result) => result,
        Err(_) => Err(ReconcileError::OutOfTime { budget }),
    };
    if result.is_ok() {
        ctx.metrics.reconcile_succeeded();
    }
    let label = result.as_ref().map_or("error", |delay| requeue::result_label(*delay));
    ctx.metrics.observe(label, started.elapsed());
    match result {
        Ok(delay) => {
            if ctx.record_success() {
                // A trigger was deferred while this pass ran (a failed pass's retry was pending): it may
                // have read the state before that change.
                tracing::debug!("a trigger came during the pass: reconciling again");
                return Ok(Action::requeue(std::time::Duration::ZERO));
            }
            Ok(requeue::action(delay))
        }
        Err(e) => {
            ctx.record_failure(|failures| requeue::error_backoff(failures, requeue::jitter()));
            Err(e)
        }
    }
}

/// One pass: the delay before the next (None: only on a watch event), or the failure.
async fn reconcile_once(
    cr: &BtpOperator,
    ctx: &Context,
    settings: &Settings,
) -> Result<Option<Duration>, ReconcileError> {
    let operation = cr.annotations().get(names::OPERATION_ANNOTATION).map(String::as_str);
    if operation == Some("ignore") {
        // Treated as if it did not exist: no status, no finalizer, no deletion.
        tracing::debug!(name = %cr.name_any(), "operation annotation is ignore: leaving the CR alone");
        return Ok(None);
    }
    let deleting = cr.meta().deletion_timestamp.is_some();
    let mut status = StatusWriter::new(ctx, cr);
    if is_valid(cr) && !deleting {
        // The credentials check's verdict goes with the status of a live, valid CR (docs/behaviour.md#credentials-check).
        status = status.with_credentials(&settings.config);
    }
    if !is_valid(cr) {
        status
            .set(Outcome::new(
                Reason::WrongNamespaceOrName,
                "Your resource must be in the kyma-system namespace. The resource's name must be btpoperator.",
            ))
            .await?;
        return Ok(None);
    }
    // What alerts read: the CR's state as it is now (a new leader learns it here; `StatusWriter::set` keeps
    // it current, and removing the finalizer removes it).
    ctx.metrics.cr_state(status.state().map(btp_api::State::as_str));
    let end = if deleting {
        deprovision::run(ctx, settings, cr, &mut status).await
    } else {
        ctx.deletion_ends();
        // The check gets the Secret beside the pass, not after it: its verdict then usually comes while the
        // pass applies, and goes with the pass's status (a new install's `Ready`) instead of bringing a
        // status write of its own just when the operand turns ready.
        let (end, ()) = futures::join!(
            provision::run(ctx, settings, cr, &mut status),
            super::credentials_condition::hand_over(ctx, settings)
        );
        end
    };
    if let Some(outcome) = end.report() {
        status.set(outcome.clone()).await?;
    }
    if !matches!(end, End::Fail(_)) {
        status.write_credentials().await?;
    }
    let delay = match end {
        End::Fail(e) => return Err(e),
        end => requeue::delay(&end, &settings.config),
    };
    if operation == Some("reconcile") {
        // The forced pass has run; removing the annotation tells whoever set it.
        cluster::Cluster::new(ctx, settings)
            .remove_operation_annotation(cr)
            .await?;
    }
    Ok(delay)
}

fn is_valid(cr: &BtpOperator) -> bool {
    cr.namespace().as_deref() == Some(names::KYMA_SYSTEM) && cr.name_any() == names::BTP_OPERATOR_NAME
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_takes_its_settings_once() {
        // `reconcile` takes the snapshot; the flows and the cluster get it handed down (`Cluster::settings`),
        // so that a change published during a pass cannot reach part of it.
        for (file, text) in [
            ("provision.rs", include_str!("provision.rs")),
            ("deprovision.rs", include_str!("deprovision.rs")),
            ("converge.rs", include_str!("converge.rs")),
            ("status_writer.rs", include_str!("status_writer.rs")),
            ("cluster/api.rs", include_str!("cluster/api.rs")),
            ("cluster/apply.rs", include_str!("cluster/apply.rs")),
            ("cluster/drift.rs", include_str!("cluster/drift.rs")),
            ("cluster/removal.rs", include_str!("cluster/removal.rs")),
            ("cluster/services.rs", include_str!("cluster/services.rs")),
        ] {
            for call in ["ctx.settings()", ".watch_settings()", "ctx.config()"] {
                assert!(!text.contains(call), "{file} calls {call} in the middle of a pass");
            }
        }
    }

    #[test]
    fn a_deletion_pass_also_gets_the_hard_deletes_budget() {
        let config = crate::config::Config::default();
        let mut cr: BtpOperator = serde_json::from_value(serde_json::json!({
            "apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "BtpOperator",
            "metadata": {"name": "btpoperator", "namespace": "kyma-system"},
        }))
        .unwrap();
        assert_eq!(pass_budget(&cr, &config), PASS_BUDGET);
        cr.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_eq!(
            pass_budget(&cr, &config),
            PASS_BUDGET + config.delete_request_timeout * 2
        );
    }
}
