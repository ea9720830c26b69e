//! Shared harness: the embedded API server with kyma-system and the BtpOperator CRD, and the manager's
//! reconciler running against it with the real module-resources.
#![allow(dead_code)]

use btp_api::{names, BtpOperator, State};
use btp_apiserver::{ApiServer, Config as ServerConfig, RunningApiServer};
use btp_manager::config::Config;
use btp_manager::reconciler::{self, metrics::ReconcileMetrics, resources, Context};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const IMAGE: &str = "example.test/sap-btp-service-operator:v0.11.10";

pub struct Env {
    pub server: RunningApiServer,
    pub client: kube::Client,
    pub ctx: Arc<Context>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Env {
    /// Embedded API server, kyma-system, the CRD, the manager's reconciler; `deployments_become_available`
    /// plays the Deployment controller.
    pub async fn start(config: Config, deployments_become_available: bool) -> Self {
        let server = ApiServer::start(ServerConfig::default()).await.expect("API server");
        let client = server.client().await;
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": names::KYMA_SYSTEM}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &BtpOperator::crd().unwrap())
            .await
            .unwrap();
        if deployments_become_available {
            btp_apiserver::spawn_deployment_controller(client.clone());
        }
        let module = resources::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("module-resources")).unwrap();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = ReconcileMetrics::register(&mut registry);
        let policies = btp_manager::reconciler::network_policies::load(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("manager-resources"),
        )
        .unwrap();
        let ctx = Arc::new(
            Context::new(client.clone(), config, module, IMAGE.into(), None, metrics).with_network_policies(policies),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(reconciler::run(ctx.clone(), async move {
            let _ = stopped.await;
        }));
        Self {
            server,
            client,
            ctx,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn crs(&self, ns: &str) -> Api<BtpOperator> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub async fn create_cr(&self, ns: &str, name: &str) {
        if ns != names::KYMA_SYSTEM {
            let n: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
            let _ = Api::<Namespace>::all(self.client.clone())
                .create(&PostParams::default(), &n)
                .await;
        }
        self.crs(ns)
            .create(&PostParams::default(), &BtpOperator::new(name))
            .await
            .unwrap();
    }

    pub async fn create_secret(&self, data: serde_json::Value, labelled: bool) {
        let labels = if labelled {
            serde_json::json!({"app.kubernetes.io/managed-by": "kcp-kyma-environment-broker"})
        } else {
            serde_json::json!({})
        };
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "sap-btp-manager", "namespace": names::KYMA_SYSTEM, "labels": labels},
            "stringData": data
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.client.clone(), names::KYMA_SYSTEM)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// Wait until the CR has `state` and `reason`; returns the CR.
    pub async fn wait_for(&self, ns: &str, name: &str, state: State, reason: &str, deadline: Duration) -> BtpOperator {
        let crs = self.crs(ns);
        let end = tokio::time::Instant::now() + deadline;
        loop {
            let cr = crs.get_opt(name).await.ok().flatten();
            let status = cr.as_ref().and_then(|c| c.status.clone());
            let hit = status.as_ref().is_some_and(|s| {
                s.state == state && s.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == reason)
            });
            if hit {
                break;
            }
            assert!(
                tokio::time::Instant::now() < end,
                "{ns}/{name} did not reach {state:?}/{reason} within {deadline:?}; last status: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        crs.get(name).await.unwrap()
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

pub fn credentials() -> serde_json::Value {
    serde_json::json!({
        "clientid": "dummy-client-id", "clientsecret": "CANARY-secret-value", "sm_url": "https://sm.example.com",
        "tokenurl": "https://auth.example.com", "cluster_id": "cluster-1"
    })
}

/// Poll `check` until it is true; panic with `what` after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out after {within:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An environment with the credentials Secret and `kyma-system/btpoperator` in Ready.
pub async fn ready_env(config: Config) -> Env {
    let env = Env::start(config, true).await;
    env.create_secret(credentials(), true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    env.wait_for(
        names::KYMA_SYSTEM,
        names::BTP_OPERATOR_NAME,
        State::Ready,
        "ReconcileSucceeded",
        Duration::from_secs(10),
    )
    .await;
    env
}

/// Force one reconcile of `kyma-system/btpoperator` and wait until it has run (the manager removes the
/// annotation when the pass is over).
pub async fn reconcile_now(env: &Env) {
    let crs = env.crs(names::KYMA_SYSTEM);
    let patch = serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: "reconcile"}}});
    crs.patch(names::BTP_OPERATOR_NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the reconcile annotation is consumed", || {
        let crs = crs.clone();
        async move {
            let cr = crs.get(names::BTP_OPERATOR_NAME).await.unwrap();
            !cr.metadata
                .annotations
                .unwrap_or_default()
                .contains_key(names::OPERATION_ANNOTATION)
        }
    })
    .await;
}
