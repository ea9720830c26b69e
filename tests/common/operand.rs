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
/// operand's webhook Service to it. Call once the manager has provisioned (the Secret exists). The server
/// stops when the returned sender is dropped.
pub async fn serve_webhooks(
    server: &btp_apiserver::RunningApiServer,
    client: &kube::Client,
) -> tokio::sync::oneshot::Sender<()> {
    let secret = Api::<Secret>::namespaced(client.clone(), "kyma-system")
        .get("webhook-server-cert")
        .await
        .expect("the manager created webhook-server-cert");
    let data = secret.data.expect("webhook-server-cert has data");
    let cert = btp_webhooks::tls::SwappableCert::from_pem(&data["tls.crt"].0, &data["tls.key"].0)
        .expect("webhook-server-cert holds a usable certificate and key");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    server.set_service_address("kyma-system", "sap-btp-operator-webhook-service", 443, addr);
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
    stop
}

/// Allow every AdmissionReview (echoing its uid).
async fn allow(axum::Json(review): axum::Json<serde_json::Value>) -> axum::Json<serde_json::Value> {
    let uid = review["request"]["uid"].clone();
    axum::Json(serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
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
