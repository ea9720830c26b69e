//! The Go manager's release stress dataset, against the embedded API server (in this process) with the
//! manager as its own process (`btp-manager run`): 500 ServiceInstances and 500 ServiceBindings, 120
//! ConfigMaps and 120 Secrets of about 4,000 keys each, 100 Secrets of 64 KiB, and 8 large Secrets labelled
//! `managed-by=btp-manager` in kyma-system. The CR must stay Ready; forced reconciles (the `operation:
//! reconcile` annotation) are timed from the manager's own `/metrics`, and its peak RSS is printed.
//! Targets: forced reconciles under 50 ms on average, peak RSS under 40 MiB.
//!
//! `BTP_BENCH_SCALE` (default 1.0) scales every count; `BTP_BENCH_RECONCILES` (default 20) sets how many
//! forced reconciles are timed. Run: `cargo bench -p btp-manager --bench stress`. With `BTP_BENCH_SUMMARY`
//! set, the figures are also appended to that file for `scripts/bench`'s table.

#[path = "../tests/common/operand.rs"]
mod operand;
mod support;

use std::process::ExitCode;
use std::time::Instant;
use support::dataset::{self, Sizes};
use support::summary::Summary;
use support::{env_usize, force_reconcile, is_ready, reconcile_errors, reconcile_time, Cluster, Manager};

fn scale() -> f64 {
    std::env::var("BTP_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0)
}

async fn run(summary: &mut Summary) {
    let namespaces = [btp_api::names::KYMA_SYSTEM].into_iter().chain(dataset::NAMESPACES);
    let cluster = Cluster::start("stress", namespaces.map(String::from)).await;
    let client = cluster.client.clone();

    // The dataset.
    let started = Instant::now();
    let sizes = Sizes::scaled(scale());
    dataset::create(&client, sizes).await.expect("the stress dataset");
    eprintln!("  dataset created in {:.1?}", started.elapsed());

    // The manager, the credentials, the CR: Ready.
    btp_apiserver::testing::spawn_deployment_controller(client.clone());
    let manager = Manager::start(&cluster.kubeconfig, &[]);
    let crs = cluster.provision(Default::default()).await;

    // Forced reconciles, one at a time, timed by the manager's own histogram.
    let (sum0, count0) = reconcile_time(&manager.metrics_text().await);
    let forced = env_usize("BTP_BENCH_RECONCILES", 20);
    for _ in 0..forced {
        force_reconcile(&crs).await;
    }
    let after = manager.metrics_text().await;
    let (sum1, count1) = reconcile_time(&after);
    let errors = reconcile_errors(&after);
    assert!(is_ready(&crs).await, "the CR stays Ready under the dataset");
    let average_ms = (sum1 - sum0) / (count1 - count0) * 1000.0;
    println!("stress dataset: {sizes}");
    println!(
        "  {} reconciles while forcing {forced}: average {average_ms:.1} ms (target under 50 ms), {errors} errors; \
         CR Ready",
        count1 - count0
    );
    let peak_rss = manager.peak_rss_mib();
    println!(
        "  manager peak RSS {peak_rss:.1} MiB (target under 40 MiB), CPU {:.2} s in all",
        manager.cpu_seconds()
    );
    summary.against(
        "peak memory: the manager's peak RSS (VmHWM)",
        &format!("{peak_rss:.1} MiB"),
        "under 40 MiB",
        peak_rss < 40.0,
    );
    summary.against(
        &format!("forced reconciles ({forced}): average reconcile time"),
        &format!("{average_ms:.1} ms over {} reconciles", count1 - count0),
        "under 50 ms",
        average_ms < 50.0,
    );
    let errors_text = if errors.is_nan() {
        "not in the manager's metrics".to_string()
    } else {
        format!("{errors}")
    };
    summary.against("reconciles that ended in error", &errors_text, "0", errors == 0.0);
    drop(manager);
    cluster.shutdown().await;
}

fn main() -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut summary = Summary::from_env(format!(
        "stress: the Go manager's release dataset{} (manager as its own process)",
        if scale() == 1.0 {
            String::new()
        } else {
            format!(" scaled by {}", scale())
        }
    ));
    rt.block_on(run(&mut summary));
    summary.exit_code()
}
