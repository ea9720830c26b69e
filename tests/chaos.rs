//! Chaos: the whole manager (controller, webhook server, leader election; `app::start`, as `run` starts it)
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

use btp_api::{names, BtpOperator, State};
use btp_apiserver::RunningApiServer;
use btp_certs::operand::{self as operand_certs, keys, Decision};
use btp_manager::app;
use btp_manager::cli::{Cli, Command, RunArgs};
use btp_manager::config::Config;
use btp_manager::reconciler::resources;
use clap::Parser as _;
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

/// The last lines the manager logged (all managers of this process: one runs at a time).
#[derive(Clone, Default)]
struct RecentLogs(Arc<std::sync::Mutex<std::collections::VecDeque<String>>>);

impl RecentLogs {
    const KEEP: usize = 3000;

    fn text(&self) -> String {
        self.0.lock().map(|l| l.iter().cloned().collect()).unwrap_or_default()
    }
}

impl std::io::Write for RecentLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut lines) = self.0.lock() {
            lines.push_back(String::from_utf8_lossy(buf).into_owned());
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
    let dir = std::env::temp_dir().join(format!("btp-chaos-charts-{}", std::process::id()));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("module-resources");
    let (v1, v2) = (dir.join("v1"), dir.join("v2"));
    for chart in [&v1, &v2] {
        std::fs::create_dir_all(chart.join("apply")).unwrap();
        std::fs::create_dir_all(chart.join("delete")).unwrap();
        for file in std::fs::read_dir(source.join("apply")).unwrap() {
            let file = file.unwrap().path();
            std::fs::copy(&file, chart.join("apply").join(file.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(source.join("chart-version"), v1.join("chart-version")).unwrap();
    std::fs::write(v2.join("chart-version"), "v9.9.9\n").unwrap();
    let services = std::fs::read_to_string(source.join("apply/service.yml")).unwrap();
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
    manager: app::Manager,
    term: watch::Sender<bool>,
}

/// The manager under test, restarted at will, and the disruption planned for the current step.
struct Chaos<'a> {
    server: &'a RunningApiServer,
    webhook_port: u16,
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

impl Chaos<'_> {
    fn args(&self) -> Box<RunArgs> {
        let port = self.webhook_port;
        let cli = Cli::try_parse_from([
            "btp-manager".to_string(),
            "run".into(),
            "--leader-elect".into(),
            "--leader-election-lease-duration=3s".into(),
            "--shutdown-drain-delay=0s".into(),
            "--metrics-bind-address=127.0.0.1:0".into(),
            "--health-probe-bind-address=127.0.0.1:0".into(),
            format!("--webhook-bind-address=127.0.0.1:{port}"),
            format!("--webhook-url=https://127.0.0.1:{port}"),
            format!("--operand-image={IMAGE}"),
            format!("--resources-path={}", self.chart.display()),
            "--hard-delete-check-interval=200ms".into(),
        ])
        .expect("the chaos test's flags parse");
        match cli.command {
            Command::Run(args) => {
                // The defaults: no periodic pass comes within a step's deadline.
                assert!(args.reconciler.processing_state_requeue_interval >= PERIODIC);
                assert!(args.reconciler.ready_state_requeue_interval >= PERIODIC);
                args
            }
            _ => unreachable!("parsed `run`"),
        }
    }

    /// Start the manager; a start the faults break is retried, as a restarting pod would be.
    async fn start(&mut self) {
        let args = self.args();
        let end = Instant::now() + STEP_DEADLINE;
        loop {
            let (term, term_rx) = watch::channel(false);
            match app::start(
                &args,
                app::manager_client(self.server.kube_config_as(MANAGER_USER)).expect("a client"),
                term_rx,
            )
            .await
            {
                Ok(manager) => {
                    self.running = Some(Running { manager, term });
                    return;
                }
                Err(e) => {
                    self.failed_starts += 1;
                    assert!(Instant::now() < end, "the manager did not start: {e:#}");
                    // A crash-looping pod's restart delay, not a synchronization.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
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

    /// Poll `done` until it holds (carrying out a disruption when it is due); panic after the deadline.
    async fn until<F, Fut>(&mut self, what: &str, mut done: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let end = Instant::now() + STEP_DEADLINE;
        loop {
            if let Some((at, kill)) = self.disruption {
                if Instant::now() >= at {
                    self.disruption = None;
                    self.restart(kill).await;
                }
            }
            if done().await {
                return;
            }
            if Instant::now() >= end {
                let cr = Api::<BtpOperator>::namespaced(self.server.client().await, NS)
                    .get_opt(names::BTP_OPERATOR_NAME)
                    .await;
                panic!(
                    "not within {STEP_DEADLINE:?}: {what}; the CR: {:?}",
                    cr.map(|c| c.map(|c| (c.metadata.finalizers, c.metadata.deletion_timestamp, c.status)))
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
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

/// Set one key of the credentials Secret (retried while the manager's webhooks, which guard it, are down).
async fn change_required_secret(chaos: &mut Chaos<'_>, secrets: &Api<Secret>, key: &str, value: &str) {
    let patch = serde_json::json!({"stringData": {key: value}});
    chaos
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

async fn cr_ready(crs: &Api<BtpOperator>) -> bool {
    crs.get_opt(names::BTP_OPERATOR_NAME)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.status)
        .is_some_and(|s| s.state == State::Ready)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_survives_faults_kills_and_restarts_through_its_whole_life() {
    if real_cluster().is_some() {
        eprintln!("chaos: skipped against a real cluster (it needs the embedded API server's fault injection)");
        return;
    }
    // The manager's recent logs, printed when a step fails; `BTP_CHAOS_LOG=<filter>` changes what is kept.
    let logs = RecentLogs::default();
    let filter = std::env::var("BTP_CHAOS_LOG").unwrap_or_else(|_| "btp_manager=info,kube_lease_manager=debug".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(false)
        .with_writer(logs.clone())
        .try_init();
    let plan = plan();
    let mut progress = Progress {
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
        },
    )
    .await;
    let server = env.server().expect("the embedded API server");
    let client = env.client.clone();
    env.ensure_namespace(TEAM).await;
    create_user_objects(&client).await;
    let users_before = user_objects(&client).await;
    let charts = charts();
    let webhook_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");

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
    // `BTP_CHAOS_FAULTS` picks the disruptions (default all: 500,429,409,cut,kill,restart; `none` for none),
    // to tell one's effect from another's or from a logic error.
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
    let (kills, restarts) = (on("kill"), on("restart"));
    let mut chaos = Chaos {
        server,
        webhook_port,
        chart: charts.v1.clone(),
        running: None,
        disruption: None,
        rng: fastrand::Rng::with_seed(plan.seed),
        kill_enabled: kills,
        restart_enabled: restarts,
        kills: 0,
        restarts: 0,
        failed_starts: 0,
    };
    chaos.start().await;
    let crs = env.crs(NS);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    let (mut peak_rate, mut requests, mut quietest) = (0, 0, 0);

    for iteration in plan.iterations.clone() {
        progress.iteration = iteration;
        // Everything this iteration chooses comes from the seed and the iteration alone.
        let iteration_seed = plan.seed ^ iteration.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        chaos.rng = fastrand::Rng::with_seed(iteration_seed);
        faults.seed(iteration_seed);
        chaos.disruption = None;
        let probe = RateProbe::start(server.request_log());

        (progress.step, progress.since) = ("chart v1", Instant::now());
        progress.took.clear();
        if chaos.chart != charts.v1 {
            chaos.chart = charts.v1.clone();
            chaos.restart(false).await;
        }

        progress.step("provisioning");
        chaos.plan_disruption();
        let secret = required_secret(iteration);
        chaos
            .until("the credentials Secret is created", || async {
                written(secrets.create(&PostParams::default(), &secret).await)
            })
            .await;
        chaos
            .until("the BtpOperator is created", || async {
                written(
                    crs.create(&PostParams::default(), &BtpOperator::new(names::BTP_OPERATOR_NAME))
                        .await,
                )
            })
            .await;
        let (secret_a, cluster_a) = (format!("secret-{iteration}-a"), format!("cluster-{iteration}-a"));
        chaos
            .until("Ready with the first credentials", || async {
                cr_ready(&crs).await
                    && secret_value(&secrets, names::operand::SECRET, "clientsecret")
                        .await
                        .as_deref()
                        == Some(secret_a.as_bytes())
                    && configmap_value(&cms, names::operand::CONFIGMAP, "CLUSTER_ID")
                        .await
                        .as_deref()
                        == Some(cluster_a.as_str())
            })
            .await;
        let operand = env.play_operand(true).await;

        progress.step("services");
        let (instances, bindings) = (chaos.rng.usize(1..=8), chaos.rng.usize(1..=8));
        for i in 0..instances {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), TEAM, &services("ServiceInstance"));
            let si = service_instance(TEAM, &format!("si-{i}"));
            eventually(STEP_DEADLINE, "a ServiceInstance is created", || async {
                written(api.create(&PostParams::default(), &si).await)
            })
            .await;
        }
        for i in 0..bindings {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), TEAM, &services("ServiceBinding"));
            let sb = service_binding(TEAM, &format!("sb-{i}"), Some(&format!("sb-{i}-secret")));
            eventually(STEP_DEADLINE, "a ServiceBinding is created", || async {
                written(api.create(&PostParams::default(), &sb).await)
            })
            .await;
        }

        progress.step("credentials change");
        chaos.plan_disruption();
        let secret_b = format!("secret-{iteration}-b");
        change_required_secret(&mut chaos, &secrets, "clientsecret", &secret_b).await;
        chaos
            .until("the operand Secret holds the new credentials", || async {
                secret_value(&secrets, names::operand::SECRET, "clientsecret")
                    .await
                    .as_deref()
                    == Some(secret_b.as_bytes())
                    && cr_ready(&crs).await
            })
            .await;

        progress.step("cluster-ID change");
        chaos.plan_disruption();
        let cluster_b = format!("cluster-{iteration}-b");
        change_required_secret(&mut chaos, &secrets, "cluster_id", &cluster_b).await;
        chaos
            .until("the operand runs with the new cluster ID", || async {
                configmap_value(&cms, names::operand::CONFIGMAP, "CLUSTER_ID")
                    .await
                    .as_deref()
                    == Some(cluster_b.as_str())
                    && cr_ready(&crs).await
            })
            .await;

        progress.step("chart upgrade");
        chaos.plan_disruption();
        chaos.chart = charts.v2.clone();
        let kill = chaos.rng.u8(..3) == 0 && chaos.kill_enabled;
        chaos.restart(kill).await;
        let svcs: Api<Service> = Api::namespaced(client.clone(), NS);
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
        chaos
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
                    && cr_ready(&crs).await
            })
            .await;

        progress.step("operand certificate repair");
        chaos.plan_disruption();
        chaos
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
        chaos
            .until("the operand's certificates are valid again and trusted", || async {
                operand_certs_valid(&client).await && cr_ready(&crs).await
            })
            .await;
        let want = expected(&charts.v2);
        chaos
            .until("exactly chart v2's objects are installed", || async {
                installed_objects(&client).await == want
            })
            .await;
        progress.step("at rest");
        let log = server.request_log();
        let before = log.len();
        tokio::time::sleep(AT_REST).await; // the window measured, not a synchronization
        let at_rest = log.since(before).iter().filter(|r| r.user == MANAGER_USER).count();
        assert!(
            at_rest <= MAX_REQUESTS_AT_REST,
            "the converged manager sent {at_rest} requests in {AT_REST:?} (bound {MAX_REQUESTS_AT_REST})"
        );
        quietest = quietest.max(at_rest);

        progress.step("force-delete");
        chaos.plan_disruption();
        let label = serde_json::json!({"metadata": {"labels": {names::FORCE_DELETE_LABEL: "true"}}});
        chaos
            .until("the CR is labelled force-delete", || async {
                written(
                    crs.patch(names::BTP_OPERATOR_NAME, &PatchParams::default(), &Patch::Merge(&label))
                        .await,
                )
            })
            .await;
        chaos
            .until("the CR deletion is accepted", || async {
                crs.delete(names::BTP_OPERATOR_NAME, &DeleteParams::default())
                    .await
                    .is_ok()
            })
            .await;
        chaos
            .until("the BtpOperator is gone", || async {
                matches!(crs.get_opt(names::BTP_OPERATOR_NAME).await, Ok(None))
            })
            .await;
        drop(operand);

        progress.step("after deletion");
        assert_eq!(
            count_services(&client).await,
            0,
            "every ServiceInstance and ServiceBinding is gone"
        );
        let left = installed_objects(&client).await;
        assert!(left.is_empty(), "nothing of the module is left: {left:?}");
        let finalizers = our_finalizers(&client).await;
        assert!(finalizers.is_empty(), "no finalizer of ours is left: {finalizers:?}");
        assert_eq!(
            user_objects(&client).await,
            users_before,
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

        let (peak, total) = probe.finish().await;
        assert!(
            peak <= MAX_REQUESTS_PER_SECOND,
            "the manager sent {peak} requests in one second (bound {MAX_REQUESTS_PER_SECOND})"
        );
        assert!(
            total <= MAX_REQUESTS_PER_ITERATION,
            "the manager sent {total} requests in one iteration (bound {MAX_REQUESTS_PER_ITERATION})"
        );
        peak_rate = peak_rate.max(peak);
        progress.step("invariants");
        progress.report(&format!(
            "{total} requests, at most {peak} in one second, {at_rest} at rest"
        ));
        requests += total;
        server.request_log().clear();
    }

    progress.step("shutdown");
    chaos.stop(false).await;
    faults.clear();
    let iterations = plan.iterations.end - plan.iterations.start;
    println!(
        "chaos: seed {}: {iterations} iterations in {:.1?}; {} restarts ({} kills), {} failed starts; the \
         manager sent {requests} requests, at most {peak_rate} in one second and {quietest} in {AT_REST:?} at rest",
        plan.seed,
        started.elapsed(),
        chaos.restarts,
        chaos.kills,
        chaos.failed_starts,
    );
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
