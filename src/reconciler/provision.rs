//! Provisioning (and the Ready-state check) of a live CR, in one pass: finalizer, `Processing/Initialized`,
//! the required Secret, credentials drift, apply ([`super::converge`]), readiness, `Ready`. Each step either
//! goes on or ends the pass ([`End`]); the pass writes the status the end reports.

use super::cluster::Cluster;
use super::context::Context;
use super::converge::{converge, observe, Observation};
use super::end::End;
use super::readiness::{self, Wait};
use super::status::Outcome;
use super::status_writer::StatusWriter;
use crate::config::Settings;
use btp_api::{BtpOperator, Reason, State};
use kube::ResourceExt as _;
use std::time::Instant;

/// Provision a live, valid CR with the pass's `settings`.
pub async fn run(ctx: &Context, settings: &Settings, cr: &BtpOperator, status: &mut StatusWriter<'_>) -> End {
    let cluster = Cluster::new(ctx, settings);
    let outcome = if has_finalizer(cr) {
        // As shipped, the mutating webhook added the finalizer when the CR was created: nothing goes before
        // the reads, and a new CR's `Initialized` goes beside them and the apply (see `steps`).
        steps(ctx, &cluster, cr, status, observe(&cluster, cr)).await
    } else {
        // The pass's first reads do not depend on the finalizer: they go alongside. Nothing is written to
        // the operand before the finalizer is in place.
        let (first, observed) = futures::join!(cluster.add_finalizer(cr), observe(&cluster, cr));
        if let Err(e) = first {
            return e.into();
        }
        steps(ctx, &cluster, cr, status, std::future::ready(observed)).await
    };
    match outcome {
        Ok(end) => end,
        Err(end) => {
            if end.report().is_some() {
                // Another problem interrupts the wait for the operand: the next wait starts a new clock.
                ctx.memory(|m| m.stop_waiting());
            }
            end
        }
    }
}

/// Whether the CR already carries our finalizer (the mutating webhook adds it at creation): then no
/// finalizer patch has to go before the pass's first write. Pure.
pub fn has_finalizer(cr: &BtpOperator) -> bool {
    cr.finalizers().iter().any(|f| f == btp_api::names::FINALIZER)
}

async fn steps(
    ctx: &Context,
    cluster: &Cluster<'_>,
    cr: &BtpOperator,
    status: &mut StatusWriter<'_>,
    observed: impl std::future::Future<Output = Result<Observation, End>>,
) -> Result<End, End> {
    let config = cluster.config();
    let was_ready = status.state() == Some(State::Ready);
    // Failures of a CR that was Ready are `ReconcileFailed`, also when the wait for the operand that began
    // in Ready (with an intermediate Processing status) runs out; before that, `ProvisioningFailed`.
    let failed = |from_ready: bool| {
        if from_ready {
            Reason::ReconcileFailed
        } else {
            Reason::ProvisioningFailed
        }
    };
    let converged = if status.state().is_none() {
        // A new CR is Initialized beside its reads (when it came with our finalizer) and the apply, rather
        // than before them (a round trip less on a cold install): the status and the operand's objects are
        // different objects, and whatever the pass ends with is written after both. A CR that came without
        // the finalizer (no webhook added it) has it added first, and the status after it, not beside it:
        // the finalizer's patch of a CR without finalizers is guarded by the resourceVersion read (it must
        // not replace a finalizer added meanwhile), and a status write beside it would change that version
        // and fail it. From Warning or
        // Error there is no intermediate write: this pass's outcome replaces the status directly, so a
        // reconcile triggered by our own status write cannot flap between Processing and the same
        // Warning/Error. (The progress reports of `converge` are for a CR that was Ready: none here.)
        //
        // A pass that has nothing to wait for (everything it reads is in the watch caches and nothing needs
        // writing: a new CR over a module that is installed and running) is over at its first poll: the CR's
        // first status is then its outcome, without a `Processing/Initialized` that would be replaced a round
        // trip later.
        let mut apply = std::pin::pin!(async { converge(cluster, cr, observed.await?, None, failed(was_ready)).await });
        match futures::poll!(apply.as_mut()) {
            std::task::Poll::Ready(converged) => converged?,
            std::task::Poll::Pending => {
                let (initialized, converged) =
                    futures::join!(status.set(Outcome::new(Reason::Initialized, "Initialized")), apply);
                initialized.map_err(End::from)?;
                converged?
            }
        }
    } else {
        converge(cluster, cr, observed.await?, Some(status), failed(was_ready)).await?
    };

    // The Deployment controller may have marked the Deployment available while the rest of the apply was
    // answering: judged as the view has it now, this pass ends Ready rather than the next.
    let deployment = cluster.operand_deployment_now(converged.operand_deployment);
    let ready = deployment.as_ref().is_some_and(readiness::deployment_ready);
    let (waited, from_ready) = if ready {
        (Default::default(), was_ready)
    } else {
        let uid = cr.uid().unwrap_or_default();
        let (since, from_ready) = ctx.memory(|m| m.start_waiting(&uid, was_ready, Instant::now()));
        (since.elapsed(), from_ready)
    };
    Ok(match readiness::judge(ready, waited, config.ready_timeout) {
        Wait::Ready => {
            ctx.memory(|m| m.stop_waiting());
            End::Report(Outcome::new(
                Reason::ReconcileSucceeded,
                "Module provisioning succeeded",
            ))
        }
        Wait::TimedOut => End::Report(Outcome::new(
            failed(from_ready),
            format!(
                "timed out while waiting for resources readiness: timeout waiting for {} Deployment to be ready",
                config.deployment_name
            ),
        )),
        // The Deployment watch brings the CR back as soon as its conditions change; the recheck enforces the
        // timeout.
        Wait::Waiting { recheck_in } => End::Recheck(
            (was_ready || status.state() != Some(State::Processing)).then(|| {
                Outcome::new(
                    Reason::Updated,
                    format!(
                        "waiting for Deployment {}/{} to become available",
                        config.chart_namespace, config.deployment_name
                    ),
                )
            }),
            recheck_in,
        ),
    })
}
