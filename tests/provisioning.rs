//! Provisioning against the embedded API server, with the real module-resources: from a CR and the
//! credentials Secret to an installed operand and a CR in Ready, and the status for every way it can fail.

mod common;

use btp_api::{names, Reason};
use btp_manager::config::Config;
use common::operand::{service_instance, services};
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use std::time::Duration;

#[tokio::test]
async fn a_valid_cr_and_secret_reach_ready_with_the_operand_installed() {
    let env = Env::start(Config::default(), true).await;
    env.create_secret_and_cr().await;
    let cr = env.wait_cr(Reason::ReconcileSucceeded, 10).await;
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

/// The Secret's creation is acted on at once (its watch, not a periodic requeue): within 2 s the CR has left
/// `MissingSecret`, and the provisioning that follows ends in Ready. (How long the provisioning takes is the
/// cluster's too: on a real one its Deployment and ReplicaSet controllers start the operand.)
#[tokio::test]
async fn a_missing_secret_warns_and_creating_it_is_acted_on_within_two_seconds() {
    let env = Env::start(Config::default(), true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    let cr = env.wait_cr(Reason::MissingSecret, 10).await;
    assert_eq!(
        cr.status.unwrap().conditions[0].message,
        "sap-btp-manager Secret in kyma-system namespace not found"
    );
    env.create_secret(credentials(), true).await;
    let crs = env.crs(names::KYMA_SYSTEM);
    eventually(Duration::from_secs(2), "the CR leaves MissingSecret", || async {
        crs.get(names::BTP_OPERATOR_NAME)
            .await
            .ok()
            .and_then(|cr| cr.status)
            .and_then(|s| s.conditions.first().map(|c| c.reason.clone()))
            .is_some_and(|r| r != Reason::MissingSecret.to_string())
    })
    .await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    env.stop().await;
}

#[tokio::test]
async fn an_unlabelled_secret_is_reported_as_such() {
    let env = Env::start(Config::default(), true).await;
    env.create_secret(credentials(), false).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    let cr = env.wait_cr(Reason::MissingSecret, 10).await;
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
    let cr = env.wait_cr(Reason::InvalidSecret, 10).await;
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
        let cr = env.wait_cr_at(ns, name, Reason::WrongNamespaceOrName, 10).await;
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
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::Initialized, 5).await;
    let cr = env.wait_cr(Reason::ProvisioningFailed, 10).await;
    let message = &cr.status.unwrap().conditions[0].message;
    assert!(
        message.contains("timeout waiting for sap-btp-operator-controller-manager Deployment to be ready"),
        "{message}"
    );
    env.stop().await;
}

/// After a deprovisioning removed the ServiceInstance/ServiceBinding CRDs, their watches stop: over the next
/// 12 s at most one request per kind reaches the API server (one already on its way when the CRD went). A
/// watch that kept retrying the 404 (its backoff: 250 ms, 500 ms, 1 s, 2 s, 4 s, then every 5 s) sent six or
/// more in that time.
#[tokio::test]
async fn no_service_request_after_a_deprovisioning_removed_their_crds() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let env = Env::start(Config::default(), true).await;
    let Some(log) = env.requests.clone() else {
        skip("counts the manager's requests: needs the API server's audit log (BTP_E2E_AUDIT_LOG)");
        return env.stop().await;
    };
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    env.delete_cr().await;
    env.wait_cr_gone(30).await;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    eventually(
        Duration::from_secs(30),
        "the deprovisioning removed both CRDs",
        || async {
            let mut gone = true;
            for plural in ["serviceinstances", "servicebindings"] {
                let name = format!("{plural}.{}", names::SERVICES_GROUP);
                gone &= crds.get_opt(&name).await.ok().flatten().is_none();
            }
            gone
        },
    )
    .await;
    let mark = log.len();
    // An observation window, long enough for a retrying watch to show itself several times.
    tokio::time::sleep(Duration::from_secs(12)).await;
    for plural in ["serviceinstances", "servicebindings"] {
        let sent: Vec<_> = log
            .since(mark)
            .into_iter()
            .filter(|r| r.group == names::SERVICES_GROUP && r.resource == plural)
            // On a real cluster kube-controller-manager follows every resource too (its garbage collector).
            .filter(|r| env.manager_user_on_real.as_ref().is_none_or(|u| &r.user == u))
            .map(|r| format!("{} {}?{} -> {}", r.method, r.path, r.query, r.code))
            .collect();
        assert!(sent.len() <= 1, "{plural} requests while its CRD is absent: {sent:#?}");
    }
    env.stop().await;
}

/// The ServiceInstance/ServiceBinding deletions watches run only while the CR is being deleted (their
/// deletions wake a deprovisioning they held), and then only once their CRDs are established. An install sends
/// no request for them nor watches their CRDs: on a real server the watches started at the CRDs' create got a
/// 404 list each on nearly every install, and they held four watches on the API server for the module's whole
/// life. A deletion held by a ServiceInstance starts them, without a request the server refuses.
#[tokio::test]
async fn the_services_watches_run_only_while_the_cr_is_deleted() {
    let env = Env::start(Config::default(), true).await;
    let Some(log) = env.requests.clone() else {
        skip("counts the manager's requests: needs the API server's audit log (BTP_E2E_AUDIT_LOG)");
        return env.stop().await;
    };
    // The manager's requests: not the test's, nor the operand stand-in's (which follows ServiceInstances), nor
    // on a real cluster kube-controller-manager's (its garbage collector follows every resource).
    let ours = |r: &btp_apiserver::testing::RequestRecord| {
        r.user_agent.starts_with("btp-manager/") && env.manager_user_on_real.as_ref().is_none_or(|u| &r.user == u)
    };
    let is_service = |r: &btp_apiserver::testing::RequestRecord| {
        ours(r)
            && r.group == names::SERVICES_GROUP
            && matches!(r.resource.as_str(), "serviceinstances" | "servicebindings")
    };
    let is_services_crd = |r: &btp_apiserver::testing::RequestRecord| {
        ours(r)
            && r.resource == "customresourcedefinitions"
            && ["serviceinstances", "servicebindings"]
                .iter()
                .any(|p| r.query.contains(&format!("{p}.{}", names::SERVICES_GROUP)))
    };
    let show = |r: &btp_apiserver::testing::RequestRecord| format!("{} {}?{} -> {}", r.verb, r.path, r.query, r.code);
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    let _operand = env.play_operand(true).await;
    env.ensure_namespace("team-a").await;
    Api::<kube::api::DynamicObject>::namespaced_with(env.client.clone(), "team-a", &services("ServiceInstance"))
        .create(&Default::default(), &service_instance("team-a", "si-1"))
        .await
        .unwrap();
    let installed: Vec<_> = log
        .since(0)
        .iter()
        .filter(|r| is_service(r) || is_services_crd(r))
        .map(show)
        .collect();
    assert!(
        installed.is_empty(),
        "requests for the services before any deletion: {installed:#?}"
    );

    let mark = log.len();
    env.delete_cr().await;
    env.wait_cr(Reason::ServiceInstancesAndBindingsNotCleaned, 10).await;
    eventually(Duration::from_secs(10), "both deletions watches started", || {
        let sent = log.since(mark);
        let ok = ["serviceinstances", "servicebindings"].iter().all(|p| {
            sent.iter()
                .any(|r| is_service(r) && r.resource == *p && r.verb == "watch" && r.code == 200)
        });
        async move { ok }
    })
    .await;
    // A real API server serves the resource only once the CRD is established: a request before is answered 404.
    let refused: Vec<_> = log
        .since(0)
        .iter()
        .filter(|r| is_service(r) && r.code == 404)
        .map(show)
        .collect();
    assert!(
        refused.is_empty(),
        "services requests before they were served: {refused:#?}"
    );
    env.stop().await;
}

/// A new CR over a module that is installed and running has nothing to wait for: every read is in the watch
/// caches and nothing needs writing, so its first status is its outcome, `Ready`, in one status write, without
/// a `Processing/Initialized` a round trip before it (docs/behaviour.md#status-protocol). The old CR goes
/// without a deprovisioning: ignored, its finalizer removed, deleted.
#[tokio::test]
async fn a_new_cr_over_an_installed_module_is_ready_in_one_status_write() {
    let env = ready_env(Config::default()).await;
    let Some(log) = env.requests.clone() else {
        skip("counts the manager's requests: needs the API server's audit log (BTP_E2E_AUDIT_LOG)");
        return env.stop().await;
    };
    env.patch_cr(serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: "ignore"}}}))
        .await;
    env.patch_cr(serde_json::json!({"metadata": {"finalizers": null}}))
        .await;
    env.delete_cr().await;
    env.wait_cr_gone(10).await;

    let mark = log.len();
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    let writes: Vec<_> = log
        .since(mark)
        .into_iter()
        .filter(|r| {
            r.resource == "btpoperators"
                && r.subresource == "status"
                && r.method != "GET"
                && r.user_agent.starts_with("btp-manager/")
                && env.manager_user_on_real.as_ref().is_none_or(|u| &r.user == u)
        })
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.code))
        .collect();
    assert_eq!(writes.len(), 1, "the new CR's status writes: {writes:#?}");
    env.stop().await;
}
