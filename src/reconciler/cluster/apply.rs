//! Applying the module resources: outdated objects deleted, the operand's certificates decided (and
//! regenerated when needed), network policies planned, what differs server-side applied in waves
//! ([`crate::reconciler::waves`]).

use super::{ignoring_not_found, retrying, Cluster};
use crate::reconciler::credentials::Credentials;
use crate::reconciler::error::{api_err, ApiError};
use crate::reconciler::metrics::Certificate;
use crate::reconciler::network_policies;
use crate::reconciler::resources::{self, ModuleResources};
use crate::reconciler::waves;
use btp_api::names;
use btp_certs::operand;
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
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

/// The operand's webhook certificates for this apply: Secrets to (re)write, the CA bundle to inject, and
/// what was regenerated (for its Event).
struct OperandCertificates {
    secrets: Vec<Value>,
    ca_bundle: Option<Vec<u8>>,
    regenerated: Option<Regenerated>,
}

/// A regeneration, for its Event.
struct Regenerated {
    what: &'static str,
    decision: operand::Decision,
}

fn secret_object(name: &str, data: BTreeMap<String, Vec<u8>>) -> Value {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let data: serde_json::Map<String, Value> = data.into_iter().map(|(k, v)| (k, json!(b64.encode(v)))).collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "data": data})
}

/// What the apply leaves for the readiness check.
pub struct Applied {
    /// The operand Deployment as it is after the apply: the compare-before-apply read when the apply did not
    /// write it, else the apply's answer.
    pub operand_deployment: Option<Deployment>,
}

/// `(kind, namespace, name)`: which object a prepared manifest (or a read) is, as the API addresses it.
type Key = (String, Option<String>, String);

fn key(obj: &Value) -> Key {
    let (_, kind, ns, name) = resources::identity(obj);
    let ns = ns.filter(|_| !resources::is_cluster_scoped(&kind));
    (kind, ns, name)
}

impl Cluster<'_> {
    /// Delete outdated objects, prepare and server-side apply the module resources
    /// (docs/behaviour.md#apply). One round of requests side by side first: the outdated and legacy objects
    /// deleted, and every object to apply read (the compare-before-apply reads, the operand's certificate
    /// Secrets among them). Then only what differs is applied, in dependency-ordered waves
    /// ([`waves`]), each wave's requests side by side; a wave that fails stops the apply.
    pub async fn apply_module(
        &self,
        cr: &btp_api::BtpOperator,
        module: &ModuleResources,
        credentials: &Credentials,
        policies_enabled: bool,
    ) -> Result<Applied, ApplyError> {
        let (policies, remove_policies) = match network_policies::plan(&self.ctx.network_policies(), policies_enabled) {
            network_policies::Plan::Apply(policies) => (policies, false),
            network_policies::Plan::Remove => (Vec::new(), true),
        };
        let mut inputs = resources::Inputs {
            chart_namespace: &self.config.chart_namespace,
            deployment_name: &self.config.deployment_name,
            credentials,
            enable_limited_cache: &self.config.enable_limited_cache,
            image: &self.ctx.image,
            rbac_proxy_image: self.ctx.rbac_proxy_image.as_deref(),
            ca_bundle: None,
            extra: &policies,
            unversioned: &[],
        };
        // What is read: every object to apply (which ones does not depend on the certificates) and the
        // certificate Secrets, by name. An object `delete/` also names is not read: it is deleted in the same
        // round, and applied afresh.
        let mut targets: Vec<Value> = resources::prepare(module, &inputs)?;
        targets.extend([operand::CA_SECRET, operand::WEBHOOK_SECRET].map(|name| {
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": name, "namespace": self.config.chart_namespace}})
        }));
        let deleted: Vec<Key> = module.delete.iter().map(key).collect();
        let mut seen = std::collections::BTreeSet::new();
        targets.retain(|t| seen.insert(key(t)) && !deleted.contains(&key(t)));

        let legacy: Api<NetworkPolicy> = Api::namespaced(self.client(), &self.config.chart_namespace);
        let (outdated, removed, legacy, reads) = futures::join!(
            self.delete_outdated(module),
            async {
                match remove_policies {
                    true => self.remove_network_policies().await,
                    false => Ok(()),
                }
            },
            // The policy the original installed under an older name (its migration).
            self.delete_ignoring_not_found(&legacy, network_policies::LEGACY_POLICY, "the legacy network policy"),
            // Owned items: a closure over borrowed ones would not be general enough for the controller's
            // `Send` future.
            futures::stream::iter(targets.clone())
                .map(|t| async move { self.read(&t).await })
                .buffered(waves::CONCURRENCY)
                .collect::<Vec<_>>(),
        );
        outdated?;
        let mut live: BTreeMap<Key, Option<Value>> = BTreeMap::new();
        for (target, read) in targets.iter().zip(reads) {
            live.insert(key(target), read?);
        }
        removed?;
        legacy?;

        let secret = |name: &str| {
            let found = live.get(&(
                "Secret".to_string(),
                Some(self.config.chart_namespace.clone()),
                name.to_string(),
            ));
            found
                .cloned()
                .flatten()
                .and_then(|v| serde_json::from_value::<Secret>(v).ok())
                .map(|s| crate::objects::secret_data(&s))
        };
        let certs = self
            .operand_certificates(secret(operand::CA_SECRET), secret(operand::WEBHOOK_SECRET))
            .await?;
        inputs.ca_bundle = certs.ca_bundle.as_deref();
        inputs.unversioned = &certs.secrets;
        let objects = resources::prepare(module, &inputs)?;
        // Compare first: an apply that would change nothing is not sent (see `already_applied`).
        let changed: Vec<Value> = objects
            .into_iter()
            .filter(|o| {
                let current = live.get(&key(o)).and_then(Option::as_ref);
                !current.is_some_and(|l| resources::already_applied(l, o))
            })
            .collect();
        let writes = async {
            let mut answers = Vec::new();
            for (_, wave) in waves::in_waves(changed.iter().cloned(), waves::kind_of) {
                let results = futures::stream::iter(wave)
                    .map(|o| async move { self.apply_one(&o).await })
                    .buffered(waves::CONCURRENCY)
                    .collect::<Vec<_>>()
                    .await;
                // The first failure in the wave's order (not the first to answer), so the message is stable.
                for result in results {
                    answers.push(result?);
                }
            }
            Ok::<_, ApiError>(answers)
        };
        let event = async {
            if let Some(regenerated) = &certs.regenerated {
                self.ctx
                    .certificate_event(cr, regenerated.what, &regenerated.decision)
                    .await;
            }
        };
        let ((), written) = futures::join!(event, writes);
        // What the writes answered replaces what was read: the Deployment as the apply left it.
        live.extend(written?);

        let deployment_key = (
            "Deployment".to_string(),
            Some(self.config.chart_namespace.clone()),
            self.config.deployment_name.clone(),
        );
        let operand_deployment = live
            .get(&deployment_key)
            .cloned()
            .flatten()
            .and_then(|v| serde_json::from_value::<Deployment>(v).ok());
        Ok(Applied { operand_deployment })
    }

    /// The object `target` names as it is now (None when absent), as JSON.
    async fn read(&self, target: &Value) -> Result<Option<Value>, ApiError> {
        let (api, name) = self.dynamic_api(target);
        let live = retrying(|| api.get_opt(&name))
            .await
            .map_err(api_err(format!("reading {} {name}", waves::kind_of(target))))?;
        Ok(live.and_then(|l| serde_json::to_value(l).ok()))
    }

    /// Server-side apply of one prepared object; the object as the API server answered (its key with it).
    async fn apply_one(&self, obj: &Value) -> Result<(Key, Option<Value>), ApiError> {
        let (api, name) = self.dynamic_api(obj);
        let params = PatchParams::apply(names::FIELD_MANAGER).force();
        let patch = Patch::Apply(obj);
        retrying(|| api.patch(&name, &params, &patch))
            .await
            .map(|applied| (key(obj), serde_json::to_value(applied).ok()))
            .map_err(api_err(format!("applying {} {name}", waves::kind_of(obj))))
    }

    /// Objects the chart no longer has (`delete/`), side by side; NotFound is success, other failures are
    /// collected in the order of `delete/`.
    async fn delete_outdated(&self, module: &ModuleResources) -> Result<(), ApplyError> {
        let errors: Vec<ApiError> = futures::stream::iter(module.delete.clone())
            .map(|obj| async move {
                let (api, name) = self.dynamic_api(&obj);
                let kind = waves::kind_of(&obj);
                let params = DeleteParams::default();
                let deleted = retrying(|| api.delete(&name, &params))
                    .await
                    .map_err(api_err(format!("deleting outdated {kind} {name}")));
                ignoring_not_found(deleted).err()
            })
            .buffered(waves::CONCURRENCY)
            .filter_map(|e| async move { e })
            .collect()
            .await;
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

    /// The operand's certificate decision on the certificate Secrets' data as read: keep, new leaf, or new
    /// CA and leaf. The Event of a regeneration is left to the caller (it is sent alongside the writes).
    async fn operand_certificates(
        &self,
        ca: Option<BTreeMap<String, Vec<u8>>>,
        webhook: Option<BTreeMap<String, Vec<u8>>>,
    ) -> Result<OperandCertificates, ApplyError> {
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
        let mut event = None;
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
            event = Some(Regenerated { what, decision });
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
            regenerated: event,
        })
    }
}
