//! [`Cluster`], the API as one pass uses it, with the reads and writes of the CR itself (its current copy,
//! finalizer, annotation), the required Secret and the operand Deployment; the other files of this module add
//! the rest.

use super::retry::retrying;
use crate::config::{Config, Settings};
use crate::reconciler::context::Context;
use crate::reconciler::error::{api_err, ApiError};
use crate::reconciler::readiness;
use crate::reconciler::resources;
use crate::reconciler::view::{cr_key, read_through, ClusterView, ObjectKey, Read};
use btp_api::{names, BtpOperator};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::ResourceExt as _;
use serde_json::{json, Value};

/// The API, as the reconciler uses it, for one pass with one configuration.
pub struct Cluster<'a> {
    pub(super) ctx: &'a Context,
    pub(super) settings: &'a Settings,
    pub(super) config: &'a Config,
}

/// An `ApiResource` for `apiVersion` and `kind`.
pub fn api_resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// NotFound is success: the object is gone either way.
pub fn ignoring_not_found<T>(r: Result<T, ApiError>) -> Result<(), ApiError> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

impl<'a> Cluster<'a> {
    /// The API for this pass.
    pub fn new(ctx: &'a Context, settings: &'a Settings) -> Self {
        Self {
            ctx,
            settings,
            config: &settings.config,
        }
    }

    /// The pass's settings.
    pub fn settings(&self) -> &'a Settings {
        self.settings
    }

    /// The pass's configuration.
    pub fn config(&self) -> &'a Config {
        self.config
    }

    pub(super) fn client(&self) -> kube::Client {
        self.ctx.client.clone()
    }

    /// A namespaced or cluster-scoped dynamic API for `obj` (by its kind), and its name.
    pub(super) fn dynamic_api(&self, obj: &Value) -> (Api<DynamicObject>, String) {
        let (api_version, kind, ns, name) = resources::identity(obj);
        // As discovered for this term ([`crate::reconciler::kinds`]), else the built-in table.
        let kinds = self.ctx.kinds();
        let ar = kinds.api_resource(&api_version, &kind);
        let api = match ns {
            Some(ns) if !kinds.cluster_scoped(&api_version, &kind) => Api::namespaced_with(self.client(), &ns, &ar),
            _ => Api::all_with(self.client(), &ar),
        };
        (api, name)
    }

    /// Delete `name` through `api`; NotFound is success.
    pub async fn delete_ignoring_not_found<K>(&self, api: &Api<K>, name: &str, what: &str) -> Result<(), ApiError>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let delete_params = DeleteParams::default();
        ignoring_not_found(
            retrying(|| api.delete(name, &delete_params))
                .await
                .map_err(api_err(format!("deleting {what}"))),
        )
    }

    /// Tell the view that this pass deleted `key`: until a store shows it gone, it is read from the API
    /// server.
    pub(super) fn deleted(&self, key: &ObjectKey) {
        if let Some(view) = self.ctx.view() {
            view.deleted(key);
        }
    }

    /// Tell the view that this pass wrote the CR (`answer`: the API server's answer), so that no later read
    /// of it comes from a store that has not caught up (see [`crate::reconciler::view`]).
    fn wrote_cr(&self, answer: &BtpOperator) {
        if let Some(view) = self.ctx.view() {
            view.wrote_cr(answer);
        }
    }

    /// The CR as new as anything this process wrote of it (docs/behaviour.md#the-read-path): the copy the
    /// controller handed over when the view says it is current, else the view's newer one, else read. None
    /// when it no longer exists.
    pub async fn current_cr(
        &self,
        cr: std::sync::Arc<BtpOperator>,
    ) -> Result<Option<std::sync::Arc<BtpOperator>>, ApiError> {
        let (namespace, name) = (cr.namespace().unwrap_or_default(), cr.name_any());
        let api: Api<BtpOperator> = Api::namespaced(self.client(), &namespace);
        let key = cr_key(&namespace, &name);
        let view = self.ctx.view();
        let get = async {
            retrying(|| api.get_opt(&name))
                .await
                .map(|cr| cr.map(std::sync::Arc::new))
        };
        read_through(
            view.as_deref(),
            |v| v.cr(&namespace, &name),
            get,
            |v, live| v.read_again(&key, live.and_then(|cr| cr.metadata.resource_version.clone())),
        )
        .await
        .map_err(api_err(format!("reading BtpOperator {namespace}/{name}")))
    }

    /// Add our finalizer to the CR unless present. Appending never drops a finalizer someone else adds
    /// concurrently; when the CR has none, the write is guarded by the resourceVersion read.
    pub async fn add_finalizer(&self, cr: &BtpOperator) -> Result<(), ApiError> {
        if cr.finalizers().iter().any(|f| f == names::FINALIZER) {
            return Ok(());
        }
        let patch = if cr.finalizers().is_empty() {
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": cr.resource_version()},
                {"op": "add", "path": "/metadata/finalizers", "value": [names::FINALIZER]},
            ])
        } else {
            json!([{"op": "add", "path": "/metadata/finalizers/-", "value": names::FINALIZER}])
        };
        self.patch_cr(cr, patch, "adding the finalizer").await
    }

    /// Remove our finalizer from the CR, guarded by a `test` of the finalizers read (a finalizer added
    /// concurrently makes the patch fail; the next pass sees it and tries again).
    pub async fn remove_finalizer(&self, cr: &BtpOperator) -> Result<(), ApiError> {
        let finalizers = cr.finalizers();
        let Some(index) = finalizers.iter().position(|f| f == names::FINALIZER) else {
            return Ok(());
        };
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
        ]);
        ignoring_not_found(self.patch_cr(cr, patch, "removing the finalizer").await)
    }

    /// Remove the `operation` annotation (a forced reconcile has run).
    pub async fn remove_operation_annotation(&self, cr: &BtpOperator) -> Result<(), ApiError> {
        let patch = json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: null}}});
        let api: Api<BtpOperator> = Api::namespaced(self.client(), &cr.namespace().unwrap_or_default());
        let (name, params, patch) = (cr.name_any(), PatchParams::default(), Patch::Merge(&patch));
        let patched = retrying(|| api.patch(&name, &params, &patch))
            .await
            .map_err(api_err("removing the operation annotation"));
        if let Ok(patched) = &patched {
            self.wrote_cr(patched);
        }
        ignoring_not_found(patched)
    }

    async fn patch_cr(&self, cr: &BtpOperator, patch: Value, action: &str) -> Result<(), ApiError> {
        let api: Api<BtpOperator> = Api::namespaced(self.client(), &cr.namespace().unwrap_or_default());
        let patch: json_patch::Patch = serde_json::from_value(patch).map_err(|e| ApiError {
            action: action.into(),
            source: kube::Error::SerdeError(e),
        })?;
        let patch = Patch::<()>::Json(patch);
        let patch_params = PatchParams::default();
        let name = cr.name_any();
        let patched = retrying(|| api.patch(&name, &patch_params, &patch))
            .await
            .map_err(api_err(action))?;
        self.wrote_cr(&patched);
        Ok(())
    }

    /// The required credentials Secret, if it exists: from the view (no request), else read.
    pub async fn required_secret(&self) -> Result<Option<Secret>, ApiError> {
        let (namespace, name) = (&self.config.chart_namespace, &self.config.secret_name);
        let secrets = Api::<Secret>::namespaced(self.client(), namespace);
        let key = ObjectKey::core("Secret", namespace, name);
        let view = self.ctx.view();
        read_through(
            view.as_deref(),
            |v| v.credentials_secret(namespace, name),
            retrying(|| secrets.get_opt(name)),
            |v, live| v.read_again(&key, live.and_then(|s| s.metadata.resource_version.clone())),
        )
        .await
        .map_err(api_err(format!("reading Secret {namespace}/{name}")))
    }

    /// The operand Deployment as new as this process knows it without asking: the view's copy once its store
    /// has shown what this process last saw of it (a watch delivers one object's changes in order, so that
    /// copy is as new as `applied` or newer, such as the Deployment controller's status written since), else
    /// `applied` (the Deployment as the pass's apply answered it). No request.
    pub fn operand_deployment_now(&self, applied: Option<Deployment>) -> Option<Deployment> {
        let seen = self
            .ctx
            .view()
            .and_then(|v| seen_deployment(&v, &self.operand_deployment_key()).known());
        readiness::newest(applied, seen)
    }

    /// The operand Deployment, if it exists.
    pub async fn operand_deployment(&self) -> Result<Option<Deployment>, ApiError> {
        let (namespace, name) = (&self.config.chart_namespace, &self.config.deployment_name);
        let deployments = Api::<Deployment>::namespaced(self.client(), namespace);
        let key = self.operand_deployment_key();
        let view = self.ctx.view();
        read_through(
            view.as_deref(),
            |v| seen_deployment(v, &key),
            retrying(|| deployments.get_opt(name)),
            |v, live: Option<&Deployment>| v.read_again(&key, live.and_then(|d| d.metadata.resource_version.clone())),
        )
        .await
        .map_err(api_err("reading the operand Deployment"))
    }

    fn operand_deployment_key(&self) -> ObjectKey {
        ObjectKey::new(
            "apps/v1",
            "Deployment",
            Some(&self.config.chart_namespace),
            &self.config.deployment_name,
        )
    }
}

/// What the view says of the Deployment `key`; a copy that does not decode is not known (the API server
/// answers).
fn seen_deployment(view: &ClusterView, key: &ObjectKey) -> Read<Deployment> {
    view.module_object(key, false)
        .and_then(|d| serde_json::from_value(d).ok())
}
