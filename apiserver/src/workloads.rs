//! A stand-in for the workload controllers and the kubelet: every Deployment gets its Pods, as its
//! ReplicaSet would create them, and they are marked running and Ready, as a kubelet would. A deleted Pod
//! is replaced, a changed pod template rolls the Pods (the old ones are deleted, new ones created), and the
//! Pods of a deleted Deployment are removed (the garbage collector's part). Nothing runs in the Pods: a test
//! that needs what a container does at start plays it by watching the Pods (see `tests/common`).
//!
//! It is a client of the API like any controller, so every request it sends is an ordinary API request.

use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::ResourceExt as _;
use serde_json::json;
use std::collections::BTreeMap;

/// The label a ReplicaSet puts on its Pods: a hash of the pod template.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// Spawns a loop that keeps every Deployment's Pods in step with it (see the module documentation) and
/// every Deployment marked available ([`mark_deployment_available`]). Abort the handle to stop it.
pub fn spawn_workload_controller(client: kube::Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(client))
}

enum Change {
    Deployment(Deployment),
    DeploymentGone(Deployment),
    PodGone(Pod),
}

async fn run(client: kube::Client) {
    let deployments = watcher(Api::<Deployment>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .filter_map(|e| async move {
            match e {
                Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => Some(Change::Deployment(d)),
                Ok(watcher::Event::Delete(d)) => Some(Change::DeploymentGone(d)),
                _ => None,
            }
        });
    let pods = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .filter_map(|e| async move {
            match e {
                Ok(watcher::Event::Delete(p)) => Some(Change::PodGone(p)),
                _ => None,
            }
        });
    let mut changes = std::pin::pin!(futures::stream::select(deployments, pods));
    while let Some(change) = changes.next().await {
        let result = match change {
            Change::Deployment(d) => sync(&client, &d).await,
            Change::DeploymentGone(d) => remove_pods(&client, &d, None).await,
            Change::PodGone(p) => match owner(&p) {
                Some(name) => {
                    let ns = p.namespace().unwrap_or_default();
                    match Api::<Deployment>::namespaced(client.clone(), &ns).get_opt(&name).await {
                        Ok(Some(d)) => sync(&client, &d).await,
                        Ok(None) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
                None => Ok(()),
            },
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "workload stand-in");
        }
    }
}

/// The Deployment that owns `pod`, by name.
fn owner(pod: &Pod) -> Option<String> {
    pod.owner_references()
        .iter()
        .find(|o| o.kind == "Deployment" && o.controller == Some(true))
        .map(|o| o.name.clone())
}

/// A stable hash of the pod template (FNV-1a of its JSON), as the label value a ReplicaSet uses.
pub fn template_hash(d: &Deployment) -> String {
    let template = d
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_string(&s.template).ok())
        .unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in template.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:010x}", h & 0xff_ffff_ffff)
}

fn selector(d: &Deployment) -> Option<String> {
    let labels = d.spec.as_ref()?.selector.match_labels.as_ref()?;
    if labels.is_empty() {
        return None;
    }
    Some(
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// Delete the Pods of `d` whose template hash is not `keep` (all of them when `keep` is `None`).
async fn remove_pods(client: &kube::Client, d: &Deployment, keep: Option<&str>) -> Result<(), kube::Error> {
    let (Some(ns), Some(selector)) = (d.namespace(), selector(d)) else {
        return Ok(());
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let name = d.name_any();
    for p in pods.list(&ListParams::default().labels(&selector)).await?.items {
        if owner(&p).as_deref() != Some(name.as_str()) {
            continue;
        }
        if keep.is_some() && p.labels().get(POD_TEMPLATE_HASH_LABEL).map(String::as_str) == keep {
            continue;
        }
        delete_ignoring_not_found(&pods, &p.name_any()).await?;
    }
    Ok(())
}

async fn delete_ignoring_not_found(pods: &Api<Pod>, name: &str) -> Result<(), kube::Error> {
    match pods.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Bring the Pods of `d` in step with its template and replica count, then mark it available.
async fn sync(client: &kube::Client, d: &Deployment) -> Result<(), kube::Error> {
    let (Some(ns), Some(selector)) = (d.namespace(), selector(d)) else {
        return Ok(());
    };
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let hash = template_hash(d);
    remove_pods(client, d, Some(&hash)).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let name = d.name_any();
    let current: Vec<Pod> = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|p| owner(p).as_deref() == Some(name.as_str()) && p.metadata.deletion_timestamp.is_none())
        .collect();
    let want = usize::try_from(d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)).unwrap_or(0);
    for extra in current.iter().skip(want) {
        delete_ignoring_not_found(&pods, &extra.name_any()).await?;
    }
    for _ in current.len()..want {
        create_pod(&pods, d, &hash).await?;
    }
    // The Deployment's status last, so that whoever waits for it to be available finds its Pods.
    let observed = d.status.as_ref().and_then(|s| s.observed_generation);
    let ready = d.status.as_ref().and_then(|s| s.ready_replicas);
    if observed != d.metadata.generation || ready != d.spec.as_ref().and_then(|s| s.replicas).or(Some(1)) {
        mark_deployment_available(client, &ns, &name).await?;
    }
    Ok(())
}

async fn create_pod(pods: &Api<Pod>, d: &Deployment, hash: &str) -> Result<(), kube::Error> {
    let Some(template) = d.spec.as_ref().map(|s| &s.template) else {
        return Ok(());
    };
    let mut labels: BTreeMap<String, String> = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(POD_TEMPLATE_HASH_LABEL.into(), hash.into());
    let name = format!("{}-{hash}-{}", d.name_any(), crate::util::name_suffix());
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": template.metadata.as_ref().and_then(|m| m.annotations.clone()),
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment", "name": d.name_any(),
                "uid": d.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": template.spec,
    });
    let pod: Pod = serde_json::from_value(pod).map_err(kube::Error::SerdeError)?;
    let created = match pods.create(&PostParams::default(), &pod).await {
        Ok(p) => p,
        // The namespace is going away, or the name was taken: the next event brings another round.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 => return Ok(()),
        Err(e) => return Err(e),
    };
    let now = crate::util::now_rfc3339();
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    let status = json!({"status": {
        "phase": "Running",
        "startTime": now,
        "conditions": [condition("Initialized"), condition("ContainersReady"), condition("Ready"), condition("PodScheduled")],
    }});
    match pods
        .patch_status(&created.name_any(), &PatchParams::default(), &Patch::Merge(&status))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Marks a Deployment as rolled out: `Available=True`, `Progressing=True`, replica counts equal
/// to `spec.replicas` and `observedGeneration = generation` (no pods run in the embedded server).
pub async fn mark_deployment_available(client: &kube::Client, ns: &str, name: &str) -> Result<(), kube::Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = api.get(name).await?;
    patch_available(&api, &d).await
}

/// The status patch of [`mark_deployment_available`], for `d` as it was read or watched: one request, as a
/// real Deployment controller writes it from its informer's cache.
async fn patch_available(api: &Api<Deployment>, d: &Deployment) -> Result<(), kube::Error> {
    let name = d.metadata.name.as_deref().unwrap_or_default();
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let gen = d.metadata.generation.unwrap_or(1);
    let now = crate::util::now_rfc3339();
    let cond = |t: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": "True", "reason": reason, "message": msg,
               "lastUpdateTime": now, "lastTransitionTime": now})
    };
    let status = json!({"status": {
        "observedGeneration": gen, "replicas": replicas, "readyReplicas": replicas,
        "availableReplicas": replicas, "updatedReplicas": replicas,
        "conditions": [
            cond("Available", "MinimumReplicasAvailable", "Deployment has minimum availability."),
            cond("Progressing", "NewReplicaSetAvailable", &format!("ReplicaSet \"{name}\" has successfully progressed.")),
        ]
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// The Deployment stand-in of tests (`testing`): a loop that keeps every Deployment marked available (see
/// [`mark_deployment_available`]), without Pods. Abort the returned handle to stop it.
#[cfg(feature = "testing")]
pub fn spawn_deployment_controller(client: kube::Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<Deployment> = Api::all(client.clone());
        // backoff: after the server shuts down the loop must not spin
        let mut s = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(ev) = s.next().await {
            let objs = match ev {
                Ok(watcher::Event::Apply(d)) | Ok(watcher::Event::InitApply(d)) => vec![d],
                _ => continue,
            };
            for d in objs {
                let observed = d.status.as_ref().and_then(|s| s.observed_generation);
                let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let ready = d.status.as_ref().and_then(|s| s.ready_replicas);
                if observed == d.metadata.generation && ready == Some(want) {
                    continue;
                }
                let Some(ns) = d.metadata.namespace.as_deref() else {
                    continue;
                };
                // From the watched object, without reading it again. A newer generation brings another event.
                let _ = patch_available(&Api::namespaced(client.clone(), ns), &d).await;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_hash_follows_the_template_only() {
        let d = |image: &str, replicas: i32| -> Deployment {
            serde_json::from_value(json!({
                "metadata": {"name": "d", "namespace": "n"},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"a": "b"}},
                         "template": {"metadata": {"labels": {"a": "b"}},
                                      "spec": {"containers": [{"name": "c", "image": image}]}}}
            }))
            .unwrap()
        };
        assert_eq!(template_hash(&d("x", 1)), template_hash(&d("x", 3)));
        assert_ne!(template_hash(&d("x", 1)), template_hash(&d("y", 1)));
        assert_eq!(template_hash(&d("x", 1)).len(), 10);
    }
}
