//! Provisioning (and the Ready-state check) of a live CR, in one pass: finalizer, `Processing/Initialized`,
//! the required Secret, credentials drift, apply, readiness, `Ready`. Each step either continues or stops the
//! pass with an outcome ([`Stop::Report`]) or a failure ([`Stop::Fail`]); [`run`] writes the final status.

use super::cluster::Cluster;
use super::cluster::{ApplyError, ModuleReads};
use super::context::Context;
use super::credentials::{self, Credentials, Observed, SecretProblem};
use super::drift;
use super::error::{report, retry, ReconcileError, Stop};
use super::network_policies;
use super::readiness::{self, Wait};
use super::requeue::{self, Next, Requeue};
use super::status::Outcome;
use super::status_writer::StatusWriter;
use crate::config::{Config, Settings};
use btp_api::{names, BtpOperator, Reason, State};
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

/// Provision a live, valid CR with the pass's `settings`.
pub async fn run(
    ctx: &Context,
    settings: &Settings,
    cr: &BtpOperator,
    status: &mut StatusWriter<'_>,
) -> Result<Next, ReconcileError> {
    let config = &settings.config;
    let cluster = Cluster::new(ctx, settings);
    let prelude = async {
        // Before the first status, not beside it: the finalizer's patch of a CR without finalizers is
        // guarded by the resourceVersion read (it must not replace a finalizer added meanwhile), and a
        // status write beside it would change that version and fail it.
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
    let (prelude, observed) = futures::join!(prelude, observe(&cluster, cr));
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
    Ok(end.next(config))
}

async fn steps(
    ctx: &Context,
    cluster: &Cluster<'_>,
    cr: &BtpOperator,
    status: &mut StatusWriter<'_>,
    observed: Observation,
) -> Result<End, Stop> {
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
    let converged = converge(cluster, cr, observed, Some(status), failed(was_ready)).await?;

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

/// The required Secret, validated (`MissingSecret`, `InvalidSecret`); a failed read is a failure of the pass
/// ([`Stop::Fail`]), never a verdict about the Secret.
pub async fn required_credentials(
    cluster: &Cluster<'_>,
    config: &Config,
) -> Result<(Credentials, std::collections::BTreeMap<String, String>), Stop> {
    // A failed read says nothing about the user's Secret: the pass fails and is retried with backoff.
    let secret = cluster.required_secret().await?;
    let data = secret.as_ref().map(crate::objects::secret_data).unwrap_or_default();
    let observed = match &secret {
        None => Observed::Absent,
        Some(s) if !names::visible_to_manager(s.metadata.labels.as_ref()) => Observed::Unlabelled,
        Some(_) => Observed::Present(&data),
    };
    let credentials =
        credentials::validate(observed, &config.secret_name, &config.chart_namespace).map_err(|p| match p {
            SecretProblem::Missing { message } => Stop::Report(Outcome::new(Reason::MissingSecret, message)),
            SecretProblem::Invalid { message } => Stop::Report(Outcome::new(Reason::InvalidSecret, message)),
        })?;
    let annotations = secret.map(|s| s.annotations().clone()).unwrap_or_default();
    Ok((credentials, annotations))
}

/// What [`converge`] leaves: the credentials it validated and the operand Deployment as it is after the apply.
pub struct Converged {
    /// The validated credentials.
    pub credentials: Credentials,
    /// The operand Deployment after the apply (None when there is none).
    pub operand_deployment: Option<k8s_openapi::api::apps::v1::Deployment>,
}

/// What [`converge`] starts from, read before anything is written: the required Secret (validated, and its
/// annotations), the credentials drift observation, and what the apply may write (its failure is the
/// apply's, reported as the apply reports it).
pub struct Observation {
    credentials: Credentials,
    required: std::collections::BTreeMap<String, String>,
    before: crate::reconciler::cluster::DriftObservation,
    /// The module this pass applies (one snapshot for the reads and the apply).
    module: std::sync::Arc<crate::reconciler::resources::ModuleResources>,
    reads: Result<ModuleReads, ApplyError>,
}

/// Read what [`converge`] starts from (`MissingSecret`, `InvalidSecret` and the drift reads' reasons). Once
/// the required Secret is read, the drift reads and the apply's reads go side by side: one round trip.
pub async fn observe(cluster: &Cluster<'_>, cr: &BtpOperator) -> Result<Observation, Stop> {
    let module = cluster.settings().module.clone();
    let (credentials, required) = required_credentials(cluster, cluster.config()).await?;
    let policies_enabled = network_policies::enabled(cr.annotations());
    let (before, reads) = futures::join!(
        cluster.observe_drift(&credentials, &required, None),
        cluster.read_module(&module, &credentials, policies_enabled),
    );
    Ok(Observation {
        credentials,
        required,
        before: before?,
        module,
        reads,
    })
}

/// Bring the operand to the desired state from what [`observe`] read: credentials drift (reported as
/// progress when `progress` is given and the CR was Ready), the apply, and the clean-up of what the drift
/// invalidated. Deprovisioning runs it without `progress` to keep the operand healthy while deletion is
/// blocked, and to restore it after a failed removal.
pub async fn converge(
    cluster: &Cluster<'_>,
    cr: &BtpOperator,
    observed: Observation,
    progress: Option<&mut StatusWriter<'_>>,
    failed: Reason,
) -> Result<Converged, Stop> {
    let Observation {
        credentials,
        required,
        before,
        module,
        reads,
    } = observed;
    if let Some(status) = progress {
        if status.state() == Some(State::Ready) {
            if let Some(outcome) = drift::ready_state_drift(&credentials, &before.observed) {
                status.set(outcome).await?;
            }
        }
    }
    let actions = drift::before_apply(&credentials, &before.observed);
    cluster.carry_out(&required, &actions, &before).await?;

    let apply_failed = |e: ApplyError| match e {
        // The API server failed us: say so, and retry with backoff.
        ApplyError::Api(_) => retry(failed)(e),
        _ => report(failed)(e),
    };
    let reads = reads.map_err(apply_failed)?;
    // The drift actions write the required Secret's annotations, the operand's cluster-ID Secret and Pod:
    // none of them is the module's. Should a module carry one of them, what was read is read again.
    let config = cluster.config();
    let touched = actions
        .delete_clusterid_secret_in
        .as_ref()
        .is_some_and(|ns| reads.includes("Secret", ns, drift::CLUSTER_ID_SECRET))
        || reads.includes("Secret", &config.chart_namespace, &config.secret_name);
    let policies_enabled = network_policies::enabled(cr.annotations());
    let applied = cluster
        .apply_module(cr, &module, &credentials, policies_enabled, (!touched).then_some(reads))
        .await
        .map_err(apply_failed)?;
    let mut operand_deployment = applied.operand_deployment;

    // What the drift invalidated (the operand restarts with the new settings); nothing to look at when the
    // credentials namespace and cluster ID did not change.
    if drift::invalidated_by_apply(&credentials, &before.observed) {
        // The cluster-ID Secret the operand wrote is looked for where it was before the apply: once the
        // apply created the operand Secret in a new credentials namespace, the operand namespace of a fresh
        // observation may already be the new one, and the old Secret would stay behind.
        let old_namespace = drift::operand_namespace(&credentials, &before.observed);
        let after = cluster
            .observe_drift(&credentials, &required, Some(&old_namespace))
            .await?;
        let actions = drift::after_apply(&credentials, &before.observed, &after.observed);
        cluster.carry_out(&required, &actions, &after).await?;
        // The operand pod may have been deleted: read the Deployment as it is now.
        operand_deployment = cluster.operand_deployment().await?;
    }
    Ok(Converged {
        credentials,
        operand_deployment,
    })
}
