//! What a network does that a pause does not: hang (docs/behaviour.md#leader-election, #the-read-path). Two
//! manager processes side by side against an embedded API server, one of them reaching it through a silent
//! partition (`common/partition.rs`: a forwarder that, when cut, passes nothing and closes nothing):
//!
//! - the leader cut off, its follower connected: the follower leads within two Lease durations and restores
//!   an edit made meanwhile; the cut-off replica reports `btpmanager_leader 0` within one Lease duration;
//!   after the network returns it sends no write (Lease requests aside) before it leads again;
//! - a SIGTERM during the partition: the cut-off leader exits 0 within the drain delay and a Lease duration
//!   (its Lease requests and its release are bounded by its right), well within the Pod's grace period;
//! - a Lease write refused with 422 for as long as the test runs (an admission policy refusing it): the
//!   replica's requests about the Lease stay at a few a second, and are counted as conflicts;
//! - a store whose watch turns 403 (an RBAC change): an operand object deleted then is restored, its reads
//!   going to the API server;
//! - the window that remains for a write (docs/behaviour.md#leader-election): a write that reached the API
//!   server inside the right, whose admission is slow and whose abandonment the server never learns (the
//!   partition), is not committed after the right ends, because it told the server the time it had left
//!   (`?timeout=`); the same write without it is committed seconds after the client gave up (measured).
//!
//! The Lease is 4 s here (`BTP_PARTITION_LEASE_SECONDS` for another, e.g. the shipped 15). The deadlines are
//! the behaviour's bounds; the observation windows are periods in which nothing may happen. On a real cluster
//! (`BTP_E2E_KUBECONFIG`, with `BTP_E2E_AUDIT_LOG`) the replicas run beside it as the shipped ServiceAccount
//! (`common::replica::any_cluster`), the partition between one of them and the real API server; the 422 and
//! 403 tests need the embedded server's fault injection and skip there. Measured on kube-apiserver v1.36.2
//! with the shipped 15 s Lease: `btpmanager_leader 0` after 9.4 s, the follower leading after 14.6 s and the
//! edit restored after 14.8 s; a SIGTERM during the partition ended the replica after 5.0 s (drain delay 5 s).

mod common;
#[path = "common/partition.rs"]
mod partition;

use btp_api::{names, BtpOperator, Reason};
use btp_apiserver::testing::{FaultRule, RequestRecord};
use common::replica::{any_cluster, cluster, http_get, lease_holder, Replica};
use common::{cr_ready, eventually};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use partition::Partition;
use std::path::Path;
use std::time::{Duration, Instant};

const NS: &str = names::KYMA_SYSTEM;
/// The operand ConfigMap and the key the edit changes (the chart says `'true'`).
const CONFIGMAP: &str = "sap-btp-operator-config";
const EDITED_KEY: &str = "ENABLE_LIMITED_CACHE";
/// deploy/deployment.yaml's `terminationGracePeriodSeconds`.
const GRACE_PERIOD: Duration = Duration::from_secs(30);
/// The drain delay as shipped (`--shutdown-drain-delay`'s default).
const SHIPPED_DRAIN: Duration = Duration::from_secs(5);

/// One test at a time: their deadlines are a Lease's fractions (1.3 s of margin with a 4 s Lease), and four
/// manager processes side by side on two cores would eat into them.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn lease_duration() -> Duration {
    let seconds = std::env::var("BTP_PARTITION_LEASE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    Duration::from_secs(seconds)
}

/// Whether the test cannot run on the cluster under test (a real one: it needs the embedded server's fault
/// injection); says so as a skip.
fn needs_the_embedded_server(why: &str) -> bool {
    if common::real_cluster().is_none() {
        return false;
    }
    common::skip(why);
    true
}

/// `btp-manager run` flags of a replica here.
fn args(drain: Duration) -> Vec<String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    vec![
        format!("--shutdown-drain-delay={}s", drain.as_secs()),
        format!("--leader-election-lease-duration={}s", lease_duration().as_secs()),
        format!("--resources-path={}", repo.join("module-resources").display()),
        format!("--manager-resources-path={}", repo.join("manager-resources").display()),
    ]
}

async fn holder(client: &kube::Client) -> String {
    lease_holder(client, NS).await
}

/// What `btpmanager_leader` says on `replica`'s `/metrics` (None when it does not answer).
async fn leader_gauge(replica: &Replica) -> Option<u8> {
    let metrics = http_get(replica.metrics, "/metrics").await?;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("btpmanager_leader "))
        .and_then(|v| v.trim().parse().ok())
}

/// A counter on `replica`'s `/metrics` (0 when absent).
async fn counter(replica: &Replica, name: &str) -> f64 {
    let metrics = http_get(replica.metrics, "/metrics").await.unwrap_or_default();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn is_write(r: &RequestRecord) -> bool {
    matches!(r.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
}

/// What `deadline` has left from now (zero when past).
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

async fn edited_value(configmaps: &Api<ConfigMap>) -> Option<String> {
    configmaps
        .get_opt(CONFIGMAP)
        .await
        .ok()
        .flatten()
        .and_then(|cm| cm.data)
        .and_then(|d| d.get(EDITED_KEY).cloned())
}

/// `a` (through `partition`) leads, `b` follows, the CR is Ready.
async fn a_leads_through_the_partition(
    client: &kube::Client,
    kubeconfig: &Path,
    dir: &Path,
    drain: Duration,
) -> (Partition, Replica, Replica) {
    let (partition, through) = Partition::for_kubeconfig(kubeconfig).await;
    let a = Replica::start("a", &through, dir, &args(drain));
    eventually(Duration::from_secs(30), "a ready and leading", || async {
        a.ready().await && holder(client).await == "a"
    })
    .await;
    let b = Replica::start("b", kubeconfig, dir, &args(drain));
    eventually(Duration::from_secs(30), "b ready", || b.ready()).await;
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), NS);
    crs.create(&PostParams::default(), &BtpOperator::new(names::BTP_OPERATOR_NAME))
        .await
        .expect("the valid CR is admitted");
    eventually(Duration::from_secs(30), "the CR is Ready", || cr_ready(&crs)).await;
    assert_eq!(leader_gauge(&a).await, Some(1), "a reports that it leads");
    assert_eq!(leader_gauge(&b).await, Some(0));
    (partition, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_stops_leading_within_its_lease_and_its_follower_takes_over() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = any_cluster("partition").await else {
        return;
    };
    let lease = lease_duration();
    let (client, dir, log) = (cluster.client.clone(), cluster.dir.clone(), cluster.requests.clone());
    let (partition, a, b) = a_leads_through_the_partition(&client, &cluster.kubeconfig, &dir, Duration::ZERO).await;

    partition.cut();
    let cut = Instant::now();
    // An edit meanwhile: the connected follower must restore it once it leads.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    configmaps
        .patch(
            CONFIGMAP,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {EDITED_KEY: "false"}})),
        )
        .await
        .expect("editing the operand ConfigMap");

    eventually(
        left(cut + lease),
        "the cut-off leader reports btpmanager_leader 0 within one Lease",
        || async { leader_gauge(&a).await == Some(0) },
    )
    .await;
    let stopped_leading = cut.elapsed();
    eventually(
        left(cut + lease * 2),
        "the follower leads within two Lease durations",
        || async { holder(&client).await == "b" },
    )
    .await;
    let takeover = cut.elapsed();
    eventually(
        Duration::from_secs(30),
        "the new leader restores the edit made meanwhile",
        || async { edited_value(&configmaps).await.as_deref() == Some("true") },
    )
    .await;
    let restored = cut.elapsed();
    assert_eq!(leader_gauge(&b).await, Some(1), "b reports that it leads");
    assert!(
        a.logs().contains("no renewal within its validity"),
        "a says why it stopped leading:\n{}",
        a.logs()
    );

    // The network returns: a reads again (its own count of answered GETs moves; a real server's audit log
    // leaves reads of Leases out) and, b leading, writes nothing.
    const ANSWERED_GETS: &str = "rest_client_requests_total{code=\"200\",method=\"GET\"}";
    let healed_at = log.len();
    let gets_before = counter(&a, ANSWERED_GETS).await;
    partition.heal();
    let healed = Instant::now();
    eventually(
        Duration::from_secs(30),
        "a reads again after the network returns",
        || async { counter(&a, ANSWERED_GETS).await > gets_before },
    )
    .await;
    // Two Lease durations more in which a, following, may send nothing but Lease requests.
    tokio::time::sleep(lease * 2).await;
    // What the partition held reaches the API server now (as TCP delivers what it retransmits): a write a
    // sent into the partition while it still had the right, which it abandoned when the right ended, arrives
    // with its client gone and is answered 504 without effect (a v1.24 run: an Event, `timeout=1964ms`,
    // "context canceled"). That was sent before the network returned; a write sent after it would be
    // answered, the network being back.
    let (held, from_a): (Vec<_>, Vec<_>) = log
        .since(healed_at)
        .into_iter()
        .filter(|r| a.sent(&r.user_agent) && is_write(r) && r.resource != "leases")
        .partition(|r| r.code == 504 && !r.changed);
    if !held.is_empty() {
        println!(
            "partition: {} write(s) held by the partition reached the API server after it healed, abandoned by              a (504, no effect): {:?}",
            held.len(),
            held.iter().map(|r| format!("{} {}", r.method, r.path)).collect::<Vec<_>>()
        );
    }
    assert!(
        from_a.is_empty(),
        "after the network returns, a sends no write before it leads again: {from_a:#?}\n--- a:\n{}",
        a.logs()
    );
    assert_eq!(holder(&client).await, "b", "b still leads");
    assert_eq!(leader_gauge(&a).await, Some(0));
    println!(
        "partition (Lease {lease:?}): the cut-off leader reported btpmanager_leader 0 after {stopped_leading:?}, \
         the follower led after {takeover:?} and restored the edit after {restored:?}; after the network \
         returned ({:?} observed), no write from the cut-off replica",
        healed.elapsed()
    );
    drop((a, b, partition));
    cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_during_a_partition_ends_the_cut_off_leader_within_the_grace_period() {
    let _serial = SERIAL.lock().await;
    let Some(cluster) = any_cluster("partition-sigterm").await else {
        return;
    };
    let lease = lease_duration();
    let (client, dir) = (cluster.client.clone(), cluster.dir.clone());
    let (partition, mut a, b) = a_leads_through_the_partition(&client, &cluster.kubeconfig, &dir, SHIPPED_DRAIN).await;

    partition.cut();
    a.signal("-TERM");
    let (status, took) = a.exited(GRACE_PERIOD).await;
    assert!(status.success(), "a exits 0 after SIGTERM, got {status}:\n{}", a.logs());
    // Its Lease requests and its release end with its right (two thirds of the Lease), the drain takes its
    // delay, side by side.
    assert!(
        took < SHIPPED_DRAIN + lease,
        "a exits within the drain delay and one Lease ({took:?}):\n{}",
        a.logs()
    );
    eventually(lease * 2, "b takes over", || async { holder(&client).await == "b" }).await;
    println!(
        "partition (Lease {lease:?}): a SIGTERM to the cut-off leader ended it after {took:?} (drain delay \
         {SHIPPED_DRAIN:?}, grace period {GRACE_PERIOD:?})"
    );
    drop((b, partition));
    cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lasting_422_on_the_lease_is_retried_at_a_few_requests_a_second() {
    let _serial = SERIAL.lock().await;
    if needs_the_embedded_server(
        "refuses every Lease patch with 422 by fault injection (on a real server an admission policy would; not set up)",
    ) {
        return;
    }
    let lease = lease_duration();
    let (server, _client, dir) = cluster("partition-422").await;
    let log = server.request_log();
    server.faults().add(FaultRule {
        fraction: 1.0,
        code: 422,
        verb: Some("patch".into()),
        resource: Some("leases".into()),
        user: None,
    });
    let a = Replica::start("a", &dir.join("kubeconfig"), &dir, &args(Duration::ZERO));
    // Past the first pauses (at once, then lease/15 doubling): the pause has reached a third of the Lease.
    eventually(Duration::from_secs(30), "a few conflicts counted", || async {
        counter(&a, "btpmanager_leader_election_conflicts_total").await >= 5.0
    })
    .await;
    let (since, started) = (log.len(), Instant::now());
    let window = lease * 3;
    tokio::time::sleep(window).await;
    let requests = log
        .since(since)
        .into_iter()
        .filter(|r| a.sent(&r.user_agent) && r.resource == "leases" && r.verb != "watch")
        .count();
    let per_second = requests as f64 / started.elapsed().as_secs_f64();
    // At most a read and a write per third of the Lease: 1.5 a second with a 4 s Lease.
    let bound = 2.0 / (lease.as_secs_f64() / 3.0);
    assert!(
        per_second <= bound,
        "{requests} Lease requests in {window:?} ({per_second:.2}/s, at most {bound:.2}/s)\n{}",
        a.logs()
    );
    assert!(requests > 0, "it goes on trying");
    assert!(
        a.logs().contains("refused again as a conflict; backing off"),
        "the conflicts are logged:\n{}",
        a.logs()
    );
    assert_eq!(leader_gauge(&a).await, Some(0), "it never led");
    println!("lasting 422 on the Lease (Lease {lease:?}): {requests} Lease requests in {window:?} ({per_second:.2}/s)");
    drop(a);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_store_whose_watch_turns_403_reads_from_the_server_and_restores_a_deleted_object() {
    let _serial = SERIAL.lock().await;
    if needs_the_embedded_server(
        "turns list and watch of ConfigMaps to 403 by fault injection (on a real server an RBAC change would; not set up)",
    ) {
        return;
    }
    let env = common::ready_env(btp_manager::config::Config::default()).await;
    let server = env.server().expect("the embedded API server");
    let (faults, log) = (server.faults(), server.request_log());
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    assert!(configmaps.get_opt(CONFIGMAP).await.unwrap().is_some());
    // Listing and watching ConfigMaps is refused from now on (getting them is not), and the open watches that
    // see an event end: the manager's ConfigMap store, which has listed, can no longer follow.
    for verb in ["list", "watch"] {
        faults.fail(1.0, 403, Some(verb), Some("configmaps"));
    }
    faults.cut_watches_after(Some(0));
    let since = log.len();
    configmaps
        .delete(CONFIGMAP, &DeleteParams::default())
        .await
        .expect("deleting the operand ConfigMap");
    eventually(Duration::from_secs(10), "the ConfigMap watch is refused", || async {
        log.since(since)
            .iter()
            .any(|r| r.resource == "configmaps" && r.verb == "watch" && r.code == 403)
    })
    .await;
    faults.cut_watches_after(None);
    eventually(
        Duration::from_secs(30),
        "the deleted ConfigMap is restored, read from the API server",
        || async { configmaps.get_opt(CONFIGMAP).await.ok().flatten().is_some() },
    )
    .await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    faults.clear();
    env.stop().await;
}

/// How long the slow webhook of [`the_window_a_write_has_after_its_right_ends`] takes.
const SLOW_WEBHOOK: Duration = Duration::from_secs(3);
/// The right a write there is sent with (it ends while the webhook is still being called).
const RIGHT: Duration = Duration::from_millis(1500);
const SLOW_NS: &str = "btp-write-window-test";
const SLOW_CONFIGMAP: &str = "slow-to-admit";
/// A ConfigMap the slow webhook does not see.
const QUICK_CONFIGMAP: &str = "quick-to-admit";
/// How long the network holds the write of the third case.
const HOLD: Duration = Duration::from_secs(4);

/// A validating webhook on loopback that answers every review, allowing it, after [`SLOW_WEBHOOK`]; counts
/// the calls it received. Returns its URL and CA.
async fn slow_webhook(calls: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> (String, String) {
    use btp_certs::{generate_ca, generate_leaf, CaSpec, KeyAlgorithm, LeafSpec};
    let now = std::time::SystemTime::now();
    let ca = generate_ca(
        &CaSpec {
            common_name: Some("slow-webhook-ca".into()),
            validity: Duration::from_secs(3600),
            key: KeyAlgorithm::EcdsaP256,
        },
        now,
    )
    .unwrap();
    let leaf = generate_leaf(
        &ca,
        &LeafSpec {
            common_name: None,
            dns_names: vec!["localhost".into()],
            ip_addresses: vec!["127.0.0.1".parse().unwrap()],
            validity: Duration::from_secs(3600),
            key: KeyAlgorithm::EcdsaP256,
        },
        now,
    )
    .unwrap();
    let cert = btp_webhooks::tls::SwappableCert::from_pem(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |axum::Json(review): axum::Json<serde_json::Value>| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                // A dry run is the test's probe that the API server calls this webhook: answered at once.
                if review["request"]["dryRun"] != true {
                    tokio::time::sleep(SLOW_WEBHOOK).await;
                }
                axum::Json(serde_json::json!({
                    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": review["request"]["uid"], "allowed": true}
                }))
            }
        }),
    );
    tokio::spawn(btp_webhooks::server::serve(
        listener,
        btp_webhooks::tls::server_config(cert).unwrap(),
        app,
        std::future::pending(),
    ));
    (format!("https://{addr}/"), ca.cert_pem)
}

/// A client of the API server `kubeconfig` names, through `partition`.
async fn client_through(partition: &Partition, kubeconfig: &str) -> kube::Client {
    let config = kube::config::Kubeconfig::from_yaml(&partition.kubeconfig(kubeconfig)).unwrap();
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .unwrap();
    btp_manager::manager::manager_client(config).unwrap()
}

/// The value the writes set, as the API server has it.
async fn slow_value(client: &kube::Client) -> Option<String> {
    Api::<ConfigMap>::namespaced(client.clone(), SLOW_NS)
        .get(SLOW_CONFIGMAP)
        .await
        .ok()
        .and_then(|cm| cm.data)
        .and_then(|d| d.get("value").cloned())
}

/// Send `patch` (setting `value`) with `client`, abandoned after [`RIGHT`] if `guarded` does not do it: once
/// the slow webhook has the call, cut `partition` (the server never learns that the client gave up). Returns
/// when the client gave up, and when (if within [`SLOW_WEBHOOK`] and 2 s more) the value was committed.
async fn abandoned_write(
    admin: &kube::Client,
    (client, partition): (kube::Client, &Partition),
    value: &str,
    calls: &std::sync::atomic::AtomicUsize,
) -> (Duration, Option<Duration>) {
    let before = calls.load(std::sync::atomic::Ordering::SeqCst);
    let configmaps: Api<ConfigMap> = Api::namespaced(client, SLOW_NS);
    let patch = serde_json::json!({"data": {"value": value}});
    let sent = Instant::now();
    let write = tokio::spawn(async move {
        let params = PatchParams::default();
        // The guarded client abandons it itself at the right's end; the plain one is given up at the same time.
        tokio::time::timeout(RIGHT, configmaps.patch(SLOW_CONFIGMAP, &params, &Patch::Merge(&patch))).await
    });
    eventually(RIGHT, "the API server calls the slow webhook", || async {
        calls.load(std::sync::atomic::Ordering::SeqCst) > before
    })
    .await;
    partition.cut();
    let outcome = write.await.expect("the write's task");
    let gave_up = sent.elapsed();
    assert!(
        !matches!(outcome, Ok(Ok(_))),
        "no answer can come through the partition: {outcome:?}"
    );
    let committed = common::try_eventually(SLOW_WEBHOOK + Duration::from_secs(2), || async {
        slow_value(admin).await.as_deref() == Some(value)
    })
    .await
    .ok()
    .map(|()| sent.elapsed());
    (gave_up, committed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_a_write_has_after_its_right_ends() {
    let _serial = SERIAL.lock().await;
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::Namespace;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    // The embedded API server, or the real one of BTP_E2E_KUBECONFIG (it must reach this machine's loopback).
    let (server, kubeconfig) = match common::real_cluster() {
        Some(path) => (None, std::fs::read_to_string(path).expect("BTP_E2E_KUBECONFIG")),
        None => {
            let server = btp_apiserver::ApiServer::start(btp_apiserver::Config::default())
                .await
                .expect("API server");
            let kubeconfig = server.kubeconfig_yaml();
            (Some(server), kubeconfig)
        }
    };
    let admin = {
        let config = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
        kube::Client::try_from(
            kube::Config::from_custom_kubeconfig(config, &Default::default())
                .await
                .unwrap(),
        )
        .unwrap()
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let (url, ca) = slow_webhook(calls.clone()).await;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": SLOW_NS}})).unwrap();
    let _ = namespaces.create(&PostParams::default(), &ns).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), SLOW_NS);
    let _ = configmaps.delete(SLOW_CONFIGMAP, &DeleteParams::default()).await;
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": SLOW_CONFIGMAP, "labels": {"btp-write-window": "slow"}},
        "data": {"value": "before"}
    }))
    .unwrap();
    configmaps.create(&PostParams::default(), &cm).await.unwrap();
    use base64::Engine as _;
    let hooks: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    let hook: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "btp-write-window"},
        "webhooks": [{
            "name": "slow.btp-write-window.example.com",
            "clientConfig": {"url": url, "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["configmaps"]}],
            "objectSelector": {"matchLabels": {"btp-write-window": "slow"}},
            "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail", "timeoutSeconds": 10
        }]
    }))
    .unwrap();
    let _ = hooks.delete("btp-write-window", &DeleteParams::default()).await;
    hooks.create(&PostParams::default(), &hook).await.unwrap();
    // A real API server takes up a new webhook configuration a moment later (its informer): until a dry run
    // reaches the webhook, a write would not.
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    common::eventually(
        Duration::from_secs(30),
        "the API server calls the new webhook",
        || async {
            let before = calls.load(std::sync::atomic::Ordering::SeqCst);
            let probe = serde_json::json!({"data": {"value": "probe"}});
            let _ = configmaps.patch(SLOW_CONFIGMAP, &dry_run, &Patch::Merge(&probe)).await;
            calls.load(std::sync::atomic::Ordering::SeqCst) > before
        },
    )
    .await;

    // The manager's client: a write with RIGHT left of the right to write.
    let first = Partition::for_kubeconfig_text(&kubeconfig).await;
    let fence = btp_manager::fence::Fence::shut();
    fence.renewed(Instant::now(), RIGHT);
    let guarded = btp_manager::rest_client::guard(
        client_through(&first, &kubeconfig).await,
        fence,
        None,
        "btp-manager-test (write-window)",
    );
    let (gave_up, committed) = abandoned_write(&admin, (guarded, &first), "guarded", &calls).await;
    assert!(
        committed.is_none(),
        "a write abandoned at the right's end ({gave_up:?}) is not committed after it (committed after {committed:?})"
    );
    assert_eq!(slow_value(&admin).await.as_deref(), Some("before"));

    // The same write without `?timeout=`: the server, not knowing the client gave up, commits it once the
    // webhook answers.
    let second = Partition::for_kubeconfig_text(&kubeconfig).await;
    let plain = client_through(&second, &kubeconfig).await;
    let (plain_gave_up, plain_committed) = abandoned_write(&admin, (plain, &second), "plain", &calls).await;
    let plain_committed = plain_committed.expect("without ?timeout= the server commits it after the webhook answers");
    println!(
        "write window: with ?timeout= a write the client abandoned at the right's end ({gave_up:?}) was not \
         committed (observed for {:?} more); without it, the same write was committed {:?} after the client \
         gave up (slow webhook {SLOW_WEBHOOK:?})",
        SLOW_WEBHOOK + Duration::from_secs(2),
        plain_committed.saturating_sub(plain_gave_up)
    );

    // A write whose bytes the network holds (sent into the partition inside the right) reaches the server only
    // when the network delivers again, and the server's deadline counts from then; but the client's
    // abandonment (its connection closed at the right's end) is delivered right behind it, and the server
    // drops the request on seeing it.
    let quick: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": QUICK_CONFIGMAP}, "data": {"value": "before"}
    }))
    .unwrap();
    let _ = configmaps.delete(QUICK_CONFIGMAP, &DeleteParams::default()).await;
    configmaps.create(&PostParams::default(), &quick).await.unwrap();
    let third = Partition::for_kubeconfig_text(&kubeconfig).await;
    let fence = btp_manager::fence::Fence::shut();
    let held_client = btp_manager::rest_client::guard(
        client_through(&third, &kubeconfig).await,
        fence.clone(),
        None,
        "btp-manager-test (write-window)",
    );
    // Connected first (a pooled connection), then cut.
    Api::<ConfigMap>::namespaced(held_client.clone(), SLOW_NS)
        .get(QUICK_CONFIGMAP)
        .await
        .unwrap();
    third.cut();
    fence.renewed(Instant::now(), RIGHT);
    let sent = Instant::now();
    let patch = serde_json::json!({"data": {"value": "held"}});
    let outcome = Api::<ConfigMap>::namespaced(held_client, SLOW_NS)
        .patch(QUICK_CONFIGMAP, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    assert!(outcome.is_err(), "abandoned at the right's end: {outcome:?}");
    let right_ended = sent.elapsed();
    tokio::time::sleep(HOLD.saturating_sub(sent.elapsed())).await;
    third.heal();
    let quick_value = || async {
        configmaps
            .get(QUICK_CONFIGMAP)
            .await
            .ok()
            .and_then(|cm| cm.data)
            .and_then(|d| d.get("value").cloned())
    };
    let held_committed = common::try_eventually(Duration::from_secs(5), || async {
        quick_value().await.as_deref() == Some("held")
    })
    .await
    .ok()
    .map(|()| sent.elapsed());
    // Whether the server sees the close before it commits is a race (on a loaded machine it lost it: committed
    // 2.6 s after the right ended): the window docs/behaviour.md#leader-election states, printed, not asserted.
    match held_committed {
        None => println!(
            "write window: a write held by the network for {HOLD:?} (its right ended after {right_ended:?}) was not \
             committed when the network delivered it with the client's close behind it (observed for 5 s)"
        ),
        Some(at) => println!(
            "write window: a write held by the network for {HOLD:?} (its right ended after {right_ended:?}) was \
             committed {:?} after the right ended: the server read it before the client's close",
            at.saturating_sub(right_ended)
        ),
    }
    // The namespace stays (a real one takes seconds to terminate, and refuses creates meanwhile).
    let _ = hooks.delete("btp-write-window", &DeleteParams::default()).await;
    for name in [SLOW_CONFIGMAP, QUICK_CONFIGMAP] {
        let _ = configmaps.delete(name, &DeleteParams::default()).await;
    }
    drop((first, second, third, server));
}
