//! Two manager processes side by side, as during a rolling update that changes the webhook settings and
//! the operand's chart version (docs/behaviour.md#who-writes-what and #leader-election), against an
//! embedded API server whose request log names each replica (its `User-Agent`):
//!
//! - replica `a` (the old version: an extra certificate name, `--webhook-dns-name extra.example.com`) leads,
//!   `b` (the new version: another chart version) follows: over 20 s, `a` writes the webhook certificate
//!   Secret and each webhook configuration at most 3 times, `b` writes nothing at all; the stored
//!   certificate has `a`'s names;
//! - `a` is paused (SIGSTOP) past its Lease with a trigger queued (an operand object deleted); `b` takes
//!   over and repairs it; `a` resumes and sends **no write** (it finds its right to write expired before it
//!   has read anything); `b` applies its chart version and its certificate settings; over the next 20 s
//!   `b` writes no object more than 3 times and `a` writes nothing.
//!
//! The 20 s windows are observation periods, not waits for a condition.

mod common;

use btp_api::{names, BtpOperator};
use common::replica::{any_cluster, http_get, is_ok, lease_holder, Replica, LEASE};
use common::requests::Requests;
use common::{cr_ready, eventually, try_eventually};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use std::path::{Path, PathBuf};
use std::time::Duration;

const NS: &str = names::KYMA_SYSTEM;
const LEASE_DURATION: Duration = Duration::from_secs(4);
const WINDOW: Duration = Duration::from_secs(20);
const EXTRA_NAME: &str = "extra.example.com";
/// The chart version the new replica installs.
const NEW_CHART: &str = "v99.0.0";

/// `btp-manager run` flags of a replica here: the lease duration, no drain delay, the given resources.
fn args(resources: &Path, extra: &[&str]) -> Vec<String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut args = vec![
        "--shutdown-drain-delay=0s".to_string(),
        format!("--leader-election-lease-duration={}s", LEASE_DURATION.as_secs()),
        format!("--resources-path={}", resources.display()),
        format!("--manager-resources-path={}", repo.join("manager-resources").display()),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// The built-in operand chart.
fn built_in() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("module-resources")
}

async fn holder(client: &kube::Client) -> String {
    lease_holder(client, NS).await
}

/// Writes in the log from index `since` on (the Lease excepted: the election itself).
fn writes(log: &Requests, since: usize) -> Vec<btp_apiserver::testing::RequestRecord> {
    log.since(since)
        .into_iter()
        .filter(|r| matches!(r.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE") && r.resource != "leases")
        .collect()
}

/// How many writes of the shared webhook state each replica sent: (certificate Secret, validating, mutating).
fn shared_writes(writes: &[btp_apiserver::testing::RequestRecord], replica: &Replica) -> (usize, usize, usize) {
    let count = |resource: &str, name: &str| {
        writes
            .iter()
            .filter(|r| replica.sent(&r.user_agent) && r.resource == resource && r.name == name && r.code < 300)
            .count()
    };
    (
        count("secrets", names::webhook::CERT_SECRET_NAME),
        count(
            "validatingwebhookconfigurations",
            names::webhook::VALIDATING_CONFIGURATION,
        ),
        count("mutatingwebhookconfigurations", names::webhook::MUTATING_CONFIGURATION),
    )
}

/// Whether the stored serving certificate names `name`.
async fn stored_leaf_names(client: &kube::Client, name: &str) -> bool {
    let Ok(Some(secret)) = Api::<Secret>::namespaced(client.clone(), NS)
        .get_opt(names::webhook::CERT_SECRET_NAME)
        .await
    else {
        return false;
    };
    let data = secret.data.unwrap_or_default();
    let Some(cert) = data.get("tls.crt") else {
        return false;
    };
    btp_certs::parse_cert_pem(&cert.0).is_ok_and(|info| info.dns_names.iter().any(|n| n == name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_writer_across_settings_and_a_paused_leader_writes_nothing_after_its_lease() {
    let Some(cluster) = any_cluster("rollout").await else {
        return;
    };
    let (client, dir, log) = (cluster.client.clone(), cluster.dir.clone(), cluster.requests.clone());
    let kubeconfig = cluster.kubeconfig.clone();
    let a = Replica::start(
        "a",
        &kubeconfig,
        &dir,
        &args(&built_in(), &["--webhook-dns-name", EXTRA_NAME]),
    );
    eventually(Duration::from_secs(30), "a ready and leading", || async {
        a.ready().await && holder(&client).await == "a"
    })
    .await;
    let chart = dir.join("new-chart");
    common::copy_chart(&chart);
    std::fs::write(chart.join("chart-version"), format!("{NEW_CHART}\n")).unwrap();
    // Side by side from b's start: the window covers b's start, the CR's provisioning and the quiet after.
    let side_by_side = log.len();
    let b_started = std::time::Instant::now();
    let b = Replica::start("b", &kubeconfig, &dir, &args(&chart, &[]));
    eventually(
        Duration::from_secs(30),
        "b ready: it serves the certificate a issued",
        || b.ready(),
    )
    .await;
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), NS);
    crs.create(&PostParams::default(), &BtpOperator::new(names::BTP_OPERATOR_NAME))
        .await
        .expect("the valid CR is admitted");
    eventually(Duration::from_secs(30), "the CR is Ready", || cr_ready(&crs)).await;

    tokio::time::sleep(WINDOW.saturating_sub(b_started.elapsed())).await;
    let window = writes(&log, side_by_side);
    let by_a = shared_writes(&window, &a);
    assert!(
        by_a.0 <= 3 && by_a.1 <= 3 && by_a.2 <= 3,
        "the leader writes the certificate Secret and each configuration at most 3 times in {WINDOW:?}: {by_a:?}"
    );
    let from_b: Vec<_> = window.iter().filter(|r| b.sent(&r.user_agent)).collect();
    assert!(
        from_b.is_empty(),
        "the follower writes nothing: {from_b:#?}\n--- b:\n{}",
        b.logs()
    );
    assert!(
        stored_leaf_names(&client, EXTRA_NAME).await,
        "the leader's settings are what is stored"
    );
    assert!(
        b.logs().contains("the leading replica decides"),
        "the follower says once that its settings differ:\n{}",
        b.logs()
    );

    // Pause the leader past its Lease with a trigger queued: an operand object it would restore.
    let paused = log.len();
    a.signal("-STOP");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    configmaps
        .delete("sap-btp-operator-config", &DeleteParams::default())
        .await
        .expect("deleting an operand ConfigMap");
    eventually(
        LEASE_DURATION * 3,
        "b takes the Lease once a's stands unrenewed",
        || async { holder(&client).await == "b" },
    )
    .await;
    eventually(Duration::from_secs(30), "b restores the operand ConfigMap", || async {
        configmaps
            .get_opt("sap-btp-operator-config")
            .await
            .ok()
            .flatten()
            .is_some()
    })
    .await;
    let resumed = log.len();
    a.signal("-CONT");
    let lost = try_eventually(Duration::from_secs(30), || async {
        a.logs().contains("no longer holds the Lease")
    })
    .await;
    assert!(lost.is_ok(), "a notices it lost the Lease:\n{}", a.logs());

    // Side by side with b leading: b converges the stored state to its settings in a few writes.
    tokio::time::sleep(WINDOW).await;
    let from_a: Vec<_> = writes(&log, resumed)
        .into_iter()
        .filter(|r| a.sent(&r.user_agent))
        .collect();
    assert!(
        from_a.is_empty(),
        "the resumed replica sends no write before it leads again: {from_a:#?}\n--- a:\n{}",
        a.logs()
    );
    assert_eq!(holder(&client).await, "b", "b still leads");
    // From the pause on: b's takeover, its convergence and the quiet after.
    let after = writes(&log, paused);
    let by_b = shared_writes(&after, &b);
    assert!(
        by_b.0 <= 3 && by_b.1 <= 3 && by_b.2 <= 3,
        "the new leader converges in a few writes: {by_b:?}"
    );
    let mut per_object = std::collections::BTreeMap::<String, usize>::new();
    for r in after.iter().filter(|r| b.sent(&r.user_agent)) {
        *per_object
            .entry(format!("{} {}/{}", r.resource, r.namespace, r.name))
            .or_default() += 1;
    }
    assert!(
        per_object.values().all(|n| *n <= 3),
        "no object is written in a loop: {per_object:#?}"
    );
    let restored = configmaps.get("sap-btp-operator-config").await.unwrap();
    assert_eq!(
        restored
            .metadata
            .labels
            .unwrap_or_default()
            .get(names::CHART_VERSION_LABEL)
            .map(String::as_str),
        Some(NEW_CHART),
        "the new leader applied its own chart version"
    );
    assert!(
        !stored_leaf_names(&client, EXTRA_NAME).await,
        "the new leader's settings are what is stored"
    );
    assert!(a.ready().await, "a serves the certificate b issued:\n{}", a.logs());
    assert!(cr_ready(&crs).await, "the CR stays Ready");
    println!(
        "rollout: a (leader) wrote {:?} (Secret, validating, mutating) in the {WINDOW:?} from b's start, b none; \
         from a's pause: b wrote {by_b:?}, a none after it resumed",
        by_a
    );
    drop((a, b));
    cluster.finish().await;
}

/// Before any replica has led, and with no configuration of ours registered (nothing waits for a caBundle, so
/// there are no first writes to make: `run` outside the cluster registers its own), the webhooks come up with
/// the first leader: a replica that cannot lead (the Lease is held by another identity) serves nothing, is not
/// ready (saying why), stays live and writes nothing; once the Lease is free it leads, issues the certificate,
/// registers the configurations and turns ready. Its request metrics (client-go's names) count what it sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_leader_brings_the_webhooks_up_and_a_follower_is_not_ready_before() {
    let Some(cluster) = any_cluster("rollout").await else {
        return;
    };
    let (client, dir, log) = (cluster.client.clone(), cluster.dir.clone(), cluster.requests.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let held: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": LEASE},
        "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600}
    }))
    .unwrap();
    leases.create(&PostParams::default(), &held).await.unwrap();
    let c = Replica::start("c", &cluster.kubeconfig, &dir, &args(&built_in(), &[]));
    // Started (it serves its probes and the webhook port), but nothing to serve yet.
    let why = eventually(Duration::from_secs(30), "c started and not ready", || async {
        http_get(c.health, "/readyz")
            .await
            .filter(|r| !r.contains("not started"))
    })
    .await;
    assert!(
        why.contains(" 503 ") && why.contains("caBundle"),
        "not ready before a leader issued the certificate, saying why: {why}"
    );
    let live = http_get(c.health, "/healthz").await.unwrap_or_default();
    assert!(is_ok(&live), "live meanwhile: {live}");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    assert!(
        secrets
            .get_opt(names::webhook::CERT_SECRET_NAME)
            .await
            .unwrap()
            .is_none(),
        "no certificate issued by a replica that does not lead"
    );
    let from_c: Vec<_> = writes(&log, 0).into_iter().filter(|r| c.sent(&r.user_agent)).collect();
    assert!(from_c.is_empty(), "a follower writes nothing: {from_c:#?}");

    // The holder lets go: c leads and brings the webhooks up.
    let mut free = leases.get(LEASE).await.unwrap();
    free.spec = Some(Default::default());
    leases.replace(LEASE, &PostParams::default(), &free).await.unwrap();
    let led = try_eventually(Duration::from_secs(30), || async {
        holder(&client).await == "c" && c.ready().await
    })
    .await;
    assert!(
        led.is_ok(),
        "c leads ({:?}), issues the certificate and is ready: {:?}\n{}",
        holder(&client).await,
        http_get(c.health, "/readyz").await,
        c.logs()
    );
    assert!(secrets
        .get_opt(names::webhook::CERT_SECRET_NAME)
        .await
        .unwrap()
        .is_some());
    let metrics = http_get(c.metrics, "/metrics").await.unwrap_or_default();
    for line in [
        "rest_client_requests_total{code=\"200\",method=\"GET\"}",
        "rest_client_requests_total{code=\"201\",method=\"POST\"}",
        "rest_client_request_duration_seconds_count{verb=\"PATCH\"}",
    ] {
        assert!(metrics.contains(line), "/metrics has {line}:\n{metrics}");
    }
    drop(c);
    cluster.finish().await;
}
