//! Applying the module resources: outdated objects deleted, the operand's certificates decided (and
//! regenerated when needed), network policies planned, everything server-side applied.

use super::{ignoring_not_found, retrying, Cluster};
use crate::reconciler::credentials::Credentials;
use crate::reconciler::error::{api_err, ApiError};
use crate::reconciler::metrics::Certificate;
use crate::reconciler::network_policies;
use crate::reconciler::resources::{self, ModuleResources};
use btp_api::names;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Why an apply failed. Messages name objects and API answers, never a secret value.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// API calls failed (several when deleting outdated objects).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Api(Vec<ApiError>),
    /// The manifests could not be prepared.
    #[error(transparent)]
    Prepare(#[from] resources::PrepareError),
    /// The operand's certificates could not be generated.
    #[error("generating the operand's webhook certificates: {0}")]
    Certificates(String),
}

impl From<ApiError> for ApplyError {
    fn from(e: ApiError) -> Self {
        ApplyError::Api(vec![e])
    }
}

/// The operand's webhook certificates for this apply: Secrets to (re)write and the CA bundle to inject.
struct OperandCertificates {
    secrets: Vec<Value>,
    ca_bundle: Option<Vec<u8>>,
}

fn secret_object(name: &str, data: BTreeMap<String, Vec<u8>>) -> Value {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let data: serde_json::Map<String, Value> = data.into_iter().map(|(k, v)| (k, json!(b64.encode(v)))).collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "data": data})
}

impl Cluster<'_> {
    /// Delete outdated objects, prepare and server-side apply the module resources.
    pub async fn apply_module(
        &self,
        cr: &btp_api::BtpOperator,
        module: &ModuleResources,
        credentials: &Credentials,
        policies_enabled: bool,
    ) -> Result<(), ApplyError> {
        self.delete_outdated(module).await?;
        let certs = self.operand_certificates(cr).await?;
        let policies = match network_policies::plan(&self.ctx.network_policies(), policies_enabled) {
            network_policies::Plan::Apply(policies) => policies,
            network_policies::Plan::Remove => {
                self.remove_network_policies().await?;
                Vec::new()
            }
        };
        // The policy the original installed under an older name (its migration).
        let legacy: Api<NetworkPolicy> = Api::namespaced(self.client(), &self.config.chart_namespace);
        self.delete_ignoring_not_found(&legacy, network_policies::LEGACY_POLICY, "the legacy network policy")
            .await?;
        let inputs = resources::Inputs {
            chart_namespace: &self.config.chart_namespace,
            deployment_name: &self.config.deployment_name,
            credentials,
            enable_limited_cache: &self.config.enable_limited_cache,
            image: &self.ctx.image,
            rbac_proxy_image: self.ctx.rbac_proxy_image.as_deref(),
            ca_bundle: certs.ca_bundle.as_deref(),
            extra: &policies,
            unversioned: &certs.secrets,
        };
        let objects = resources::prepare(module, &inputs)?;
        let params = PatchParams::apply(names::FIELD_MANAGER).force();
        for obj in &objects {
            let (api, name) = self.dynamic_api(obj);
            // Compare first: an apply that would change nothing is not sent (see `already_applied`).
            let live = retrying(|| api.get_opt(&name)).await.map_err(api_err(format!(
                "reading {} {name}",
                obj["kind"].as_str().unwrap_or("")
            )))?;
            let unchanged = live
                .and_then(|l| serde_json::to_value(l).ok())
                .is_some_and(|l| resources::already_applied(&l, obj));
            if unchanged {
                continue;
            }
            let patch = Patch::Apply(obj);
            retrying(|| api.patch(&name, &params, &patch))
                .await
                .map_err(api_err(format!(
                    "applying {} {name}",
                    obj["kind"].as_str().unwrap_or("")
                )))?;
        }
        Ok(())
    }

    /// Objects the chart no longer has (`delete/`); NotFound is success, other failures are collected.
    async fn delete_outdated(&self, module: &ModuleResources) -> Result<(), ApplyError> {
        let mut errors = Vec::new();
        for obj in &module.delete {
            let (api, name) = self.dynamic_api(obj);
            let kind = obj["kind"].as_str().unwrap_or("");
            let params = DeleteParams::default();
            let deleted = retrying(|| api.delete(&name, &params))
                .await
                .map_err(api_err(format!("deleting outdated {kind} {name}")));
            if let Err(e) = ignoring_not_found(deleted) {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ApplyError::Api(errors))
        }
    }

    /// Delete the network policies we installed (both managed labels; unlabelled policies are left alone).
    pub async fn remove_network_policies(&self) -> Result<(), ApiError> {
        let api: Api<NetworkPolicy> = Api::namespaced(self.client(), &self.config.chart_namespace);
        let params = kube::api::ListParams::default().labels(&network_policies::managed_selector());
        let delete_params = DeleteParams::default();
        retrying(|| api.delete_collection(&delete_params, &params))
            .await
            .map(|_| ())
            .map_err(api_err("removing network policies"))
    }

    /// The operand's certificate decision on what is in the cluster now: keep, new leaf, or new CA and leaf.
    async fn operand_certificates(&self, cr: &btp_api::BtpOperator) -> Result<OperandCertificates, ApplyError> {
        use btp_certs::operand;
        let secrets: Api<Secret> = Api::namespaced(self.client(), &self.config.chart_namespace);
        let read = |name: &'static str| {
            let secrets = secrets.clone();
            async move {
                retrying(|| secrets.get_opt(name))
                    .await
                    .map(|s| s.as_ref().map(crate::objects::secret_data))
                    .map_err(api_err(format!("reading Secret {name}")))
            }
        };
        let ca = read(operand::CA_SECRET).await?;
        let webhook = read(operand::WEBHOOK_SECRET).await?;
        let settings = operand::Settings {
            ca_validity: self.config.ca_certificate_expiration,
            webhook_validity: self.config.webhook_certificate_expiration,
            expiration_boundary: self.config.expiration_boundary,
            key: self.config.key_algorithm,
            namespace: self.config.chart_namespace.clone(),
        };
        let now = std::time::SystemTime::now();
        let decision = operand::decide(ca.as_ref(), webhook.as_ref(), now, &settings);
        let regenerated = if matches!(decision, operand::Decision::Keep) {
            None
        } else {
            let (d, c, s) = (decision, ca.clone(), settings.clone());
            // RSA key generation can take seconds: keep it off the async workers.
            tokio::task::spawn_blocking(move || operand::regenerate(&d, c.as_ref(), now, &s))
                .await
                .map_err(|e| ApplyError::Certificates(format!("certificate generation task: {e}")))?
                .map_err(|e| ApplyError::Certificates(e.to_string()))?
        };
        // Only regenerated Secrets are written: re-writing unchanged ones with what this pass read could
        // overwrite a concurrent edit or resurrect a deleted Secret with stale content.
        let mut secrets = Vec::new();
        if let Some(certs) = &regenerated {
            let full = matches!(decision, operand::Decision::Full(_));
            if full {
                secrets.push(secret_object(operand::CA_SECRET, operand::to_ca_secret_data(&certs.ca)));
            }
            secrets.push(secret_object(
                operand::WEBHOOK_SECRET,
                operand::to_webhook_secret_data(&certs.webhook),
            ));
            self.ctx.metrics.cert_regenerated();
            let what = if full {
                "CA and webhook certificate"
            } else {
                "webhook certificate"
            };
            tracing::info!(%decision, "regenerating the operand's {what}");
            self.ctx.certificate_event(cr, what, &decision).await;
        }
        // Their expiry, for alerts: what the Secrets hold once this pass has written them.
        let expiry = self.ctx.metrics.certificates();
        let stored = |data: &Option<BTreeMap<String, Vec<u8>>>, key: &str| {
            data.as_ref().and_then(|d| d.get(key)).cloned().unwrap_or_default()
        };
        let ca_pem = regenerated.as_ref().map_or_else(
            || stored(&ca, operand::keys::CA_CRT),
            |c| c.ca.cert_pem.clone().into_bytes(),
        );
        let leaf_pem = regenerated.as_ref().map_or_else(
            || stored(&webhook, operand::keys::TLS_CRT),
            |c| c.webhook.cert_pem.clone().into_bytes(),
        );
        expiry.observe_pem(Certificate::OperandCa, &ca_pem);
        expiry.observe_pem(Certificate::OperandLeaf, &leaf_pem);
        Ok(OperandCertificates {
            secrets,
            ca_bundle: operand::ca_bundle(ca.as_ref(), regenerated.as_ref()),
        })
    }
}
