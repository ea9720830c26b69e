//! Applying the module resources: what the apply may write read first (alongside the drift observation),
//! outdated objects deleted, the operand's certificates decided (and regenerated when needed), network
//! policies planned, what differs server-side applied in dependency order ([`crate::reconciler::waves`]).

use super::api::{ignoring_not_found, Cluster};
use super::retry::retrying;
use crate::reconciler::credentials::Credentials;
use crate::reconciler::error::{api_err, ApiError};
use crate::reconciler::kinds::{Kinds, KindsError};
use crate::reconciler::metrics::Certificate;
use crate::reconciler::network_policies;
use crate::reconciler::resources::{self, ModuleResources};
use crate::reconciler::view::{read_through, ObjectKey};
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
    /// A kind of the manifests could not be resolved (unknown, or discovery failed).
    #[error(transparent)]
    Kinds(#[from] KindsError),
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

/// Which object a prepared manifest (or a read) is, as the API addresses it.
fn key(obj: &Value, kinds: &Kinds) -> ObjectKey {
    let (api_version, kind, ns, name) = resources::identity(obj);
    let ns = ns.filter(|_| !kinds.cluster_scoped(&api_version, &kind));
    ObjectKey::new(&api_version, &kind, ns.as_deref(), &name)
}

/// What the apply found before writing: every object it may write, as the API server had it (None when
/// absent). Read alongside the credentials drift observation ([`Cluster::read_module`]), so that a pass
/// spends no round trip of its own on them.
pub struct ModuleReads {
    live: BTreeMap<ObjectKey, Option<Value>>,
    /// The outdated objects (`delete/`) that exist: to delete.
    outdated: Vec<Value>,
    /// Whether the legacy network policy exists: to delete.
    legacy_policy: bool,
}

impl ModuleReads {
    /// Whether the reads include `key`.
    pub fn includes(&self, key: &ObjectKey) -> bool {
        self.live.contains_key(key)
    }
}

impl Cluster<'_> {
    /// The network policies to apply, rendered for this cluster's API server ports (and whether to remove
    /// ours instead) for a CR with `policies_enabled`.
    async fn policy_plan(&self, policies_enabled: bool) -> Result<(Vec<Value>, bool), ApplyError> {
        Ok(
            match network_policies::plan(&self.settings.network_policies, policies_enabled) {
                network_policies::Plan::Apply(policies) => (
                    network_policies::render(&policies, &self.api_server_ports().await?),
                    false,
                ),
                network_policies::Plan::Remove => (Vec::new(), true),
            },
        )
    }

    /// Read every object the apply may write, side by side (the compare-before-apply reads, the operand's
    /// certificate Secrets among them). Which objects does not depend on the certificates; an object
    /// `delete/` also names is not read: it is deleted, and applied afresh.
    pub async fn read_module(
        &self,
        module: &ModuleResources,
        credentials: &Credentials,
        policies_enabled: bool,
    ) -> Result<ModuleReads, ApplyError> {
        let (policies, _) = self.policy_plan(policies_enabled).await?;
        let kinds = self.resolve_kinds(module, &policies, false).await?;
        let inputs = self.inputs(credentials, &policies, &kinds);
        let mut targets: Vec<Value> = resources::prepare(module, &inputs)?;
        targets.extend([operand::CA_SECRET, operand::WEBHOOK_SECRET].map(|name| {
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": name, "namespace": self.config.chart_namespace}})
        }));
        let deleted: Vec<ObjectKey> = module.delete.iter().map(|o| key(o, &kinds)).collect();
        let mut seen = std::collections::BTreeSet::new();
        targets.retain(|t| seen.insert(key(t, &kinds)) && !deleted.contains(&key(t, &kinds)));
        // And what is to be deleted, so that only what exists is: the outdated objects and the policy the
        // original installed under an older name (its migration). A steady state sends no delete.
        let legacy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                            "metadata": {"name": network_policies::LEGACY_POLICY,
                                         "namespace": self.config.chart_namespace}});
        let outdated = module.delete.clone();
        // What a read needs of each: its identity (a copy of the whole objects, the CRDs among them, cost more
        // than the reads from the caches).
        let everything: Vec<Value> = targets
            .iter()
            .chain(&outdated)
            .chain([&legacy])
            .map(|o| {
                json!({"apiVersion": o["apiVersion"], "kind": o["kind"],
                       "metadata": {"name": o["metadata"]["name"], "namespace": o["metadata"]["namespace"]}})
            })
            .collect();
        // Owned items: a closure over borrowed ones would not be general enough for the controller's `Send`
        // future.
        let certain = targets.len();
        let mut reads = futures::stream::iter(everything.into_iter().enumerate())
            // The outdated objects and the legacy policy are deleted only when they exist: their absence
            // must hold for objects without our label too.
            .map(|(i, t)| async move { self.read(&t, i >= certain).await })
            .buffered(waves::CONCURRENCY)
            .collect::<Vec<_>>()
            .await
            .into_iter();
        let mut live = BTreeMap::new();
        for (target, read) in targets.iter().zip(reads.by_ref()) {
            live.insert(key(target, &kinds), read?);
        }
        let mut present = Vec::new();
        for (obj, read) in outdated.into_iter().zip(reads.by_ref()) {
            if read?.is_some() {
                present.push(obj);
            }
        }
        let legacy_policy = reads.next().transpose()?.flatten().is_some();
        Ok(ModuleReads {
            live,
            outdated: present,
            legacy_policy,
        })
    }

    fn inputs<'i>(
        &'i self,
        credentials: &'i Credentials,
        policies: &'i [Value],
        kinds: &'i Kinds,
    ) -> resources::Inputs<'i> {
        resources::Inputs {
            chart_namespace: &self.config.chart_namespace,
            deployment_name: &self.config.deployment_name,
            credentials,
            enable_limited_cache: &self.config.enable_limited_cache,
            image: &self.ctx.image,
            rbac_proxy_image: self.ctx.rbac_proxy_image.as_deref(),
            ca_bundle: None,
            extra: policies,
            unversioned: &[],
            kinds: Some(kinds),
        }
    }

    /// Delete outdated objects, prepare and server-side apply the module resources
    /// (docs/behaviour.md#apply), from what [`Cluster::read_module`] read (`reads`; read here when None).
    /// Only what differs from what was read is applied, in the order of [`waves`]; the outdated and legacy
    /// objects found are deleted alongside (before, when one of them is applied afresh).
    pub async fn apply_module(
        &self,
        cr: &btp_api::BtpOperator,
        module: &ModuleResources,
        credentials: &Credentials,
        policies_enabled: bool,
        reads: Option<ModuleReads>,
    ) -> Result<Applied, ApplyError> {
        let (policies, remove_policies) = self.policy_plan(policies_enabled).await?;
        let reads = match reads {
            Some(reads) => reads,
            None => self.read_module(module, credentials, policies_enabled).await?,
        };
        let ModuleReads {
            mut live,
            outdated,
            legacy_policy,
        } = reads;
        let legacy: Api<NetworkPolicy> = Api::namespaced(self.client(), &self.config.chart_namespace);
        let kinds = self.resolve_kinds(module, &policies, false).await?;
        let recreated: Vec<ObjectKey> = outdated.iter().map(|o| key(o, &kinds)).collect();
        let mut deletes = Some(async {
            let (outdated, removed, legacy) = futures::join!(
                self.delete_outdated(&outdated),
                async {
                    match remove_policies {
                        true => self.remove_network_policies().await,
                        false => Ok(()),
                    }
                },
                async {
                    match legacy_policy {
                        true => {
                            let deleted = self
                                .delete_ignoring_not_found(
                                    &legacy,
                                    network_policies::LEGACY_POLICY,
                                    "the legacy network policy",
                                )
                                .await;
                            if deleted.is_ok() {
                                let ns = Some(self.config.chart_namespace.as_str());
                                let policy = network_policies::LEGACY_POLICY;
                                self.deleted(&ObjectKey::new("networking.k8s.io/v1", "NetworkPolicy", ns, policy));
                            }
                            deleted
                        }
                        false => Ok(()),
                    }
                },
            );
            outdated?;
            removed?;
            legacy?;
            Ok::<(), ApplyError>(())
        });

        let secret = |name: &str| {
            let found = live.get(&ObjectKey::core("Secret", &self.config.chart_namespace, name));
            found
                .cloned()
                .flatten()
                .and_then(|v| serde_json::from_value::<Secret>(v).ok())
                .map(|s| crate::objects::secret_data(&s))
        };
        let certs = self
            .operand_certificates(secret(operand::CA_SECRET), secret(operand::WEBHOOK_SECRET))
            .await?;
        let mut inputs = self.inputs(credentials, &policies, &kinds);
        inputs.ca_bundle = certs.ca_bundle.as_deref();
        inputs.unversioned = &certs.secrets;
        let objects = resources::prepare(module, &inputs)?;
        // Compare first: an apply that would change nothing is not sent (see `already_applied`).
        let changed: Vec<Value> = objects
            .into_iter()
            .filter(|o| {
                let current = live.get(&key(o, &kinds)).and_then(Option::as_ref);
                !current.is_some_and(|l| resources::already_applied(l, o))
            })
            .collect();
        // An object deleted to be applied afresh is written only once its deletion is done.
        if changed.iter().any(|o| recreated.contains(&key(o, &kinds))) {
            if let Some(deletes) = deletes.take() {
                deletes.await?;
            }
        }
        if let Some(regenerated) = &certs.regenerated {
            self.ctx.certificate_event(cr, regenerated.what, &regenerated.decision);
        }
        let (deleted, written) = futures::join!(
            async {
                match deletes {
                    Some(deletes) => deletes.await,
                    None => Ok(()),
                }
            },
            self.write_in_order(&changed)
        );
        // The deletes' failures first (they were sent first in the order of the pass).
        deleted?;
        // What the writes answered replaces what was read: the Deployment as the apply left it.
        live.extend(written?);

        let deployment_key = ObjectKey::new(
            "apps/v1",
            "Deployment",
            Some(&self.config.chart_namespace),
            &self.config.deployment_name,
        );
        let operand_deployment = live
            .get(&deployment_key)
            .cloned()
            .flatten()
            .and_then(|v| serde_json::from_value::<Deployment>(v).ok());
        Ok(Applied { operand_deployment })
    }

    /// Server-side apply `objects` in the order of [`waves::plan`]: a group of one kind as soon as the
    /// groups it needs are applied, its requests side by side (at most [`waves::CONCURRENCY`] in flight in
    /// all); a group whose needs failed is not sent. A member refused for want of an object of the same apply
    /// ([`waves::refused_for_its_role`]: a binding whose role does not exist yet) is sent once more as soon as
    /// the groups it may wait for ([`waves::Group::retry_after`]) are applied. The answers, or the first
    /// failure in the plan's order.
    async fn write_in_order(&self, objects: &[Value]) -> Result<Vec<(ObjectKey, Option<Value>)>, ApiError> {
        #[derive(Clone, Copy, PartialEq)]
        enum Group {
            Waiting,
            Sent,
            /// Some members were refused for want of what `retry_after` applies: they go again after it.
            Refused,
            Applied,
            Failed,
        }
        let plan = waves::plan(objects, waves::kind_of);
        let limit = tokio::sync::Semaphore::new(waves::CONCURRENCY);
        // Each object's answer once its group is back; None for an object never sent.
        type Answer = Result<(ObjectKey, Option<Value>), ApiError>;
        let mut results: Vec<Option<Answer>> = objects.iter().map(|_| None).collect();
        let mut groups = vec![Group::Waiting; plan.groups.len()];
        // The members of a group in `Refused` to send again.
        let mut again: Vec<Vec<usize>> = vec![Vec::new(); plan.groups.len()];
        let mut sent = futures::stream::FuturesUnordered::new();
        let send = |g: usize, members: Vec<usize>| {
            let limit = &limit;
            async move {
                let answers = futures::future::join_all(members.into_iter().map(|i| async move {
                    // The semaphore is never closed: a permit always comes.
                    let _permit = limit.acquire().await.ok();
                    (i, self.apply_one(&objects[i]).await)
                }))
                .await;
                (g, answers)
            }
        };
        loop {
            // A group needs only groups before it (of a smaller depth): one sweep settles every group.
            let mut ready = Vec::new();
            for (g, group) in plan.groups.iter().enumerate() {
                match groups[g] {
                    Group::Waiting => {
                        if group.after.iter().any(|&a| groups[a] == Group::Failed) {
                            groups[g] = Group::Failed;
                        } else if group.after.iter().all(|&a| groups[a] == Group::Applied) {
                            groups[g] = Group::Sent;
                            ready.push((g, group.members.clone()));
                        }
                    }
                    Group::Refused => {
                        if group.retry_after.iter().any(|&a| groups[a] == Group::Failed) {
                            // What it waited for failed: that failure comes first in the report.
                            groups[g] = Group::Failed;
                        } else if group.retry_after.iter().all(|&a| groups[a] == Group::Applied) {
                            groups[g] = Group::Sent;
                            ready.push((g, std::mem::take(&mut again[g])));
                        }
                    }
                    Group::Sent | Group::Applied | Group::Failed => {}
                }
            }
            // The most urgent first (stable): they are polled, and so sent, in the order pushed.
            ready.sort_by_key(|(g, _)| std::cmp::Reverse(plan.groups[*g].urgency));
            for (g, members) in ready {
                sent.push(send(g, members));
            }
            let Some((g, answers)) = sent.next().await else {
                break;
            };
            let group = &plan.groups[g];
            let refused: Vec<usize> = answers
                .iter()
                .filter(|(i, a)| {
                    a.as_ref().is_err_and(|e| {
                        waves::refused_for_its_role(waves::kind_of(&objects[*i]), e.is_not_found().then_some(404))
                    })
                })
                .map(|(i, _)| *i)
                .collect();
            let failed = answers.iter().filter(|(_, a)| a.is_err()).count();
            // Sent again once at most: a member refused a second time has its answer.
            let first_time = refused.iter().all(|i| results[*i].is_none());
            groups[g] = if failed == 0 {
                Group::Applied
            } else if failed == refused.len() && first_time && !group.retry_after.is_empty() {
                again[g] = refused;
                Group::Refused
            } else {
                Group::Failed
            };
            for (i, answer) in answers {
                results[i] = Some(answer);
            }
        }
        let mut written = Vec::new();
        for &i in &plan.order {
            match results[i].take() {
                Some(Ok(answer)) => written.push(answer),
                Some(Err(e)) => return Err(e),
                None => {}
            }
        }
        Ok(written)
    }

    /// The object `target` names as it is now (None when absent), as JSON.
    /// A 404 is absence, also when it is the resource type that does not exist (an instance of a CRD the
    /// same apply creates: the API server answers `404 page not found`, not a NotFound Status).
    async fn read(&self, target: &Value, certain_absence: bool) -> Result<Option<Value>, ApiError> {
        let key = key(target, &self.ctx.kinds());
        let (api, name) = self.dynamic_api(target);
        let get = async {
            match retrying(|| api.get_opt(&name)).await {
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                read => read
                    .map(|live| live.and_then(|l| serde_json::to_value(l).ok()))
                    .map_err(api_err(format!("reading {} {name}", waves::kind_of(target)))),
            }
        };
        let view = self.ctx.view();
        read_through(
            view.as_deref(),
            |v| v.module_object(&key, certain_absence),
            get,
            |v, live| v.read_again_json(&key, live),
        )
        .await
    }

    /// Server-side apply of one prepared object; the object as the API server answered (its key with it).
    async fn apply_one(&self, obj: &Value) -> Result<(ObjectKey, Option<Value>), ApiError> {
        let (api, name) = self.dynamic_api(obj);
        let params = PatchParams::apply(names::FIELD_MANAGER).force();
        let patch = Patch::Apply(obj);
        let view = self.ctx.view();
        let key = key(obj, &self.ctx.kinds());
        // Its watch may deliver this write before the answer: an echo of ours all the same. Dropped
        // unanswered (a failure, or the pass dropped), it leaves nothing pending.
        let writing = view.as_deref().map(|view| view.writing(&key));
        let applied = retrying(|| api.patch(&name, &params, &patch)).await;
        if let (Ok(applied), Some(writing)) = (&applied, writing) {
            // Read from the API server until the store shows this write.
            writing.wrote(&applied.metadata);
        }
        applied
            .map(|applied| (key, serde_json::to_value(applied).ok()))
            .map_err(api_err(format!("applying {} {name}", waves::kind_of(obj))))
    }

    /// Objects the chart no longer has (`delete/`, those found), side by side; NotFound is success, other
    /// failures are collected in the order of `delete/`.
    async fn delete_outdated(&self, outdated: &[Value]) -> Result<(), ApplyError> {
        let errors: Vec<ApiError> = futures::stream::iter(outdated.to_vec())
            .map(|obj| async move {
                let (api, name) = self.dynamic_api(&obj);
                let kind = waves::kind_of(&obj);
                let params = DeleteParams::default();
                let deleted = retrying(|| api.delete(&name, &params))
                    .await
                    .map_err(api_err(format!("deleting outdated {kind} {name}")));
                let deleted = ignoring_not_found(deleted);
                if deleted.is_ok() {
                    self.deleted(&key(&obj, &self.ctx.kinds()));
                }
                deleted.err()
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
            .map(|_| {
                // Gone, as far as this pass knows: the view must not answer from copies of them.
                if let Some(view) = self.ctx.view() {
                    view.removed("networking.k8s.io/v1", "NetworkPolicy");
                }
            })
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
