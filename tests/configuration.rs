//! Timers, requeues and retries: no configuration makes the manager spin, the ReadyTimeout clock belongs to
//! one wait, a failing API is retried with backoff, and a Ready CR's outage is a ReconcileFailed.

mod common;

use btp_api::{names, Reason};
use btp_manager::config::Config;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use std::time::{Duration, Instant};

const DEPLOYMENT: &str = "sap-btp-operator-controller-manager";

#[tokio::test]
async fn zero_requeue_intervals_mean_no_periodic_requeue_and_no_spin() {
    let config = Config {
        ready_state_requeue_interval: Duration::ZERO,
        processing_state_requeue_interval: Duration::ZERO,
        hard_delete_check_interval: Duration::ZERO,
        ..Config::default()
    };
    let env = ready_env(config).await;
    let before = env.ctx.metrics.reconciles();
    // A measurement window, not a synchronisation: a spinning manager makes hundreds of passes in it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let passes = env.ctx.metrics.reconciles() - before;
    assert!(passes <= 3, "{passes} reconciles in 3 s with every interval at 0");
    env.stop().await;
}

#[tokio::test]
async fn the_ready_timeout_clock_restarts_when_the_wait_restarts() {
    // The operand never becomes available here: every wait ends in the timeout.
    let config = Config {
        ready_timeout: Duration::from_secs(3),
        ..Config::default()
    };
    let env = Env::start(config, false).await;
    env.create_secret_and_cr().await;
    // The first wait begins; the Secret goes missing in the middle of it.
    eventually(Duration::from_secs(5), "the operand Deployment exists", || async {
        Api::<Deployment>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
            .get_opt(DEPLOYMENT)
            .await
            .unwrap()
            .is_some()
    })
    .await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    secrets
        .delete(names::REQUIRED_SECRET_NAME, &DeleteParams::default())
        .await
        .unwrap();
    env.wait_cr(Reason::MissingSecret, 5).await;
    // Longer than the first wait's timeout passes while the Secret is missing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let restored = Instant::now();
    env.create_secret(credentials(), true).await;
    // A new wait: Processing first, and the timeout only after a full ReadyTimeout.
    env.wait_cr(Reason::Updated, 5).await;
    env.wait_cr(Reason::ProvisioningFailed, 10).await;
    let waited = restored.elapsed();
    assert!(
        waited >= Duration::from_millis(2900),
        "the timeout came {waited:?} after the Secret was restored; the new wait must last the full 3 s"
    );
    env.stop().await;
}

#[tokio::test]
async fn an_outage_after_ready_that_times_out_is_a_reconcile_failure() {
    let config = Config {
        ready_timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let env = Env::start(config, false).await;
    env.create_secret_and_cr().await;
    set_available(&env, true).await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    set_available(&env, false).await;
    let cr = env.wait_cr(Reason::ReconcileFailed, 10).await;
    assert!(cr.status.unwrap().conditions[0]
        .message
        .starts_with("timed out while waiting for resources readiness"));
    // And back once the operand recovers.
    set_available(&env, true).await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    env.stop().await;
}

#[tokio::test]
async fn a_failing_api_is_retried_with_backoff_not_hammered() {
    let env = ready_env(Config::default()).await;
    let Some(server) = env.embedded() else {
        return env.stop().await;
    };
    // Status writes fail; then the Secret goes, so every pass has a status to write and fails.
    server.faults().fail(1.0, 500, Some("patch"), Some("btpoperators"));
    Api::<Secret>::namespaced(env.client.clone(), names::KYMA_SYSTEM)
        .delete(names::REQUIRED_SECRET_NAME, &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "a pass failed", || async {
        env.ctx.consecutive_failures() >= 1
    })
    .await;
    let log = server.request_log();
    log.clear();
    let before = env.ctx.metrics.reconciles();
    // A measurement window: 6 s of a failing API.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let requests = log.entries().len();
    let passes = env.ctx.metrics.reconciles() - before;
    assert!(env.ctx.consecutive_failures() >= 2, "the passes kept failing");
    server.faults().clear();
    // Backoff 1 s, 2 s, 4 s (±20 %): at most 4 retries in 6 s, each a few dozen requests. A fixed short
    // retry or a retry loop makes many times that.
    assert!(passes <= 4, "{passes} failed passes in 6 s");
    assert!(requests <= 250, "{requests} requests in 6 s against a failing API");
    // The next retry succeeds and resets the backoff.
    env.wait_cr(Reason::MissingSecret, 20).await;
    eventually(
        Duration::from_secs(5),
        "the success resets the failure count",
        || async { env.ctx.consecutive_failures() == 0 },
    )
    .await;
    env.stop().await;
}

/// Create the runtime ConfigMap (labelled as the Go manager's e2e fixture has it).
async fn runtime_configmap(env: &Env, data: serde_json::Value) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-manager", "namespace": names::KYMA_SYSTEM,
                     "labels": {"app.kubernetes.io/managed-by": "btp-manager"}},
        "data": data
    }))
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    api.patch(
        "sap-btp-manager",
        &PatchParams::apply("e2e-test").force(),
        &Patch::Apply(&cm),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn the_runtime_configmap_is_read_before_the_first_reconcile() {
    let env = Env::start_with(
        Config::default(),
        true,
        StartOptions {
            reconcile: false,
            ..StartOptions::default()
        },
    )
    .await;
    runtime_configmap(&env, serde_json::json!({"EnableLimitedCache": "false"})).await;
    env.create_secret_and_cr().await;
    if let Some(log) = env.request_log() {
        log.clear();
    }
    let mut env = env;
    env.restart_manager().await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    use k8s_openapi::api::core::v1::ConfigMap;
    let operand: ConfigMap = Api::namespaced(env.client.clone(), names::KYMA_SYSTEM)
        .get("sap-btp-operator-config")
        .await
        .unwrap();
    assert_eq!(operand.data.unwrap()["ENABLE_LIMITED_CACHE"], "false");
    if let Some(log) = env.request_log() {
        // Written once, with the ConfigMap's value: never first with the flag default.
        let writes = log.filter(|r| r.changed && r.resource == "configmaps" && r.name == "sap-btp-operator-config");
        assert_eq!(writes.len(), 1, "{writes:?}");
    }
    env.stop().await;
}

#[tokio::test]
async fn an_invalid_value_keeps_the_previous_one_and_watched_names_wait_for_a_restart() {
    let env = ready_env(Config::default()).await;
    runtime_configmap(&env, serde_json::json!({"ReadyTimeout": "10s"})).await;
    eventually(Duration::from_secs(5), "ReadyTimeout applied", || async {
        env.ctx.settings().config.ready_timeout == Duration::from_secs(10)
    })
    .await;
    runtime_configmap(
        &env,
        serde_json::json!({"ReadyTimeout": "soon", "DeploymentName": "elsewhere", "ProbeInterval": "1h",
                           "EnableLimitedCache": "false"}),
    )
    .await;
    eventually(Duration::from_secs(5), "the new ConfigMap applied", || async {
        env.ctx.settings().config.enable_limited_cache == "false"
    })
    .await;
    let config = env.ctx.settings().config.clone();
    assert_eq!(
        config.ready_timeout,
        Duration::from_secs(10),
        "the invalid value kept the previous one"
    );
    assert_eq!(
        config.deployment_name, DEPLOYMENT,
        "a watched object's name changes at the next start"
    );
    reconcile_now(&env).await;
    env.wait_cr(Reason::ReconcileSucceeded, 5).await;
    env.stop().await;
}
