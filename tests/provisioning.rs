//! Provisioning against the embedded API server, with the real module-resources: from a CR and the
//! credentials Secret to an installed operand and a CR in Ready, and the status for every way it can fail.

use btp_api::{names, BtpOperator, State};
use btp_apiserver::{ApiServer, Config as ServerConfig, RunningApiServer};
use btp_manager::config::Config;
use btp_manager::reconciler::{self, metrics::ReconcileMetrics, resources, Context};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const IMAGE: &str = "example.test/sap-btp-service-operator:v0.11.10";

struct Env {
    _server: RunningApiServer,
    client: kube::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Env {
    /// Embedded API server, kyma-system, the CRD, the manager's reconciler; `deployments_become_available`
    /// plays the Deployment controller.
    async fn start(config: Config, deployments_become_available: bool) -> Self {
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
        let ctx = Arc::new(Context::new(
            client.clone(),
            config,
            module,
            IMAGE.into(),
            None,
            metrics,
        ));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(reconciler::run(ctx, async move {
            let _ = stopped.await;
        }));
        Self {
            _server: server,
            client,
            stop: Some(stop),
            task: Some(task),
        }
    }

    fn crs(&self, ns: &str) -> Api<BtpOperator> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn create_cr(&self, ns: &str, name: &str) {
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

    async fn create_secret(&self, data: serde_json::Value, labelled: bool) {
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
    async fn wait_for(&self, ns: &str, name: &str, state: State, reason: &str, deadline: Duration) -> BtpOperator {
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

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

fn credentials() -> serde_json::Value {
    serde_json::json!({
        "clientid": "dummy-client-id", "clientsecret": "CANARY-secret-value", "sm_url": "https://sm.example.com",
        "tokenurl": "https://auth.example.com", "cluster_id": "cluster-1"
    })
}

#[tokio::test]
async fn a_valid_cr_and_secret_reach_ready_with_the_operand_installed() {
    let env = Env::start(Config::default(), true).await;
    env.create_secret(credentials(), true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    let cr = env
        .wait_for(
            names::KYMA_SYSTEM,
            names::BTP_OPERATOR_NAME,
            State::Ready,
            "ReconcileSucceeded",
            Duration::from_secs(10),
        )
        .await;
    assert!(cr
        .metadata
        .finalizers
        .unwrap_or_default()
        .contains(&names::FINALIZER.to_string()));
    let condition = &cr.status.unwrap().conditions[0];
    assert_eq!(condition.message, "Module provisioning succeeded");
    assert_eq!(condition.observed_generation, cr.metadata.generation);

    let deployment = Api::<Deployment>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
        .get("sap-btp-operator-controller-manager")
        .await
        .unwrap();
    let labels = deployment.metadata.labels.unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "btp-manager");
    assert_eq!(labels["chart-version"], "v0.11.10");
    let pod = deployment.spec.unwrap().template;
    assert_eq!(
        pod.metadata.unwrap().labels.unwrap()["kyma-project.io/module"],
        "btp-operator"
    );
    let container = pod
        .spec
        .unwrap()
        .containers
        .into_iter()
        .find(|c| c.name == "manager")
        .unwrap();
    assert_eq!(container.image.as_deref(), Some(IMAGE));

    let cm = Api::<ConfigMap>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
        .get("sap-btp-operator-config")
        .await
        .unwrap();
    let data = cm.data.unwrap();
    assert_eq!(data["CLUSTER_ID"], "cluster-1");
    assert_eq!(data["MANAGEMENT_NAMESPACE"], "kyma-system");
    assert_eq!(data["ENABLE_LIMITED_CACHE"], "true");
    let operand_secret = Api::<Secret>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
        .get("sap-btp-service-operator")
        .await
        .unwrap();
    let sd = operand_secret.data.unwrap();
    assert_eq!(sd["clientsecret"].0, b"CANARY-secret-value");
    assert!(!sd.contains_key("cluster_id"));
    assert_eq!(sd["tokenurlsuffix"].0, b"/oauth/token");
    env.stop().await;
}

#[tokio::test]
async fn a_missing_secret_warns_and_creating_it_leads_to_ready_within_two_seconds() {
    let env = Env::start(Config::default(), true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    let cr = env
        .wait_for(
            names::KYMA_SYSTEM,
            names::BTP_OPERATOR_NAME,
            State::Warning,
            "MissingSecret",
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(
        cr.status.unwrap().conditions[0].message,
        "sap-btp-manager Secret in kyma-system namespace not found"
    );
    env.create_secret(credentials(), true).await;
    env.wait_for(
        names::KYMA_SYSTEM,
        names::BTP_OPERATOR_NAME,
        State::Ready,
        "ReconcileSucceeded",
        Duration::from_secs(2),
    )
    .await;
    env.stop().await;
}

#[tokio::test]
async fn an_unlabelled_secret_is_reported_as_such() {
    let env = Env::start(Config::default(), true).await;
    env.create_secret(credentials(), false).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    let cr = env
        .wait_for(
            names::KYMA_SYSTEM,
            names::BTP_OPERATOR_NAME,
            State::Warning,
            "MissingSecret",
            Duration::from_secs(10),
        )
        .await;
    let message = &cr.status.unwrap().conditions[0].message;
    assert!(
        message.contains("lacks the label app.kubernetes.io/managed-by=kcp-kyma-environment-broker"),
        "{message}"
    );
    env.stop().await;
}

#[tokio::test]
async fn an_invalid_secret_is_an_error_naming_the_keys_and_no_value() {
    let env = Env::start(Config::default(), true).await;
    env.create_secret(serde_json::json!({"clientid": "id", "clientsecret": "", "sm_url": "https://sm.example.com", "tokenurl": "https://t.example.com"}), true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    let cr = env
        .wait_for(
            names::KYMA_SYSTEM,
            names::BTP_OPERATOR_NAME,
            State::Error,
            "InvalidSecret",
            Duration::from_secs(10),
        )
        .await;
    let message = &cr.status.unwrap().conditions[0].message;
    assert_eq!(
        message,
        "key(s) cluster_id not found, missing value(s) for clientsecret key(s)"
    );
    env.stop().await;
}

#[tokio::test]
async fn misnamed_crs_get_a_warning_and_no_finalizer() {
    let env = Env::start(Config::default(), true).await;
    env.create_secret(credentials(), true).await;
    env.create_cr("default", names::BTP_OPERATOR_NAME).await;
    env.create_cr(names::KYMA_SYSTEM, "btpoperator-test").await;
    for (ns, name) in [
        ("default", names::BTP_OPERATOR_NAME),
        (names::KYMA_SYSTEM, "btpoperator-test"),
    ] {
        let cr = env
            .wait_for(
                ns,
                name,
                State::Warning,
                "WrongNamespaceOrName",
                Duration::from_secs(10),
            )
            .await;
        assert!(
            cr.metadata.finalizers.unwrap_or_default().is_empty(),
            "{ns}/{name} got a finalizer"
        );
        assert_eq!(
            cr.status.unwrap().conditions[0].message,
            "Your resource must be in the kyma-system namespace. The resource's name must be btpoperator."
        );
    }
    // Nothing was installed for them.
    let deployments = Api::<Deployment>::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    assert!(deployments
        .get_opt("sap-btp-operator-controller-manager")
        .await
        .unwrap()
        .is_none());
    env.stop().await;
}

#[tokio::test]
async fn a_deployment_that_never_becomes_available_is_an_error_after_the_ready_timeout() {
    let config = Config {
        ready_timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let env = Env::start(config, false).await;
    env.create_secret(credentials(), true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    env.wait_for(
        names::KYMA_SYSTEM,
        names::BTP_OPERATOR_NAME,
        State::Processing,
        "Initialized",
        Duration::from_secs(5),
    )
    .await;
    let cr = env
        .wait_for(
            names::KYMA_SYSTEM,
            names::BTP_OPERATOR_NAME,
            State::Error,
            "ProvisioningFailed",
            Duration::from_secs(10),
        )
        .await;
    let message = &cr.status.unwrap().conditions[0].message;
    assert!(
        message.contains("timeout waiting for sap-btp-operator-controller-manager Deployment to be ready"),
        "{message}"
    );
    env.stop().await;
}
