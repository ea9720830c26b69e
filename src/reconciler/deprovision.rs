//! Deprovisioning a deleted CR that carries our finalizer (decisions in [`super::deprovision_plan`]). Each
//! pass continues where the last one stopped, so a manager restarted at any point finishes the job: the
//! status says whether the soft delete was reached, and every step is idempotent.

use super::cluster::{Cluster, SERVICE_BINDING, SERVICE_INSTANCE};
use super::context::Context;
use super::converge::{converge, observe, required_credentials};
use super::deprovision_plan::{self as plan, HardDelete, HardDeleteMemory};
use super::end::End;
use super::error::{ApiError, ReconcileError};
use super::status::Outcome;
use super::status_writer::StatusWriter;
use btp_api::{names, BtpOperator, Reason};
use kube::ResourceExt as _;
use std::time::Instant;

/// Deprovision `cr` (its `deletionTimestamp` is set).
pub async fn run(ctx: &Context, cr: &BtpOperator, status: &mut StatusWriter<'_>) -> End {
    if !cr.finalizers().iter().any(|f| f == names::FINALIZER) {
        // Not ours to finish (never provisioned, or already done).
        ctx.memory(|m| m.end_deletion());
        return End::AwaitChange;
    }
    // From here on, deletions of ServiceInstances and ServiceBindings wake the reconciler.
    ctx.memory(|m| m.set_deleting());
    let config = ctx.config();
    let cluster = Cluster::new(ctx, &config);
    match steps(ctx, &cluster, cr, status).await {
        Ok(end) => end,
        Err(End::Report(outcome)) if outcome.reason == Reason::ResourceRemovalFailed => {
            // Report, restore the operand, and retry with backoff.
            if let Err(e) = status.set(outcome.clone()).await {
                return e.into();
            }
            keep_operand(ctx, &cluster, cr).await;
            End::Fail(ReconcileError::Reported(outcome))
        }
        Err(end) => end,
    }
}

async fn steps(
    ctx: &Context,
    cluster: &Cluster<'_>,
    cr: &BtpOperator,
    status: &mut StatusWriter<'_>,
) -> Result<End, End> {
    let config = ctx.config();
    let uid = cr.uid().unwrap_or_default();
    let mut soft = plan::soft_deleting(status.state(), status.reason())
        || ctx.memory(|m| m.hard_delete(&uid, Instant::now())) == HardDeleteMemory::GivenUp;
    if !soft {
        if let Some(outcome) = plan::announce(status.state(), status.reason()) {
            status.set(outcome).await?;
        }
        if !plan::force_delete(cr.labels()) {
            if let Some(outcome) = plan::blocked(cluster.count_services().await?) {
                // Blocked: the operand keeps running and stays healthy until the user decides.
                keep_operand(ctx, cluster, cr).await;
                return Ok(End::Report(outcome));
            }
        }
        if let Some(outcome) = plan::unblocked(status.reason()) {
            status.set(outcome).await?;
        }
        match hard_delete(ctx, cluster, &uid).await {
            Ok(HardDelete::Done) => {}
            Ok(HardDelete::Wait(recheck)) => return Ok(End::Recheck(None, recheck)),
            Ok(HardDelete::GiveUp) => {
                tracing::info!(timeout = ?config.hard_delete_timeout, "hard delete timed out: soft delete");
                soft = true;
            }
            Err(e) => {
                tracing::warn!(error = %e, "hard delete failed: soft delete");
                soft = true;
            }
        }
    }
    if soft {
        ctx.memory(|m| m.give_up_hard_delete(&uid, Instant::now()));
        status
            .set(Outcome::new(Reason::SoftDeleting, "Being soft deleted"))
            .await?;
        soft_delete(cluster).await?;
    }
    let (module, credentials_namespace) = (ctx.resources(), credentials_namespace(cluster, &config).await);
    cluster
        .remove_module_resources(&module, credentials_namespace.as_deref())
        .await
        .map_err(|e| End::Report(plan::removal_failed(&e.to_string())))?;
    cluster.remove_finalizer(cr).await?;
    tracing::info!("BtpOperator deprovisioned: finalizer removed");
    ctx.metrics.cr_state(None);
    ctx.memory(|m| m.end_deletion());
    Ok(End::AwaitChange)
}

/// Delete every ServiceBinding, then every ServiceInstance (once per CR incarnation in this process), and
/// judge what is left against `HardDeleteTimeout`.
async fn hard_delete(ctx: &Context, cluster: &Cluster<'_>, uid: &str) -> Result<HardDelete, ApiError> {
    let config = ctx.config();
    let now = Instant::now();
    let remembered = ctx.memory(|m| m.hard_delete(uid, now));
    if remembered == HardDeleteMemory::NotBegun {
        ctx.memory(|m| m.begin_hard_delete(uid, now));
        tracing::info!("hard delete: deleting every ServiceBinding, then every ServiceInstance");
        for kind in [SERVICE_BINDING, SERVICE_INSTANCE] {
            cluster.delete_all_services(kind, config.delete_request_timeout).await?;
        }
    }
    let left = cluster.any_service_left(SERVICE_BINDING).await? || cluster.any_service_left(SERVICE_INSTANCE).await?;
    Ok(plan::hard_delete(
        left,
        match remembered {
            HardDeleteMemory::Running { elapsed } => elapsed,
            _ => now.elapsed(),
        },
        config.hard_delete_timeout,
        config.hard_delete_check_interval,
    ))
}

/// Soft delete, in the order that matters: the operand's workload and webhooks first (so that finalizer
/// edits are not sent to a dead webhook), the network policies, then bindings (with their Secrets) and
/// instances without their finalizers.
async fn soft_delete(cluster: &Cluster<'_>) -> Result<(), End> {
    let failed = |e: &dyn std::fmt::Display| End::Report(plan::removal_failed(&e.to_string()));
    cluster.remove_operand_workload().await.map_err(|e| failed(&e))?;
    cluster.remove_network_policies().await.map_err(|e| failed(&e))?;
    for kind in [SERVICE_BINDING, SERVICE_INSTANCE] {
        cluster.strip_services(kind).await.map_err(|e| failed(&e))?;
    }
    Ok(())
}

/// The credentials namespace the required Secret names, if it can be read and is valid.
async fn credentials_namespace(cluster: &Cluster<'_>, config: &crate::config::Config) -> Option<String> {
    required_credentials(cluster, config)
        .await
        .ok()
        .map(|(c, _)| c.credentials_namespace)
}

/// Keep (or put back) the operand as provisioning would, without touching the status; problems are logged.
async fn keep_operand(ctx: &Context, cluster: &Cluster<'_>, cr: &BtpOperator) {
    let kept = async {
        let observed = observe(ctx, cluster, cr).await?;
        converge(ctx, cluster, cr, observed, None, Reason::ReconcileFailed).await
    };
    match kept.await {
        Ok(_) => {}
        Err(End::Report(outcome)) | Err(End::Fail(ReconcileError::Reported(outcome))) => {
            tracing::info!(reason = %outcome.reason, detail = %outcome.message, "operand not kept during deletion")
        }
        Err(End::Fail(e)) => tracing::warn!(error = %e, "operand not kept during deletion"),
        // Converging ends early only with a problem.
        Err(End::Recheck(..)) | Err(End::AwaitChange) => {}
    }
}
