//! Graceful shutdown and leader handover with two real manager processes.
//!
//! Two processes of the built binary run `run --leader-elect` (distinct ports and HOSTNAME identities)
//! against an embedded API server started here. Both register the same webhook URL: a small TCP proxy
//! in front of them plays the Service and its endpoints controller (it sends new connections only to
//! replicas whose `/readyz` answers 200, re-checked every 100 ms). A stream of webhook requests runs
//! through the API server (misnamed BtpOperators, refused by the validating webhook; any other answer,
//! e.g. a webhook call failing, counts as a failure) while:
//! - the leader gets SIGTERM: no request fails, the standby leads within 2 s, the CR stays Ready and the
//!   new leader reconciles, the old leader exits 0;
//! - the new leader is killed with SIGKILL: a third replica leads within the lease duration.
//!
//! Drain and handover times are printed (performance numbers belong to benchmarks; the deadlines here are
//! wait deadlines).

mod common;

use btp_api::{names, BtpOperator};
use common::replica::{cluster, lease_holder, ready, Replica};
use common::{cr_ready, eventually, reconcile_now_in};
use futures::FutureExt as _;
use kube::api::{Api, PostParams};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NS: &str = names::KYMA_SYSTEM;
const DRAIN: &str = "1s";
/// Concurrent webhook request streams.
const WORKERS: usize = 4;
const LEASE_DURATION: Duration = Duration::from_secs(4);

/// How long `wait` took.
async fn timed(wait: impl std::future::Future<Output = ()>) -> Duration {
    let start = Instant::now();
    wait.await;
    start.elapsed()
}

/// `btp-manager run` flags of every replica here: the drain delay, the lease duration, the webhook URL of the
/// proxy, the built-in resources.
fn args(proxy: SocketAddr) -> Vec<String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    vec![
        "--shutdown-drain-delay".into(),
        DRAIN.into(),
        format!("--leader-election-lease-duration={}s", LEASE_DURATION.as_secs()),
        format!("--webhook-url=https://{proxy}"),
        format!("--resources-path={}", repo.join("module-resources").display()),
        format!("--manager-resources-path={}", repo.join("manager-resources").display()),
    ]
}

/// Plays the webhook Service: new connections go to a replica whose /readyz is 200.
struct Proxy {
    addr: SocketAddr,
    backends: Arc<Mutex<Vec<(SocketAddr, SocketAddr, bool)>>>,
}

impl Proxy {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let backends: Arc<Mutex<Vec<(SocketAddr, SocketAddr, bool)>>> = Arc::default();
        // The kubelet's readiness probe and the endpoints controller: re-check readiness every 100 ms; an endpoint
        // becomes ready on one success and unready after `failureThreshold` (3, the Kubernetes default, which
        // deploy/deployment.yaml keeps) failures in a row, as a kubelet decides. One slow probe on a loaded
        // machine must not take a serving replica out.
        let watched = backends.clone();
        tokio::spawn(async move {
            const FAILURE_THRESHOLD: u32 = 3;
            let mut failures: std::collections::HashMap<SocketAddr, u32> = std::collections::HashMap::new();
            loop {
                let list: Vec<(SocketAddr, SocketAddr)> =
                    watched.lock().unwrap().iter().map(|(h, w, _)| (*h, *w)).collect();
                for (health, webhook) in list {
                    let failed = failures.entry(webhook).or_default();
                    *failed = if ready(health).await {
                        0
                    } else {
                        failed.saturating_add(1)
                    };
                    let ok = *failed == 0
                        || (*failed < FAILURE_THRESHOLD
                            && watched.lock().unwrap().iter().any(|b| b.1 == webhook && b.2));
                    for b in watched.lock().unwrap().iter_mut().filter(|b| b.1 == webhook) {
                        b.2 = ok;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let routed = backends.clone();
        let next = Arc::new(AtomicUsize::new(0));
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let ready: Vec<SocketAddr> = routed.lock().unwrap().iter().filter(|b| b.2).map(|b| b.1).collect();
                if ready.is_empty() {
                    continue; // no endpoint: the connection is refused
                }
                let target = ready[next.fetch_add(1, Ordering::Relaxed) % ready.len()];
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Self { addr, backends }
    }

    /// Whether the endpoints list `replica` as ready (what the API server's calls through the Service see).
    fn serves(&self, replica: &Replica) -> bool {
        self.backends
            .lock()
            .unwrap()
            .iter()
            .any(|b| b.1 == replica.webhook && b.2)
    }

    fn add(&self, replica: &Replica) {
        self.backends
            .lock()
            .unwrap()
            .push((replica.health, replica.webhook, false));
    }
}

/// Misnamed BtpOperators through the API server, from a few concurrent clients, until stopped.
struct Stream {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Stream {
    fn start(client: kube::Client) -> Self {
        let (stop, sent, failures) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
            Arc::default(),
        );
        let crs: Api<BtpOperator> = Api::namespaced(client, NS);
        let next = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                let (stop, sent, failures, crs, next): (_, _, Arc<Mutex<Vec<String>>>, _, _) = (
                    stop.clone(),
                    sent.clone(),
                    Arc::clone(&failures),
                    crs.clone(),
                    next.clone(),
                );
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        let outcome = crs
                            .create(&PostParams::default(), &BtpOperator::new(&format!("misnamed-{n}")))
                            .await;
                        sent.fetch_add(1, Ordering::Relaxed);
                        match outcome {
                            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("denied the request") => {}
                            other => failures.lock().unwrap().push(format!("request {n}: {other:?}")),
                        }
                    }
                })
            })
            .collect();
        let task = tokio::spawn(futures::future::join_all(workers).map(drop));
        Self {
            stop,
            sent,
            failures,
            task,
        }
    }

    fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stop; how many were sent and the failures.
    async fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        let failures = self.failures.lock().unwrap().clone();
        (self.sent.load(Ordering::Relaxed), failures)
    }
}

async fn holder(client: &kube::Client) -> String {
    lease_holder(client, NS).await
}

/// On the embedded server: two replicas as processes behind a proxy that plays the Service (below). On a real
/// cluster (`BTP_E2E_KUBECONFIG`): [`a_rolling_update_as_shipped_fails_no_admission_request`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_over_without_failed_requests_and_sigkill_within_the_lease_duration() {
    if let Some(cluster) = common::shipped::RealCluster::connect().await {
        return a_rolling_update_as_shipped_fails_no_admission_request(cluster).await;
    }
    let (_server, client, dir) = cluster("shutdown").await;
    let kubeconfig = dir.join("kubeconfig");
    let proxy = Proxy::start().await;
    let mut a = Replica::start("manager-a", &kubeconfig, &dir, &args(proxy.addr));
    proxy.add(&a);
    eventually(
        Duration::from_secs(30),
        "manager-a ready, leading and in the endpoints",
        || async { ready(a.health).await && holder(&client).await == "manager-a" && proxy.serves(&a) },
    )
    .await;
    let mut b = Replica::start("manager-b", &kubeconfig, &dir, &args(proxy.addr));
    proxy.add(&b);
    eventually(
        Duration::from_secs(30),
        "manager-b ready and in the endpoints",
        || async { ready(b.health).await && proxy.serves(&b) },
    )
    .await;

    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), NS);
    crs.create(&PostParams::default(), &BtpOperator::new(names::BTP_OPERATOR_NAME))
        .await
        .expect("the valid CR is admitted");
    eventually(Duration::from_secs(20), "the CR is Ready", || cr_ready(&crs)).await;

    // SIGTERM the leader under a stream of webhook requests.
    let stream = Stream::start(client.clone());
    eventually(Duration::from_secs(10), "the stream is flowing", || async {
        stream.sent() >= 10
    })
    .await;
    a.signal("-TERM");
    let sigterm = Instant::now();
    let not_ready = timed(eventually(Duration::from_secs(2), "manager-a not ready", || async {
        !ready(a.health).await
    }))
    .await;
    let handover = timed(eventually(
        Duration::from_secs(2),
        "manager-b leads within 2 s of the SIGTERM",
        || async { holder(&client).await == "manager-b" },
    ))
    .await;
    let (status, _) = a.exited(Duration::from_secs(25)).await;
    let exit_after = sigterm.elapsed();
    assert!(
        status.success(),
        "manager-a exits 0 after SIGTERM, got {status}:\n{}",
        a.logs()
    );
    let sent_at_exit = stream.sent();
    eventually(Duration::from_secs(10), "requests after manager-a exited", || async {
        stream.sent() >= sent_at_exit + 20
    })
    .await;
    let (sent, failures) = stream.finish().await;
    assert!(
        failures.is_empty(),
        "{} of {} webhook requests failed around the SIGTERM:\n{}\n--- manager-a:\n{}",
        failures.len(),
        sent,
        failures.join("\n"),
        a.logs()
    );
    let leader_logs = a.logs();
    assert!(
        leader_logs.contains("lease released"),
        "manager-a released the Lease:\n{leader_logs}"
    );

    // The CR stays Ready, and the new leader reconciles it.
    assert!(cr_ready(&crs).await, "the CR stays Ready");
    // manager-b reconciles (consumes the annotation).
    reconcile_now_in(&crs, Duration::from_secs(10)).await;
    assert!(cr_ready(&crs).await, "the CR stays Ready under the new leader");

    // SIGKILL the new leader: a third replica takes over once the Lease expires.
    let mut c = Replica::start("manager-c", &kubeconfig, &dir, &args(proxy.addr));
    proxy.add(&c);
    eventually(Duration::from_secs(30), "manager-c ready", || ready(c.health)).await;
    b.signal("-KILL");
    let _ = b.exited(Duration::from_secs(5)).await;
    let takeover = timed(eventually(
        LEASE_DURATION + Duration::from_secs(3),
        "manager-c leads within the lease duration",
        || async { holder(&client).await == "manager-c" },
    ))
    .await;
    c.signal("-TERM");
    let (status, _) = c.exited(Duration::from_secs(25)).await;
    assert!(status.success(), "manager-c exits 0:\n{}", c.logs());

    println!(
        "SIGTERM: not ready after {not_ready:?}, standby leading after {handover:?}, exit 0 after {exit_after:?} \
         (drain delay {DRAIN}); {} webhook requests, none failed. SIGKILL: standby leading after {takeover:?} \
         (lease duration {LEASE_DURATION:?})",
        sent
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A rolling update of the manager as shipped, on a real cluster: `deploy/` installed as docs/install.md says,
/// the CR Ready, a stream of misnamed BtpOperators through the real API server (each must be refused by our
/// webhook: anything else counts as a failed admission request), then `kubectl rollout restart`: the
/// Deployment controller starts a new replica, and once it is ready (its readiness probe, its EndpointSlice)
/// deletes an old one, whose container gets SIGTERM and drains (the shipped `--shutdown-drain-delay`), twice.
/// No admission request fails, a new replica leads and reconciles, the CR stays Ready.
async fn a_rolling_update_as_shipped_fails_no_admission_request(cluster: common::shipped::RealCluster) {
    use common::shipped::{run_ok, Shipped, DEPLOYMENT};
    use k8s_openapi::api::core::v1::Pod;
    let mut shipped = Shipped::install(&cluster).await;
    let client = cluster.client.clone();
    shipped.create_secret_and_cr(&client).await;
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), NS);
    eventually(Duration::from_secs(60), "the CR is Ready", || cr_ready(&crs)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = kube::api::ListParams::default().labels("app.kubernetes.io/component=btp-manager.kyma-project.io");
    let names_of = |list: Vec<Pod>| -> Vec<String> { list.into_iter().filter_map(|p| p.metadata.name).collect() };
    let before = names_of(pods.list(&selector).await.unwrap().items);

    let stream = Stream::start(client.clone());
    eventually(Duration::from_secs(10), "the stream is flowing", || async {
        stream.sent() >= 10
    })
    .await;
    let started = Instant::now();
    let restart = [
        "kubectl",
        "-n",
        NS,
        "rollout",
        "restart",
        &format!("deployment/{DEPLOYMENT}"),
    ]
    .map(String::from);
    run_ok(&cluster.kubeconfig, &restart).await;
    let status = [
        "kubectl",
        "-n",
        NS,
        "rollout",
        "status",
        &format!("deployment/{DEPLOYMENT}"),
    ]
    .map(String::from);
    run_ok(&cluster.kubeconfig, &status).await;
    // The old replicas are gone (their containers drained and exited), two new ones serve.
    let after = eventually(Duration::from_secs(60), "only the new replicas are left", || async {
        let now = names_of(pods.list(&selector).await.unwrap().items);
        (now.len() == 2 && now.iter().all(|p| !before.contains(p))).then_some(now)
    })
    .await;
    let rolled = started.elapsed();
    let sent_after = stream.sent();
    eventually(Duration::from_secs(20), "requests after the rollout", || async {
        stream.sent() >= sent_after + 20
    })
    .await;
    let (sent, failures) = stream.finish().await;
    assert!(
        failures.is_empty(),
        "{} of {} admission requests failed during the rolling update:\n{}\n{}",
        failures.len(),
        sent,
        failures.join("\n"),
        shipped.logs()
    );
    let leader = eventually(Duration::from_secs(30), "a new replica leads", || async {
        let holder = holder(&client).await;
        after.contains(&holder).then_some(holder)
    })
    .await;
    assert!(cr_ready(&crs).await, "the CR stays Ready");
    reconcile_now_in(&crs, Duration::from_secs(20)).await;
    assert!(cr_ready(&crs).await, "the CR stays Ready under the new leader");
    println!(
        "rolling update as shipped: {before:?} -> {after:?} in {rolled:?}, {leader} leads; {sent} admission requests \
         through the API server, none failed"
    );
    shipped.uninstall(&cluster).await;
}

/// The shipped Deployment gives the shutdown enough time: drain delay plus the reconciler's budget, and
/// drain delay plus the webhooks' timeout, both within terminationGracePeriodSeconds.
#[test]
fn the_grace_period_covers_drain_and_in_flight_work() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/deployment.yaml")).unwrap();
    let d: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let pod = &d["spec"]["template"]["spec"];
    let grace = Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().expect("grace period set"));
    let args: Vec<String> = serde_json::from_value(pod["containers"][0]["args"].clone()).unwrap();
    let drain = args
        .iter()
        .find_map(|a| a.strip_prefix("--shutdown-drain-delay="))
        .map(|v| btp_manager::config::parse_go_duration(v).expect("a duration"))
        .unwrap_or(Duration::from_secs(5));
    assert!(
        drain + btp_manager::manager::RECONCILER_STOP_BUDGET < grace,
        "{drain:?} + reconcile budget vs {grace:?}"
    );
    let webhook_timeout = Duration::from_secs(5);
    assert!(drain + webhook_timeout < grace);
}
