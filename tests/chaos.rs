//! Chaos: the whole manager (controller, webhook server, leader election; `ManagerBuilder::start` with
//! `run`'s options, as `run` starts it)
//! goes through its life again and again while the API server fails about 10 % of the manager's requests
//! (9 % 500 and 0.5 % 429 on any request, 3 % more 409 on creates and updates), cuts 5 % of watch streams
//! at each event, and the manager is killed (as SIGKILL would: nothing finished, the Lease not released)
//! or stopped and started again at random points.
//!
//! Each iteration: provisioning, ServiceInstances and ServiceBindings, a credentials change, a cluster-ID
//! change, a chart upgrade (an object moved to `delete/`), an operand certificate repair and a force-delete.
//! After each step the CR reaches the expected state; after the certificate repair exactly the chart's
//! objects exist (none missing, none left over); after the deletion nothing of ours is left, no finalizer
//! of ours anywhere, and the user's objects are untouched (same uid). The manager's request rate stays
//! bounded throughout.
//!
//! Seeded: the seed decides every choice (where the manager is killed, how many services, the faults'
//! draws). A failure prints the seed, the iteration and the step, and `BTP_CHAOS_REPLAY=<seed>:<iteration>`
//! runs that iteration again (each iteration starts from a clean cluster). `BTP_CHAOS_ITERATIONS` (default
//! 50) and `BTP_CHAOS_SEED` run it longer or with another seed, `BTP_CHAOS_FAULTS` with some of the
//! disruptions only. A failure also prints the manager's last 3,000 log lines (`BTP_CHAOS_LOG` sets the
//! filter). Embedded API server only: it injects the faults.
//!
//! The manager runs with the default periodic re-checks (5 m while Processing, 15 m while Ready), and every
//! step must reach its expected state within [`STEP_DEADLINE`], well below them: only watches (and the error
//! backoff) may bring the manager back in time, so a lost trigger fails the step (docs/behaviour.md#watches-and-triggers).

mod common;

use btp_api::{names, BtpOperator};
use btp_apiserver::RunningApiServer;
use btp_certs::operand::{self as operand_certs, keys, Decision};
use btp_manager::cli::RunArgs;
use btp_manager::config::Config;
use btp_manager::manager::{self, manager_client, ManagerBuilder, Options};
use btp_manager::reconciler::resources;
use common::operand::{service_binding, service_instance, services};
use common::*;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::ByteString;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::ResourceExt as _;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The shipped ServiceAccount (`deploy/service-account.yaml`), with the RBAC of `deploy/` installed by the harness.
const MANAGER_USER: &str = "system:serviceaccount:kyma-system:btp-manager-controller-manager";
const NS: &str = names::KYMA_SYSTEM;
/// Where the ServiceInstances and ServiceBindings live.
const TEAM: &str = "chaos-team";
const METRICS_SERVICE: &str = "sap-btp-operator-controller-manager-metrics-service";
/// The name chart v2 gives the metrics Service (v1's is in v2's `delete/`).
const METRICS_SERVICE_V2: &str = "sap-btp-operator-controller-manager-metrics-service-v2";
/// How long one step may take to converge: well below the periodic re-checks the manager runs with (the
/// defaults, [`PERIODIC`]), so that a step that needs a periodic pass fails.
const STEP_DEADLINE: Duration = Duration::from_secs(90);
/// The shortest periodic re-check of the manager (the default `ProcessingStateRequeueInterval`).
const PERIODIC: Duration = Duration::from_secs(5 * 60);
const _: () = assert!(STEP_DEADLINE.as_secs() * 3 <= PERIODIC.as_secs());
/// The manager's requests in any one second: provisioning passes in a row reach about 400 in this build.
const MAX_REQUESTS_PER_SECOND: usize = 1000;
/// The manager's requests in one iteration (about 600 to 900 are usual).
const MAX_REQUESTS_PER_ITERATION: usize = 4000;
/// The manager's requests in the half second after it converged: Lease renewals, retried watches, a pass woken
/// by a re-listed watch, the start of a manager restarted just before (its lists and watches, about 60). A
/// loop that does not come to rest sends a pass (about 30 requests) every few tens of milliseconds.
const MAX_REQUESTS_AT_REST: usize = 100;
/// How long the manager is watched at rest.
const AT_REST: Duration = Duration::from_millis(500);
/// How many more windows are watched when a leadership term began shortly before or during the one measured
/// (the start of a term, about 60 requests of lists and watches, is not a loop): a loop that does not come to
/// rest fails every window.
const AT_REST_REMEASURES: usize = 2;
/// How long a term's start goes on sending its lists and watches: under the injected faults a failed list is
/// retried after 250 ms, then 500 ms, then 1 s (the manager's watch backoff).
const TERM_START: Duration = Duration::from_secs(2);

/// What to run: the seed and the iterations.
struct Plan {
    seed: u64,
    iterations: std::ops::Range<u64>,
}

fn plan() -> Plan {
    if let Ok(replay) = std::env::var("BTP_CHAOS_REPLAY") {
        let (seed, iteration) = replay
            .split_once(':')
            .and_then(|(s, i)| Some((s.parse().ok()?, i.parse().ok()?)))
            .expect("BTP_CHAOS_REPLAY is <seed>:<iteration>");
        return Plan {
            seed,
            iterations: iteration..iteration + 1,
        };
    }
    let seed = std::env::var("BTP_CHAOS_SEED")
        .ok()
        .map(|s| s.parse().expect("BTP_CHAOS_SEED is a number"))
        .unwrap_or_else(|| fastrand::u64(..1_000_000));
    let iterations = std::env::var("BTP_CHAOS_ITERATIONS")
        .ok()
        .map(|s| s.parse().expect("BTP_CHAOS_ITERATIONS is a number"))
        .unwrap_or(50);
    Plan {
        seed,
        iterations: 0..iterations,
    }
}

/// Where the run is; printed with the replay command when a step fails (the panic unwinds through it).
struct Progress {
    logs: RecentLogs,
    seed: u64,
    iteration: u64,
    step: &'static str,
    /// When the current step began, and how long the finished steps of this iteration took.
    since: Instant,
    took: Vec<(&'static str, Duration)>,
}

impl Progress {
    fn step(&mut self, step: &'static str) {
        self.took.push((self.step, self.since.elapsed()));
        self.step = step;
        self.since = Instant::now();
    }

    /// The steps' durations of the iteration that ends (printed with `--nocapture`).
    fn report(&mut self, extra: &str) {
        self.took.push((self.step, self.since.elapsed()));
        let steps: Vec<String> = self
            .took
            .drain(..)
            .map(|(step, took)| format!("{step} {:.1}s", took.as_secs_f64()))
            .collect();
        println!("chaos: iteration {}: {}; {extra}", self.iteration, steps.join(", "));
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("\nchaos: the manager's last log lines:\n{}", self.logs.text());
            eprintln!(
                "\nchaos: FAILED with seed {seed}, iteration {iteration}, step `{step}`\n\
                 replay: BTP_CHAOS_REPLAY={seed}:{iteration} cargo test --test chaos -- --nocapture\n",
                seed = self.seed,
                iteration = self.iteration,
                step = self.step
            );
        }
    }
}

/// The last lines the manager logged (all managers of this process: one runs at a time), and when the last
/// leadership term began.
#[derive(Clone, Default)]
struct RecentLogs {
    lines: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    last_term: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl RecentLogs {
    const KEEP: usize = 3000;
    /// What the manager logs when a leadership term begins (`app::lead_and_reconcile`).
    const TERM_BEGINS: &'static str = "leading: reconciling";

    fn text(&self) -> String {
        self.lines
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The last `n` lines about leadership and controller terms.
    fn leadership_lines(&self, n: usize) -> Vec<String> {
        let Ok(lines) = self.lines.lock() else {
            return Vec::new();
        };
        let mut found: Vec<String> = lines
            .iter()
            .rev()
            .filter(|l| {
                ["leader election", "leading", "the controller", "lost the lease"]
                    .iter()
                    .any(|k| l.contains(k))
            })
            .take(n)
            .cloned()
            .collect();
        found.reverse();
        found
    }

    /// Whether a leadership term began at or after `since`.
    fn term_began_since(&self, since: Instant) -> bool {
        self.last_term
            .lock()
            .map(|t| t.is_some_and(|t| t >= since))
            .unwrap_or(false)
    }
}

impl std::io::Write for RecentLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let line = String::from_utf8_lossy(buf).into_owned();
        if line.contains(Self::TERM_BEGINS) {
            if let Ok(mut last) = self.last_term.lock() {
                *last = Some(Instant::now());
            }
        }
        if let Ok(mut lines) = self.lines.lock() {
            lines.push_back(line);
            while lines.len() > Self::KEEP {
                lines.pop_front();
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RecentLogs {
    type Writer = RecentLogs;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Two operand charts in a temporary directory: v1 (the built-in one) and v2, which renames the metrics
/// Service and lists v1's in `delete/`.
struct Charts {
    dir: PathBuf,
    v1: PathBuf,
    v2: PathBuf,
}

impl Drop for Charts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn charts() -> Charts {
    let dir = temp_dir("chaos-charts");
    let (v1, v2) = (dir.join("v1"), dir.join("v2"));
    copy_chart(&v1);
    copy_chart(&v2);
    std::fs::write(v2.join("chart-version"), "v9.9.9\n").unwrap();
    let services = std::fs::read_to_string(v1.join("apply/service.yml")).unwrap();
    let renamed = services.replace(
        &format!("name: {METRICS_SERVICE}\n"),
        &format!("name: {METRICS_SERVICE_V2}\n"),
    );
    assert_ne!(services, renamed, "service.yml names the metrics Service");
    std::fs::write(v2.join("apply/service.yml"), renamed).unwrap();
    std::fs::write(
        v2.join("delete/service.yml"),
        format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: {METRICS_SERVICE}\n  namespace: {NS}\n"),
    )
    .unwrap();
    Charts { dir, v1, v2 }
}

/// A running manager and the sender that asks it to shut down.
struct Running {
    manager: manager::Manager,
    term: watch::Sender<bool>,
}

/// How long a start the faults broke waits before the next: a crash-looping pod's restart delay.
const RESTART_DELAY: Duration = Duration::from_millis(100);

/// The manager under test, restarted at will, and the disruption planned for the current step.
struct UnderTest<'a> {
    server: &'a RunningApiServer,
    /// Where every start of the manager serves its webhooks: a loopback IP of its own, so that no outgoing
    /// connection takes the port between two starts ([`common::own_addr`]).
    webhook: std::net::SocketAddr,
    chart: PathBuf,
    running: Option<Running>,
    /// When to disrupt the manager next, and whether by killing it (else a graceful restart).
    disruption: Option<(Instant, bool)>,
    rng: fastrand::Rng,
    /// Whether steps are disrupted by kills, by graceful restarts.
    kill_enabled: bool,
    restart_enabled: bool,
    kills: usize,
    restarts: usize,
    failed_starts: usize,
}

impl UnderTest<'_> {
    fn args(&self) -> Box<RunArgs> {
        let webhook = self.webhook;
        let args = common::run_args([
            "--leader-elect".to_string(),
            "--leader-election-lease-duration=3s".into(),
            "--shutdown-drain-delay=0s".into(),
            "--metrics-bind-address=127.0.0.1:0".into(),
            "--health-probe-bind-address=127.0.0.1:0".into(),
            format!("--webhook-bind-address={webhook}"),
            format!("--webhook-url=https://{webhook}"),
            format!("--operand-image={IMAGE}"),
            format!("--resources-path={}", self.chart.display()),
            "--hard-delete-check-interval=200ms".into(),
            // Tests reach nothing beyond loopback: the Secret's token endpoint does not exist.
            "--credentials-check-interval=0".into(),
        ]);
        // The defaults: no periodic pass comes within a step's deadline.
        assert!(args.reconciler.processing_state_requeue_interval >= PERIODIC);
        assert!(args.reconciler.ready_state_requeue_interval >= PERIODIC);
        Box::new(args)
    }

    /// Start the manager; a start the faults break is retried, as a restarting pod would be.
    async fn start(&mut self) {
        let args = self.args();
        let (server, failed) = (self.server, std::cell::Cell::new(0));
        let started = try_eventually_every(RESTART_DELAY, STEP_DEADLINE, || {
            let (term, term_rx) = watch::channel(false);
            let client = manager_client(server.kube_config_as(MANAGER_USER)).expect("a client");
            let builder = ManagerBuilder::new(client, Options::run(&args)).expect("the chaos test's options");
            let failed = &failed;
            async move {
                let started = builder.start(term_rx).await;
                if started.is_err() {
                    failed.set(failed.get() + 1);
                }
                started.map(|manager| Running { manager, term })
            }
        })
        .await;
        self.failed_starts += failed.get();
        match started {
            Ok(running) => self.running = Some(running),
            Err(e) => panic!("the manager did not start: {e:#}"),
        }
    }

    async fn stop(&mut self, kill: bool) {
        let Some(Running { manager, term }) = self.running.take() else {
            return;
        };
        if kill {
            self.kills += 1;
            manager.kill().await;
        } else {
            let _ = term.send(true);
            tokio::time::timeout(Duration::from_secs(30), manager.shut_down())
                .await
                .expect("a graceful shutdown ends within 30 s")
                .expect("a graceful shutdown succeeds");
        }
    }

    async fn restart(&mut self, kill: bool) {
        self.restarts += 1;
        self.stop(kill).await;
        self.start().await;
    }

    /// Maybe disrupt the manager during the coming step: a quarter of the steps, at a random point in the
    /// first 600 ms, a third of them by a kill (after which the new manager waits for the Lease to expire,
    /// 3 s).
    fn plan_disruption(&mut self) {
        if self.disruption.is_none() && self.rng.u8(..4) == 0 {
            let at = Instant::now() + Duration::from_millis(self.rng.u64(..600));
            let kill = self.rng.u8(..3) == 0;
            if (kill && self.kill_enabled) || (!kill && self.restart_enabled) {
                self.disruption = Some((at, kill));
            }
        }
    }

    /// Carry out the planned disruption if it is due.
    async fn disrupt_when_due(&mut self) {
        if let Some((at, kill)) = self.disruption {
            if Instant::now() >= at {
                self.disruption = None;
                self.restart(kill).await;
            }
        }
    }

    /// [`eventually`] `done` holds within [`STEP_DEADLINE`], carrying out the planned disruption before
    /// the poll at which it is due; a timeout shows the CR.
    async fn until<F, Fut>(&mut self, what: &str, mut done: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let server = self.server;
        let this = tokio::sync::Mutex::new(self);
        let held = try_eventually(STEP_DEADLINE, || {
            // Made now, run after the disruption: a future does nothing until it is polled.
            let done = done();
            let this = &this;
            async move {
                this.lock().await.disrupt_when_due().await;
                done.await
            }
        })
        .await;
        if held.is_err() {
            let cr = Api::<BtpOperator>::namespaced(server.client().await, NS)
                .get_opt(names::BTP_OPERATOR_NAME)
                .await;
            panic!(
                "not within {STEP_DEADLINE:?}: {what}; the CR: {:?}",
                cr.map(|c| c.map(|c| (c.metadata.finalizers, c.metadata.deletion_timestamp, c.status)))
            );
        }
    }
}

/// The manager's requests, sampled every 100 ms: the highest count in any one-second window.
struct RateProbe {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(usize, usize)>,
}

impl RateProbe {
    fn start(log: btp_apiserver::testing::RequestLog) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let (mut seen, mut total) = (log.len(), 0usize);
            let mut window = std::collections::VecDeque::<usize>::new();
            let mut peak = 0;
            while !stopped.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let new = log.since(seen);
                seen += new.len();
                let mine = new.iter().filter(|r| r.user == MANAGER_USER).count();
                total += mine;
                window.push_back(mine);
                if window.len() > 10 {
                    window.pop_front();
                }
                peak = peak.max(window.iter().sum());
            }
            (peak, total)
        });
        RateProbe { stop, task }
    }

    /// (the highest one-second count, all requests).
    async fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the rate probe")
    }
}

fn dynamic(client: &kube::Client, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)),
    )
}

/// What the manager installs with `chart`: its objects, the network policies and the operand's two
/// certificate Secrets.
fn expected(chart: &Path) -> BTreeSet<String> {
    let module = resources::load(chart).unwrap();
    let policies = btp_manager::reconciler::network_policies::load(Path::new("")).unwrap();
    let mut names: BTreeSet<String> = module
        .apply
        .iter()
        .chain(policies.iter())
        .map(|o| {
            let (_, kind, ns, name) = resources::identity(o);
            format!("{kind} {}/{name}", ns.unwrap_or_default())
        })
        .collect();
    for secret in [names::operand::CA_SECRET, names::operand::WEBHOOK_SECRET] {
        names.insert(format!("Secret {NS}/{secret}"));
    }
    names
}

/// Objects anywhere that still carry the manager's finalizer.
async fn our_finalizers(client: &kube::Client) -> Vec<String> {
    let mut found = Vec::new();
    let mut kinds: Vec<(String, String, String)> = MANAGED_KINDS
        .iter()
        .map(|(g, v, k, _)| (g.to_string(), v.to_string(), k.to_string()))
        .collect();
    kinds.push((names::GROUP.into(), names::VERSION.into(), names::KIND.into()));
    kinds.push((
        names::SERVICES_GROUP.into(),
        names::SERVICES_VERSION.into(),
        "ServiceInstance".into(),
    ));
    kinds.push((
        names::SERVICES_GROUP.into(),
        names::SERVICES_VERSION.into(),
        "ServiceBinding".into(),
    ));
    for (group, version, kind) in kinds {
        let list = match dynamic(client, &group, &version, &kind)
            .list_metadata(&ListParams::default())
            .await
        {
            Ok(l) => l.items,
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => panic!("listing {kind}: {e}"),
        };
        for o in list {
            if o.finalizers().iter().any(|f| f == names::FINALIZER) {
                found.push(format!("{kind} {}/{}", o.namespace().unwrap_or_default(), o.name_any()));
            }
        }
    }
    found
}

/// The user's objects, which nothing the manager does may remove: (kind, namespace, name) → uid.
async fn user_objects(client: &kube::Client) -> BTreeMap<String, String> {
    let mut uids = BTreeMap::new();
    let cm: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let secret: Api<Secret> = Api::namespaced(client.clone(), NS);
    let deployment: Api<Deployment> = Api::namespaced(client.clone(), TEAM);
    for (what, uid) in [
        (
            "ConfigMap user-config",
            cm.get_opt("user-config").await.unwrap().map(|o| o.uid()),
        ),
        (
            "Secret user-secret",
            secret.get_opt("user-secret").await.unwrap().map(|o| o.uid()),
        ),
        (
            "Deployment user-app",
            deployment.get_opt("user-app").await.unwrap().map(|o| o.uid()),
        ),
    ] {
        uids.insert(what.to_string(), uid.flatten().unwrap_or_default());
    }
    uids
}

async fn create_user_objects(client: &kube::Client) {
    // Labelled managed-by=btp-manager but not as a module object: deprovisioning must leave it.
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "user-config", "namespace": NS, "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_BTP_MANAGER}},
        "data": {"owner": "the platform team"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "user-secret", "namespace": NS}, "stringData": {"token": "user-value"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let app: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "user-app", "namespace": TEAM},
        "spec": {"selector": {"matchLabels": {"app": "user"}},
                 "template": {"metadata": {"labels": {"app": "user"}},
                              "spec": {"containers": [{"name": "app", "image": "example.test/app:1"}]}}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), TEAM)
        .create(&PostParams::default(), &app)
        .await
        .unwrap();
}

fn required_secret(iteration: u64) -> Secret {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": names::REQUIRED_SECRET_NAME, "namespace": NS,
                     "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_KEB}},
        "stringData": {"clientid": "chaos-client", "clientsecret": format!("secret-{iteration}-a"),
                       "sm_url": "https://sm.example.com", "tokenurl": "https://auth.example.com",
                       "cluster_id": format!("cluster-{iteration}-a")}
    }))
    .unwrap()
}

/// Whether a write went through (or had already: 409 on a create); false while the manager's webhooks
/// do not answer (it is being restarted).
fn written<T>(result: Result<T, kube::Error>) -> bool {
    match result {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => true,
        Err(_) => false,
    }
}

async fn secret_value(secrets: &Api<Secret>, name: &str, key: &str) -> Option<Vec<u8>> {
    secrets
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|s| s.data)
        .and_then(|d| d.get(key).map(|v| v.0.clone()))
}

async fn configmap_value(cms: &Api<ConfigMap>, name: &str, key: &str) -> Option<String> {
    cms.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.data)
        .and_then(|d| d.get(key).cloned())
}

/// Whether the operand's certificates are valid and both webhook configurations trust their CA.
async fn operand_certs_valid(client: &kube::Client) -> bool {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let data = |s: Option<Secret>| {
        s.and_then(|s| s.data)
            .map(|d| d.into_iter().map(|(k, v)| (k, v.0)).collect::<BTreeMap<_, _>>())
    };
    let ca = data(secrets.get_opt(names::operand::CA_SECRET).await.ok().flatten());
    let webhook = data(secrets.get_opt(names::operand::WEBHOOK_SECRET).await.ok().flatten());
    let decision = operand_certs::decide(
        ca.as_ref(),
        webhook.as_ref(),
        std::time::SystemTime::now(),
        &operand_certs::Settings::default(),
    );
    let Some(ca_crt) = ca.as_ref().and_then(|c| c.get(keys::CA_CRT)) else {
        return false;
    };
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(names::operand::MUTATING_WEBHOOK_CONFIGURATION)
        .await
        .ok()
        .flatten()
        .and_then(|m| m.webhooks)
        .unwrap_or_default();
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt(names::operand::VALIDATING_WEBHOOK_CONFIGURATION)
        .await
        .ok()
        .flatten()
        .and_then(|v| v.webhooks)
        .unwrap_or_default();
    let bundles: Vec<Option<Vec<u8>>> = mutating
        .into_iter()
        .map(|w| w.client_config.ca_bundle.map(|b| b.0))
        .chain(validating.into_iter().map(|w| w.client_config.ca_bundle.map(|b| b.0)))
        .collect();
    decision == Decision::Keep && !bundles.is_empty() && bundles.iter().all(|b| b.as_ref() == Some(ca_crt))
}

/// Inject the faults `BTP_CHAOS_FAULTS` picks into the manager's requests (default all:
/// 500,429,409,cut,kill,restart; `none` for none), to tell one disruption's effect from another's or from a
/// logic error; whether kills and graceful restarts are picked.
fn inject_faults(server: &RunningApiServer) -> (bool, bool) {
    let faults = server.faults();
    let fault = |fraction: f64, code: u16, verb: Option<&str>| {
        faults.add(btp_apiserver::testing::FaultRule {
            fraction,
            code,
            verb: verb.map(str::to_string),
            resource: None,
            user: Some(MANAGER_USER.into()),
        })
    };
    let picked = std::env::var("BTP_CHAOS_FAULTS").unwrap_or_else(|_| "500,429,409,cut,kill,restart".into());
    let on = |what: &str| picked.split(',').any(|p| p.trim() == what);
    if on("500") {
        fault(0.09, 500, None);
    }
    // Few 429s: each makes the client wait the second the server's Retry-After asks for, as it should
    // (more would make the run slow, not harder).
    if on("429") {
        fault(0.005, 429, None);
    }
    if on("409") {
        fault(0.03, 409, Some("create"));
        fault(0.03, 409, Some("update"));
    }
    if on("cut") {
        faults.cut_watches_randomly(0.05);
    }
    (on("kill"), on("restart"))
}

/// What the run has seen so far, for its summary.
#[derive(Default)]
struct Totals {
    requests: usize,
    /// The highest count of the manager's requests in one second.
    peak_rate: usize,
    /// The most requests the manager sent at rest in one window.
    at_rest: usize,
    /// Windows measured again after a leadership term began in them.
    at_rest_remeasured: usize,
}

/// One chaos run: the manager under test, the cluster as the test sees it, where the run is; each step of
/// an iteration is a method.
struct Chaos<'a> {
    manager: UnderTest<'a>,
    env: &'a Env,
    client: kube::Client,
    crs: Api<BtpOperator>,
    secrets: Api<Secret>,
    cms: Api<ConfigMap>,
    charts: Charts,
    progress: Progress,
    /// The user's objects before the first iteration.
    users_before: BTreeMap<String, String>,
    started: Instant,
    totals: Totals,
}

impl<'a> Chaos<'a> {
    /// The user's objects, the two charts, the faults, and the manager started on chart v1.
    async fn new(env: &'a Env, seed: u64, progress: Progress) -> Chaos<'a> {
        let server = env.server().expect("the embedded API server");
        let client = env.client.clone();
        env.ensure_namespace(TEAM).await;
        create_user_objects(&client).await;
        let users_before = user_objects(&client).await;
        let charts = charts();
        let webhook = common::own_addr();
        let (kill_enabled, restart_enabled) = inject_faults(server);
        let mut manager = UnderTest {
            server,
            webhook,
            chart: charts.v1.clone(),
            running: None,
            disruption: None,
            rng: fastrand::Rng::with_seed(seed),
            kill_enabled,
            restart_enabled,
            kills: 0,
            restarts: 0,
            failed_starts: 0,
        };
        manager.start().await;
        Chaos {
            manager,
            env,
            crs: env.crs(NS),
            secrets: Api::namespaced(client.clone(), NS),
            cms: Api::namespaced(client.clone(), NS),
            client,
            charts,
            progress,
            users_before,
            started: Instant::now(),
            totals: Totals::default(),
        }
    }

    /// One iteration of the manager's whole life, from a clean cluster back to one; everything it chooses
    /// comes from the seed and the iteration alone.
    async fn iteration(&mut self, seed: u64, iteration: u64) {
        self.progress.iteration = iteration;
        let iteration_seed = seed ^ iteration.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.manager.rng = fastrand::Rng::with_seed(iteration_seed);
        self.manager.server.faults().seed(iteration_seed);
        self.manager.disruption = None;
        let probe = RateProbe::start(self.manager.server.request_log());

        (self.progress.step, self.progress.since) = ("chart v1", Instant::now());
        self.progress.took.clear();
        self.back_to_chart_v1().await;
        self.progress.step("provisioning");
        let operand = self.provision().await;
        self.progress.step("services");
        self.create_services().await;
        self.progress.step("credentials change");
        self.change_credentials().await;
        self.progress.step("cluster-ID change");
        self.change_cluster_id().await;
        self.progress.step("chart upgrade");
        self.upgrade_chart().await;
        self.progress.step("operand certificate repair");
        self.repair_operand_certificate().await;
        self.progress.step("at rest");
        let at_rest = self.measure_at_rest().await;
        self.progress.step("force-delete");
        self.force_delete().await;
        drop(operand);
        self.progress.step("after deletion");
        self.check_nothing_is_left().await;
        self.check_request_bounds(probe, at_rest).await;
    }

    /// The manager back on chart v1 (the last iteration upgraded it).
    async fn back_to_chart_v1(&mut self) {
        if self.manager.chart != self.charts.v1 {
            self.manager.chart = self.charts.v1.clone();
            self.manager.restart(false).await;
        }
    }

    /// The credentials Secret and the CR created; Ready with the first credentials. The operand stand-in
    /// from then on.
    async fn provision(&mut self) -> OperandDouble {
        self.manager.plan_disruption();
        let iteration = self.progress.iteration;
        let (crs, secrets, cms) = (&self.crs, &self.secrets, &self.cms);
        let secret = required_secret(iteration);
        self.manager
            .until("the credentials Secret is created", || async {
                written(secrets.create(&PostParams::default(), &secret).await)
            })
            .await;
        self.manager
            .until("the BtpOperator is created", || async {
                written(
                    crs.create(&PostParams::default(), &BtpOperator::new(names::BTP_OPERATOR_NAME))
                        .await,
                )
            })
            .await;
        let (secret_a, cluster_a) = (format!("secret-{iteration}-a"), format!("cluster-{iteration}-a"));
        self.manager
            .until("Ready with the first credentials", || async {
                cr_ready(crs).await
                    && secret_value(secrets, names::operand::SECRET, "clientsecret")
                        .await
                        .as_deref()
                        == Some(secret_a.as_bytes())
                    && configmap_value(cms, names::operand::CONFIGMAP, "CLUSTER_ID")
                        .await
                        .as_deref()
                        == Some(cluster_a.as_str())
            })
            .await;
        self.env.play_operand(true).await
    }

    /// ServiceInstances and ServiceBindings (one to eight of each), which the force-delete removes.
    async fn create_services(&mut self) {
        let (instances, bindings) = (self.manager.rng.usize(1..=8), self.manager.rng.usize(1..=8));
        for i in 0..instances {
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), TEAM, &services("ServiceInstance"));
            let si = service_instance(TEAM, &format!("si-{i}"));
            eventually(STEP_DEADLINE, "a ServiceInstance is created", || async {
                written(api.create(&PostParams::default(), &si).await)
            })
            .await;
        }
        for i in 0..bindings {
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), TEAM, &services("ServiceBinding"));
            let sb = service_binding(TEAM, &format!("sb-{i}"), Some(&format!("sb-{i}-secret")));
            eventually(STEP_DEADLINE, "a ServiceBinding is created", || async {
                written(api.create(&PostParams::default(), &sb).await)
            })
            .await;
        }
    }

    /// Set one key of the credentials Secret (retried while the manager's webhooks, which guard it, are down).
    async fn set_credential(&mut self, key: &str, value: &str) {
        let patch = serde_json::json!({"stringData": {key: value}});
        let secrets = &self.secrets;
        self.manager
            .until(&format!("the credentials Secret's {key} is changed"), || async {
                written(
                    secrets
                        .patch(
                            names::REQUIRED_SECRET_NAME,
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await,
                )
            })
            .await;
    }

    /// New credentials reach the operand Secret.
    async fn change_credentials(&mut self) {
        self.manager.plan_disruption();
        let secret_b = format!("secret-{}-b", self.progress.iteration);
        self.set_credential("clientsecret", &secret_b).await;
        let (crs, secrets) = (&self.crs, &self.secrets);
        self.manager
            .until("the operand Secret holds the new credentials", || async {
                secret_value(secrets, names::operand::SECRET, "clientsecret")
                    .await
                    .as_deref()
                    == Some(secret_b.as_bytes())
                    && cr_ready(crs).await
            })
            .await;
    }

    /// A new cluster ID reaches the operand's ConfigMap.
    async fn change_cluster_id(&mut self) {
        self.manager.plan_disruption();
        let cluster_b = format!("cluster-{}-b", self.progress.iteration);
        self.set_credential("cluster_id", &cluster_b).await;
        let (crs, cms) = (&self.crs, &self.cms);
        self.manager
            .until("the operand runs with the new cluster ID", || async {
                configmap_value(cms, names::operand::CONFIGMAP, "CLUSTER_ID")
                    .await
                    .as_deref()
                    == Some(cluster_b.as_str())
                    && cr_ready(crs).await
            })
            .await;
    }

    /// The manager restarted (or killed) with chart v2: v2 installed, the object v2 lists in `delete/` gone.
    async fn upgrade_chart(&mut self) {
        self.manager.plan_disruption();
        self.manager.chart = self.charts.v2.clone();
        let kill = self.manager.rng.u8(..3) == 0 && self.manager.kill_enabled;
        self.manager.restart(kill).await;
        let svcs: Api<Service> = Api::namespaced(self.client.clone(), NS);
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), NS);
        let crs = &self.crs;
        self.manager
            .until("chart v2 is installed and v1's metrics Service deleted", || async {
                let upgraded = deployments
                    .get_opt(names::operand::DEPLOYMENT)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|d| d.labels().get(names::CHART_VERSION_LABEL).map(String::as_str) == Some("v9.9.9"));
                upgraded
                    && matches!(svcs.get_opt(METRICS_SERVICE).await, Ok(None))
                    && matches!(svcs.get_opt(METRICS_SERVICE_V2).await, Ok(Some(_)))
                    && cr_ready(crs).await
            })
            .await;
    }

    /// The operand's webhook certificate damaged: valid and trusted again, and exactly chart v2's objects.
    async fn repair_operand_certificate(&mut self) {
        self.manager.plan_disruption();
        let (client, crs, secrets) = (&self.client, &self.crs, &self.secrets);
        self.manager
            .until("the operand's webhook certificate is damaged", || async {
                let Ok(mut s) = secrets.get(names::operand::WEBHOOK_SECRET).await else {
                    return false;
                };
                let data = s.data.get_or_insert_with(BTreeMap::new);
                data.insert(
                    keys::TLS_CRT.into(),
                    ByteString(b"-----BEGIN CERTIFICATE-----\ngarbage".to_vec()),
                );
                secrets
                    .replace(names::operand::WEBHOOK_SECRET, &PostParams::default(), &s)
                    .await
                    .is_ok()
            })
            .await;
        self.manager
            .until("the operand's certificates are valid again and trusted", || async {
                operand_certs_valid(client).await && cr_ready(crs).await
            })
            .await;
        let want = expected(&self.charts.v2);
        self.manager
            .until("exactly chart v2's objects are installed", || async {
                installed_objects(client).await == want
            })
            .await;
    }

    /// The converged manager's requests in [`AT_REST`] (measured again when a leadership term began in the
    /// window), within [`MAX_REQUESTS_AT_REST`].
    async fn measure_at_rest(&mut self) -> usize {
        let log = self.manager.server.request_log();
        let mut remeasured = 0;
        let at_rest = loop {
            let (before, began) = (log.len(), Instant::now());
            tokio::time::sleep(AT_REST).await; // the window measured, not a synchronization
            let at_rest = log.since(before).iter().filter(|r| r.user == MANAGER_USER).count();
            // A term that began shortly before this window (a lease taken over after a restart) sends its
            // lists and watches into it: the next window tells whether the manager comes to rest.
            let term_began = began
                .checked_sub(TERM_START)
                .is_some_and(|t| self.progress.logs.term_began_since(t));
            if at_rest > MAX_REQUESTS_AT_REST && term_began && remeasured < AT_REST_REMEASURES {
                println!("chaos: {at_rest} requests at rest in a window where a leadership term began; measured again");
                // Why a term began while the manager was at rest: its recent leadership lines.
                for line in self.progress.logs.leadership_lines(20) {
                    print!("chaos:   {line}");
                }
                remeasured += 1;
                self.totals.at_rest_remeasured += 1;
                continue;
            }
            break at_rest;
        };
        assert!(
            at_rest <= MAX_REQUESTS_AT_REST,
            "the converged manager sent {at_rest} requests in {AT_REST:?} (bound {MAX_REQUESTS_AT_REST})"
        );
        self.totals.at_rest = self.totals.at_rest.max(at_rest);
        at_rest
    }

    /// The CR labelled force-delete and deleted: gone.
    async fn force_delete(&mut self) {
        self.manager.plan_disruption();
        let crs = &self.crs;
        let label = serde_json::json!({"metadata": {"labels": {names::FORCE_DELETE_LABEL: "true"}}});
        self.manager
            .until("the CR is labelled force-delete", || async {
                written(
                    crs.patch(names::BTP_OPERATOR_NAME, &PatchParams::default(), &Patch::Merge(&label))
                        .await,
                )
            })
            .await;
        self.manager
            .until("the CR deletion is accepted", || async {
                crs.delete(names::BTP_OPERATOR_NAME, &DeleteParams::default())
                    .await
                    .is_ok()
            })
            .await;
        self.manager
            .until("the BtpOperator is gone", || async {
                matches!(crs.get_opt(names::BTP_OPERATOR_NAME).await, Ok(None))
            })
            .await;
    }

    /// After the deletion: no service, module object or finalizer of ours left, the user's objects untouched
    /// and the credentials Secret kept (then deleted, for the next iteration).
    async fn check_nothing_is_left(&self) {
        let (client, secrets) = (&self.client, &self.secrets);
        assert_eq!(
            count_services(client).await,
            0,
            "every ServiceInstance and ServiceBinding is gone"
        );
        let left = installed_objects(client).await;
        assert!(left.is_empty(), "nothing of the module is left: {left:?}");
        let finalizers = our_finalizers(client).await;
        assert!(finalizers.is_empty(), "no finalizer of ours is left: {finalizers:?}");
        assert_eq!(
            user_objects(client).await,
            self.users_before,
            "the user's objects are untouched"
        );
        assert!(
            secrets.get_opt(names::REQUIRED_SECRET_NAME).await.unwrap().is_some(),
            "the credentials Secret (the user's) is kept"
        );
        secrets
            .delete(names::REQUIRED_SECRET_NAME, &DeleteParams::default())
            .await
            .unwrap();
        eventually(STEP_DEADLINE, "the credentials Secret is deleted", || async {
            matches!(secrets.get_opt(names::REQUIRED_SECRET_NAME).await, Ok(None))
        })
        .await;
    }

    /// The manager's request rate stayed bounded through the iteration.
    async fn check_request_bounds(&mut self, probe: RateProbe, at_rest: usize) {
        let (peak, total) = probe.finish().await;
        assert!(
            peak <= MAX_REQUESTS_PER_SECOND,
            "the manager sent {peak} requests in one second (bound {MAX_REQUESTS_PER_SECOND})"
        );
        assert!(
            total <= MAX_REQUESTS_PER_ITERATION,
            "the manager sent {total} requests in one iteration (bound {MAX_REQUESTS_PER_ITERATION})"
        );
        self.totals.peak_rate = self.totals.peak_rate.max(peak);
        self.progress.step("invariants");
        self.progress.report(&format!(
            "{total} requests, at most {peak} in one second, {at_rest} at rest"
        ));
        self.totals.requests += total;
        self.manager.server.request_log().clear();
    }

    /// Stop the manager gracefully and print the run's summary.
    async fn finish(mut self, plan: &Plan) {
        self.progress.step("shutdown");
        self.manager.stop(false).await;
        self.manager.server.faults().clear();
        let iterations = plan.iterations.end - plan.iterations.start;
        let Totals {
            requests,
            peak_rate,
            at_rest,
            at_rest_remeasured,
        } = self.totals;
        println!(
            "chaos: seed {}: {iterations} iterations in {:.1?}; {} restarts ({} kills), {} failed starts; the \
             manager sent {requests} requests, at most {peak_rate} in one second and {at_rest} in {AT_REST:?} at \
             rest ({at_rest_remeasured} windows measured again after a leadership term began)",
            plan.seed,
            self.started.elapsed(),
            self.manager.restarts,
            self.manager.kills,
            self.manager.failed_starts,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_survives_faults_kills_and_restarts_through_its_whole_life() {
    if real_cluster().is_some() {
        eprintln!("chaos: skipped against a real cluster (it needs the embedded API server's fault injection)");
        return;
    }
    // The manager's recent logs, printed when a step fails; `BTP_CHAOS_LOG=<filter>` changes what is kept.
    let logs = RecentLogs::default();
    let filter = std::env::var("BTP_CHAOS_LOG").unwrap_or_else(|_| "btp_manager=info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(false)
        .with_writer(logs.clone())
        .try_init();
    let plan = plan();
    let progress = Progress {
        logs,
        seed: plan.seed,
        iteration: plan.iterations.start,
        step: "setup",
        since: Instant::now(),
        took: Vec::new(),
    };
    eprintln!(
        "chaos: seed {} (replay an iteration: BTP_CHAOS_REPLAY=<seed>:<iteration>)",
        plan.seed
    );
    let env = Env::start_with(
        Config::default(),
        true,
        StartOptions {
            manager_user: Some(MANAGER_USER.into()),
            reconcile: false,
            ..StartOptions::default()
        },
    )
    .await;
    let mut chaos = Chaos::new(&env, plan.seed, progress).await;
    for iteration in plan.iterations.clone() {
        chaos.iteration(plan.seed, iteration).await;
    }
    chaos.finish(&plan).await;
    env.stop().await;
}

/// Found by the chaos run: a manager asked to stop before its first list of BtpOperators succeeded never
/// stopped (kube's controller holds reconciles until that list and waited for it after the shutdown), and
/// its leader election went on renewing the Lease, so its successor never led.
#[tokio::test]
async fn a_shutdown_before_the_first_list_of_crs_stops_at_once() {
    let env = Env::start_with(
        Config::default(),
        false,
        StartOptions {
            manager_user: Some(MANAGER_USER.into()),
            reconcile: false,
            ..StartOptions::default()
        },
    )
    .await;
    let Some(server) = env.server() else {
        eprintln!("skipped against a real cluster (it needs the embedded API server's fault injection)");
        return;
    };
    server.faults().fail(1.0, 500, Some("list"), Some("btpoperators"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(btp_manager::reconciler::run(env.ctx.clone(), async move {
        let _ = stopped.await;
    }));
    let log = server.request_log();
    eventually(
        Duration::from_secs(10),
        "the manager tried to list the BtpOperators",
        || {
            let log = log.clone();
            async move {
                !log.filter(|r| r.resource == "btpoperators" && r.verb == "list" && r.code == 500)
                    .is_empty()
            }
        },
    )
    .await;
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the controller stops within 5 s of the shutdown")
        .expect("the controller task ends without a panic");
    server.faults().clear();
    env.stop().await;
}
