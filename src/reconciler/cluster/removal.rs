//! Removing what the manager installed for the operand: every object of a module-resource kind that carries
//! both `app.kubernetes.io/managed-by=btp-manager` and `kyma-project.io/module=btp-operator` (the manager's
//! own objects carry neither pair, see `btp_api::names::manager_labels`), the network policies, the operand
//! Secret wherever it was moved, and the operand's cluster-ID Secret.

use super::api::{ignoring_not_found, Cluster};
use super::retry::retrying;
use crate::reconciler::drift;
use crate::reconciler::error::{api_err, ApiError};
use crate::reconciler::resources::{self, ModuleResources};
use crate::reconciler::view::ObjectKey;
use btp_api::names;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};

/// The apiVersion of the webhook configurations.
const ADMISSION: &str = "admissionregistration.k8s.io/v1";

/// What could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum RemovalError {
    /// An API call failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// Objects were left after a soft delete stripped their finalizers.
    #[error("{count} {kind}(s) left after removing their finalizers")]
    Left {
        /// Their kind.
        kind: String,
        /// How many.
        count: usize,
    },
    /// Several removals failed (each is named).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<ApiError>),
}

/// Each distinct (apiVersion, kind) of the manifests, in first-seen order.
pub fn module_kinds(module: &ModuleResources) -> Vec<(String, String)> {
    let mut kinds: Vec<(String, String)> = Vec::new();
    for obj in module.apply.iter().chain(&module.delete) {
        let (api_version, kind, _, _) = resources::identity(obj);
        if !kinds.iter().any(|(v, k)| *v == api_version && *k == kind) {
            kinds.push((api_version, kind));
        }
    }
    kinds
}

/// 404 (no such kind or nothing there) and 405 (no delete-collection) are not failures here.
fn tolerated(r: Result<(), ApiError>) -> Result<(), ApiError> {
    match r {
        Err(ApiError {
            source: kube::Error::Api(s),
            ..
        }) if s.code == 405 => Ok(()),
        other => ignoring_not_found(other),
    }
}

impl Cluster<'_> {
    /// Soft delete, first step: the operand Deployment and both operand webhook configurations, so that
    /// finalizer edits on ServiceInstances/ServiceBindings are no longer sent to a dead webhook.
    pub async fn remove_operand_workload(&self) -> Result<(), ApiError> {
        let deployments: Api<Deployment> = Api::namespaced(self.client(), &self.config.chart_namespace);
        self.delete_ignoring_not_found(&deployments, &self.config.deployment_name, "the operand Deployment")
            .await?;
        let ns = Some(self.config.chart_namespace.as_str());
        self.deleted(&ObjectKey::new(
            "apps/v1",
            "Deployment",
            ns,
            &self.config.deployment_name,
        ));
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(self.client());
        self.delete_ignoring_not_found(
            &mutating,
            btp_certs::operand::MUTATING_WEBHOOK_CONFIGURATION,
            "the operand's MutatingWebhookConfiguration",
        )
        .await?;
        self.deleted(&ObjectKey::new(
            ADMISSION,
            "MutatingWebhookConfiguration",
            None,
            btp_certs::operand::MUTATING_WEBHOOK_CONFIGURATION,
        ));
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(self.client());
        self.delete_ignoring_not_found(
            &validating,
            btp_certs::operand::VALIDATING_WEBHOOK_CONFIGURATION,
            "the operand's ValidatingWebhookConfiguration",
        )
        .await?;
        self.deleted(&ObjectKey::new(
            ADMISSION,
            "ValidatingWebhookConfiguration",
            None,
            btp_certs::operand::VALIDATING_WEBHOOK_CONFIGURATION,
        ));
        Ok(())
    }

    /// Remove every module resource (both modes of deprovisioning). `credentials_namespace` is the one the
    /// required Secret names, if it could be read. Every step is tried; the failures are reported together.
    pub async fn remove_module_resources(
        &self,
        module: &ModuleResources,
        credentials_namespace: Option<&str>,
    ) -> Result<(), RemovalError> {
        let mut failures = Vec::new();
        // Where the operand Secret lives (read before anything is deleted): only one that carries both labels
        // of what the manager installs is deleted outside the chart namespace.
        let selector = names::module_resource_selector();
        let ours: Vec<String> = self
            .operand_secrets()
            .await?
            .into_iter()
            .filter(|s| names::is_module_resource(s.labels.as_ref()))
            .filter_map(|s| s.namespace)
            .collect();
        let mut credentials_namespaces = ours.clone();
        credentials_namespaces.push(self.config.chart_namespace.clone());
        credentials_namespaces.extend(credentials_namespace.map(str::to_string));
        credentials_namespaces.sort();
        credentials_namespaces.dedup();

        let params = ListParams::default().labels(&selector);
        // Marked gone before each delete too: its watch may deliver the deletions before the answer, and
        // they are echoes of ours (docs/behaviour.md#watches-and-triggers).
        let view = self.ctx.view();
        if let Some(view) = &view {
            view.removed("v1", "Secret");
        }
        // Kinds nobody serves any more have nothing to delete.
        let kinds = match self.resolve_kinds(module, &[], true).await {
            Ok(kinds) => kinds,
            Err(e) => {
                tracing::debug!(error = %e, "discovery for the removal; the built-in table answers");
                self.ctx.kinds()
            }
        };
        for (api_version, kind) in module_kinds(module) {
            if let Some(view) = &view {
                view.removed(&api_version, &kind);
            }
            let ar = kinds.api_resource(&api_version, &kind);
            let api: Api<DynamicObject> = if kinds.cluster_scoped(&api_version, &kind) {
                Api::all_with(self.client(), &ar)
            } else {
                Api::namespaced_with(self.client(), &self.config.chart_namespace, &ar)
            };
            let delete_params = DeleteParams::default();
            let removed = retrying(|| api.delete_collection(&delete_params, &params))
                .await
                .map(|_| ())
                .map_err(api_err(format!("removing {kind}s")));
            if let Err(e) = tolerated(removed) {
                failures.push(e);
            }
        }
        if let Some(view) = view {
            // Gone, as far as this pass knows (a CR created next must not be applied from copies of them).
            for (api_version, kind) in module_kinds(module) {
                view.removed(&api_version, &kind);
            }
            view.removed("v1", "Secret");
        }
        if let Err(e) = tolerated(self.remove_network_policies().await) {
            failures.push(e);
        }
        for ns in &credentials_namespaces {
            let secrets: Api<Secret> = Api::namespaced(self.client(), ns);
            if *ns != self.config.chart_namespace && ours.contains(ns) {
                // Moved there by a custom credentials_namespace; the list above found it with our labels.
                let ours = self
                    .delete_ignoring_not_found(
                        &secrets,
                        drift::OPERAND_SECRET,
                        &format!("Secret {ns}/{}", drift::OPERAND_SECRET),
                    )
                    .await;
                match ours {
                    Ok(()) => self.deleted(&ObjectKey::core("Secret", ns, drift::OPERAND_SECRET)),
                    Err(e) => failures.push(e),
                }
            }
            let clusterid = self
                .delete_ignoring_not_found(
                    &secrets,
                    drift::CLUSTER_ID_SECRET,
                    &format!("Secret {ns}/{}", drift::CLUSTER_ID_SECRET),
                )
                .await;
            match clusterid {
                Ok(()) => self.deleted(&ObjectKey::core("Secret", ns, drift::CLUSTER_ID_SECRET)),
                Err(e) => failures.push(e),
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(RemovalError::Several(failures))
        }
    }
}
