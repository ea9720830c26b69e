//! Deprovisioning a deleted CR: the state machine of [`super::deprovision_plan`], carried out. [`run`] asks
//! the plan for the stage, takes its step (one `match`), and asks again until a stage ends the pass. Each pass
//! continues where the last one stopped, so a manager restarted at any point finishes the job: the status
//! says whether the soft delete was reached, and every step is idempotent.

use super::cluster::{Cluster, SERVICE_BINDING, SERVICE_INSTANCE};
use super::context::Context;
use super::converge::{converge, observe, required_credentials};
use super::deprovision_plan::{self as plan, Facts, GiveUp, Pass, Stage};
use super::end::End;
use super::error::{ApiError, ReconcileError};
use super::status::Outcome;
use super::status_writer::StatusWriter;
use crate::config::Settings;
use btp_api::{names, BtpOperator, Reason};
use kube::ResourceExt as _;
use std::time::Instant;

/// Deprovision `cr` (its `deletionTimestamp` is set) with the pass's `settings`.
pub async fn run(ctx: &Context, settings: &Settings, cr: &BtpOperator, status: &mut StatusWriter<'_>) -> End {
    match stages(ctx, settings, cr, status).await {
        Ok(end) | Err(end) => end,
    }
}

async fn stages(
    ctx: &Context,
    settings: &Settings,
    cr: &BtpOperator,
    status: &mut StatusWriter<'_>,
) -> Result<End, End> {
    let config = &settings.config;
    let cluster = Cluster::new(ctx, settings);
    let uid = cr.uid().unwrap_or_default();
    let finalizer = cr.finalizers().iter().any(|f| f == names::FINALIZER);
    if finalizer {
        // From here on, deletions of ServiceInstances and ServiceBindings wake the reconciler.
        ctx.deletion_begins();
    }
    let forced = plan::force_delete(cr.labels());
    let mut pass = Pass::default();
    loop {
        let facts = Facts {
            state: status.state(),
            reason: status.reason(),
            finalizer,
            forced,
            hard_delete: ctx.memory(|m| m.hard_delete(&uid, Instant::now())),
            pass: pass.clone(),
        };
        match plan::stage(&facts, config.hard_delete_timeout, config.hard_delete_check_interval) {
            Stage::NotOurs => {
                ctx.deletion_ends();
                return Ok(End::AwaitChange);
            }
            Stage::Announce(outcome) | Stage::Unblocked(outcome) => status.set(outcome).await?,
            Stage::Count => pass.counts = Some(cluster.count_services().await?),
            Stage::Blocked(outcome) => {
                // The operand keeps running and stays healthy until the user decides.
                keep_operand(&cluster, cr).await;
                return Ok(End::Report(outcome));
            }
            Stage::HardDelete => {
                tracing::info!("hard delete: deleting every ServiceBinding, then every ServiceInstance");
                ctx.memory(|m| m.begin_hard_delete(&uid, Instant::now()));
                for kind in [SERVICE_BINDING, SERVICE_INSTANCE] {
                    if let Err(e) = cluster.delete_all_services(kind, config.delete_request_timeout).await {
                        pass.hard_delete_failed = Some(e.to_string());
                        break;
                    }
                }
            }
            Stage::CheckHardDelete => {
                let left = async {
                    Ok::<_, ApiError>(
                        cluster.any_service_left(SERVICE_BINDING).await?
                            || cluster.any_service_left(SERVICE_INSTANCE).await?,
                    )
                };
                match left.await {
                    Ok(left) => pass.left = Some(left),
                    Err(e) => pass.hard_delete_failed = Some(e.to_string()),
                }
            }
            Stage::AwaitHardDelete(recheck) => return Ok(End::Recheck(None, recheck)),
            Stage::GiveUpHardDelete(why) => {
                match why {
                    GiveUp::TimedOut => {
                        tracing::info!(timeout = ?config.hard_delete_timeout, "hard delete timed out: soft delete")
                    }
                    GiveUp::Failed(error) => tracing::warn!(%error, "hard delete failed: soft delete"),
                }
                ctx.memory(|m| m.give_up_hard_delete(&uid, Instant::now()));
            }
            Stage::SoftDelete => {
                ctx.memory(|m| m.give_up_hard_delete(&uid, Instant::now()));
                status
                    .set(Outcome::new(Reason::SoftDeleting, "Being soft deleted"))
                    .await?;
                match soft_delete(&cluster).await {
                    Ok(()) => pass.soft_deleted = true,
                    Err(failed) => pass.removal_failed = Some(failed),
                }
            }
            Stage::RemoveResources => {
                let (module, credentials_namespace) =
                    (settings.module.clone(), credentials_namespace(&cluster, config).await);
                match cluster
                    .remove_module_resources(&module, credentials_namespace.as_deref())
                    .await
                {
                    Ok(()) => pass.removed = true,
                    Err(e) => pass.removal_failed = Some(plan::removal_failed(&e.to_string())),
                }
            }
            Stage::Restore(outcome) => {
                // Report, restore the operand, and retry with backoff.
                status.set(outcome.clone()).await?;
                keep_operand(&cluster, cr).await;
                return Err(End::Fail(ReconcileError::Reported(outcome)));
            }
            Stage::RemoveFinalizer => {
                cluster.remove_finalizer(cr).await?;
                pass.finalizer_removed = true;
            }
            Stage::Deprovisioned => {
                tracing::info!("BtpOperator deprovisioned: finalizer removed");
                ctx.metrics.cr_state(None);
                ctx.deletion_ends();
                return Ok(End::AwaitChange);
            }
        }
    }
}

/// Soft delete, in the order that matters: the operand's workload and webhooks first (so that finalizer
/// edits are not sent to a dead webhook), the network policies, then bindings (with their Secrets) and
/// instances without their finalizers. A failure is the outcome to report.
async fn soft_delete(cluster: &Cluster<'_>) -> Result<(), Outcome> {
    let failed = |e: &dyn std::fmt::Display| plan::removal_failed(&e.to_string());
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
async fn keep_operand(cluster: &Cluster<'_>, cr: &BtpOperator) {
    let kept = async {
        let observed = observe(cluster, cr).await?;
        converge(cluster, cr, observed, None, Reason::ReconcileFailed).await
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
