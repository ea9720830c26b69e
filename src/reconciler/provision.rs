//! Provisioning (and the Ready-state check) of a live CR, in one pass: finalizer, `Processing/Initialized`,
//! the required Secret, credentials drift, apply ([`super::converge`]), readiness, `Ready`. Each step either continues or stops the
//! pass with an outcome ([`Stop::Report`]) or a failure ([`Stop::Fail`]); [`run`] writes the final status.

use super::cluster::Cluster;
use super::context::Context;
use super::converge::{converge, observe, Observation};
use super::error::{ReconcileError, Stop};
use super::readiness::{self, Wait};
use super::requeue::{self, Next, Requeue};
use super::status::Outcome;
use super::status_writer::StatusWriter;
use crate::config::Config;
use btp_api::{BtpOperator, Reason, State};
use kube::ResourceExt as _;

/// How a pass ended: what to report (nothing, when the status already says it) and when to come back.
pub struct End {
    /// The outcome to write.
    pub report: Option<Outcome>,
    /// When to come back.
    pub requeue: Requeue,
}

impl End {
    /// Report `outcome`, come back periodically.
    pub fn periodic(outcome: Outcome) -> Self {
        Self {
            report: Some(outcome),
            requeue: Requeue::Periodic,
        }
    }

    /// What the controller does after this end.
    pub fn next(&self, config: &Config) -> Next {
        let reason = self.report.as_ref().map_or(Reason::Updated, |o| o.reason);
        Next(requeue::delay(reason, self.requeue, config))
    }
}

/// Provision a live, valid CR.
pub async fn run(ctx: &Context, cr: &BtpOperator, status: &mut StatusWriter<'_>) -> Result<Next, ReconcileError> {
    let config = ctx.config();
    let cluster = Cluster::new(ctx, &config);
    let prelude = async {
        cluster.add_finalizer(cr).await?;
        // A new CR is Initialized first. From Warning or Error there is no intermediate write: this pass's
        // outcome replaces the status directly, so a reconcile triggered by our own status write cannot flap
        // between Processing and the same Warning/Error.
        if status.state().is_none() {
            status.set(Outcome::new(Reason::Initialized, "Initialized")).await?;
        }
        Ok::<(), ReconcileError>(())
    };
    // The pass's first reads (the required Secret, credentials drift) do not depend on the finalizer or the
    // first status: they go alongside. Nothing is written to the operand before the finalizer is in place,
    // and what the reads found is acted on only after the first status.
    let (prelude, observed) = futures::join!(prelude, observe(ctx, &cluster, cr));
    prelude?;
    let steps = async {
        let observed = observed?;
        steps(ctx, &cluster, cr, status, observed).await
    };
    let end = match steps.await {
        Ok(end) => end,
        Err(Stop::Report(outcome)) => {
            // Another problem interrupts the wait for the operand: the next wait starts a new clock.
            ctx.stop_waiting();
            End::periodic(outcome)
        }
        Err(Stop::Retry(outcome)) => {
            ctx.stop_waiting();
            status.set(outcome.clone()).await?;
            return Err(outcome.into());
        }
        Err(Stop::Fail(e)) => return Err(e),
    };
    if let Some(outcome) = &end.report {
        status.set(outcome.clone()).await?;
    }
    Ok(end.next(&config))
}

async fn steps(
    ctx: &Context,
    cluster: &Cluster<'_>,
    cr: &BtpOperator,
    status: &mut StatusWriter<'_>,
    observed: Observation,
) -> Result<End, Stop> {
    let config = ctx.config();
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
    let converged = converge(ctx, cluster, cr, observed, Some(status), failed(was_ready)).await?;

    let deployment = converged.operand_deployment;
    let ready = deployment.as_ref().is_some_and(readiness::deployment_ready);
    let (waited, from_ready) = if ready {
        (Default::default(), was_ready)
    } else {
        let (since, from_ready) = ctx.start_waiting(&cr.uid().unwrap_or_default(), was_ready);
        (since.elapsed(), from_ready)
    };
    Ok(match readiness::judge(ready, waited, config.ready_timeout) {
        Wait::Ready => {
            ctx.stop_waiting();
            End::periodic(Outcome::new(
                Reason::ReconcileSucceeded,
                "Module provisioning succeeded",
            ))
        }
        Wait::TimedOut => End::periodic(Outcome::new(
            failed(from_ready),
            format!(
                "timed out while waiting for resources readiness: timeout waiting for {} Deployment to be ready",
                config.deployment_name
            ),
        )),
        Wait::Waiting { recheck_in } => End {
            // The Deployment watch brings the CR back as soon as its conditions change; the requeue
            // enforces the timeout.
            report: (was_ready || status.state() != Some(State::Processing)).then(|| {
                Outcome::new(
                    Reason::Updated,
                    format!(
                        "waiting for Deployment {}/{} to become available",
                        config.chart_namespace, config.deployment_name
                    ),
                )
            }),
            requeue: Requeue::After(recheck_in),
        },
    })
}
