//! The steps that keep the operand converged, shared by provisioning and deprovisioning (which keeps the
//! operand healthy while a deletion is blocked, and restores it after a failed removal): the required Secret
//! ([`required_credentials`]), the reads a pass starts from ([`observe`]), and the apply with the credentials
//! drift around it ([`converge`]).

use super::cluster::{ApplyError, Cluster, DriftObservation, ModuleReads};
use super::credentials::{self, Credentials, Observed, SecretProblem};
use super::drift;
use super::end::{report, retry, End};
use super::network_policies;
use super::resources::ModuleResources;
use super::status::Outcome;
use super::status_writer::StatusWriter;
use super::view::ObjectKey;
use crate::config::Config;
use btp_api::{names, BtpOperator, Reason, State};
use kube::ResourceExt as _;

/// The required Secret, validated (`MissingSecret`, `InvalidSecret`); a failed read is a failure of the pass
/// ([`End::Fail`]), never a verdict about the Secret.
pub async fn required_credentials(
    cluster: &Cluster<'_>,
    config: &Config,
) -> Result<(Credentials, std::collections::BTreeMap<String, String>), End> {
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
            SecretProblem::Missing { message } => End::Report(Outcome::new(Reason::MissingSecret, message)),
            SecretProblem::Invalid { message } => End::Report(Outcome::new(Reason::InvalidSecret, message)),
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
    before: DriftObservation,
    /// The module this pass applies (one snapshot for the reads and the apply).
    module: std::sync::Arc<ModuleResources>,
    reads: Result<ModuleReads, ApplyError>,
}

/// Read what [`converge`] starts from (`MissingSecret`, `InvalidSecret` and the drift reads' reasons). Once
/// the required Secret is read, the drift reads and the apply's reads go side by side: one round trip.
pub async fn observe(cluster: &Cluster<'_>, cr: &BtpOperator) -> Result<Observation, End> {
    let config = cluster.config();
    let module = cluster.settings().module.clone();
    let (credentials, required) = required_credentials(cluster, config).await?;
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
) -> Result<Converged, End> {
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
        ApplyError::Api(_) | ApplyError::Kinds(crate::reconciler::kinds::KindsError::Discovery { .. }) => {
            retry(failed)(e)
        }
        _ => report(failed)(e),
    };
    let reads = reads.map_err(apply_failed)?;
    // The drift actions write the required Secret's annotations, the operand's cluster-ID Secret and Pod:
    // none of them is the module's. Should a module carry one of them, what was read is read again.
    let config = cluster.config();
    let touched = actions
        .delete_clusterid_secret_in
        .as_ref()
        .is_some_and(|ns| reads.includes(&ObjectKey::core("Secret", ns, drift::CLUSTER_ID_SECRET)))
        || reads.includes(&ObjectKey::core("Secret", &config.chart_namespace, &config.secret_name));
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
