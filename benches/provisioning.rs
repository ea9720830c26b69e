//! Provisioning benchmark against the embedded API server (the manager in-process, real HTTPS).
//!
//! Prints:
//! 1. time from creating `kyma-system/btpoperator` to `Ready`, with the Secret present and the operand
//!    Deployment made available as soon as it exists (`BTP_BENCH_ITERS` runs, default 15, each on a fresh
//!    API server);
//! 2. API requests made by one steady-state reconcile, and how many of them changed a resourceVersion;
//! 3. the performance scenario (docs/behaviour.md#performance-scenario): 20 rapid `sm_url` edits of the Secret, then 10
//!    delete/re-create cycles, reading the average reconcile time and the error count from `/metrics`.
//!
//! Run: `cargo bench -p btp-manager --bench provisioning`. With `BTP_BENCH_SUMMARY` set, the figures are
//! also appended to that file for `scripts/bench`'s table.

#[path = "support/summary.rs"]
mod summary;

use btp_api::{names, BtpOperator, State};
use btp_manager::config::Config;
use btp_manager::reconciler::{self, metrics::ReconcileMetrics, network_policies, resources, Context};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use prometheus_client::registry::Registry;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Setup {
    server: btp_apiserver::RunningApiServer,
    client: kube::Client,
    ctx: Arc<Context>,
    registry: Registry,
    _stop: tokio::sync::oneshot::Sender<()>,
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

async fn setup(config: Config) -> Setup {
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
    Api::<Secret>::namespaced(client.clone(), names::KYMA_SYSTEM)
        .create(&PostParams::default(), &secret())
        .await
        .expect("Secret");
    btp_apiserver::spawn_deployment_controller(client.clone());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let module = resources::load(&root.join("module-resources")).expect("module resources");
    let policies = network_policies::load(&root.join("manager-resources")).expect("policies");
    let mut registry = Registry::default();
    let metrics = ReconcileMetrics::register(&mut registry);
    let ctx = Context::new(
        client.clone(),
        config,
        module,
        "example.test/operator:v1".into(),
        None,
        metrics,
    );
    let ctx = Arc::new(ctx.with_network_policies(policies));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(reconciler::run(ctx.clone(), async move {
        let _ = stopped.await;
    }));
    Setup {
        server,
        client,
        ctx,
        registry,
        _stop: stop,
    }
}

/// Create the CR and return the time until a watch sees it Ready.
async fn create_until_ready(s: &Setup) -> Duration {
    let crs: Api<BtpOperator> = Api::namespaced(s.client.clone(), names::KYMA_SYSTEM);
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
    while let Some(Ok(cr)) = events.next().await {
        if cr.status.is_some_and(|st| st.state == State::Ready) {
            return started.elapsed();
        }
    }
    panic!("watch ended before Ready");
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

fn main() -> ExitCode {
    let mut summary = summary::Summary::from_env("provisioning (embedded API server, manager in-process)");
    let iters: usize = std::env::var("BTP_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // 1. CR creation to Ready.
        let mut times = Vec::new();
        for _ in 0..iters {
            let s = setup(Config::default()).await;
            times.push(create_until_ready(&s).await);
        }
        times.sort();
        println!(
            "provisioning/create-to-ready: median {}, p90 {}, min {}, max {} (n={iters})",
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.9)),
            ms(times[0]),
            ms(times[times.len() - 1])
        );
        summary.figure(
            &format!("CR to Ready (median of {iters})"),
            &format!("{} (p90 {})", ms(percentile(&times, 0.5)), ms(percentile(&times, 0.9))),
        );

        // 2. One steady-state reconcile (periodic requeue, nothing to change).
        let s = setup(Config { ready_state_requeue_interval: Duration::from_millis(300), ..Config::default() }).await;
        create_until_ready(&s).await;
        let settled = s.ctx.metrics.reconciles() + 3;
        wait_reconciles(&s.ctx, settled).await;
        let log = s.server.request_log();
        log.clear();
        let start = s.ctx.metrics.reconciles();
        wait_reconciles(&s.ctx, start + 5).await;
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
        summary.figure(
            "API requests per steady-state reconcile",
            &format!("{:.1}", entries.len() as f64 / 5.0),
        );
        drop(s);

        // 3. Reference §16.4: 20 rapid sm_url edits, then 10 delete/re-create cycles of the Secret.
        let s = setup(Config::default()).await;
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
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &s.registry).expect("encode metrics");
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
