//! Provisioning benchmark against the embedded API server (the manager in-process as `run` runs it, its
//! admission webhooks registered, real HTTPS).
//!
//! Prints:
//! 1. time from creating `kyma-system/btpoperator` to `Ready`, with the Secret present and the operand
//!    Deployment made available as soon as it exists: cold (`BTP_BENCH_ITERS` runs, default 15, each on a
//!    fresh API server) and warm (the operand already installed, a freshly started manager; at most 10
//!    runs), each without and with a real API server's round trip simulated (15 ms per request, 30 ms per CRD
//!    write), with the manager's sequential round trips (the longest chain of requests each sent after the one
//!    before had answered) and requests; `BTP_BENCH_TRACE=1` prints every request of each run;
//! 2. API requests made by one steady-state reconcile, and how many of them changed a resourceVersion;
//! 3. the performance scenario (docs/behaviour.md#performance-scenario): 20 rapid `sm_url` edits of the Secret, then 10
//!    delete/re-create cycles, reading the average reconcile time and the error count from `/metrics`.
//!
//! Run: `cargo bench -p btp-manager --bench provisioning`. With `BTP_BENCH_SUMMARY` set, the figures are
//! also appended to that file for `scripts/bench`'s table.
//!
//! `BTP_BENCH_MODE=real` runs instead CR to Ready on real API servers of `../shared/realk8s`, a fresh server
//! per round, the manager with `run`'s options from `deploy/deployment.yaml` (`support/real_provisioning.rs`,
//! its knobs in `support/realk8s.rs`); where there is no realk8s it says so and reports that it did not run.
//! `BTP_BENCH_MODE=real-roles` measures the writes of the operand's roles as the manager on one real server,
//! with the shipped RBAC and without its `escalate` (`support/real_roles.rs`).

#[path = "../tests/common/eventually.rs"]
mod eventually;
#[path = "support/metrics.rs"]
mod metrics;
#[path = "support/real_provisioning.rs"]
mod real;
#[path = "support/real_roles.rs"]
mod real_roles;
#[path = "support/realk8s.rs"]
mod realk8s;
#[path = "../tests/common/install.rs"]
mod shipped;
#[path = "support/summary.rs"]
mod summary;
#[path = "support/timeline.rs"]
mod timeline;

use btp_api::{names, BtpOperator, State};
use btp_manager::config::Config;
use btp_manager::manager::{ManagerBuilder, Options};
use btp_manager::reconciler::{network_policies, resources, Context};
use futures::StreamExt as _;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The round trip the API server simulates (`FaultInjector::add_latency`).
#[derive(Clone, Copy)]
struct Latency {
    /// Every request.
    all: Duration,
    /// Writes of CustomResourceDefinitions (slower on a real server).
    crd_writes: Duration,
}

impl Latency {
    const NONE: Latency = Latency {
        all: Duration::ZERO,
        crd_writes: Duration::ZERO,
    };
    /// What a real API server (etcd, 2 cores) takes: issue 20 measured 15-20 ms per request.
    const REAL: Latency = Latency {
        all: Duration::from_millis(15),
        crd_writes: Duration::from_millis(30),
    };

    fn install(self, server: &btp_apiserver::RunningApiServer) {
        if self.all.is_zero() && self.crd_writes.is_zero() {
            return;
        }
        for verb in ["create", "update", "patch"] {
            server.faults().add_latency(btp_apiserver::testing::LatencyRule {
                latency: self.crd_writes,
                verb: Some(verb.into()),
                resource: Some("customresourcedefinitions".into()),
            });
        }
        server.faults().latency(self.all);
    }

    fn label(self) -> String {
        if self.all.is_zero() {
            "no latency".into()
        } else {
            format!(
                "{} ms per request, {} ms per CRD write",
                self.all.as_millis(),
                self.crd_writes.as_millis()
            )
        }
    }
}

/// A manager running in-process as `run` runs it, its requests timed.
struct Manager {
    ctx: Arc<Context>,
    /// Where it serves `/metrics`.
    metrics: std::net::SocketAddr,
    timeline: timeline::Timeline,
    term: tokio::sync::watch::Sender<bool>,
    running: btp_manager::manager::Manager,
}

struct Setup {
    server: btp_apiserver::RunningApiServer,
    client: kube::Client,
    manager: Manager,
}

fn secret() -> Secret {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-manager", "namespace": names::KYMA_SYSTEM,
                     "labels": {"app.kubernetes.io/managed-by": "kcp-kyma-environment-broker"}},
        "stringData": {"clientid": "id", "clientsecret": "secret", "sm_url": "https://sm.example.com",
                       "tokenurl": "https://auth.example.com", "cluster_id": "cluster-1"}
    }))
    .expect("secret")
}

async fn setup(config: Config, latency: Latency) -> Setup {
    let server = btp_apiserver::ApiServer::start(btp_apiserver::Config::default())
        .await
        .expect("API server");
    let client = server.client().await;
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": names::KYMA_SYSTEM}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &BtpOperator::crd().expect("crd"))
        .await
        .expect("CRD");
    btp_manager::objects::crd_established(&client, names::CRD_NAME, Duration::from_secs(30))
        .await
        .expect("the BtpOperator CRD is established");
    Api::<Secret>::namespaced(client.clone(), names::KYMA_SYSTEM)
        .create(&PostParams::default(), &secret())
        .await
        .expect("Secret");
    btp_apiserver::testing::spawn_deployment_controller(client.clone());
    latency.install(&server);
    let manager = start_manager(&server, config).await;
    Setup {
        server,
        client,
        manager,
    }
}

/// Start a manager as `run` starts it (the reconciler, the probes, and its admission webhooks registered
/// with the API server: as shipped, the mutating webhook puts the finalizer on a new CR), without leader
/// election, and wait until its watches are established (so that a CR created next is seen at once).
async fn start_manager(server: &btp_apiserver::RunningApiServer, config: Config) -> Manager {
    // The admin's identity: the embedded server enforces RBAC for every other user.
    let options = Options::in_process(config, "example.test/operator:v1");
    Manager::start(server.kube_config(), options, &server.client().await).await
}

impl Manager {
    /// A manager with `options`, a client of `config` (without kube's own retries, as `run`'s), its requests
    /// timed; returns once its watches run and its webhook configurations name its address (read by `admin`).
    async fn start(config: kube::Config, options: Options, admin: &kube::Client) -> Manager {
        let timeline = timeline::Timeline::default();
        let client = timeline.client(btp_manager::reconciler::cluster::client_config(config));
        let (term, term_rx) = tokio::sync::watch::channel(false);
        let running = ManagerBuilder::new(client, options)
            .expect("the manager's options")
            .start(term_rx)
            .await
            .expect("the manager starts");
        let ctx = running.ctx.clone();
        let watching = |resource: &str| timeline.watching(&format!("/{resource}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        let view_ready = || ctx.view().is_some_and(|v| v.ready());
        while !(watching("btpoperators") && view_ready()) {
            assert!(Instant::now() < deadline, "the manager's watches did not start");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Its webhooks registered, at its own address (a CR created before would go through none of them, or
        // through a configuration left by the manager before it).
        let at = format!(":{}/", running.webhook_addr.port());
        loop {
            let mutating = Api::<MutatingWebhookConfiguration>::all(admin.clone())
                .get_opt(names::webhook::MUTATING_CONFIGURATION)
                .await
                .expect("read the mutating webhook configuration");
            let validating = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
                .get_opt(names::webhook::VALIDATING_CONFIGURATION)
                .await
                .expect("read the validating webhook configuration");
            let points_here = |v: Option<serde_json::Value>| {
                v.and_then(|v| {
                    v["webhooks"][0]["clientConfig"]["url"]
                        .as_str()
                        .map(|u| u.contains(&at))
                })
                .unwrap_or(false)
            };
            if points_here(mutating.and_then(|m| serde_json::to_value(m).ok()))
                && points_here(validating.and_then(|v| serde_json::to_value(v).ok()))
            {
                break;
            }
            assert!(Instant::now() < deadline, "the manager's webhooks were not registered");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Manager {
            ctx,
            metrics: running.metrics_addr,
            timeline,
            term,
            running,
        }
    }

    async fn stop(self) {
        let _ = self.term.send(true);
        self.running.shut_down().await.expect("the manager shuts down");
    }
}

/// One CR-to-Ready: how long it took, and what the manager sent meanwhile.
struct Run {
    elapsed: Duration,
    /// Round trips one after another (see `timeline::sequential_round_trips`).
    sequential: usize,
    /// Of those, the ones on the module's objects (the apply step and its compare-before-apply reads).
    sequential_apply: usize,
    requests: usize,
}

/// Create the CR and return the time until a watch sees it Ready, with the manager's requests meanwhile.
async fn create_until_ready(s: &Setup) -> Run {
    create_until_ready_with(&s.client, &s.manager, &[]).await
}

/// [`create_until_ready`] through `client`; `others` are the requests of other clients (name, timeline) that
/// the trace shows beside the manager's (they count in no figure).
async fn create_until_ready_with(
    client: &kube::Client,
    manager: &Manager,
    others: &[(&str, &timeline::Timeline)],
) -> Run {
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let mut events = watcher(
        crs.clone(),
        watcher::Config::default().fields("metadata.name=btpoperator"),
    )
    .applied_objects()
    .boxed();
    let started = Instant::now();
    crs.create(&PostParams::default(), &BtpOperator::new(names::BTP_OPERATOR_NAME))
        .await
        .expect("create CR");
    let created = started.elapsed();
    // What the bench's watch saw, and when (for the trace).
    let mut seen: Vec<(Instant, String)> = Vec::new();
    while let Some(Ok(cr)) = events.next().await {
        seen.push((
            Instant::now(),
            match &cr.status {
                None => "no status".to_string(),
                Some(st) => st
                    .conditions
                    .iter()
                    .map(|c| format!("{} {:?} {}", c.type_, c.status, c.reason))
                    .fold(format!("{:?}:", st.state), |line, c| format!("{line} [{c}]")),
            },
        ));
        if cr.status.is_some_and(|st| st.state == State::Ready) {
            let elapsed = started.elapsed();
            let spans = manager.timeline.between(started, started + elapsed);
            let module_paths = module_paths(&manager.ctx);
            let apply: Vec<timeline::Span> = spans
                .iter()
                .filter(|sp| module_paths.iter().any(|p| sp.what.ends_with(p.as_str())))
                .cloned()
                .collect();
            if std::env::var_os("BTP_BENCH_TRACE").is_some() {
                // What the manager sent, relative to the CR's creation (for finding where a pass waits), with
                // the requests sent before Ready and answered after it (marked `*`; they count in no figure).
                let ready_at = started + elapsed;
                let deadline = Instant::now() + Duration::from_secs(2);
                while !manager.timeline.answered_before(ready_at) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let mut lines: Vec<(String, timeline::Span)> = manager
                    .timeline
                    .between(started, ready_at + Duration::from_secs(2))
                    .into_iter()
                    .filter(|sp| sp.start <= ready_at)
                    .map(|sp| (String::new(), sp))
                    .collect();
                let watched = seen.iter().map(|(t, what)| {
                    let at = *t;
                    (
                        "[bench's watch] ".to_string(),
                        timeline::Span {
                            start: at,
                            end: at,
                            what: what.clone(),
                        },
                    )
                });
                lines.extend(watched);
                for (who, other) in others {
                    lines.extend(
                        other
                            .between(started, ready_at + Duration::from_secs(2))
                            .into_iter()
                            .filter(|sp| sp.start <= ready_at)
                            .map(|sp| (format!("[{who}] "), sp)),
                    );
                }
                lines.sort_by_key(|(_, sp)| sp.start);
                let at = |t: Instant| (t - started).as_secs_f64() * 1e3;
                println!(
                    "  {:7.1} {:7.1} ms  [bench] POST the CR (through the admission webhooks)",
                    0.0,
                    created.as_secs_f64() * 1e3
                );
                for (who, sp) in &lines {
                    let late = if sp.end > ready_at { "*" } else { " " };
                    println!("  {:7.1} {:7.1}{late}ms  {who}{}", at(sp.start), at(sp.end), sp.what);
                }
                println!(
                    "  {:7.1} ms  Ready (seen by the bench's watch)",
                    elapsed.as_secs_f64() * 1e3
                );
            }
            return Run {
                elapsed,
                sequential: timeline::sequential_round_trips(&spans),
                sequential_apply: timeline::sequential_round_trips(&apply),
                requests: spans.len(),
            };
        }
    }
    panic!("watch ended before Ready");
}

/// `/<plural>/<name>` of every object the apply step reads or writes: the module's objects, the network
/// policies, the operand's certificate Secrets and the legacy policy. Not the operand ConfigMap: the drift
/// step reads it too, before the apply.
fn module_paths(ctx: &Context) -> Vec<String> {
    let plural = |kind: &str| {
        let kind = kind.to_lowercase();
        match kind.strip_suffix('y') {
            Some(stem) => format!("{stem}ies"),
            None => format!("{kind}s"),
        }
    };
    let settings = ctx.settings();
    let mut paths: Vec<String> = settings
        .module
        .apply
        .iter()
        .chain(settings.network_policies.iter())
        .filter(|o| o["metadata"]["name"] != resources::OPERAND_CONFIGMAP)
        .map(|o| {
            format!(
                "/{}/{}",
                plural(o["kind"].as_str().unwrap_or_default()),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    paths.extend([btp_certs::operand::CA_SECRET, btp_certs::operand::WEBHOOK_SECRET].map(|n| format!("/secrets/{n}")));
    paths.push(format!("/networkpolicies/{}", network_policies::LEGACY_POLICY));
    paths
}

/// Cold: CR to Ready on a fresh API server, `iters` times.
async fn cold(iters: usize, latency: Latency) -> Vec<Run> {
    let mut runs = Vec::new();
    for _ in 0..iters {
        let s = setup(Config::default(), latency).await;
        runs.push(create_until_ready(&s).await);
        s.manager.stop().await;
    }
    runs
}

/// The CR deleted while no manager runs (the operand stays): the manager's webhook configurations removed
/// (its webhooks stopped with it, and the configurations would refuse the delete; the next manager registers
/// them again), the finalizer removed, the CR deleted and gone.
async fn delete_cr_while_no_manager_runs(client: &kube::Client) {
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(names::webhook::VALIDATING_CONFIGURATION, &DeleteParams::default())
        .await
        .expect("remove the validating webhook configuration");
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(names::webhook::MUTATING_CONFIGURATION, &DeleteParams::default())
        .await
        .expect("remove the mutating webhook configuration");
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let patch = serde_json::json!({"metadata": {"finalizers": null}});
    crs.patch(names::BTP_OPERATOR_NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("remove the finalizer");
    crs.delete(names::BTP_OPERATOR_NAME, &DeleteParams::default())
        .await
        .expect("delete the CR");
    let deadline = Instant::now() + Duration::from_secs(30);
    while crs
        .get_opt(names::BTP_OPERATOR_NAME)
        .await
        .expect("read the CR")
        .is_some()
    {
        assert!(Instant::now() < deadline, "the CR was not deleted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Warm: CR to Ready on a cluster that already has the operand (installed by an earlier CR, deleted while
/// no manager ran, so the operand stayed), by a freshly started manager, `iters` times.
async fn warm(iters: usize, latency: Latency) -> Vec<Run> {
    let mut s = setup(Config::default(), latency).await;
    create_until_ready(&s).await;
    let mut runs = Vec::new();
    for _ in 0..iters {
        let Setup {
            server,
            client,
            manager,
        } = s;
        manager.stop().await;
        delete_cr_while_no_manager_runs(&client).await;
        let manager = start_manager(&server, Config::default()).await;
        s = Setup {
            server,
            client,
            manager,
        };
        runs.push(create_until_ready(&s).await);
    }
    s.manager.stop().await;
    runs
}

/// Median and p90 of the elapsed times, and the median sequential round trips and requests.
struct Figures {
    median: Duration,
    p90: Duration,
    sequential: usize,
    sequential_apply: usize,
    requests: usize,
}

fn figures(runs: &[Run]) -> Figures {
    let mut times: Vec<Duration> = runs.iter().map(|r| r.elapsed).collect();
    times.sort();
    let median_of = |f: fn(&Run) -> usize| {
        let mut v: Vec<usize> = runs.iter().map(f).collect();
        v.sort();
        v[v.len() / 2]
    };
    Figures {
        median: percentile(&times, 0.5),
        p90: percentile(&times, 0.9),
        sequential: median_of(|r| r.sequential),
        sequential_apply: median_of(|r| r.sequential_apply),
        requests: median_of(|r| r.requests),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn wait_reconciles(ctx: &Context, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while ctx.metrics.reconciles() < at_least {
        assert!(Instant::now() < deadline, "reconciles stalled");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The machine's load average (1, 5 and 15 minutes), for the lines that print a figure.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mode = std::env::var("BTP_BENCH_MODE").unwrap_or_default();
    if mode == "real" || mode == "real-roles" {
        let roles = mode == "real-roles";
        let mut summary = summary::Summary::from_env(if roles {
            "provisioning (role writes on a real API server)"
        } else {
            "provisioning (real API server, manager in-process)"
        });
        let result = rt.block_on(async {
            if roles {
                real_roles::run(&mut summary).await
            } else {
                real::run(&mut summary).await
            }
        });
        if let Err(e) = result {
            eprintln!("provisioning/{mode}: {e}");
            return ExitCode::FAILURE;
        }
        return summary.exit_code();
    }
    let mut summary = summary::Summary::from_env("provisioning (embedded API server, manager in-process)");
    let iters = env_usize("BTP_BENCH_ITERS", 15);
    rt.block_on(async {
        // 1. CR creation to Ready, cold and warm, without and with a real server's round trip.
        let warm_iters = iters.clamp(1, 10);
        for latency in [Latency::NONE, Latency::REAL] {
            let label = latency.label();
            let c = figures(&cold(iters, latency).await);
            let w = figures(&warm(warm_iters, latency).await);
            for (kind, f, n) in [("cold", &c, iters), ("warm", &w, warm_iters)] {
                println!(
                    "provisioning/create-to-ready {kind} ({label}): median {}, p90 {} (n={n}); {} sequential round trips \
                     ({} of them on module objects), {} requests",
                    ms(f.median),
                    ms(f.p90),
                    f.sequential,
                    f.sequential_apply,
                    f.requests
                );
            }
            if latency.all.is_zero() {
                summary.figure(
                    &format!("CR to Ready, cold (median of {iters}, {label})"),
                    &format!("{} (p90 {})", ms(c.median), ms(c.p90)),
                );
                summary.figure(
                    &format!("CR to Ready, warm: the operand installed (median of {warm_iters}, {label})"),
                    &format!("{} (p90 {})", ms(w.median), ms(w.p90)),
                );
                summary.figure(
                    "sequential round trips, cold CR to Ready (all / on module objects) and requests",
                    &format!("{} / {}, {} requests", c.sequential, c.sequential_apply, c.requests),
                );
                summary.figure(
                    "sequential round trips, warm CR to Ready (all / on module objects) and requests",
                    &format!("{} / {}, {} requests", w.sequential, w.sequential_apply, w.requests),
                );
            } else {
                summary.against(
                    &format!("CR to Ready, cold (median of {iters}, {label})"),
                    &format!("{} (p90 {})", ms(c.median), ms(c.p90)),
                    "at most 100 ms",
                    c.median <= Duration::from_millis(100),
                );
                summary.figure(
                    &format!("CR to Ready, warm: the operand installed (median of {warm_iters}, {label})"),
                    &format!("{} (p90 {})", ms(w.median), ms(w.p90)),
                );
                summary.against(
                    &format!("round trips on module objects in a warm CR to Ready ({label})"),
                    &format!("{}", w.sequential_apply),
                    "at most 2 (the reads come from the caches; nothing written)",
                    w.sequential_apply <= 2,
                );
            }
        }

        // 2. One steady-state reconcile (periodic requeue, nothing to change).
        let s = setup(Config { ready_state_requeue_interval: Duration::from_millis(300), ..Config::default() }, Latency::NONE).await;
        create_until_ready(&s).await;
        let settled = s.manager.ctx.metrics.reconciles() + 3;
        wait_reconciles(&s.manager.ctx, settled).await;
        let log = s.server.request_log();
        log.clear();
        let start = s.manager.ctx.metrics.reconciles();
        wait_reconciles(&s.manager.ctx, start + 5).await;
        let entries = log.entries();
        let writes = entries.iter().filter(|r| r.changed).count();
        println!(
            "provisioning/steady-state reconcile: {:.1} API requests per reconcile, {} of {} changed a resourceVersion (over 5 reconciles)",
            entries.len() as f64 / 5.0,
            writes,
            entries.len()
        );
        summary.against(
            "writes per steady-state reconcile (requests that changed a resourceVersion)",
            &format!("{:.1} ({writes} in 5 reconciles)", writes as f64 / 5.0),
            "0 (a steady state writes nothing)",
            writes == 0,
        );
        let per_pass = entries.len() as f64 / 5.0;
        summary.against(
            "API requests per steady-state reconcile",
            &format!("{per_pass:.1}"),
            "at most 26 (what the sequential apply sent; with the caches, none)",
            per_pass <= 26.0,
        );
        s.manager.stop().await;

        // 3. Reference §16.4: 20 rapid sm_url edits, then 10 delete/re-create cycles of the Secret.
        let s = setup(Config::default(), Latency::NONE).await;
        create_until_ready(&s).await;
        let secrets: Api<Secret> = Api::namespaced(s.client.clone(), names::KYMA_SYSTEM);
        for i in 0..20 {
            let patch = serde_json::json!({"stringData": {"sm_url": format!("https://sm-{i}.example.com")}});
            secrets.patch("sap-btp-manager", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("edit");
        }
        for _ in 0..10 {
            secrets.delete("sap-btp-manager", &DeleteParams::default()).await.expect("delete");
            secrets.create(&PostParams::default(), &secret()).await.expect("re-create");
        }
        // Let the last trigger finish: the CR is Ready again with the final Secret.
        let crs: Api<BtpOperator> = Api::namespaced(s.client.clone(), names::KYMA_SYSTEM);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let cr = crs.get(names::BTP_OPERATOR_NAME).await.expect("CR");
            if cr.status.is_some_and(|st| st.state == State::Ready) {
                break;
            }
            assert!(Instant::now() < deadline, "not Ready after the scenario");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let text = metrics::text(s.manager.metrics).await;
        let sum = metric(&text, "controller_runtime_reconcile_time_seconds_sum{controller=\"btpoperator\"} ");
        let count = metric(&text, "controller_runtime_reconcile_time_seconds_count{controller=\"btpoperator\"} ");
        let errors = metric(&text, "controller_runtime_reconcile_total{controller=\"btpoperator\",result=\"error\"} ");
        let average = (count > 0.0).then(|| Duration::from_secs_f64(sum / count));
        println!(
            "provisioning/reference perf scenario: {} reconciles, average {} per reconcile, {} errors",
            count,
            average.map_or_else(|| "(none)".to_string(), ms),
            errors
        );
        summary.against(
            "performance scenario (reference §16.4: 20 sm_url edits, 10 Secret re-creations): average reconcile time",
            &format!("{} over {count} reconciles", average.map_or_else(|| "no reconcile".to_string(), ms)),
            "at most 5 s",
            average.is_some_and(|a| a <= Duration::from_secs(5)),
        );
        summary.against(
            "performance scenario (reference §16.4): reconciles that ended in error",
            &format!("{errors}"),
            "0",
            errors == 0.0,
        );
    });
    summary.exit_code()
}
