//! The switch from the Go BTP Manager and back on a real cluster, as shipped: the Go install
//! (`tests/fixtures/go-install.yaml`) with its Pod leading and renewing its Lease (the kubelet stand-in plays it,
//! `tests/common/go_lease.rs`), the state the Go manager left (`tests/common/go_manager.rs`: the chart's objects,
//! the CRDs with descriptions wherever the chart has them), then docs/upgrading.md's commands as written, with
//! kube-controller-manager's Deployment controller rolling from the Go Pod to this manager's, whose Pods the
//! kubelet stand-in runs as processes. Then the guide's rollback, and the Go install again: the Go manager leads
//! with its own RBAC, and nothing of ours writes.

use super::*;
use common::go_lease::{LEASE_DURATION, RETRY_PERIOD, USER_AGENT as GO_USER_AGENT};
use common::replica::lease_holder;
use common::requests::Requests;
use common::shipped::{documented_blocks, run_ok, RealCluster, Shipped};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use kube::api::PostParams;
use std::time::Instant;

/// The manager's Pods (this manager's and the Go manager's: the same label).
const MANAGER_PODS: &str = "app.kubernetes.io/component=btp-manager.kyma-project.io";

/// The Go manager's Pods now: those whose container runs `/manager`.
async fn go_pods(client: &kube::Client) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    pods.list(&ListParams::default().labels(MANAGER_PODS))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.command.clone())
                == Some(vec!["/manager".to_string()])
        })
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Lease writes the API server answered for the Go manager (its `User-Agent`), in `records`: (ok, refused).
fn go_lease_writes(records: &[btp_apiserver::testing::RequestRecord]) -> (usize, usize) {
    let writes: Vec<_> = records
        .iter()
        .filter(|r| r.user_agent == GO_USER_AGENT && r.resource == "leases" && r.method != "GET")
        .collect();
    let ok = writes.iter().filter(|r| r.code < 300).count();
    (ok, writes.len() - ok)
}

fn kubectl(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

pub async fn switch_and_back_as_shipped(cluster: RealCluster) {
    let Some(audit) = common::requests::audit_log() else {
        common::skip("tells the Go manager's and this manager's requests apart: needs the API server's audit log (BTP_E2E_AUDIT_LOG)");
        return;
    };
    let client = cluster.client.clone();
    let kubeconfig = cluster.kubeconfig.clone();
    let kubelet = common::kubelet::Kubelet::start(
        client.clone(),
        &cluster.config,
        common::kubelet::KubeletOptions {
            run_manager: true,
            ..Default::default()
        },
    )
    .await;

    // The Go install, its Pod leading, and the state the Go manager left.
    run_ok(&kubeconfig, &kubectl(&["kubectl", "apply", "-k", "deploy/namespace"])).await;
    run_ok(
        &kubeconfig,
        &kubectl(&["kubectl", "apply", "-f", "tests/fixtures/go-install.yaml"]),
    )
    .await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    if crds
        .get_opt("btpoperators.operator.kyma-project.io")
        .await
        .unwrap()
        .is_none()
    {
        crds.create(&PostParams::default(), &BtpOperator::crd().unwrap())
            .await
            .expect("the BtpOperator CRD");
        eventually(Duration::from_secs(30), "the BtpOperator CRD is served", || async {
            Api::<BtpOperator>::all(client.clone())
                .list(&ListParams::default())
                .await
                .is_ok()
        })
        .await;
    }
    let go_pod = eventually(Duration::from_secs(60), "the Go manager's Pod leads", || async {
        let pods = go_pods(&client).await;
        let holder = lease_holder(&client, names::KYMA_SYSTEM).await;
        pods.into_iter().find(|p| *p == holder)
    })
    .await;
    // The operand image both installs name (the Go install's SAP_BTP_SERVICE_OPERATOR is deploy/'s).
    let deployment = common::install::deploy_objects("deployment.yaml").remove(0);
    let image = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "SAP_BTP_SERVICE_OPERATOR")
        .and_then(|e| e["value"].as_str())
        .expect("deploy/ names the operand image")
        .to_string();
    let state = common::go_manager::leave_go_state(&client, &credentials(), &image).await;
    eventually(Duration::from_secs(60), "the operand runs", || async {
        !operand_pods(&client).await.is_empty()
    })
    .await;
    let pods_before = operand_pods(&client).await;
    let before = snapshot(&client, &state.objects).await;
    let crd_generations: Vec<String> = before
        .iter()
        .filter(|(k, _)| k.starts_with("CustomResourceDefinition"))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let required_before = secrets.get(names::REQUIRED_SECRET_NAME).await.unwrap();
    let (states, watch) = record_states(&client);
    eventually(Duration::from_secs(10), "the CR watch delivered the CR", || async {
        !states.lock().unwrap().is_empty()
    })
    .await;
    // When the Go Pod gets deleted (the Deployment controller's part of the rollout).
    let go_pod_deleted = {
        let pods: Api<Pod> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
        let name = go_pod.clone();
        tokio::spawn(async move {
            // Polled (every 50 ms) for as long as the test runs; the rollout's bound is checked below.
            let deleted = common::try_eventually(Duration::from_secs(600), || async {
                match pods.get_opt(&name).await {
                    Ok(Some(p)) => p.metadata.deletion_timestamp.is_some(),
                    Ok(None) => true,
                    Err(_) => false,
                }
            })
            .await;
            deleted.ok().map(|()| Instant::now())
        })
    };
    let requests = Requests::audit(audit.clone());
    let probe = common::admission::AdmissionProbe::start(client.clone());

    // docs/upgrading.md: install this manager and wait for it, as written.
    let blocks = documented_blocks("upgrading.md", "## How to switch");
    let applied = Instant::now();
    let mut shipped = None;
    let mut kubelet = Some(kubelet);
    let mut rolled_out = applied;
    for command in &blocks[0] {
        let out = common::shipped::run(&kubeconfig, command).await;
        let logs = shipped.as_ref().map(Shipped::logs).unwrap_or_default();
        assert!(
            out.status.success(),
            "{}:\n{}\n{}\nthe manager's containers:\n{logs}",
            command.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if command[..3] == kubectl(&["kubectl", "apply", "-k"])[..] {
            // The Service exists now: the kube-proxy stand-in serves its ClusterIP.
            shipped = Some(Shipped::serving(&cluster, kubelet.take().expect("the kubelet stand-in")).await);
        }
        if command.iter().any(|a| a == "rollout") {
            rolled_out = Instant::now();
            // The rollout waits for the new Pods only, never for a leader of ours: the Go manager's Lease
            // (renewed until its Pod was deleted) still stands.
            let holder = lease_holder(&client, names::KYMA_SYSTEM).await;
            assert_eq!(holder, go_pod, "the rollout completed before any replica of ours led");
        }
    }
    let shipped = shipped.expect("the guide applies deploy/");
    let go_ended = tokio::time::timeout(Duration::from_secs(5), go_pod_deleted)
        .await
        .expect("the rollout deleted the Go Pod")
        .expect("the watch of the Go Pod")
        .expect("the Go Pod deleted");
    let took = common::try_eventually(LEASE_DURATION + RETRY_PERIOD + Duration::from_secs(5), || async {
        let holder = lease_holder(&client, names::KYMA_SYSTEM).await;
        !holder.is_empty() && holder != go_pod
    })
    .await;
    assert!(
        took.is_ok(),
        "one of ours leads within a Lease of the Go Pod's end:\n{}",
        shipped.logs()
    );
    let led_after = go_ended.elapsed();
    reconcile_now_in(
        &Api::namespaced(client.clone(), names::KYMA_SYSTEM),
        Duration::from_secs(60),
    )
    .await;
    reconcile_now_in(
        &Api::namespaced(client.clone(), names::KYMA_SYSTEM),
        Duration::from_secs(60),
    )
    .await;
    watch.abort();

    // The operand untouched: no operand object written (the CRDs keep their generation), no restart.
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
    assert_eq!(
        secrets
            .get(names::REQUIRED_SECRET_NAME)
            .await
            .unwrap()
            .metadata
            .resource_version,
        required_before.metadata.resource_version,
        "the credentials Secret is not written"
    );
    let seen = states.lock().unwrap().clone();
    assert!(
        seen.iter().all(|s| s.as_deref() == Some("Ready")),
        "the CR left Ready during the switch: {seen:?}"
    );
    // The Go manager renewed its Lease throughout, until its Pod was deleted; ours wrote nothing but the first
    // writes before one of ours held the Lease.
    let records = requests.since(0);
    let (go_ok, go_refused) = go_lease_writes(&records);
    let go_led_for = go_ended - applied;
    assert!(
        go_refused == 0 && go_ok >= 1 && go_ok + 1 >= (go_led_for.as_secs() / RETRY_PERIOD.as_secs()) as usize,
        "the Go manager renewed every {RETRY_PERIOD:?} until its Pod went ({go_led_for:?}): {go_ok} renewals, {go_refused} refused"
    );
    let first_lease_write = records
        .iter()
        .position(|r| {
            r.user_agent.starts_with("btp-manager/") && r.resource == "leases" && r.method != "GET" && r.code < 300
        })
        .expect("one of ours took the Lease");
    let before_leading = super::ours(&records[..first_lease_write]);
    assert!(
        before_leading.iter().all(super::is_first_write),
        "nothing of ours writes while the Go manager leads but the first writes: {before_leading:#?}"
    );
    // Admission: refused from the apply until the first replica served (while the Go manager led), never after.
    let served = probe.first_refusal_since(applied).expect("refused by our webhook");
    assert!(
        served < go_ended,
        "admission through the Service works before the Go Pod goes"
    );
    let gaps: Vec<_> = probe.gaps().into_iter().filter(|(at, _)| *at >= applied).collect();
    assert!(
        gaps.len() <= 1 && gaps.iter().all(|(at, gap)| *at + *gap <= served),
        "one admission gap, at the install, over once our webhook first answered: {gaps:?}"
    );
    let gap = gaps.first().map_or(Duration::ZERO, |(_, gap)| *gap);
    println!(
        "switch (real cluster): rollout complete {:?} after the apply; the Go Pod deleted {go_led_for:?} after \
         the apply, its Lease renewed {go_ok} time(s) from the apply on, none refused; admission gap {gap:?} \
         (probed every {:?}); one of ours led {led_after:?} after the Go Pod's deletion; CRD generations \
         unchanged: {}",
        rolled_out - applied,
        common::admission::EVERY,
        crd_generations.join(", ")
    );
    drop(probe);

    // The way back: docs/upgrading.md's rollback as written, then the Go install again.
    let runtime: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-manager", "namespace": names::KYMA_SYSTEM}, "data": {}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), names::KYMA_SYSTEM)
        .create(&PostParams::default(), &runtime)
        .await
        .expect("the runtime ConfigMap the guide patches");
    let back = documented_blocks("upgrading.md", "## Rolling back to the Go BTP Manager");
    assert_eq!(back.len(), 2, "RSA first, then stop and unregister: {back:?}");
    for command in &back[0] {
        run_ok(&kubeconfig, command).await;
    }
    eventually(Duration::from_secs(60), "a new RSA CA stored as PKCS#1", || async {
        secrets
            .get_opt(names::operand::CA_SECRET)
            .await
            .unwrap()
            .and_then(|s| s.data)
            .and_then(|d| {
                d.get("ca.key")
                    .map(|k| k.0.starts_with(b"-----BEGIN RSA PRIVATE KEY-----"))
            })
            .unwrap_or(false)
    })
    .await;
    for command in &back[1] {
        run_ok(&kubeconfig, command).await;
    }
    let stopped = requests.len();
    let installed_again = Instant::now();
    run_ok(
        &kubeconfig,
        &kubectl(&["kubectl", "apply", "-f", "tests/fixtures/go-install.yaml"]),
    )
    .await;
    let go_again = eventually(
        LEASE_DURATION + Duration::from_secs(60),
        "the Go manager leads again",
        || async {
            let pods = go_pods(&client).await;
            let holder = lease_holder(&client, names::KYMA_SYSTEM).await;
            pods.into_iter().find(|p| *p == holder)
        },
    )
    .await;
    let leads_after = installed_again.elapsed();
    // Three renewals more, each allowed by the Go install's own RBAC.
    let renewed = common::try_eventually(RETRY_PERIOD * 8, || async {
        let (ok, _) = go_lease_writes(&requests.since(stopped));
        ok >= 4
    })
    .await;
    assert!(renewed.is_ok(), "the Go manager renews its Lease");
    let (ok, refused) = go_lease_writes(&requests.since(stopped));
    assert_eq!(refused, 0, "no renewal of the Go manager refused");
    let role = Api::<Role>::namespaced(client.clone(), names::KYMA_SYSTEM)
        .get("btp-manager-leader-election-role")
        .await
        .unwrap();
    assert!(
        role.rules.unwrap_or_default().iter().any(|r| {
            r.resources
                .as_deref()
                .unwrap_or_default()
                .contains(&"leases".to_string())
                && r.verbs.contains(&"update".to_string())
        }),
        "the leader-election Role is the Go install's again (update on Leases)"
    );
    let cluster_role = Api::<ClusterRole>::all(client.clone())
        .get("btp-manager-manager-role")
        .await
        .unwrap();
    assert!(
        !cluster_role.rules.unwrap_or_default().iter().any(|r| r
            .resources
            .as_deref()
            .unwrap_or_default()
            .contains(&"leases".to_string())),
        "the ClusterRole is the Go install's (the fixture grants no Leases there): the Role allows the renewals"
    );
    let ours_after: Vec<_> = requests
        .since(stopped)
        .into_iter()
        .filter(|r| r.user_agent.starts_with("btp-manager/") && r.method != "GET")
        .map(|r| format!("{} {} {}/{} {}", r.verb, r.resource, r.namespace, r.name, r.code))
        .collect();
    assert!(
        ours_after.is_empty(),
        "nothing of ours writes after the rollback: {ours_after:#?}"
    );
    println!(
        "rollback (real cluster): the Go Pod {go_again} leads {leads_after:?} after its install, {ok} renewals, none refused"
    );

    // Leave the cluster for the next test: the Go-only objects go, then what the harness removes.
    for command in &blocks[1] {
        run_ok(&kubeconfig, command).await;
    }
    drop(shipped);
    drop(cluster);
    drop(RealCluster::connect().await);
}
