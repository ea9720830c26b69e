//! The Go manager's release stress dataset (docs/behaviour.md#performance-scenario) as a test: the embedded
//! API server runs as its own process (btp-apiserver's `serve` example, writing its request log), and the
//! manager as another (`btp-manager run`, authenticating as its ServiceAccount's user). Under the dataset
//! the CR stays Ready through forced reconciles without a failed pass, and no pass reads anything it does
//! not own: nothing in the namespaces that hold the dataset, no cluster-wide list of Secrets or ConfigMaps.
//! A pass's cost therefore does not grow with the cluster's unrelated objects.
//!
//! The figures (average forced reconcile, the manager's peak RSS) are printed, not asserted: their targets
//! live in `cargo bench -p btp-manager --bench stress`. `BTP_STRESS_SCALE` (default 1.0) scales the dataset
//! and `BTP_STRESS_RECONCILES` (default 20) sets the number of forced reconciles, to run it longer.
//! Embedded server only (it reads the server's request log).

#[path = "common/operand.rs"]
mod operand;
#[path = "../benches/support/mod.rs"]
mod support;

use btp_api::names;
use kube::api::Api;
use support::dataset::{self, Sizes};
use support::{
    env_usize, force_reconcile, install, is_ready, provision, reconcile_errors, reconcile_time, Manager, ServerProcess,
    MANAGER_USER,
};

/// Send a request the log will show (a GET of a namespace that does not exist) and wait until it does:
/// every request logged after it was answered after this call.
async fn mark(server: &ServerProcess, client: &kube::Client, name: &str) -> usize {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.get_opt(name).await;
    support::eventually(std::time::Duration::from_secs(10), "the marker is logged", || {
        std::future::ready(
            server
                .requests()
                .iter()
                .position(|r| r["resource"] == "namespaces" && r["name"] == name),
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_release_dataset_keeps_the_cr_ready_and_no_pass_reads_what_the_manager_does_not_own() {
    let scale = std::env::var("BTP_STRESS_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let sizes = Sizes::scaled(scale);
    let server = ServerProcess::start("stress-test").await;
    let client = server.client().await;
    let namespaces = [names::KYMA_SYSTEM].into_iter().chain(dataset::NAMESPACES);
    install(&client, namespaces.map(String::from)).await;
    dataset::create(&client, sizes).await.expect("the stress dataset");

    let manager = Manager::start(&server.manager_kubeconfig, &[]);
    let crs = provision(&client, Default::default()).await;
    let (sum0, count0) = reconcile_time(&manager.metrics_text().await);
    let start = mark(&server, &client, "stress-window-start").await;
    let forced = env_usize("BTP_STRESS_RECONCILES", 20);
    for i in 0..forced {
        force_reconcile(&crs).await;
        assert!(is_ready(&crs).await, "the CR is Ready after forced reconcile {i}");
    }
    // A pass takes the annotation off before it ends: wait until the last one is counted too.
    support::eventually(
        std::time::Duration::from_secs(10),
        "every forced reconcile is counted",
        || async { reconcile_time(&manager.metrics_text().await).1 - count0 >= forced as f64 },
    )
    .await;
    let metrics = manager.metrics_text().await;
    let end = mark(&server, &client, "stress-window-end").await;
    let (sum1, count1) = reconcile_time(&metrics);

    assert_eq!(reconcile_errors(&metrics), 0.0, "no reconcile failed under the dataset");
    let window = &server.requests()[start..end];
    let by_manager: Vec<&serde_json::Value> = window.iter().filter(|r| r["user"] == MANAGER_USER).collect();
    assert!(
        !by_manager.is_empty(),
        "the manager's requests are logged under its user"
    );
    let unowned: Vec<String> = by_manager
        .iter()
        .filter(|r| {
            let ns = r["namespace"].as_str().unwrap_or_default();
            let resource = r["resource"].as_str().unwrap_or_default();
            let cluster_wide_list = ns.is_empty()
                && matches!(r["verb"].as_str(), Some("list" | "watch"))
                && matches!(resource, "secrets" | "configmaps");
            dataset::NAMESPACES.contains(&ns) || cluster_wide_list
        })
        .map(|r| {
            format!(
                "{} {} {}/{}?{}",
                r["verb"], r["resource"], r["namespace"], r["name"], r["query"]
            )
        })
        .collect();
    assert!(
        unowned.is_empty(),
        "forced reconciles read what the manager does not own: {unowned:#?}"
    );
    let passes = count1 - count0;
    let per_pass = by_manager.len() as f64 / passes;
    if std::env::var("BTP_STRESS_DUMP").is_ok() {
        let mut counts = std::collections::BTreeMap::new();
        for r in &by_manager {
            *counts
                .entry(format!(
                    "{} {} {}/{}",
                    r["verb"], r["resource"], r["namespace"], r["name"]
                ))
                .or_insert(0) += 1;
        }
        eprintln!("{counts:#?}");
    }
    // A pass reads the objects it owns (about 27 requests) and writes nothing in steady state; more would
    // mean a pass started reading something new.
    assert!(
        per_pass <= 35.0,
        "{per_pass:.1} requests per pass: {:#?}",
        by_manager
            .iter()
            .map(|r| format!("{} {} {}/{}", r["verb"], r["resource"], r["namespace"], r["name"]))
            .collect::<Vec<_>>()
    );

    // The manager keeps nothing of the dataset: caching its Secrets (about 20 MiB of data) would show
    // here. The release build's figure, against its 40 MiB target, is the stress bench's.
    let rss = manager.peak_rss_mib();
    assert!(rss < 100.0, "the manager's peak RSS is {rss:.1} MiB under the dataset");

    println!("stress dataset: {sizes}");
    println!(
        "  {forced} forced reconciles ({passes} passes): average pass {:.1} ms (this build; the release target \
         of 50 ms is in the stress bench), {per_pass:.1} manager requests per pass, 0 errors, CR Ready",
        (sum1 - sum0) / passes * 1000.0
    );
    println!(
        "  manager peak RSS {rss:.1} MiB (this build), CPU {:.2} s in all",
        manager.cpu_seconds()
    );
}
