//! Secret customisation (docs/behaviour.md#credentials-drift, with the Go project's customisation scenarios): credentials namespace, cluster ID and credential changes in
//! the required Secret propagate to the operand and clean up what they invalidate.

mod common;

use base64::Engine as _;
use btp_api::names;
use btp_manager::config::Config;
use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::time::Duration;

const NS: &str = names::KYMA_SYSTEM;

async fn patch_required(env: &Env, string_data: serde_json::Value) {
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    let patch = serde_json::json!({"stringData": string_data});
    secrets
        .patch("sap-btp-manager", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

async fn operand_secret(env: &Env, ns: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(env.client.clone(), ns)
        .get_opt("sap-btp-service-operator")
        .await
        .unwrap()
}

async fn operand_config(env: &Env) -> std::collections::BTreeMap<String, String> {
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    cms.get("sap-btp-operator-config")
        .await
        .unwrap()
        .data
        .unwrap_or_default()
}

async fn required_annotation(env: &Env, key: &str) -> Option<String> {
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    secrets
        .get("sap-btp-manager")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
        .get(key)
        .cloned()
}

#[tokio::test]
async fn a_custom_credentials_namespace_moves_the_operand_secret_and_back() {
    let env = ready_env(Config::default()).await;
    env.ensure_namespace("custom-creds").await;

    patch_required(&env, serde_json::json!({"credentials_namespace": "custom-creds"})).await;
    eventually(
        Duration::from_secs(5),
        "operand Secret only in custom-creds, ConfigMap updated",
        || async {
            let config = operand_config(&env).await;
            operand_secret(&env, "custom-creds").await.is_some()
                && operand_secret(&env, NS).await.is_none()
                && config["RELEASE_NAMESPACE"] == "custom-creds"
                && config["MANAGEMENT_NAMESPACE"] == "custom-creds"
        },
    )
    .await;
    assert_eq!(
        required_annotation(&env, "operator.kyma-project.io/previous-credentials-namespace")
            .await
            .as_deref(),
        Some(NS)
    );
    let moved = operand_secret(&env, "custom-creds").await.unwrap().data.unwrap();
    assert_eq!(moved["clientsecret"].0, b"CANARY-secret-value");
    assert!(!moved.contains_key("credentials_namespace"));

    // And back.
    patch_required(&env, serde_json::json!({"credentials_namespace": NS})).await;
    eventually(
        Duration::from_secs(5),
        "operand Secret back in kyma-system only",
        || async {
            operand_secret(&env, NS).await.is_some()
                && operand_secret(&env, "custom-creds").await.is_none()
                && operand_config(&env).await["RELEASE_NAMESPACE"] == NS
        },
    )
    .await;
    env.wait_for(
        NS,
        names::BTP_OPERATOR_NAME,
        btp_api::State::Ready,
        "ReconcileSucceeded",
        Duration::from_secs(5),
    )
    .await;
    env.stop().await;
}

#[tokio::test]
async fn a_new_cluster_id_updates_the_configmap_and_removes_the_stale_cluster_id_secret() {
    let env = ready_env(Config::default()).await;
    // What the operand writes on its first start.
    let clusterid: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-operator-clusterid", "namespace": NS},
        "data": {"INITIAL_CLUSTER_ID": base64::engine::general_purpose::STANDARD.encode("cluster-1")}
    }))
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    secrets.create(&PostParams::default(), &clusterid).await.unwrap();

    patch_required(&env, serde_json::json!({"cluster_id": "cluster-2"})).await;
    eventually(
        Duration::from_secs(5),
        "CLUSTER_ID updated and the stale cluster-ID Secret gone",
        || async {
            operand_config(&env).await["CLUSTER_ID"] == "cluster-2"
                && secrets.get_opt("sap-btp-operator-clusterid").await.unwrap().is_none()
        },
    )
    .await;
    assert_eq!(
        required_annotation(&env, "operator.kyma-project.io/previous-cluster-id")
            .await
            .as_deref(),
        Some("cluster-1")
    );
    env.wait_for(
        NS,
        names::BTP_OPERATOR_NAME,
        btp_api::State::Ready,
        "ReconcileSucceeded",
        Duration::from_secs(5),
    )
    .await;
    env.stop().await;
}

#[tokio::test]
async fn a_changed_client_id_reaches_the_operand_secret() {
    let env = ready_env(Config::default()).await;
    patch_required(&env, serde_json::json!({"clientid": "rotated-client-id"})).await;
    eventually(Duration::from_secs(5), "clientid propagated", || async {
        operand_secret(&env, NS)
            .await
            .and_then(|s| s.data)
            .is_some_and(|d| d["clientid"].0 == b"rotated-client-id")
    })
    .await;
    env.stop().await;
}
