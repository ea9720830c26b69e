//! Reading what credentials drift needs and carrying out its actions (the decisions are in
//! `reconciler::drift`). Failed calls map to the reasons the status contract names for them, and the pass is
//! retried with backoff ([`End::Fail`]).

use super::api::Cluster;
use super::retry::retrying;
use crate::reconciler::credentials::Credentials;
use crate::reconciler::drift;
use crate::reconciler::end::{retry, End};
use crate::reconciler::error::api_err;
use crate::reconciler::view::{read_through, ClusterView, ObjectKey};
use btp_api::Reason;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use kube::ResourceExt as _;
use serde_json::json;
use std::collections::BTreeMap;

/// What [`Cluster::observe_drift`] saw, with the operand pod's name for a delete.
pub struct DriftObservation {
    /// The observation the decisions take.
    pub observed: drift::Observed,
    /// The operand pod, if there is one.
    pub pod: Option<String>,
}

impl Cluster<'_> {
    /// The operand Secrets we created (labelled managed-by=btp-manager, in every namespace; metadata only):
    /// from the view (no request), else by a cluster-wide list.
    pub async fn operand_secrets(&self) -> Result<Vec<ObjectMeta>, crate::reconciler::error::ApiError> {
        let (secrets, selector) = (Api::<Secret>::all(self.client()), drift::operand_secrets_selector());
        let list = async {
            let secrets = retrying(|| secrets.list_metadata(&selector)).await?;
            Ok(Some(secrets.items.into_iter().map(|s| s.metadata).collect()))
        };
        let view = self.ctx.view();
        let answered = |v: &ClusterView, found: Option<&Vec<ObjectMeta>>| {
            v.operand_secrets_listed(found.map_or(&[], Vec::as_slice))
        };
        read_through(view.as_deref(), |v| v.operand_secrets(), list, answered)
            .await
            .map(Option::unwrap_or_default)
            .map_err(api_err("listing operand Secrets"))
    }

    /// The namespaces that hold an operand Secret we created ([`Cluster::operand_secrets`]).
    pub async fn operand_secret_namespaces(&self) -> Result<Vec<String>, crate::reconciler::error::ApiError> {
        let secrets = self.operand_secrets().await?;
        Ok(secrets.into_iter().filter_map(|s| s.namespace).collect())
    }

    /// Read what credentials drift needs. The cluster-ID Secret is read in `clusterid_namespace` when given
    /// (after the apply: the namespace the observation before it chose, see `drift::after_apply`), else in
    /// [`drift::operand_namespace`] of what this observation sees.
    pub async fn observe_drift(
        &self,
        credentials: &Credentials,
        required_annotations: &BTreeMap<String, String>,
        clusterid_namespace: Option<&str>,
    ) -> Result<DriftObservation, End> {
        let operand_secret_namespaces = self
            .operand_secret_namespaces()
            .await
            .map_err(retry(Reason::GettingDefaultCredentialsSecretFailed))?;
        let previous_credentials_namespace = required_annotations
            .get(drift::PREVIOUS_CREDENTIALS_NAMESPACE_ANNOTATION)
            .cloned();
        // Where the cluster-ID Secret is depends on what is known by now, not on the other two reads: the
        // three go side by side (a failure is reported in the order below, whichever answered first).
        let namespace = clusterid_namespace.map(str::to_string).unwrap_or_else(|| {
            drift::operand_namespace(
                credentials,
                &drift::Observed {
                    operand_secret_namespaces: operand_secret_namespaces.clone(),
                    previous_credentials_namespace: previous_credentials_namespace.clone(),
                    ..Default::default()
                },
            )
        });
        let configmaps = Api::<ConfigMap>::namespaced(self.client(), &self.config.chart_namespace);
        let secrets = Api::<Secret>::namespaced(self.client(), &namespace);
        let selector = format!("{}={}", drift::OPERAND_POD_LABEL, drift::OPERAND_POD_LABEL_VALUE);
        let (pods, params) = (
            Api::<Pod>::namespaced(self.client(), &self.config.chart_namespace),
            ListParams::default().labels(&selector),
        );
        // Before the apply, from the view where it can answer; after it (`clusterid_namespace` given), from
        // the API server: what the apply and the drift actions just changed.
        let view = self.ctx.view().filter(|_| clusterid_namespace.is_none());
        let view = view.as_deref();
        let chart_namespace = self.config.chart_namespace.as_str();
        let (configmap, clusterid, pods) = futures::join!(
            async {
                let key = ObjectKey::core("ConfigMap", chart_namespace, drift::OPERAND_CONFIGMAP);
                let get = async {
                    let read = retrying(|| configmaps.get_opt(drift::OPERAND_CONFIGMAP)).await;
                    read.map(|cm| cm.and_then(|cm| serde_json::to_value(cm).ok()))
                };
                let read = read_through(
                    view,
                    |v| v.module_object(&key, false),
                    get,
                    |v, live| v.read_again_json(&key, live),
                )
                .await;
                read.map(|cm| cm.and_then(|cm| serde_json::from_value::<ConfigMap>(cm).ok()))
            },
            async {
                let key = ObjectKey::core("Secret", &namespace, drift::CLUSTER_ID_SECRET);
                let get = retrying(|| secrets.get_opt(drift::CLUSTER_ID_SECRET));
                read_through(
                    view,
                    |v| v.clusterid_secret(&namespace),
                    get,
                    |v, live| v.read_again(&key, live.and_then(|s| s.metadata.resource_version.clone())),
                )
                .await
            },
            async {
                let list = async { retrying(|| pods.list(&params)).await.map(|l| Some(l.items)) };
                let answered =
                    |v: &ClusterView, found: Option<&Vec<Pod>>| v.operand_pods_listed(found.map_or(&[], Vec::as_slice));
                read_through(view, |v| v.operand_pods(chart_namespace), list, answered)
                    .await
                    .map(Option::unwrap_or_default)
            },
        );
        let configmap = configmap
            .map_err(api_err(format!("reading ConfigMap {}", drift::OPERAND_CONFIGMAP)))
            .map_err(retry(Reason::GettingSapBtpServiceOperatorConfigMapFailed))?;
        let mut observed = drift::Observed {
            operand_secret_namespaces,
            previous_credentials_namespace,
            configmap_cluster_id: configmap
                .and_then(|c| c.data)
                .and_then(|d| d.get(drift::CLUSTER_ID_CONFIGMAP_KEY).cloned()),
            clusterid_secret_value: None,
            operand_pod_ready: None,
        };
        let clusterid = clusterid
            .map_err(api_err(format!(
                "reading Secret {namespace}/{}",
                drift::CLUSTER_ID_SECRET
            )))
            .map_err(retry(Reason::GettingSapBtpServiceOperatorClusterIdSecretFailed))?;
        observed.clusterid_secret_value = clusterid.map(|s| {
            s.data
                .and_then(|d| {
                    d.get(drift::INITIAL_CLUSTER_ID_KEY)
                        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                })
                .unwrap_or_default()
        });
        let pods = pods
            .map_err(api_err("listing operand pods"))
            .map_err(retry(Reason::ResourceRemovalFailed))?;
        let pod = pods.into_iter().find(|p| {
            drift::is_operand_pod(
                &p.name_any(),
                p.namespace().as_deref().unwrap_or_default(),
                &self.config.chart_namespace,
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

    /// Carry out drift actions. NotFound on a delete is success.
    pub async fn carry_out(
        &self,
        required_annotations: &BTreeMap<String, String>,
        actions: &drift::Actions,
        seen: &DriftObservation,
    ) -> Result<(), End> {
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
            let secrets: Api<Secret> = Api::namespaced(self.client(), &self.config.chart_namespace);
            let patch = json!({"metadata": {"annotations": annotations}});
            let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
            // Its watch delivers this write back: an echo of ours, not a change that may cut a backoff short.
            let key = ObjectKey::core("Secret", &self.config.chart_namespace, &self.config.secret_name);
            let view = self.ctx.view();
            let writing = view.as_deref().map(|view| view.writing(&key));
            let patched = retrying(|| secrets.patch(&self.config.secret_name, &params, &patch)).await;
            if let (Ok(patched), Some(writing)) = (&patched, writing) {
                writing.wrote(&patched.metadata);
            }
            patched
                .map_err(api_err("annotating the required Secret"))
                .map_err(retry(Reason::AnnotatingSecretFailed))?;
        }
        if let Some(ns) = &actions.delete_clusterid_secret_in {
            let api: Api<Secret> = Api::namespaced(self.client(), ns);
            self.delete_ignoring_not_found(
                &api,
                drift::CLUSTER_ID_SECRET,
                &format!("{ns}/{}", drift::CLUSTER_ID_SECRET),
            )
            .await
            .map_err(retry(Reason::DeletionOfOrphanedResourcesFailed))?;
            self.deleted(&ObjectKey::core("Secret", ns, drift::CLUSTER_ID_SECRET));
        }
        if let (true, Some(pod)) = (actions.delete_operand_pod, &seen.pod) {
            let api: Api<Pod> = Api::namespaced(self.client(), &self.config.chart_namespace);
            self.delete_ignoring_not_found(&api, pod, &format!("the operand pod {pod}"))
                .await
                .map_err(retry(Reason::ResourceRemovalFailed))?;
            self.deleted(&ObjectKey::core("Pod", &self.config.chart_namespace, pod));
        }
        if let Some(ns) = &actions.delete_old_operand_secret_in {
            let api: Api<Secret> = Api::namespaced(self.client(), ns);
            self.delete_ignoring_not_found(&api, drift::OPERAND_SECRET, &format!("{ns}/{}", drift::OPERAND_SECRET))
                .await
                .map_err(retry(Reason::ResourceRemovalFailed))?;
            self.deleted(&ObjectKey::core("Secret", ns, drift::OPERAND_SECRET));
        }
        Ok(())
    }
}
