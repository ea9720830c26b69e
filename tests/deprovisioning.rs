//! Deprovisioning: `kubectl delete btpoperator` finishes and leaves nothing of ours behind — and nothing of
//! anyone else's is removed. Against the embedded API server by default, against a real cluster with
//! `BTP_E2E_KUBECONFIG` (where the harness plays the operand's webhooks behind its Service and its finalizer
//! removal, unless `BTP_E2E_REAL_OPERAND=1` says the real operand runs).

mod common;

use btp_api::{names, BtpOperator, Reason, State};
use btp_manager::config::Config;
use common::operand::{service_binding, service_instance, services};
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::ResourceExt as _;
use std::time::Duration;

/// [`installed_objects`], as a list.
async fn installed(env: &Env) -> Vec<String> {
    installed_objects(&env.client).await.into_iter().collect()
}

async fn label_force_delete(env: &Env) {
    env.patch_cr(serde_json::json!({"metadata": {"labels": {names::FORCE_DELETE_LABEL: "true"}}}))
        .await;
}

fn api(env: &Env, ns: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(env.client.clone(), ns, &services(kind))
}

async fn create(env: &Env, ns: &str, obj: &DynamicObject) {
    let kind = obj.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
    api(env, ns, &kind).create(&PostParams::default(), obj).await.unwrap();
}

fn config() -> Config {
    Config {
        hard_delete_timeout: Duration::from_secs(30),
        hard_delete_check_interval: Duration::from_secs(1),
        ..Config::default()
    }
}

#[tokio::test]
async fn a_deletion_with_nothing_blocking_removes_every_module_resource_and_the_cr() {
    let env = ready_env(config()).await;
    // A user's ConfigMap with only the managed-by label, and the required Secret, must survive.
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "team-config", "namespace": names::KYMA_SYSTEM,
                     "labels": {"app.kubernetes.io/managed-by": "btp-manager"}},
        "data": {"k": "v"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    assert!(
        installed(&env).await.len() >= 15,
        "the operand is installed: {:?}",
        installed(&env).await
    );

    env.delete_cr().await;
    env.wait_cr_gone(10).await;

    assert_eq!(installed(&env).await, Vec::<String>::new(), "nothing of ours is left");
    let secrets = Api::<Secret>::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    for gone in ["ca-server-cert", "webhook-server-cert", "sap-btp-service-operator"] {
        assert!(secrets.get_opt(gone).await.unwrap().is_none(), "{gone} is removed");
    }
    assert!(
        secrets.get_opt(names::REQUIRED_SECRET_NAME).await.unwrap().is_some(),
        "the required Secret is the user's"
    );
    assert!(
        Api::<ConfigMap>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
            .get_opt("team-config")
            .await
            .unwrap()
            .is_some(),
        "a ConfigMap labelled only managed-by=btp-manager is not ours"
    );
    env.stop().await;
}

#[tokio::test]
async fn services_block_the_deletion_the_operand_stays_healthy_and_the_last_deletion_unblocks_it() {
    let env = ready_env(config()).await;
    let _operand = env.play_operand(true).await;
    env.ensure_namespace("team-a").await;
    create(&env, "team-a", &service_instance("team-a", "si-1")).await;
    create(&env, "team-a", &service_binding("team-a", "sb-1", None)).await;

    env.delete_cr().await;
    let cr = env.wait_cr(Reason::ServiceInstancesAndBindingsNotCleaned, 10).await;
    let message = &cr.status.unwrap().conditions[0].message;
    assert_eq!(
        message,
        "All service instances and bindings must be removed: 1 instance(s) and 1 binding(s)"
    );

    // Blocked, the operand is still managed: a deleted Deployment and a deleted CA come back.
    let deployments = Api::<Deployment>::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    deployments
        .delete("sap-btp-operator-controller-manager", &DeleteParams::default())
        .await
        .unwrap();
    let secrets = Api::<Secret>::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    secrets
        .delete("ca-server-cert", &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the operand is restored while blocked", || {
        let (deployments, secrets) = (deployments.clone(), secrets.clone());
        async move {
            deployments
                .get_opt("sap-btp-operator-controller-manager")
                .await
                .unwrap()
                .is_some()
                && secrets.get_opt("ca-server-cert").await.unwrap().is_some()
        }
    })
    .await;
    assert_eq!(
        count_services(&env.client).await,
        2,
        "nothing was deleted without force-delete"
    );
    // Restored means running again: its webhooks answer (through its Service, with the new certificate)
    // before the user's deletions below pass them.
    let probe = service_instance("team-a", "probe");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually(
        Duration::from_secs(30),
        "the operand's webhooks answer again",
        || async { api(&env, "team-a", "ServiceInstance").create(&dry_run, &probe).await },
    )
    .await;

    // The user removes them; the deletion proceeds within 2 s of the last one disappearing.
    api(&env, "team-a", "ServiceBinding")
        .delete("sb-1", &DeleteParams::default())
        .await
        .unwrap();
    api(&env, "team-a", "ServiceInstance")
        .delete("si-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the operand removed its finalizers", || async {
        count_services(&env.client).await == 0
    })
    .await;
    env.wait_cr_gone(2).await;
    assert_eq!(installed(&env).await, Vec::<String>::new());
    env.stop().await;
}

#[tokio::test]
async fn force_delete_while_blocked_deletes_the_services_then_everything_else() {
    let env = ready_env(config()).await;
    let _operand = env.play_operand(true).await;
    env.ensure_namespace("team-b").await;
    create(&env, "team-b", &service_instance("team-b", "si-1")).await;
    create(&env, "team-b", &service_binding("team-b", "sb-1", None)).await;
    env.delete_cr().await;
    env.wait_cr(Reason::ServiceInstancesAndBindingsNotCleaned, 10).await;

    label_force_delete(&env).await;
    env.wait_cr_gone(10).await;
    assert_eq!(count_services(&env.client).await, 0);
    assert_eq!(installed(&env).await, Vec::<String>::new());
    env.stop().await;
}

#[tokio::test]
async fn a_hard_delete_that_times_out_ends_in_a_soft_delete_that_removes_binding_secrets() {
    let env = ready_env(Config {
        hard_delete_timeout: Duration::from_secs(1),
        hard_delete_check_interval: Duration::from_millis(200),
        ..Config::default()
    })
    .await;
    // The operand's webhooks answer, but it never removes its finalizers (say, SAP BTP is unreachable).
    let _operand = env.play_operand(false).await;
    env.ensure_namespace("team-c").await;
    create(&env, "team-c", &service_instance("team-c", "si-1")).await;
    create(&env, "team-c", &service_binding("team-c", "sb-default", None)).await;
    create(
        &env,
        "team-c",
        &service_binding("team-c", "sb-custom", Some("custom-credentials")),
    )
    .await;
    let secrets = Api::<Secret>::namespaced(env.client.clone(), "team-c");
    for (name, binding) in [
        ("sb-default", "sb-default"),
        ("custom-credentials", "sb-custom"),
        ("sb-custom", ""),
    ] {
        let s: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "team-c"}, "stringData": {"binding": binding}
        }))
        .unwrap();
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    label_force_delete(&env).await;
    env.delete_cr().await;
    env.wait_cr(Reason::SoftDeleting, 10).await;
    env.wait_cr_gone(10).await;

    assert_eq!(
        count_services(&env.client).await,
        0,
        "soft delete removed the finalizers"
    );
    assert!(
        secrets.get_opt("sb-default").await.unwrap().is_none(),
        "the default binding Secret is removed"
    );
    assert!(
        secrets.get_opt("custom-credentials").await.unwrap().is_none(),
        "spec.secretName is removed"
    );
    assert!(
        secrets.get_opt("sb-custom").await.unwrap().is_some(),
        "a Secret that only shares the binding's name is not the binding's"
    );
    assert_eq!(installed(&env).await, Vec::<String>::new());
    env.stop().await;
}

#[tokio::test]
async fn a_manager_restarted_during_the_hard_delete_and_during_the_soft_delete_still_finishes() {
    let mut env = ready_env(Config {
        hard_delete_timeout: Duration::from_secs(2),
        hard_delete_check_interval: Duration::from_millis(200),
        ..Config::default()
    })
    .await;
    let _operand = env.play_operand(false).await;
    env.ensure_namespace("team-d").await;
    create(&env, "team-d", &service_instance("team-d", "si-1")).await;
    label_force_delete(&env).await;
    env.delete_cr().await;
    env.wait_cr(Reason::HardDeleting, 10).await;
    // In the middle of the hard delete (the instance is terminating, its finalizer stays).
    eventually(Duration::from_secs(5), "the hard delete issued its deletes", || async {
        let si = api(&env, "team-d", "ServiceInstance").get_opt("si-1").await.unwrap();
        si.is_some_and(|s| s.metadata.deletion_timestamp.is_some())
    })
    .await;
    env.restart_manager().await;
    env.wait_cr(Reason::SoftDeleting, 10).await;
    // And again, once the soft delete has begun.
    env.restart_manager().await;
    env.wait_cr_gone(10).await;
    assert_eq!(count_services(&env.client).await, 0);
    assert_eq!(installed(&env).await, Vec::<String>::new());
    env.stop().await;
}

#[tokio::test]
async fn a_new_cr_after_a_finished_deprovisioning_provisions_again() {
    let env = ready_env(config()).await;
    env.delete_cr().await;
    env.wait_cr_gone(10).await;
    assert_eq!(installed(&env).await, Vec::<String>::new());

    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    assert!(Api::<Deployment>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
        .get_opt("sap-btp-operator-controller-manager")
        .await
        .unwrap()
        .is_some());
    env.stop().await;
}

#[tokio::test]
async fn an_ignored_cr_is_left_exactly_as_it_is_even_when_deleted() {
    let env = ready_env(config()).await;
    env.patch_cr(serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: "ignore"}}}))
        .await;
    env.delete_cr().await;
    // The manager must not act; give it the time it needs to act, then check nothing happened.
    reconcile_now_ignored(&env).await;
    let cr: BtpOperator = env.cr().await;
    assert_eq!(cr.status.as_ref().unwrap().state, State::Ready, "no status written");
    assert!(cr.finalizers().iter().any(|f| f == names::FINALIZER), "finalizer kept");
    assert!(!installed(&env).await.is_empty(), "nothing removed");

    // Un-ignoring it lets the deletion proceed.
    env.patch_cr(serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: null}}}))
        .await;
    env.wait_cr_gone(10).await;
    env.stop().await;
}

/// Wait until the manager has seen the ignored, deleted CR: a second CR event after the deletion has been
/// reconciled (the reconcile counter moves) without any effect.
async fn reconcile_now_ignored(env: &Env) {
    let before = env.ctx.metrics.reconciles();
    env.patch_cr(serde_json::json!({"metadata": {"labels": {"poke": "1"}}}))
        .await;
    eventually(
        Duration::from_secs(5),
        "the manager reconciled the ignored CR",
        || async { env.ctx.metrics.reconciles() > before },
    )
    .await;
}

#[tokio::test]
async fn a_force_delete_survives_injected_api_failures_and_cut_watches() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("btp_manager=info")
        .with_test_writer()
        .try_init();
    let env = ready_env(config()).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    let _operand = env.play_operand(true).await;
    env.ensure_namespace("team-e").await;
    for i in 0..5 {
        create(&env, "team-e", &service_instance("team-e", &format!("si-{i}"))).await;
        create(&env, "team-e", &service_binding("team-e", &format!("sb-{i}"), None)).await;
    }
    label_force_delete(&env).await;
    server.faults().fail(0.1, 500, None, None);
    server.faults().fail(0.05, 429, None, None);
    server.faults().cut_watches_randomly(0.2);
    // Deleting may itself meet an injected failure: retry as kubectl users do.
    eventually(Duration::from_secs(5), "the CR is deleted", || async {
        env.crs(names::KYMA_SYSTEM)
            .delete(names::BTP_OPERATOR_NAME, &DeleteParams::default())
            .await
            .is_ok()
    })
    .await;
    let crs = env.crs(names::KYMA_SYSTEM);
    eventually(
        Duration::from_secs(60),
        "the BtpOperator is gone despite the failures",
        || async { matches!(crs.get_opt(names::BTP_OPERATOR_NAME).await, Ok(None)) },
    )
    .await;
    server.faults().clear();
    assert_eq!(count_services(&env.client).await, 0);
    assert_eq!(installed(&env).await, Vec::<String>::new());
    env.stop().await;
}

#[tokio::test]
async fn the_finalizer_is_never_dropped_for_someone_else() {
    let env = ready_env(config()).await;
    // Another controller's finalizer on the CR stays after ours is removed.
    env.patch_cr(serde_json::json!({"metadata": {"finalizers": [names::FINALIZER, "example.com/keep"]}}))
        .await;
    env.delete_cr().await;
    eventually(Duration::from_secs(10), "our finalizer is removed", || async {
        env.cr().await.finalizers() == ["example.com/keep".to_string()]
    })
    .await;
    assert_eq!(installed(&env).await, Vec::<String>::new());
    env.patch_cr(serde_json::json!({"metadata": {"finalizers": null}}))
        .await;
    env.wait_cr_gone(5).await;
    env.stop().await;
}

/// Apply the manager's own installation (deploy/, without the namespace, the CRD and the PriorityClass, which
/// the embedded API server does not serve and deprovisioning never touches) and its certificate
/// Secret, as a cluster running the manager has them; returns what was applied.
async fn install_the_manager_itself(env: &Env) -> Vec<(kube::api::ApiResource, Option<String>, String)> {
    use btp_manager::reconciler::resources::is_cluster_scoped;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut applied = Vec::new();
    for file in [
        "service-account.yaml",
        "rbac.yaml",
        "services.yaml",
        "deployment.yaml",
        "webhooks.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        for doc in serde_saphyr::from_multiple::<serde_json::Value>(&text).unwrap() {
            if doc.is_null() {
                continue;
            }
            let (api_version, kind) = (doc["apiVersion"].as_str().unwrap(), doc["kind"].as_str().unwrap());
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let ar = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(group, version, kind));
            let name = doc["metadata"]["name"].as_str().unwrap().to_string();
            let ns = (!is_cluster_scoped(kind) && kind != "PriorityClass").then(|| {
                doc["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or(names::KYMA_SYSTEM)
                    .to_string()
            });
            let api: Api<DynamicObject> = match &ns {
                Some(ns) => Api::namespaced_with(env.client.clone(), ns, &ar),
                None => Api::all_with(env.client.clone(), &ar),
            };
            api.patch(&name, &PatchParams::apply("e2e-test").force(), &Patch::Apply(&doc))
                .await
                .unwrap_or_else(|e| panic!("applying {kind} {name} from deploy/{file}: {e}"));
            applied.push((ar, ns, name));
        }
    }
    let certs = btp_manager::webhook_certs::WebhookCerts::new(
        env.client.clone(),
        names::KYMA_SYSTEM,
        names::webhook::CERT_SECRET_NAME,
        btp_certs::rotation::Policy::new(vec!["btp-manager-webhook-service.kyma-system.svc".into()], vec![]),
        btp_webhooks::manifests::WebhookManifests::in_cluster(names::KYMA_SYSTEM),
    );
    certs.settle().await.unwrap();
    let secret = kube::api::ApiResource::erase::<Secret>(&());
    applied.push((
        secret,
        Some(names::KYMA_SYSTEM.into()),
        names::webhook::CERT_SECRET_NAME.into(),
    ));
    applied
}

#[tokio::test]
async fn the_managers_own_deployment_rbac_services_webhooks_and_certificate_survive_a_deprovisioning() {
    let env = ready_env(config()).await;
    let _operand = env.play_operand(true).await;
    env.ensure_namespace("team-f").await;
    create(&env, "team-f", &service_instance("team-f", "si-1")).await;
    env.delete_cr().await;
    env.wait_cr(Reason::ServiceInstancesAndBindingsNotCleaned, 10).await;
    // The CR is terminating, so the manager's own webhooks (no manager serves them here) are in nobody's way.
    let own = install_the_manager_itself(&env).await;
    assert!(own.len() >= 10, "deploy/ has the manager's objects: {}", own.len());

    label_force_delete(&env).await;
    env.wait_cr_gone(10).await;
    assert_eq!(installed(&env).await, Vec::<String>::new(), "the operand is removed");
    for (ar, ns, name) in &own {
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(env.client.clone(), ns, ar),
            None => Api::all_with(env.client.clone(), ar),
        };
        assert!(
            api.get_opt(name).await.unwrap().is_some(),
            "the manager's own {} {name} survived",
            ar.kind
        );
        // Leave a real cluster as it was.
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    env.stop().await;
}

#[tokio::test]
async fn a_failed_removal_is_reported_the_operand_restored_and_the_deletion_retried() {
    let env = ready_env(config()).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    // Roles cannot be removed (say, RBAC was tightened by hand).
    server.faults().fail(1.0, 403, Some("deletecollection"), Some("roles"));
    env.delete_cr().await;
    let cr = env.wait_cr(Reason::ResourceRemovalFailed, 10).await;
    let message = &cr.status.unwrap().conditions[0].message;
    assert!(
        message.starts_with("Unable to remove installed resources: removing Roles:"),
        "names what failed: {message}"
    );
    // The operand is put back while the deletion waits for its retry.
    let deployments = Api::<Deployment>::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    eventually(Duration::from_secs(5), "the operand is restored", || {
        let deployments = deployments.clone();
        async move {
            deployments
                .get_opt("sap-btp-operator-controller-manager")
                .await
                .unwrap()
                .is_some()
        }
    })
    .await;
    // Retries back off: reporting the failure (a status write) must not bring the CR straight back. Over a
    // 3 s window, backoff (1 s, 2 s, ...) allows a handful of passes; a retry loop would make hundreds.
    let before = env.ctx.metrics.reconciles();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let passes = env.ctx.metrics.reconciles() - before;
    assert!(
        passes <= 6,
        "{passes} reconciles in 3 s while the removal keeps failing"
    );
    server.faults().clear();
    // The retry (with backoff: the first ones come within seconds) finishes the job.
    env.wait_cr_gone(20).await;
    assert_eq!(installed(&env).await, Vec::<String>::new());
    env.stop().await;
}

#[tokio::test]
async fn a_hard_delete_that_fails_goes_to_the_soft_delete() {
    let env = ready_env(config()).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    let _operand = env.play_operand(true).await;
    env.ensure_namespace("team-g").await;
    create(&env, "team-g", &service_instance("team-g", "si-1")).await;
    create(&env, "team-g", &service_binding("team-g", "sb-1", None)).await;
    label_force_delete(&env).await;
    // The delete requests of the hard delete are refused.
    server
        .faults()
        .fail(1.0, 403, Some("deletecollection"), Some("servicebindings"));
    env.delete_cr().await;
    env.wait_cr(Reason::SoftDeleting, 10).await;
    env.wait_cr_gone(10).await;
    server.faults().clear();
    assert_eq!(count_services(&env.client).await, 0);
    assert_eq!(installed(&env).await, Vec::<String>::new());
    env.stop().await;
}

#[tokio::test]
async fn the_operand_secret_in_a_custom_credentials_namespace_is_removed_too() {
    let env = Env::start(config(), true).await;
    env.ensure_namespace("team-creds").await;
    let mut creds = credentials();
    creds["credentials_namespace"] = serde_json::json!("team-creds");
    env.create_secret(creds, true).await;
    env.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    let moved = Api::<Secret>::namespaced(env.client.clone(), "team-creds");
    assert!(moved.get_opt("sap-btp-service-operator").await.unwrap().is_some());
    // A Secret of the user's with the same name elsewhere, without our labels, is not ours.
    env.ensure_namespace("team-other").await;
    let theirs: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-service-operator", "namespace": "team-other"}, "stringData": {"k": "v"}
    }))
    .unwrap();
    let other = Api::<Secret>::namespaced(env.client.clone(), "team-other");
    other.create(&PostParams::default(), &theirs).await.unwrap();

    env.delete_cr().await;
    env.wait_cr_gone(10).await;
    assert!(
        moved.get_opt("sap-btp-service-operator").await.unwrap().is_none(),
        "ours is removed"
    );
    assert!(
        other.get_opt("sap-btp-service-operator").await.unwrap().is_some(),
        "theirs stays"
    );
    assert_eq!(installed(&env).await, Vec::<String>::new());
    env.stop().await;
}
