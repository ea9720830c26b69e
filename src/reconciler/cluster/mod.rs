//! Every API read and write of the reconciler. The flows (`provision`, `deprovision`) decide; this module
//! does. Failures carry what was attempted ([`ApiError`]); the flows decide which reason reports them.

mod apply;
mod drift;
mod removal;
mod services;

pub use apply::{Applied, ApplyError, ModuleReads};
pub use drift::{operand_secrets_selector, DriftObservation};
pub use services::{services_resource, Counts, SERVICE_BINDING, SERVICE_INSTANCE};

use super::context::Context;
use super::error::{api_err, ApiError};
use super::resources;
use crate::config::{Config, Settings};
use btp_api::{names, BtpOperator};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::ResourceExt as _;
use serde_json::{json, Value};
use std::time::Duration;

/// The API, as the reconciler uses it, for one pass with one snapshot of the settings.
pub struct Cluster<'a> {
    ctx: &'a Context,
    settings: &'a Settings,
    config: &'a Config,
}

/// An `ApiResource` for `apiVersion` and `kind`.
pub fn api_resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// Whether a failure is worth retrying at once: the server was busy or failed internally, or the
/// connection broke. Conflicts, refusals and invalid requests are not.
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// How long one API call of a pass may take, its retries and their pauses included
/// (docs/behaviour.md#retries-and-budgets). The manager's client does not retry by itself ([`client_config`]):
/// this is the one retry layer.
pub const CALL_BUDGET: Duration = Duration::from_secs(10);
/// How many times a transient failure is retried within one call.
pub const CALL_RETRIES: u32 = 3;
/// The first pause before a retry (then doubling: 50, 100, 200 ms).
pub const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The manager's client configuration: `config` without kube's own retry layer (which would retry a 429,
/// 503 or 504 up to 15 times, waiting out any `Retry-After`: minutes for one call). [`retrying`] is the
/// one retry layer, with one budget per call.
pub fn client_config(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

/// The pause before the next try of a call whose `attempt`th retry (0 for the first) is due, after a
/// transient failure that asked to wait `retry_after` (a `Retry-After`), with `remaining` of the call's
/// budget left; None to give up now (retries used up, or the wait would outlast the budget: the pass then
/// fails and is retried with its own backoff).
pub fn retry_pause(attempt: u32, retry_after: Option<Duration>, remaining: Duration) -> Option<Duration> {
    if attempt >= CALL_RETRIES {
        return None;
    }
    let pause = FIRST_RETRY_PAUSE.saturating_mul(1 << attempt.min(16));
    let pause = retry_after.map_or(pause, |wait| wait.max(pause));
    (pause < remaining).then_some(pause)
}

/// The wait a failure asks for (`retryAfterSeconds` in the API server's Status, as it sends with a 429).
fn retry_after(e: &kube::Error) -> Option<Duration> {
    match e {
        kube::Error::Api(s) => s
            .details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(u64::from(s))),
        _ => None,
    }
}

/// A call that ran out of [`CALL_BUDGET`].
#[derive(Debug, thiserror::Error)]
#[error("no answer within the call's budget of {0:?}")]
pub struct OutOfTime(pub Duration);

/// Run an API call within [`CALL_BUDGET`], retrying transient failures ([`is_transient`]) as
/// [`retry_pause`] decides: a pass that removes dozens of objects must not fail, and start over, for one
/// blip, and no call may hang a pass (an attempt that does not answer within the budget is abandoned).
pub async fn retrying<T, F, Fut>(call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    retrying_within(CALL_BUDGET, call).await
}

/// [`retrying`] with another budget.
pub async fn retrying_within<T, F, Fut>(budget: Duration, mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = tokio::time::Instant::now() + budget;
    let mut attempt = 0;
    loop {
        let result = match tokio::time::timeout_at(deadline, call()).await {
            Ok(result) => result,
            Err(_) => return Err(kube::Error::Service(Box::new(OutOfTime(budget)))),
        };
        match result {
            Err(e) if is_transient(&e) => {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                match retry_pause(attempt, retry_after(&e), remaining) {
                    Some(pause) => {
                        attempt += 1;
                        tokio::time::sleep(pause).await;
                    }
                    None => return Err(e),
                }
            }
            result => return result,
        }
    }
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
    /// The API for this pass, with its `settings`.
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

    fn client(&self) -> kube::Client {
        self.ctx.client.clone()
    }

    /// A namespaced or cluster-scoped dynamic API for `obj` (by its kind), and its name.
    fn dynamic_api(&self, obj: &Value) -> (Api<DynamicObject>, String) {
        let (api_version, kind, ns, name) = resources::identity(obj);
        let ar = api_resource(&api_version, &kind);
        let api = match ns {
            Some(ns) if !resources::is_cluster_scoped(&kind) => Api::namespaced_with(self.client(), &ns, &ar),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_pause_50_100_200_ms_then_give_up() {
        let plenty = CALL_BUDGET;
        assert_eq!(retry_pause(0, None, plenty), Some(Duration::from_millis(50)));
        assert_eq!(retry_pause(1, None, plenty), Some(Duration::from_millis(100)));
        assert_eq!(retry_pause(2, None, plenty), Some(Duration::from_millis(200)));
        assert_eq!(retry_pause(3, None, plenty), None);
        assert_eq!(retry_pause(u32::MAX, None, plenty), None);
    }

    #[test]
    fn retry_after_is_honoured_only_within_the_budget() {
        let s = Duration::from_secs;
        assert_eq!(retry_pause(0, Some(s(1)), s(10)), Some(s(1)));
        assert_eq!(
            retry_pause(0, Some(s(30)), s(10)),
            None,
            "waiting 30 s would outlast the call"
        );
        assert_eq!(retry_pause(0, Some(s(30)), s(60)), Some(s(30)));
        assert_eq!(
            retry_pause(0, None, Duration::from_millis(40)),
            None,
            "not even the first pause fits"
        );
        assert_eq!(
            retry_pause(2, Some(Duration::from_millis(10)), s(10)),
            Some(Duration::from_millis(200)),
            "a shorter Retry-After does not shorten our pause"
        );
    }

    #[test]
    fn the_manager_client_does_not_retry_by_itself() {
        let config = client_config(kube::Config::new(http::Uri::from_static("https://127.0.0.1")));
        assert!(!config.default_retry);
    }
}
