//! Taking over a cluster the Go BTP Manager provisioned (docs/upgrading.md): the state it leaves behind is
//! built from the operand chart's facts and the Go manager's code (`tests/common/go_manager.rs`), then this
//! manager starts. The takeover is a non-event for the operand: no write to any operand object (their facts
//! match; the CRDs carry descriptions wherever the chart has them, in other words than ours, and keep them:
//! their generation stays), the Deployment's pod template and generation unchanged and its Pod the same (no restart), the
//! certificates and caBundles kept, and the CR never leaves `Ready`.
//!
//! Intended differences, named: the manager creates its network policies (not part of the fixture: they
//! are the Go manager's `manager-resources`, not the chart); it writes the CR (its own status fields and the
//! consumed `operation` annotation), the required Secret never.

mod common;

use btp_api::{names, BtpOperator};
use btp_manager::config::Config;
use common::*;
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::watcher;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a takeover must leave as it was: per object, its resourceVersion (the Deployment: its generation
/// and pod template, as its status moves with the Pods).
async fn snapshot(client: &kube::Client, objects: &[(String, Option<String>, String)]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (kind, ns, name) in objects {
        let key = format!("{kind} {}/{name}", ns.as_deref().unwrap_or(""));
        let value = if kind == "Deployment" {
            let d = Api::<Deployment>::namespaced(client.clone(), ns.as_deref().unwrap())
                .get(name)
                .await
                .unwrap();
            format!(
                "generation {:?} template {}",
                d.metadata.generation,
                serde_json::to_string(&d.spec.unwrap().template).unwrap()
            )
        } else {
            let (group, version) = match kind.as_str() {
                "CustomResourceDefinition" => ("apiextensions.k8s.io", "v1"),
                "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding" => ("rbac.authorization.k8s.io", "v1"),
                "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
                    ("admissionregistration.k8s.io", "v1")
                }
                _ => ("", "v1"),
            };
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
            let api: Api<DynamicObject> = match ns {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            let o = api.get(name).await.unwrap_or_else(|e| panic!("{key}: {e}"));
            // A CRD's status moves with the API server's own bookkeeping; its spec only with a write.
            match kind.as_str() {
                "CustomResourceDefinition" => format!("generation {:?}", o.metadata.generation),
                _ => format!("resourceVersion {:?}", o.metadata.resource_version),
            }
        };
        out.insert(key, value);
    }
    out
}

/// The operand's Pods: name and uid (a restart replaces them).
async fn operand_pods(client: &kube::Client) -> Vec<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let mut out: Vec<(String, String)> = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=sap-btp-operator"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.metadata.name.unwrap_or_default(), p.metadata.uid.unwrap_or_default()))
        .collect();
    out.sort();
    out
}

/// Every state the CR shows from now on (None: no status), as the watch delivers it.
/// The states a watch saw, in order (None: no status yet).
type States = Arc<Mutex<Vec<Option<String>>>>;

fn record_states(client: &kube::Client) -> (States, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", names::BTP_OPERATOR_NAME));
    let sink = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(crs, config));
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(cr) | watcher::Event::InitApply(cr)) = event {
                let state = cr.status.as_ref().and_then(|s| serde_json::to_value(s).ok());
                let state = state.and_then(|s| s["state"].as_str().map(str::to_string));
                sink.lock().unwrap().push(state);
            }
        }
    });
    (seen, task)
}

fn secret_data(secret: &Secret, key: &str) -> Vec<u8> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_takeover_of_a_go_managed_cluster_leaves_the_operand_untouched() {
    let options = StartOptions {
        manager_user: Some(common::install::manager_user()),
        // The Go manager's state first; this manager starts later.
        reconcile: false,
        ..StartOptions::default()
    };
    let mut env = Env::start_with(Config::default(), true, options).await;
    let client = env.client.clone();
    let state = common::go_manager::leave_go_state(&client, &credentials(), IMAGE).await;

    // The Go-provisioned operand runs: its Pod exists and it made its cluster-ID Secret.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    eventually(Duration::from_secs(20), "the operand runs", || async {
        !operand_pods(&client).await.is_empty()
            && secrets
                .get_opt(names::operand::CLUSTER_ID_SECRET)
                .await
                .unwrap()
                .is_some()
    })
    .await;
    let pods_before = operand_pods(&client).await;
    let before = snapshot(&client, &state.objects).await;
    let certificates = [names::operand::CA_SECRET, names::operand::WEBHOOK_SECRET];
    let mut certs_before = Vec::new();
    for name in certificates {
        certs_before.push(secrets.get(name).await.unwrap().metadata.resource_version);
    }
    let required_before = secrets.get(names::REQUIRED_SECRET_NAME).await.unwrap();
    let log_start = env.request_log().map(|l| l.len()).unwrap_or(0);

    let (states, watch) = record_states(&client);
    eventually(
        Duration::from_secs(10),
        "the CR watch delivered the Go manager's CR",
        || async { !states.lock().unwrap().is_empty() },
    )
    .await;
    // The takeover, and one more whole pass after it.
    env.restart_manager().await;
    reconcile_now_in(&env.crs(names::KYMA_SYSTEM), Duration::from_secs(30)).await;
    reconcile_now_in(&env.crs(names::KYMA_SYSTEM), Duration::from_secs(30)).await;
    watch.abort();

    // No operand object written: the facts matched.
    let after = snapshot(&client, &state.objects).await;
    let changed: Vec<String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {v} -> {:?}", after.get(k)))
        .collect();
    assert!(
        changed.is_empty(),
        "operand objects written on takeover:\n{}",
        changed.join("\n")
    );
    assert_eq!(
        operand_pods(&client).await,
        pods_before,
        "the operand was not restarted"
    );
    // The Go manager's RSA certificates are kept, and its CA stays in every webhook.
    for (name, rv) in certificates.iter().zip(&certs_before) {
        assert_eq!(
            &secrets.get(name).await.unwrap().metadata.resource_version,
            rv,
            "{name} kept"
        );
    }
    let ca = secrets.get(names::operand::CA_SECRET).await.unwrap();
    assert_eq!(secret_data(&ca, "ca.crt"), state.ca_crt);
    let tls = secrets.get(names::operand::WEBHOOK_SECRET).await.unwrap();
    assert_eq!(secret_data(&tls, "tls.crt"), state.tls_crt);
    // The required Secret (with the Go drift detector's annotations) is read, never written.
    let required_after = secrets.get(names::REQUIRED_SECRET_NAME).await.unwrap();
    assert_eq!(
        required_after.metadata.resource_version,
        required_before.metadata.resource_version
    );
    // The CR never left Ready.
    let seen = states.lock().unwrap().clone();
    assert!(seen.len() >= 2, "the watch saw the CR through the takeover: {seen:?}");
    assert!(
        seen.iter().all(|s| s.as_deref() == Some("Ready")),
        "the CR left Ready during the takeover: {seen:?}"
    );

    // Where the log is there (the embedded server), every write the manager made is one of the named ones.
    if let Some(log) = env.request_log() {
        let manager = common::install::manager_user();
        let writes: Vec<String> = log
            .since(log_start)
            .into_iter()
            .filter(|r| r.user == manager && r.changed)
            .filter(|r| !["btpoperators", "networkpolicies", "events", "leases"].contains(&r.resource.as_str()))
            .map(|r| format!("{} {} {}/{}", r.verb, r.resource, r.namespace, r.name))
            .collect();
        assert!(writes.is_empty(), "writes beyond the named differences: {writes:#?}");
    }
    env.stop().await;
}
