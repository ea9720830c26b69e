//! [`Cluster`], the API as one pass uses it, with the reads and writes of the CR itself (finalizer,
//! annotation), the required Secret and the operand Deployment; the other files of this module add the rest.

use super::retry::retrying;
use crate::config::{Config, Settings};
use crate::reconciler::context::Context;
use crate::reconciler::error::{api_err, ApiError};
use crate::reconciler::resources;
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

    /// Tell the caches that this pass deleted `kind` `namespace`/`name`: until a store shows it gone, it is
    /// read from the API server.
    pub(super) fn deleted(&self, kind: &str, namespace: &str, name: &str) {
        if let Some(caches) = self.ctx.caches() {
            let namespace = (!resources::is_cluster_scoped(kind)).then(|| namespace.to_string());
            caches.saw((kind.to_string(), namespace, name.to_string()), None);
        }
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
        ignoring_not_found(
            retrying(|| api.patch(&name, &params, &patch))
                .await
                .map_err(api_err("removing the operation annotation")),
        )
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
        retrying(|| api.patch(&name, &patch_params, &patch))
            .await
            .map(|_| ())
            .map_err(api_err(action))
    }

    /// The required credentials Secret, if it exists: from the watch on it once it has listed (no request),
    /// else read.
    pub async fn required_secret(&self) -> Result<Option<Secret>, ApiError> {
        if let Some(cached) = self
            .ctx
            .required_secret(&self.config.chart_namespace, &self.config.secret_name)
        {
            return Ok(cached);
        }
        let secrets = Api::<Secret>::namespaced(self.client(), &self.config.chart_namespace);
        retrying(|| secrets.get_opt(&self.config.secret_name))
            .await
            .map_err(api_err(format!(
                "reading Secret {}/{}",
                self.config.chart_namespace, self.config.secret_name
            )))
    }

    /// The operand Deployment, if it exists.
    pub async fn operand_deployment(&self) -> Result<Option<Deployment>, ApiError> {
        let deployments = Api::<Deployment>::namespaced(self.client(), &self.config.chart_namespace);
        retrying(|| deployments.get_opt(&self.config.deployment_name))
            .await
            .map_err(api_err("reading the operand Deployment"))
    }
}
