//! A stand-in for the SAP BTP service operator where none runs (the embedded API server): it serves the
//! operand's admission webhooks (allowing everything) with the certificate the manager issued in
//! `webhook-server-cert`, at the address the operand's Service resolves to, and removes the operand's
//! finalizer from deleted ServiceInstances and ServiceBindings, as the real operand does once it has
//! cleaned up in SAP BTP.
#![allow(dead_code)]

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::ResourceExt as _;
use std::sync::Arc;

/// The operand's finalizer on ServiceInstances and ServiceBindings.
pub const SERVICES_FINALIZER: &str = "services.cloud.sap.com/sap-btp-finalizer";

pub use btp_manager::reconciler::cluster::services_resource as services;

/// Serve the operand's webhooks on loopback with the leaf in `kyma-system/webhook-server-cert`, and map the
/// operand's webhook Service to it on the embedded server. Call once the manager has provisioned (the Secret
/// exists). The server stops when the returned sender is dropped.
pub async fn serve_webhooks(
    server: &btp_apiserver::RunningApiServer,
    client: &kube::Client,
) -> tokio::sync::oneshot::Sender<()> {
    let (addr, stop) = serve_webhooks_on_loopback(client).await;
    server.set_service_address("kyma-system", "sap-btp-operator-webhook-service", 443, addr);
    stop
}

/// The operand's webhook server (allowing everything) on a loopback port, with the certificate the manager
/// issued, reloaded when the manager regenerates it: its address, and the sender that stops it when dropped.
pub async fn serve_webhooks_on_loopback(
    client: &kube::Client,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let secret = Api::<Secret>::namespaced(client.clone(), "kyma-system")
        .get("webhook-server-cert")
        .await
        .expect("the manager created webhook-server-cert");
    let data = secret.data.expect("webhook-server-cert has data");
    let cert = btp_webhooks::tls::SwappableCert::from_pem(&data["tls.crt"].0, &data["tls.key"].0)
        .expect("webhook-server-cert holds a usable certificate and key");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let router = axum::Router::new().fallback(allow);
    let tls = btp_webhooks::tls::server_config(cert.clone()).expect("TLS config");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // The operand reloads its mounted certificate when the manager regenerates it; so does this one.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kyma-system");
    let reload = cert.clone();
    let reloader = tokio::spawn(async move {
        let config = watcher::Config::default().fields("metadata.name=webhook-server-cert");
        let mut events = std::pin::pin!(watcher::watcher(secrets, config).default_backoff().applied_objects());
        while let Some(secret) = events.next().await {
            if let Some(data) = secret.ok().and_then(|s| s.data) {
                if let (Some(crt), Some(key)) = (data.get("tls.crt"), data.get("tls.key")) {
                    let _ = reload.set_pem(&crt.0, &key.0);
                }
            }
        }
    });
    tokio::spawn(btp_webhooks::server::serve(listener, tls, router, async move {
        let _ = stopped.await;
        reloader.abort();
    }));
    (addr, stop)
}

/// The operand Pod's labels that [`POD_SELECTOR`] selects.
pub fn pod_labels() -> std::collections::BTreeMap<String, String> {
    POD_SELECTOR
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The operand's webhook Service and its container port.
pub const WEBHOOK_SERVICE: &str = "sap-btp-operator-webhook-service";
pub const WEBHOOK_PORT: i32 = 9443;

/// Allow every AdmissionReview (echoing its uid, in the version it came in: the operand's configurations list
/// `v1beta1` first, and the API server refuses an answer in another version).
async fn allow(axum::Json(review): axum::Json<serde_json::Value>) -> axum::Json<serde_json::Value> {
    let uid = review["request"]["uid"].clone();
    axum::Json(serde_json::json!({
        "apiVersion": review["apiVersion"], "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true}
    }))
}

/// Remove the operand's finalizer from every deleted ServiceInstance and ServiceBinding, as they come,
/// `concurrency` at a time. Abort the handle to stop.
pub fn spawn_finalizer_remover(client: kube::Client, concurrency: usize) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let streams = ["ServiceInstance", "ServiceBinding"].map(|kind| {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &services(kind));
            watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .filter_map(move |o| std::future::ready(o.ok().map(|o| (kind, o))))
                .boxed()
        });
        let client = Arc::new(client);
        futures::stream::select_all(streams)
            .for_each_concurrent(concurrency, |(kind, obj)| {
                let client = client.clone();
                async move {
                    if obj.metadata.deletion_timestamp.is_none()
                        || !obj.finalizers().iter().any(|f| f == SERVICES_FINALIZER)
                    {
                        return;
                    }
                    let rest: Vec<&String> = obj.finalizers().iter().filter(|f| *f != SERVICES_FINALIZER).collect();
                    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
                        {"op": "test", "path": "/metadata/finalizers", "value": obj.finalizers()},
                        {"op": "replace", "path": "/metadata/finalizers", "value": rest},
                    ]))
                    .expect("a JSON patch");
                    let api: Api<DynamicObject> =
                        Api::namespaced_with((*client).clone(), &obj.namespace().unwrap_or_default(), &services(kind));
                    // Retried like a controller's requeue: the API may fail now and then.
                    let patch = Patch::<()>::Json(patch);
                    for _ in 0..10 {
                        match api.patch(&obj.name_any(), &PatchParams::default(), &patch).await {
                            Err(kube::Error::Api(s)) if s.code >= 429 => {
                                tokio::time::sleep(std::time::Duration::from_millis(50)).await
                            }
                            _ => break,
                        }
                    }
                }
            })
            .await;
    })
}

/// A ServiceInstance carrying the operand's finalizer.
pub fn service_instance(ns: &str, name: &str) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "services.cloud.sap.com/v1", "kind": "ServiceInstance",
        "metadata": {"name": name, "namespace": ns, "finalizers": [SERVICES_FINALIZER]},
        "spec": {"serviceOfferingName": "xsuaa", "servicePlanName": "application"}
    }))
    .expect("a ServiceInstance")
}

/// A ServiceBinding carrying the operand's finalizer, with an optional `spec.secretName`.
pub fn service_binding(ns: &str, name: &str, secret_name: Option<&str>) -> DynamicObject {
    let mut spec = serde_json::json!({"serviceInstanceName": "si"});
    if let Some(s) = secret_name {
        spec["secretName"] = serde_json::json!(s);
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "services.cloud.sap.com/v1", "kind": "ServiceBinding",
        "metadata": {"name": name, "namespace": ns, "finalizers": [SERVICES_FINALIZER]},
        "spec": spec
    }))
    .expect("a ServiceBinding")
}

/// The label that selects the operand's Pods.
pub const POD_SELECTOR: &str = "app.kubernetes.io/instance=sap-btp-operator";

/// Play what the operand's container does when its Pod starts (no container runs here): it reads its
/// configuration from the ConfigMap `sap-btp-operator-config` of its namespace (`CLUSTER_ID`,
/// `RELEASE_NAMESPACE`, as its `envFrom` does), and creates its cluster-ID Secret `sap-btp-operator-clusterid`
/// (key `INITIAL_CLUSTER_ID`) in the release namespace when there is none. When one exists with another
/// cluster ID, the operand refuses to start: its Pod's `Ready` condition turns `False` (a crash loop).
/// Each Pod starts once (by uid), when it is `Running`. Abort the handle to stop it.
pub fn spawn_operand_starts(client: kube::Client) -> tokio::task::JoinHandle<()> {
    use k8s_openapi::api::core::v1::Pod;
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::all(client.clone());
        let config = watcher::Config::default().labels(POD_SELECTOR);
        let mut events = std::pin::pin!(watcher::watcher(pods, config).default_backoff().applied_objects());
        let mut started = std::collections::HashSet::new();
        while let Some(pod) = events.next().await {
            let Ok(pod) = pod else { continue };
            let (Some(uid), Some(ns)) = (pod.uid(), pod.namespace()) else {
                continue;
            };
            // A container starts once the kubelet (or its stand-in) runs the Pod.
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if !running || pod.metadata.deletion_timestamp.is_some() || !started.insert(uid) {
                continue;
            }
            if let Err(e) = start(&client, &ns, &pod.name_any()).await {
                tracing::debug!(error = %e, "operand stand-in: start");
            }
        }
    })
}

/// What the operand's container does when it starts (see [`spawn_operand_starts`]), for any Pod: whether its
/// container comes up (false: the operand refuses to start, its cluster-ID Secret names another cluster). A
/// Pod that is not the operand's comes up.
pub async fn start_container(
    client: &kube::Client,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> Result<bool, kube::Error> {
    let operand = pod_labels().iter().all(|(k, v)| pod.labels().get(k) == Some(v));
    match pod.namespace() {
        Some(ns) if operand => record_cluster_id(client, &ns).await,
        _ => Ok(true),
    }
}

async fn start(client: &kube::Client, ns: &str, pod: &str) -> Result<(), kube::Error> {
    use k8s_openapi::api::core::v1::Pod;
    if record_cluster_id(client, ns).await? {
        return Ok(());
    }
    let status = serde_json::json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
        {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
    ]}});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map(|_| ())
}

/// The operand's start in namespace `ns`: its cluster-ID Secret created where there is none; whether it
/// starts (false: the recorded cluster ID is another one).
async fn record_cluster_id(client: &kube::Client, ns: &str) -> Result<bool, kube::Error> {
    use base64::Engine as _;
    use k8s_openapi::api::core::v1::ConfigMap;
    let config = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(btp_api::names::operand::CONFIGMAP)
        .await?
        .and_then(|c| c.data)
        .unwrap_or_default();
    let cluster_id = config.get("CLUSTER_ID").cloned().unwrap_or_default();
    let release_ns = config
        .get("RELEASE_NAMESPACE")
        .cloned()
        .unwrap_or_else(|| ns.to_string());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &release_ns);
    let name = btp_api::names::operand::CLUSTER_ID_SECRET;
    let existing = secrets.get_opt(name).await?;
    let recorded = existing
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get("INITIAL_CLUSTER_ID"))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned());
    match recorded {
        None if existing.is_none() => {
            let secret = serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": release_ns},
                "data": {"INITIAL_CLUSTER_ID": base64::engine::general_purpose::STANDARD.encode(&cluster_id)},
            });
            let secret: Secret = serde_json::from_value(secret).map_err(kube::Error::SerdeError)?;
            match secrets.create(&Default::default(), &secret).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(true),
                Err(e) => Err(e),
            }
        }
        Some(recorded) if !recorded.is_empty() && recorded != cluster_id => Ok(false),
        _ => Ok(true),
    }
}
