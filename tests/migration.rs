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

/// The manager's writes among `records`, as (verb, resource, name): every request of the manager's
/// ServiceAccount that changed something and was not sent by the Go manager (its `User-Agent`).
fn ours(records: &[btp_apiserver::testing::RequestRecord]) -> Vec<(String, String, String)> {
    let manager = common::install::manager_user();
    records
        .iter()
        .filter(|r| r.user == manager && r.changed && r.user_agent.starts_with("btp-manager/"))
        .map(|r| (r.verb.clone(), r.resource.clone(), r.name.clone()))
        .collect()
}

/// The first writes ([`btp_manager::first_writes`]): what a replica of ours may write while it does not lead.
fn is_first_write((verb, resource, name): &(String, String, String)) -> bool {
    match (verb.as_str(), resource.as_str()) {
        // A create names no object in its URL: the embedded request log has no name for it.
        ("create", "secrets") => name.is_empty() || name == names::webhook::CERT_SECRET_NAME,
        ("patch", "validatingwebhookconfigurations") => name == names::webhook::VALIDATING_CONFIGURATION,
        ("patch", "mutatingwebhookconfigurations") => name == names::webhook::MUTATING_CONFIGURATION,
        _ => false,
    }
}

/// docs/upgrading.md#how-to-switch with the Go manager's Pod running and renewing its Lease (GET and PUT every
/// 2 s under the Go install's RBAC, `tests/common/go_lease.rs`) until its Pod is deleted. This manager's
/// replicas turn ready while the Go manager still leads (they issue the first webhook certificate and caBundle
/// themselves: the only writes of ours meanwhile), so the rollout goes on and deletes the Go Pod; one of ours
/// leads within a Lease duration of the Go Pod's end, and then writes no operand object (the CRDs with the
/// chart's descriptions keep their generation). BtpOperator writes are refused only between the apply and the
/// first replica of ours serving (measured and printed), never while leadership moves.
///
/// On a real cluster (`BTP_E2E_KUBECONFIG`) the guide's commands run as written and kube-controller-manager's
/// Deployment controller does the rollout, the kubelet stand-in running the Go Pod and this manager's Pods as
/// processes; then the rollback of the guide, which leaves the Go manager leading with its own RBAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_switch_completes_while_the_go_manager_renews_its_lease() {
    if let Some(cluster) = common::shipped::RealCluster::connect().await {
        return switch_and_back_as_shipped(cluster).await;
    }
    use btp_apiserver::{ApiServer, Config as ServerConfig};
    use common::go_lease::{go_client, GoLeader, LEASE_DURATION, RETRY_PERIOD};
    use common::replica::{lease_holder, Replica};
    use common::shipped::{documented_blocks, run_ok};
    let server = ApiServer::start(ServerConfig::default()).await.expect("API server");
    let client = server.client().await;
    let dir = temp_dir("switch");
    let admin = dir.join("admin.kubeconfig");
    std::fs::write(&admin, server.kubeconfig_yaml()).unwrap();
    let as_manager = dir.join("manager.kubeconfig");
    std::fs::write(&as_manager, server.kubeconfig_yaml_as(&common::install::manager_user())).unwrap();
    let kubectl = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    // The Go install and the state the Go manager left, its Pod leading.
    run_ok(&admin, &kubectl(&["kubectl", "apply", "-k", "deploy/namespace"])).await;
    run_ok(
        &admin,
        &kubectl(&["kubectl", "apply", "-f", "tests/fixtures/go-install.yaml"]),
    )
    .await;
    Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(
        client.clone(),
    )
    .create(&Default::default(), &BtpOperator::crd().unwrap())
    .await
    .expect("the BtpOperator CRD");
    common::btp_operator_crd_served(&client).await;
    let _workloads = AbortOnDrop(btp_apiserver::spawn_workload_controller(client.clone()));
    let _starts = AbortOnDrop(common::operand::spawn_operand_starts(client.clone()));
    let state = common::go_manager::leave_go_state(&client, &credentials(), IMAGE).await;
    const GO_POD: &str = "btp-manager-controller-manager-7d4b9c5f8-go";
    let mut go = GoLeader::start(
        go_client(server.kube_config_as(&common::install::manager_user())),
        names::KYMA_SYSTEM,
        GO_POD,
    );
    eventually(Duration::from_secs(20), "the Go manager leads and renews", || async {
        lease_holder(&client, names::KYMA_SYSTEM).await == GO_POD && go.record().renewed.len() >= 2
    })
    .await;
    eventually(Duration::from_secs(20), "the operand runs", || async {
        !operand_pods(&client).await.is_empty()
    })
    .await;
    let pods_before = operand_pods(&client).await;
    let before = snapshot(&client, &state.objects).await;
    let log = server.request_log();
    let (states, watch) = record_states(&client);
    eventually(Duration::from_secs(10), "the CR watch delivered the CR", || async {
        !states.lock().unwrap().is_empty()
    })
    .await;
    let probe = common::admission::AdmissionProbe::start(client.clone());

    // The guide's install: this manager's objects replace the Go install's in place.
    let blocks = documented_blocks("upgrading.md", "## How to switch");
    let install = &blocks[0];
    assert_eq!(
        install[0],
        kubectl(&["kubectl", "apply", "-k", "deploy/"]),
        "{install:?}"
    );
    let start = log.len();
    let applied = std::time::Instant::now();
    run_ok(&admin, &install[0]).await;
    // The rollout, played (the embedded server runs no Pods): two replicas of the new Deployment start, the
    // Go Pod goes once they are ready. The webhook Service reaches replica `a`.
    let a = Replica::start("a", &as_manager, &dir, &["--shutdown-drain-delay=0s".to_string()]);
    let b = Replica::start("b", &as_manager, &dir, &["--shutdown-drain-delay=0s".to_string()]);
    server.set_service_address(names::KYMA_SYSTEM, names::webhook::SERVICE_NAME, 443, a.webhook);
    let ready = common::try_eventually(Duration::from_secs(60), || async { a.ready().await && b.ready().await }).await;
    assert!(
        ready.is_ok(),
        "both replicas ready while the Go manager leads:\n--- a:\n{}\n--- b:\n{}",
        a.logs(),
        b.logs()
    );
    let both_ready = std::time::Instant::now();
    eventually(
        Duration::from_secs(5),
        "admission through the webhook Service works",
        || async { probe.first_refusal_since(applied).is_some() },
    )
    .await;
    assert_eq!(
        lease_holder(&client, names::KYMA_SYSTEM).await,
        GO_POD,
        "the Go manager still leads"
    );
    let record = go.record();
    assert!(
        record.refused.is_empty() && !record.lost,
        "the Go manager's renewals all succeed: {record:?}"
    );
    let renewed_meanwhile = record.renewed.iter().filter(|t| **t > applied).count();
    assert!(
        renewed_meanwhile + 1 >= (both_ready - applied).as_secs() as usize / RETRY_PERIOD.as_secs() as usize,
        "the Go manager renewed every {RETRY_PERIOD:?} throughout: {renewed_meanwhile} in {:?}",
        both_ready - applied
    );
    let while_go_leads = ours(&log.since(start));
    assert!(
        while_go_leads.iter().all(is_first_write),
        "nothing of ours writes while the Go manager leads but the first writes: {while_go_leads:#?}"
    );
    let first_secret_writes = while_go_leads.iter().filter(|w| w.1 == "secrets").count();
    assert_eq!(
        first_secret_writes, 1,
        "one replica issued the first certificate: {while_go_leads:?}"
    );

    // The Deployment deletes the Go Pod: its process ends without releasing the Lease.
    let go_pod_ends = log.len();
    go.stop().await;
    let go_ended = std::time::Instant::now();
    let took = common::try_eventually(LEASE_DURATION + RETRY_PERIOD + Duration::from_secs(3), || async {
        ["a", "b"].contains(&lease_holder(&client, names::KYMA_SYSTEM).await.as_str())
    })
    .await;
    assert!(
        took.is_ok(),
        "one of ours leads within a Lease of the Go Pod's end:\n--- a:\n{}\n--- b:\n{}",
        a.logs(),
        b.logs()
    );
    let led_after = go_ended.elapsed();
    reconcile_now_in(
        &Api::namespaced(client.clone(), names::KYMA_SYSTEM),
        Duration::from_secs(30),
    )
    .await;
    reconcile_now_in(
        &Api::namespaced(client.clone(), names::KYMA_SYSTEM),
        Duration::from_secs(30),
    )
    .await;
    watch.abort();

    let after = snapshot(&client, &state.objects).await;
    let changed: Vec<String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {v} -> {:?}", after.get(k)))
        .collect();
    assert!(
        changed.is_empty(),
        "operand objects written by the switch:\n{}",
        changed.join("\n")
    );
    assert_eq!(
        operand_pods(&client).await,
        pods_before,
        "the operand was not restarted"
    );
    let seen = states.lock().unwrap().clone();
    assert!(
        seen.iter().all(|s| s.as_deref() == Some("Ready")),
        "the CR left Ready during the switch: {seen:?}"
    );
    let leading = ours(&log.since(go_pod_ends));
    let own = [
        "btpoperators",
        "networkpolicies",
        "events",
        "leases",
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    ];
    let beyond: Vec<_> = leading.iter().filter(|w| !own.contains(&w.1.as_str())).collect();
    assert!(
        beyond.is_empty(),
        "writes of the new leader beyond its own objects and the CR: {beyond:#?}"
    );

    // Admission: refused only from the apply until the first replica served (while the Go manager led),
    // never after.
    let gaps: Vec<_> = probe.gaps().into_iter().filter(|(at, _)| *at >= applied).collect();
    let served = probe.first_refusal_since(applied).expect("refused by our webhook");
    let answers: Vec<String> = probe
        .answers()
        .iter()
        .filter(|(at, _)| *at >= applied)
        .map(|(at, a)| format!("{:?} {a:?}", at.duration_since(applied)))
        .collect();
    assert!(
        gaps.len() <= 1 && gaps.iter().all(|(at, gap)| *at + *gap <= served),
        "one admission gap, at the install, over once our webhook first answered ({:?}): {gaps:?}\n{}",
        served - applied,
        answers.join("\n")
    );
    let gap = gaps.first().map_or(Duration::ZERO, |(_, gap)| *gap);
    println!(
        "switch (embedded): both replicas ready {:?} after the apply, the Go manager renewing throughout; \
         admission gap {gap:?}; one of ours led {led_after:?} after the Go Pod ended",
        both_ready - applied
    );
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[path = "migration/as_shipped.rs"]
mod as_shipped;
use as_shipped::switch_and_back_as_shipped;
