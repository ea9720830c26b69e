//! Secret customisation (docs/behaviour.md#credentials-drift, with the Go project's customisation scenarios): credentials namespace, cluster ID and credential changes in
//! the required Secret propagate to the operand and clean up what they invalidate.

mod common;

use base64::Engine as _;
use btp_api::{names, Reason};
use btp_manager::config::Config;
use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use std::time::Duration;

const NS: &str = names::KYMA_SYSTEM;

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

/// The cluster ID the operand recorded in its cluster-ID Secret in `ns` (None: no such Secret).
async fn recorded_cluster_id(env: &Env, ns: &str) -> Option<String> {
    Api::<Secret>::namespaced(env.client.clone(), ns)
        .get_opt(names::operand::CLUSTER_ID_SECRET)
        .await
        .unwrap()
        .map(|s| {
            s.data
                .and_then(|d| {
                    d.get("INITIAL_CLUSTER_ID")
                        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                })
                .unwrap_or_default()
        })
}

/// The operand's Pods: (name, Ready).
async fn operand_pods(env: &Env) -> Vec<(String, bool)> {
    use kube::ResourceExt as _;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    pods.list(&ListParams::default().labels(operand::POD_SELECTOR))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            (p.name_any(), ready)
        })
        .collect()
}

/// Once provisioned, the operand's Pod runs and has recorded its cluster ID in `ns`; its name.
async fn running_operand(env: &Env, ns: &str, cluster_id: &str) -> String {
    eventually(
        Duration::from_secs(10),
        &format!("one Ready operand Pod that recorded cluster ID {cluster_id} in {ns}"),
        || async {
            let pods = operand_pods(env).await;
            pods.len() == 1 && pods[0].1 && recorded_cluster_id(env, ns).await.as_deref() == Some(cluster_id)
        },
    )
    .await;
    operand_pods(env).await.remove(0).0
}

/// The Go manager's e2e scenario for credentials customisation (its
/// `run_e2e_sap_btp_manager_secret_test.sh`), with an operand Pod that the manager restarts and that records
/// its cluster ID at start: move the credentials namespace to `credentials-namespace` and back; each move
/// leaves the operand Secret and the cluster-ID Secret only in the new namespace, and restarts the operand.
#[tokio::test]
async fn a_custom_credentials_namespace_moves_the_operand_secret_and_back() {
    const CUSTOM: &str = "credentials-namespace";
    let env = ready_env(Config::default()).await;
    env.ensure_namespace(CUSTOM).await;
    let first = running_operand(&env, NS, "cluster-1").await;

    env.patch_secret(serde_json::json!({"stringData": {"credentials_namespace": CUSTOM}}))
        .await;
    eventually(
        Duration::from_secs(10),
        "operand Secret and cluster-ID Secret only in credentials-namespace, ConfigMap updated",
        || async {
            let config = operand_config(&env).await;
            operand_secret(&env, CUSTOM).await.is_some()
                && operand_secret(&env, NS).await.is_none()
                && config["RELEASE_NAMESPACE"] == CUSTOM
                && config["MANAGEMENT_NAMESPACE"] == CUSTOM
                && recorded_cluster_id(&env, CUSTOM).await.as_deref() == Some("cluster-1")
                && recorded_cluster_id(&env, NS).await.is_none()
        },
    )
    .await;
    let second = running_operand(&env, CUSTOM, "cluster-1").await;
    assert_ne!(first, second, "the operand restarted with the new namespace");
    assert_eq!(
        required_annotation(&env, "operator.kyma-project.io/previous-credentials-namespace")
            .await
            .as_deref(),
        Some(NS)
    );
    let moved = operand_secret(&env, CUSTOM).await.unwrap().data.unwrap();
    assert_eq!(moved["clientsecret"].0, b"CANARY-secret-value");
    assert!(!moved.contains_key("credentials_namespace"));

    // And back.
    env.patch_secret(serde_json::json!({"stringData": {"credentials_namespace": NS}}))
        .await;
    eventually(
        Duration::from_secs(10),
        "operand Secret and cluster-ID Secret back in kyma-system only",
        || async {
            operand_secret(&env, NS).await.is_some()
                && operand_secret(&env, CUSTOM).await.is_none()
                && operand_config(&env).await["RELEASE_NAMESPACE"] == NS
                && recorded_cluster_id(&env, NS).await.as_deref() == Some("cluster-1")
                && recorded_cluster_id(&env, CUSTOM).await.is_none()
        },
    )
    .await;
    let third = running_operand(&env, NS, "cluster-1").await;
    assert_ne!(second, third, "the operand restarted with the old namespace");
    env.wait_cr(Reason::ReconcileSucceeded, 5).await;
    env.stop().await;
}

#[tokio::test]
async fn a_new_cluster_id_updates_the_configmap_and_restarts_the_operand_with_it() {
    let env = ready_env(Config::default()).await;
    let first = running_operand(&env, NS, "cluster-1").await;

    env.patch_secret(serde_json::json!({"stringData": {"cluster_id": "cluster-2"}}))
        .await;
    eventually(
        Duration::from_secs(10),
        "CLUSTER_ID updated and the operand restarted with it",
        || async { operand_config(&env).await["CLUSTER_ID"] == "cluster-2" },
    )
    .await;
    let second = running_operand(&env, NS, "cluster-2").await;
    assert_ne!(first, second, "the operand restarted");
    assert_eq!(
        required_annotation(&env, "operator.kyma-project.io/previous-cluster-id")
            .await
            .as_deref(),
        Some("cluster-1")
    );
    env.wait_cr(Reason::ReconcileSucceeded, 5).await;
    env.stop().await;
}

/// Reference §9.4 (the Go e2e corner case): someone changes `INITIAL_CLUSTER_ID` by hand; the operand, once
/// restarted, refuses to start (not Ready). The next pass deletes the stale Secret and the crashing Pod, and
/// the operand starts again with the right cluster ID.
#[tokio::test]
async fn a_cluster_id_secret_changed_by_hand_is_repaired() {
    let env = ready_env(Config::default()).await;
    let first = running_operand(&env, NS, "cluster-1").await;
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), NS);
    let bogus =
        serde_json::json!({"data": {"INITIAL_CLUSTER_ID": base64::engine::general_purpose::STANDARD.encode("bogus")}});
    secrets
        .patch(
            names::operand::CLUSTER_ID_SECRET,
            &PatchParams::default(),
            &Patch::Merge(&bogus),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    pods.delete(&first, &Default::default()).await.unwrap();
    // The crashing Pod, as seen then (the manager may replace it at any moment after: the cluster-ID Secret
    // it watches changed).
    let crashing = eventually(Duration::from_secs(10), "the restarted operand crash-loops", || async {
        let pods = operand_pods(&env).await;
        (pods.len() == 1 && pods[0].0 != first && !pods[0].1).then(|| pods[0].0.clone())
    })
    .await;

    reconcile_now(&env).await;
    let repaired = running_operand(&env, NS, "cluster-1").await;
    assert_ne!(repaired, crashing, "the crashing Pod was replaced");
    assert_eq!(
        required_annotation(&env, "operator.kyma-project.io/previous-cluster-id")
            .await
            .as_deref(),
        Some("bogus")
    );
    env.stop().await;
}

#[tokio::test]
async fn a_changed_client_id_reaches_the_operand_secret() {
    let env = ready_env(Config::default()).await;
    env.patch_secret(serde_json::json!({"stringData": {"clientid": "rotated-client-id"}}))
        .await;
    eventually(Duration::from_secs(5), "clientid propagated", || async {
        operand_secret(&env, NS)
            .await
            .and_then(|s| s.data)
            .is_some_and(|d| d["clientid"].0 == b"rotated-client-id")
    })
    .await;
    env.stop().await;
}
