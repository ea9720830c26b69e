//! The reconcile loop for `BtpOperator` (reference §3–§8 with product.md §3 "One pass, event-driven").
//!
//! One reconcile carries the CR as far as it can: validity → finalizer → Processing → Secret → apply →
//! readiness → Ready. It never sleeps: when the operand Deployment is not available yet it returns and
//! the Deployment watch brings it back (a requeue enforces `ReadyTimeout`). Decisions live in the pure
//! submodules ([`credentials`], [`resources`], [`status`]); this module only reads and writes the API.

pub mod credentials;
pub mod drift;
pub mod metrics;
pub mod network_policies;
pub mod resources;
pub mod status;

use crate::config::Config;
use btp_api::{names, BtpOperator, BtpOperatorStatus, Reason, State};
use credentials::{Observed, SecretProblem};
use futures::StreamExt as _;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::{Resource as _, ResourceExt as _};
use resources::ModuleResources;
use serde_json::{json, Value};
use status::Outcome;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// An API failure (status-reported problems are not errors: they end the reconcile with `Ok`).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was attempted.
        action: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> ReconcileError {
    let action = action.into();
    move |source| ReconcileError::Api { action, source }
}

/// Shared state of the controller.
pub struct Context {
    /// API client.
    pub client: kube::Client,
    /// Configuration; the runtime ConfigMap may change it.
    pub config: RwLock<Config>,
    /// The operand's manifests.
    pub resources: RwLock<Arc<ModuleResources>>,
    /// `SAP_BTP_SERVICE_OPERATOR`.
    pub image: String,
    /// `KUBE_RBAC_PROXY`.
    pub rbac_proxy_image: Option<String>,
    /// The operand's network policies (manager-resources/network-policies).
    pub network_policies: Vec<Value>,
    /// Reconcile metrics.
    pub metrics: metrics::ReconcileMetrics,
    recorder: Recorder,
    /// When the CR entered Processing while waiting for the Deployment (for `ReadyTimeout`).
    waiting_since: Mutex<Option<Instant>>,
}

impl Context {
    /// A context; `resources` are loaded by the caller.
    pub fn new(
        client: kube::Client,
        config: Config,
        resources: ModuleResources,
        image: String,
        rbac_proxy_image: Option<String>,
        metrics: metrics::ReconcileMetrics,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "btp-manager".into(),
                instance: None,
            },
        );
        Self {
            client,
            config: RwLock::new(config),
            resources: RwLock::new(Arc::new(resources)),
            image,
            rbac_proxy_image,
            network_policies: Vec::new(),
            metrics,
            recorder,
            waiting_since: Mutex::new(None),
        }
    }

    /// Install these network policies (unless a CR disables them).
    pub fn with_network_policies(mut self, policies: Vec<Value>) -> Self {
        self.network_policies = policies;
        self
    }

    fn config(&self) -> Config {
        match self.config.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn resources(&self) -> Arc<ModuleResources> {
        match self.resources.read() {
            Ok(r) => r.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// An Event on the BtpOperator saying which certificates were regenerated and why (no key material).
    async fn certificate_event(&self, what: &str, decision: &btp_certs::operand::Decision) {
        let reference = BtpOperator::new(names::BTP_OPERATOR_NAME);
        let mut reference = reference.object_ref(&());
        reference.namespace = Some(names::KYMA_SYSTEM.into());
        let event = Event {
            type_: EventType::Normal,
            reason: "CertificatesRegenerated".into(),
            note: Some(format!("regenerated the operand's {what}: {decision}")),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, "publishing an Event");
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        match self.waiting_since.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// When waiting for the operand Deployment began (now, on the first call since the last stop).
    fn start_waiting(&self) -> Instant {
        *self.waiting().get_or_insert_with(Instant::now)
    }

    fn stop_waiting(&self) {
        *self.waiting() = None;
    }
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| jiff::Timestamp::now().to_string())
}

fn is_valid(cr: &BtpOperator) -> bool {
    cr.namespace().as_deref() == Some(names::KYMA_SYSTEM) && cr.name_any() == names::BTP_OPERATOR_NAME
}

/// Writes status and publishes an Event on every state change.
struct StatusWriter<'a> {
    ctx: &'a Context,
    api: Api<BtpOperator>,
    cr: &'a BtpOperator,
    current: Option<BtpOperatorStatus>,
}

impl StatusWriter<'_> {
    async fn set(&mut self, outcome: Outcome) -> Result<(), ReconcileError> {
        let Some(next) = status::next_status(
            self.current.as_ref(),
            &outcome,
            self.cr.meta().generation,
            &now_rfc3339(),
        ) else {
            return Ok(());
        };
        let name = self.cr.name_any();
        self.api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({ "status": next })))
            .await
            .map_err(api_err("writing the BtpOperator status"))?;
        let changed_state = self.current.as_ref().map(|s| s.state) != Some(next.state);
        if changed_state {
            let type_ = match next.state {
                State::Error | State::Warning => EventType::Warning,
                _ => EventType::Normal,
            };
            let event = Event {
                type_,
                reason: outcome.reason.as_str().into(),
                note: Some(format!("{}: {}", next.state.as_str(), outcome.message)),
                action: "Reconcile".into(),
                secondary: None,
            };
            if let Err(e) = self.ctx.recorder.publish(&event, &self.cr.object_ref(&())).await {
                tracing::warn!(error = %e, "publishing an Event");
            }
            tracing::info!(state = next.state.as_str(), reason = %outcome.reason, detail = %outcome.message, "BtpOperator state changed");
        }
        self.current = Some(next);
        Ok(())
    }

    fn state(&self) -> Option<State> {
        status::current_state(self.current.as_ref())
    }
}

/// Reconcile one `BtpOperator`.
pub async fn reconcile(cr: Arc<BtpOperator>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let result = reconcile_inner(&cr, &ctx).await;
    ctx.metrics.observe(&result, started.elapsed());
    result
}

async fn reconcile_inner(cr: &BtpOperator, ctx: &Context) -> Result<Action, ReconcileError> {
    let action = reconcile_pass(cr, ctx).await?;
    // `operation: reconcile` asked for this pass; removing the annotation when the pass is over tells
    // whoever set it that it has run.
    if cr.annotations().get(names::OPERATION_ANNOTATION).map(String::as_str) == Some("reconcile") {
        let crs: Api<BtpOperator> = Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default());
        let patch = json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: null}}});
        crs.patch(&cr.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err("removing the operation annotation"))?;
    }
    Ok(action)
}

async fn reconcile_pass(cr: &BtpOperator, ctx: &Context) -> Result<Action, ReconcileError> {
    let config = ctx.config();
    let annotations = cr.annotations();
    if annotations.get(names::OPERATION_ANNOTATION).map(String::as_str) == Some("ignore") {
        tracing::debug!(name = %cr.name_any(), "operation annotation is ignore: leaving the CR alone");
        return Ok(Action::await_change());
    }
    let namespace = cr.namespace().unwrap_or_default();
    let crs: Api<BtpOperator> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut status = StatusWriter {
        ctx,
        api: crs.clone(),
        cr,
        current: cr.status.clone(),
    };

    if !is_valid(cr) {
        status
            .set(Outcome::new(
                Reason::WrongNamespaceOrName,
                "Your resource must be in the kyma-system namespace. The resource's name must be btpoperator.",
            ))
            .await?;
        return Ok(Action::await_change());
    }
    if cr.meta().deletion_timestamp.is_some() {
        // Deprovisioning is a separate piece of work; until it exists the CR stays in Deleting.
        status
            .set(Outcome::new(Reason::HardDeleting, "BtpOperator is to be deleted"))
            .await?;
        return Ok(Action::await_change());
    }
    if !cr.finalizers().iter().any(|f| f == names::FINALIZER) {
        let mut finalizers = cr.finalizers().to_vec();
        finalizers.push(names::FINALIZER.into());
        let patch = json!({"metadata": {"finalizers": finalizers}});
        crs.patch(&cr.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_err("adding the finalizer"))?;
    }
    let was_ready = status.state() == Some(State::Ready);
    // A new CR is Initialized first. From Warning or Error there is no intermediate write: this pass's
    // outcome replaces the status directly, so a reconcile triggered by our own status write cannot
    // flap between Processing and the same Warning/Error.
    if status.state().is_none() {
        status.set(Outcome::new(Reason::Initialized, "Initialized")).await?;
    }
    let failed = if was_ready {
        Reason::ReconcileFailed
    } else {
        Reason::ProvisioningFailed
    };

    // The required Secret.
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &config.chart_namespace);
    let secret = secrets.get_opt(&config.secret_name).await;
    let secret = match secret {
        Ok(s) => s,
        Err(e) => {
            let message = format!("unable to get Secret: {}", api_error_summary(&e));
            status.set(Outcome::new(Reason::InvalidSecret, message)).await?;
            return Ok(Action::requeue(config.processing_state_requeue_interval));
        }
    };
    let data = secret.as_ref().map(crate::objects::secret_data).unwrap_or_default();
    let observed = match &secret {
        None => Observed::Absent,
        Some(s) if !names::visible_to_manager(s.metadata.labels.as_ref()) => Observed::Unlabelled,
        Some(_) => Observed::Present(&data),
    };
    let credentials = match credentials::validate(observed, &config.secret_name, &config.chart_namespace) {
        Ok(c) => c,
        Err(SecretProblem::Missing { message }) => {
            status.set(Outcome::new(Reason::MissingSecret, message)).await?;
            return Ok(Action::requeue(config.ready_state_requeue_interval));
        }
        Err(SecretProblem::Invalid { message }) => {
            status.set(Outcome::new(Reason::InvalidSecret, message)).await?;
            return Ok(Action::requeue(config.ready_state_requeue_interval));
        }
    };

    // Credentials drift (reference §9): observe, report drift found in Ready, clean up before the apply.
    let required = secret.as_ref().map(|s| s.annotations().clone()).unwrap_or_default();
    let before = match observe_drift(ctx, &config, &credentials, &required).await {
        Ok(o) => o,
        Err(outcome) => {
            status.set(outcome).await?;
            return Ok(Action::requeue(config.processing_state_requeue_interval));
        }
    };
    if was_ready {
        if let Some(outcome) = drift::ready_state_drift(&credentials, &before.observed) {
            status.set(outcome).await?;
        }
    }
    let actions = drift::before_apply(&credentials, &before.observed);
    if let Err(outcome) = carry_out(ctx, &config, &required, &actions, &before).await {
        status.set(outcome).await?;
        return Ok(Action::requeue(config.processing_state_requeue_interval));
    }

    // Apply.
    let module = ctx.resources();
    let policies_enabled = network_policies::enabled(cr.annotations());
    if let Err(message) = apply_module(ctx, &config, &module, &credentials, policies_enabled).await {
        status.set(Outcome::new(failed, message)).await?;
        return Ok(Action::requeue(config.processing_state_requeue_interval));
    }

    // What the drift invalidated (the operand restarts with the new settings); nothing to look at when the
    // credentials namespace and cluster ID did not change.
    if drift::invalidated_by_apply(&credentials, &before.observed) {
        let after = match observe_drift(ctx, &config, &credentials, &required).await {
            Ok(o) => o,
            Err(outcome) => {
                status.set(outcome).await?;
                return Ok(Action::requeue(config.processing_state_requeue_interval));
            }
        };
        let actions = drift::after_apply(&credentials, &before.observed, &after.observed);
        if let Err(outcome) = carry_out(ctx, &config, &required, &actions, &after).await {
            status.set(outcome).await?;
            return Ok(Action::requeue(config.processing_state_requeue_interval));
        }
    }

    // Readiness of the operand Deployment.
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &config.chart_namespace);
    let deployment = deployments
        .get_opt(&config.deployment_name)
        .await
        .map_err(api_err("reading the operand Deployment"))?;
    if deployment.as_ref().is_some_and(deployment_ready) {
        ctx.stop_waiting();
        status
            .set(Outcome::new(
                Reason::ReconcileSucceeded,
                "Module provisioning succeeded",
            ))
            .await?;
        return Ok(Action::requeue(config.ready_state_requeue_interval));
    }
    let since = ctx.start_waiting();
    let waited = since.elapsed();
    if waited >= config.ready_timeout {
        let message = format!(
            "timed out while waiting for resources readiness: timeout waiting for {} Deployment to be ready",
            config.deployment_name
        );
        status.set(Outcome::new(failed, message)).await?;
        return Ok(Action::requeue(config.processing_state_requeue_interval));
    }
    if was_ready || status.state() != Some(State::Processing) {
        let message = format!(
            "waiting for Deployment {}/{} to become available",
            config.chart_namespace, config.deployment_name
        );
        status.set(Outcome::new(Reason::Updated, message)).await?;
    }
    // The Deployment watch brings us back as soon as its conditions change; this requeue enforces the timeout.
    Ok(Action::requeue(
        config.ready_timeout - waited + Duration::from_millis(50),
    ))
}

/// `Available=True` and `Progressing=True`.
pub fn deployment_ready(d: &Deployment) -> bool {
    let conditions = d.status.as_ref().and_then(|s| s.conditions.as_ref());
    let is_true = |t: &str| conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"));
    is_true("Available") && is_true("Progressing")
}

fn api_error_summary(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

fn api_resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn dynamic_api(client: &kube::Client, obj: &Value) -> (Api<DynamicObject>, String) {
    let (api_version, kind, ns, name) = resources::identity(obj);
    let ar = api_resource(&api_version, &kind);
    let api = match ns {
        Some(ns) if !resources::is_cluster_scoped(&kind) => Api::namespaced_with(client.clone(), &ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    };
    (api, name)
}

/// Delete outdated objects, prepare and server-side apply the module resources. Returns a message
/// (never a secret value) on failure.
async fn apply_module(
    ctx: &Context,
    config: &Config,
    module: &ModuleResources,
    credentials: &credentials::Credentials,
    policies_enabled: bool,
) -> Result<(), String> {
    let mut errors = Vec::new();
    for obj in &module.delete {
        let (api, name) = dynamic_api(&ctx.client, obj);
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => errors.push(format!(
                "deleting outdated {} {name}: {}",
                obj["kind"].as_str().unwrap_or(""),
                api_error_summary(&e)
            )),
        }
    }
    if !errors.is_empty() {
        return Err(errors.join(", "));
    }
    let certs = operand_certificates(ctx, config).await?;
    let policies = match network_policies::plan(&ctx.network_policies, policies_enabled) {
        network_policies::Plan::Apply(policies) => policies,
        network_policies::Plan::Remove => {
            remove_network_policies(ctx, config).await?;
            Vec::new()
        }
    };
    // The policy the original installed under an older name (reference §8.5 migration).
    let legacy: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &config.chart_namespace);
    match legacy
        .delete(network_policies::LEGACY_POLICY, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(format!("deleting the legacy network policy: {}", api_error_summary(&e))),
    }
    let inputs = resources::Inputs {
        chart_namespace: &config.chart_namespace,
        deployment_name: &config.deployment_name,
        credentials,
        enable_limited_cache: &config.enable_limited_cache,
        image: &ctx.image,
        rbac_proxy_image: ctx.rbac_proxy_image.as_deref(),
        ca_bundle: certs.ca_bundle.as_deref(),
        extra: &policies,
        unversioned: &certs.secrets,
    };
    let objects = resources::prepare(module, &inputs).map_err(|e| e.to_string())?;
    let params = PatchParams::apply(names::FIELD_MANAGER).force();
    for obj in &objects {
        let (api, name) = dynamic_api(&ctx.client, obj);
        if let Err(e) = api.patch(&name, &params, &Patch::Apply(obj)).await {
            return Err(format!(
                "applying {} {name}: {}",
                obj["kind"].as_str().unwrap_or(""),
                api_error_summary(&e)
            ));
        }
    }
    Ok(())
}

/// What [`observe_drift`] saw, with the operand pod's name for a delete.
struct DriftObservation {
    observed: drift::Observed,
    pod: Option<String>,
}

/// Read what reference §9 needs. Read failures map to the reference's reasons.
async fn observe_drift(
    ctx: &Context,
    config: &Config,
    credentials: &credentials::Credentials,
    required_annotations: &std::collections::BTreeMap<String, String>,
) -> Result<DriftObservation, Outcome> {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    let list = kube::api::ListParams::default()
        .labels(&format!(
            "{}={}",
            names::MANAGED_BY_LABEL,
            names::MANAGED_BY_BTP_MANAGER
        ))
        .fields(&format!("metadata.name={}", drift::OPERAND_SECRET));
    let operand_secrets = Api::<Secret>::all(ctx.client.clone())
        .list_metadata(&list)
        .await
        .map_err(|e| {
            Outcome::new(
                Reason::GettingDefaultCredentialsSecretFailed,
                format!("listing operand Secrets: {}", api_error_summary(&e)),
            )
        })?;
    let configmap = Api::<ConfigMap>::namespaced(ctx.client.clone(), &config.chart_namespace)
        .get_opt(drift::OPERAND_CONFIGMAP)
        .await
        .map_err(|e| {
            Outcome::new(
                Reason::GettingSapBtpServiceOperatorConfigMapFailed,
                format!(
                    "reading ConfigMap {}: {}",
                    drift::OPERAND_CONFIGMAP,
                    api_error_summary(&e)
                ),
            )
        })?;
    let mut observed = drift::Observed {
        operand_secret_namespaces: operand_secrets
            .items
            .iter()
            .filter_map(|s| s.metadata.namespace.clone())
            .collect(),
        previous_credentials_namespace: required_annotations
            .get(drift::PREVIOUS_CREDENTIALS_NAMESPACE_ANNOTATION)
            .cloned(),
        configmap_cluster_id: configmap
            .and_then(|c| c.data)
            .and_then(|d| d.get(drift::CLUSTER_ID_CONFIGMAP_KEY).cloned()),
        clusterid_secret_value: None,
        operand_pod_ready: None,
    };
    let namespace = drift::operand_namespace(credentials, &observed);
    let clusterid = Api::<Secret>::namespaced(ctx.client.clone(), &namespace)
        .get_opt(drift::CLUSTER_ID_SECRET)
        .await
        .map_err(|e| {
            Outcome::new(
                Reason::GettingSapBtpServiceOperatorClusterIdSecretFailed,
                format!(
                    "reading Secret {namespace}/{}: {}",
                    drift::CLUSTER_ID_SECRET,
                    api_error_summary(&e)
                ),
            )
        })?;
    observed.clusterid_secret_value = clusterid.map(|s| {
        s.data
            .and_then(|d| {
                d.get(drift::INITIAL_CLUSTER_ID_KEY)
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            })
            .unwrap_or_default()
    });
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &config.chart_namespace)
        .list(&kube::api::ListParams::default().labels(&format!(
            "{}={}",
            drift::OPERAND_POD_LABEL,
            drift::OPERAND_POD_LABEL_VALUE
        )))
        .await
        .map_err(|e| {
            Outcome::new(
                Reason::ResourceRemovalFailed,
                format!("listing operand pods: {}", api_error_summary(&e)),
            )
        })?;
    let pod = pods.items.into_iter().find(|p| {
        drift::is_operand_pod(
            &p.name_any(),
            p.namespace().as_deref().unwrap_or_default(),
            &config.chart_namespace,
        )
    });
    observed.operand_pod_ready = pod.as_ref().map(|p| {
        let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
        !conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "False"))
    });
    Ok(DriftObservation {
        observed,
        pod: pod.map(|p| p.name_any()),
    })
}

/// Carry out drift [`drift::Actions`]. NotFound on a delete is success.
async fn carry_out(
    ctx: &Context,
    config: &Config,
    required_annotations: &std::collections::BTreeMap<String, String>,
    actions: &drift::Actions,
    seen: &DriftObservation,
) -> Result<(), Outcome> {
    let mut annotations = serde_json::Map::new();
    for (key, value) in [
        (
            drift::PREVIOUS_CREDENTIALS_NAMESPACE_ANNOTATION,
            &actions.annotate_previous_credentials_namespace,
        ),
        (
            drift::PREVIOUS_CLUSTER_ID_ANNOTATION,
            &actions.annotate_previous_cluster_id,
        ),
    ] {
        if let Some(value) = value.as_ref().filter(|v| required_annotations.get(key) != Some(*v)) {
            annotations.insert(key.into(), json!(value));
        }
    }
    if !annotations.is_empty() {
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &config.chart_namespace);
        let patch = json!({"metadata": {"annotations": annotations}});
        secrets
            .patch(&config.secret_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                Outcome::new(
                    Reason::AnnotatingSecretFailed,
                    format!("annotating the required Secret: {}", api_error_summary(&e)),
                )
            })?;
    }
    let gone = |r: Result<_, kube::Error>| match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(api_error_summary(&e)),
    };
    if let Some(ns) = &actions.delete_clusterid_secret_in {
        let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
        gone(
            api.delete(drift::CLUSTER_ID_SECRET, &DeleteParams::default())
                .await
                .map(|_| ()),
        )
        .map_err(|e| {
            Outcome::new(
                Reason::DeletionOfOrphanedResourcesFailed,
                format!("deleting {ns}/{}: {e}", drift::CLUSTER_ID_SECRET),
            )
        })?;
    }
    if let (true, Some(pod)) = (actions.delete_operand_pod, &seen.pod) {
        let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(ctx.client.clone(), &config.chart_namespace);
        gone(api.delete(pod, &DeleteParams::default()).await.map(|_| ())).map_err(|e| {
            Outcome::new(
                Reason::ResourceRemovalFailed,
                format!("deleting the operand pod {pod}: {e}"),
            )
        })?;
    }
    if let Some(ns) = &actions.delete_old_operand_secret_in {
        let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
        gone(
            api.delete(drift::OPERAND_SECRET, &DeleteParams::default())
                .await
                .map(|_| ()),
        )
        .map_err(|e| {
            Outcome::new(
                Reason::ResourceRemovalFailed,
                format!("deleting {ns}/{}: {e}", drift::OPERAND_SECRET),
            )
        })?;
    }
    Ok(())
}

/// Delete the network policies we installed (both managed labels; unlabelled policies are left alone).
async fn remove_network_policies(ctx: &Context, config: &Config) -> Result<(), String> {
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &config.chart_namespace);
    let params = kube::api::ListParams::default().labels(&network_policies::managed_selector());
    api.delete_collection(&DeleteParams::default(), &params)
        .await
        .map(|_| ())
        .map_err(|e| format!("removing network policies: {}", api_error_summary(&e)))
}

/// The operand's webhook certificates for this apply: Secrets to (re)write and the CA bundle to inject.
struct OperandCertificates {
    secrets: Vec<Value>,
    ca_bundle: Option<Vec<u8>>,
}

fn secret_object(name: &str, data: std::collections::BTreeMap<String, Vec<u8>>) -> Value {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let data: serde_json::Map<String, Value> = data.into_iter().map(|(k, v)| (k, json!(b64.encode(v)))).collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "data": data})
}

/// Reference §10.3 on what is in the cluster now: keep, new leaf, or new CA and leaf.
async fn operand_certificates(ctx: &Context, config: &Config) -> Result<OperandCertificates, String> {
    use btp_certs::operand;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &config.chart_namespace);
    let read = |name: &'static str| {
        let secrets = secrets.clone();
        async move {
            secrets
                .get_opt(name)
                .await
                .map(|s| s.as_ref().map(crate::objects::secret_data))
                .map_err(|e| format!("reading Secret {name}: {}", api_error_summary(&e)))
        }
    };
    let ca: Option<std::collections::BTreeMap<String, Vec<u8>>> = read(operand::CA_SECRET).await?;
    let webhook: Option<std::collections::BTreeMap<String, Vec<u8>>> = read(operand::WEBHOOK_SECRET).await?;
    let settings = operand::Settings {
        ca_validity: config.ca_certificate_expiration,
        webhook_validity: config.webhook_certificate_expiration,
        expiration_boundary: config.expiration_boundary,
        key: config.key_algorithm,
        namespace: config.chart_namespace.clone(),
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
            .map_err(|e| format!("certificate generation task: {e}"))?
            .map_err(|e| format!("generating the operand's webhook certificates: {e}"))?
    };
    // Only regenerated Secrets are written: re-writing unchanged ones with what this pass read could
    // overwrite a concurrent edit or resurrect a deleted Secret with stale content.
    let mut out = OperandCertificates {
        secrets: Vec::new(),
        ca_bundle: None,
    };
    if let Some(certs) = &regenerated {
        if matches!(decision, operand::Decision::Full(_)) {
            out.secrets
                .push(secret_object(operand::CA_SECRET, operand::to_ca_secret_data(&certs.ca)));
        }
        out.secrets.push(secret_object(
            operand::WEBHOOK_SECRET,
            operand::to_webhook_secret_data(&certs.webhook),
        ));
    }
    if regenerated.is_some() {
        ctx.metrics.cert_regenerated();
        let what = if matches!(decision, operand::Decision::Full(_)) {
            "CA and webhook certificate"
        } else {
            "webhook certificate"
        };
        tracing::info!(%decision, "regenerating the operand's {what}");
        ctx.certificate_event(what, &decision).await;
    }
    out.ca_bundle = operand::ca_bundle(ca.as_ref(), regenerated.as_ref());
    Ok(out)
}

/// Requeue with backoff on API errors.
pub fn error_policy(_cr: Arc<BtpOperator>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// The key every secondary watch maps to.
fn the_cr() -> ObjectRef<BtpOperator> {
    ObjectRef::new(names::BTP_OPERATOR_NAME).within(names::KYMA_SYSTEM)
}

/// Follow the runtime ConfigMap: on every change, `base` (defaults + flags) with the ConfigMap's keys on
/// top becomes the configuration; when it is deleted, `base` again (product.md: deleting reverts to the
/// defaults). Each change triggers a reconcile.
async fn follow_config(
    ctx: Arc<Context>,
    base: Config,
    trigger: futures::channel::mpsc::UnboundedSender<ObjectRef<BtpOperator>>,
) {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event as W;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &base.chart_namespace);
    let mut events = watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={}", base.config_name)),
    )
    // With backoff: a lost API server must not turn this into a busy loop.
    .default_backoff()
    .boxed();
    while let Some(event) = events.next().await {
        let data = match event {
            Ok(W::Apply(cm)) | Ok(W::InitApply(cm)) => Some(cm.data.unwrap_or_default()),
            Ok(W::Delete(_)) => None,
            Ok(W::Init) | Ok(W::InitDone) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "config ConfigMap watch");
                continue;
            }
        };
        let mut next = base.clone();
        if let Some(data) = &data {
            for problem in next.apply_configmap(data) {
                tracing::warn!(key = %problem.key, reason = %problem.reason, "config ConfigMap value not applied");
            }
        }
        ctx.metrics.custom_config_applied(data.is_some());
        if next.resources_path != ctx.config().resources_path {
            match resources::load(&next.resources_path) {
                Ok(module) => match ctx.resources.write() {
                    Ok(mut r) => *r = Arc::new(module),
                    Err(p) => *p.into_inner() = Arc::new(module),
                },
                Err(e) => tracing::warn!(error = %e, "module resources from the new ResourcesPath not loaded"),
            }
        }
        match ctx.config.write() {
            Ok(mut c) => *c = next,
            Err(p) => *p.into_inner() = next,
        }
        tracing::info!(applied = data.is_some(), "configuration updated");
        let _ = trigger.unbounded_send(the_cr());
    }
}

/// Run the controller until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let config = ctx.config();
    let client = ctx.client.clone();
    let (trigger, triggered) = futures::channel::mpsc::unbounded();
    let config_task = tokio::spawn(follow_config(ctx.clone(), config.clone(), trigger));
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    Controller::new(Api::<BtpOperator>::all(client.clone()), watcher::Config::default())
        .watches(
            Api::<Secret>::namespaced(client.clone(), &config.chart_namespace),
            by_name(&config.secret_name),
            |_| Some(the_cr()),
        )
        .watches(
            Api::<Deployment>::namespaced(client.clone(), &config.chart_namespace),
            by_name(&config.deployment_name),
            |_| Some(the_cr()),
        )
        // Everything we put in the chart namespace (cert Secrets, the operand Secret): edits are reverted.
        .watches(
            Api::<Secret>::namespaced(client.clone(), &config.chart_namespace),
            watcher::Config::default().labels(&format!(
                "{}={}",
                names::MANAGED_BY_LABEL,
                names::MANAGED_BY_BTP_MANAGER
            )),
            |_| Some(the_cr()),
        )
        // Our network policies: edits and deletions are reverted.
        .watches(
            Api::<NetworkPolicy>::namespaced(client.clone(), &config.chart_namespace),
            watcher::Config::default().labels(&network_policies::managed_selector()),
            |_| Some(the_cr()),
        )
        // The operand's webhook configurations: a changed caBundle is put back at once.
        .watches(
            Api::<MutatingWebhookConfiguration>::all(client.clone()),
            by_name(btp_certs::operand::MUTATING_WEBHOOK_CONFIGURATION),
            |_| Some(the_cr()),
        )
        .watches(
            Api::<ValidatingWebhookConfiguration>::all(client.clone()),
            by_name(btp_certs::operand::VALIDATING_WEBHOOK_CONFIGURATION),
            |_| Some(the_cr()),
        )
        .reconcile_on(triggered)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
    config_task.abort();
}
