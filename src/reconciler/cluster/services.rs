//! ServiceInstances and ServiceBindings (the operand's custom resources): counting them, deleting them all
//! (hard delete), and removing them without the operand (soft delete). A missing CRD means there are none.

use super::api::{api_resource, ignoring_not_found, Cluster};
use super::removal::RemovalError;
use super::retry::{retrying, retrying_within};
use crate::reconciler::deprovision_plan::Counts;
use crate::reconciler::error::{api_err, ApiError};
use btp_api::names;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::ResourceExt as _;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

/// Kind of the operand's service instances.
pub const SERVICE_INSTANCE: &str = "ServiceInstance";
/// Kind of the operand's service bindings.
pub const SERVICE_BINDING: &str = "ServiceBinding";

/// Page size for listing them (10,000 objects must not be read in one answer).
const PAGE: u32 = 500;
/// Requests in flight at once when deleting or patching many objects.
const CONCURRENCY: usize = 16;

/// The API resource of a services kind.
pub fn services_resource(kind: &str) -> ApiResource {
    api_resource(&format!("{}/{}", names::SERVICES_GROUP, names::SERVICES_VERSION), kind)
}

/// 404 means the CRD is not installed: there are none.
fn or_none<T>(r: Result<T, ApiError>, none: T) -> Result<T, ApiError> {
    match r {
        Err(e) if e.is_not_found() => Ok(none),
        other => other,
    }
}

impl Cluster<'_> {
    fn services(&self, kind: &str) -> Api<DynamicObject> {
        Api::all_with(self.client(), &services_resource(kind))
    }

    /// Every page of `kind`'s metadata, folded with `f`.
    async fn fold_metadata<T>(
        &self,
        kind: &str,
        mut acc: T,
        f: impl Fn(&mut T, &kube::core::PartialObjectMeta<DynamicObject>),
    ) -> Result<T, ApiError> {
        let api = self.services(kind);
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = retrying(|| api.list_metadata(&params))
                .await
                .map_err(api_err(format!("listing {kind}s")))?;
            page.items.iter().for_each(|o| f(&mut acc, o));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(acc),
            }
        }
    }

    /// How many ServiceInstances and ServiceBindings exist (all namespaces).
    pub async fn count_services(&self) -> Result<Counts, ApiError> {
        let count = |kind: &'static str| async move {
            let n = self.fold_metadata(kind, 0usize, |n, _| *n += 1).await;
            or_none(n, 0)
        };
        Ok(Counts {
            instances: count(SERVICE_INSTANCE).await?,
            bindings: count(SERVICE_BINDING).await?,
        })
    }

    /// Whether any object of `kind` is left (one-item list).
    pub async fn any_service_left(&self, kind: &str) -> Result<bool, ApiError> {
        let api = self.services(kind);
        let params = ListParams::default().limit(1);
        let page = retrying(|| api.list_metadata(&params))
            .await
            .map_err(api_err(format!("listing {kind}s")));
        or_none(page.map(|p| !p.items.is_empty()), false)
    }

    /// Hard delete: a delete-collection of `kind` in every namespace that has one, all within `budget`
    /// (running out of it is tolerated: what was issued stands, the caller checks what is left).
    pub async fn delete_all_services(&self, kind: &str, budget: Duration) -> Result<(), ApiError> {
        let work = async {
            let namespaces = self
                .fold_metadata(kind, BTreeSet::new(), |set, o| {
                    if let Some(ns) = &o.metadata.namespace {
                        set.insert(ns.clone());
                    }
                })
                .await;
            let namespaces = or_none(namespaces, BTreeSet::new())?;
            let ar = services_resource(kind);
            futures::stream::iter(namespaces)
                .map(|ns| {
                    let api: Api<DynamicObject> = Api::namespaced_with(self.client(), &ns, &ar);
                    async move {
                        let params = ListParams::default();
                        let delete_params = DeleteParams::default();
                        // Its own budget: one delete-collection of thousands may take longer than a call's.
                        let deleted = retrying_within(budget, || api.delete_collection(&delete_params, &params))
                            .await
                            .map_err(api_err(format!("deleting {kind}s in namespace {ns}")));
                        ignoring_not_found(deleted)
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<()>>()
                .await
                .map(|_| ())
        };
        match tokio::time::timeout(budget, work).await {
            Ok(result) => result,
            Err(_) => {
                tracing::info!(
                    kind,
                    ?budget,
                    "the delete requests ran out of their budget; checking what is left"
                );
                Ok(())
            }
        }
    }

    /// Soft delete of `kind`: delete each object (unless terminating), strip its finalizers (guarded by a
    /// `test` of the finalizers read), and for a binding delete its Secret (`spec.secretName`, default the
    /// binding's name). Fails when any is left afterwards.
    pub async fn strip_services(&self, kind: &str) -> Result<(), RemovalError> {
        let api = self.services(kind);
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = match retrying(|| api.list(&params))
                .await
                .map_err(api_err(format!("listing {kind}s")))
            {
                Err(e) if e.is_not_found() => return Ok(()),
                other => other?,
            };
            let next = page.metadata.continue_.filter(|c| !c.is_empty());
            futures::stream::iter(page.items)
                .map(|obj| async move { self.strip_one(kind, &obj).await })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<()>>()
                .await?;
            match next {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        let left = or_none(self.fold_metadata(kind, 0usize, |n, _| *n += 1).await, 0)?;
        if left > 0 {
            return Err(RemovalError::Left {
                kind: kind.into(),
                count: left,
            });
        }
        Ok(())
    }

    async fn strip_one(&self, kind: &str, obj: &DynamicObject) -> Result<(), ApiError> {
        let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
        let api: Api<DynamicObject> = Api::namespaced_with(self.client(), &ns, &services_resource(kind));
        if obj.metadata.deletion_timestamp.is_none() {
            let delete_params = DeleteParams::default();
            ignoring_not_found(
                retrying(|| api.delete(&name, &delete_params))
                    .await
                    .map_err(api_err(format!("deleting {kind} {ns}/{name}"))),
            )?;
        }
        if !obj.finalizers().is_empty() {
            let patch: json_patch::Patch = serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": obj.finalizers()},
                {"op": "replace", "path": "/metadata/finalizers", "value": []},
            ]))
            .map_err(|e| ApiError {
                action: format!("removing the finalizers of {kind} {ns}/{name}"),
                source: kube::Error::SerdeError(e),
            })?;
            let patch = Patch::<()>::Json(patch);
            let patch_params = PatchParams::default();
            ignoring_not_found(
                retrying(|| api.patch(&name, &patch_params, &patch))
                    .await
                    .map_err(api_err(format!("removing the finalizers of {kind} {ns}/{name}"))),
            )?;
        }
        if kind == SERVICE_BINDING {
            let secret = obj.data["spec"]["secretName"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or(&name)
                .to_string();
            let secrets: Api<Secret> = Api::namespaced(self.client(), &ns);
            self.delete_ignoring_not_found(&secrets, &secret, &format!("Secret {ns}/{secret} of {kind} {name}"))
                .await?;
        }
        Ok(())
    }
}
