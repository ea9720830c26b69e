//! The Go manager's release stress dataset, against the embedded API server (in this process) with the
//! manager as its own process (`btp-manager run`): 500 ServiceInstances and 500 ServiceBindings, 120
//! ConfigMaps and 120 Secrets of about 4,000 keys each, 100 Secrets of 64 KiB, and 8 large Secrets labelled
//! `managed-by=btp-manager` in kyma-system. The CR must stay Ready; forced reconciles (the `operation:
//! reconcile` annotation) are timed from the manager's own `/metrics`, and its peak RSS is printed.
//! Targets: forced reconciles under 50 ms on average, peak RSS under 40 MiB.
//!
//! `BTP_BENCH_SCALE` (default 1.0) scales every count; `BTP_BENCH_RECONCILES` (default 20) sets how many
//! forced reconciles are timed. Run: `cargo bench -p btp-manager --bench stress`.

#[path = "../tests/common/operand.rs"]
mod operand;
mod support;

use btp_api::names;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use std::time::{Duration, Instant};
use support::{env_usize, eventually, is_ready, metric, Cluster, Manager};

fn scaled(n: usize) -> usize {
    let scale: f64 = std::env::var("BTP_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    ((n as f64) * scale).round().max(1.0) as usize
}

/// `keys` keys of about `value_len` bytes each.
fn many_keys(keys: usize, value_len: usize) -> serde_json::Map<String, serde_json::Value> {
    (0..keys)
        .map(|i| (format!("key-{i:05}"), serde_json::json!("v".repeat(value_len))))
        .collect()
}

async fn create_all<K>(api: Api<K>, objects: Vec<K>) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    futures::stream::iter(objects)
        .map(|o| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &o).await.map(|_| ()) }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}

async fn run() {
    let cluster = Cluster::start("stress", [names::KYMA_SYSTEM, "stress", "team"].map(String::from)).await;
    let client = cluster.client.clone();

    // The dataset.
    let started = Instant::now();
    let services = scaled(500);
    let si = Api::<DynamicObject>::namespaced_with(client.clone(), "team", &operand::services("ServiceInstance"));
    let sb = Api::<DynamicObject>::namespaced_with(client.clone(), "team", &operand::services("ServiceBinding"));
    create_all(
        si,
        (0..services)
            .map(|i| operand::service_instance("team", &format!("si-{i}")))
            .collect(),
    )
    .await
    .expect("ServiceInstances");
    create_all(
        sb,
        (0..services)
            .map(|i| operand::service_binding("team", &format!("sb-{i}"), None))
            .collect(),
    )
    .await
    .expect("ServiceBindings");
    let wide = scaled(120);
    let configmaps: Vec<ConfigMap> = (0..wide)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("wide-{i}"), "namespace": "stress"}, "data": many_keys(4000, 8)
            }))
            .expect("ConfigMap")
        })
        .collect();
    create_all(Api::namespaced(client.clone(), "stress"), configmaps)
        .await
        .expect("ConfigMaps");
    let secret = |name: String, ns: &str, labels: serde_json::Value, data: serde_json::Value| -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "stringData": data
        }))
        .expect("Secret")
    };
    let wide_secrets = (0..wide)
        .map(|i| {
            secret(
                format!("wide-{i}"),
                "stress",
                serde_json::json!({}),
                many_keys(4000, 8).into(),
            )
        })
        .collect();
    create_all(Api::namespaced(client.clone(), "stress"), wide_secrets)
        .await
        .expect("wide Secrets");
    let large = (0..scaled(100))
        .map(|i| {
            secret(
                format!("large-{i}"),
                "stress",
                serde_json::json!({}),
                serde_json::json!({"blob": "x".repeat(64 * 1024)}),
            )
        })
        .collect();
    create_all(Api::namespaced(client.clone(), "stress"), large)
        .await
        .expect("large Secrets");
    let labelled = (0..8)
        .map(|i| {
            secret(
                format!("large-labelled-{i}"),
                names::KYMA_SYSTEM,
                serde_json::json!({"app.kubernetes.io/managed-by": "btp-manager"}),
                serde_json::json!({"blob": "x".repeat(512 * 1024)}),
            )
        })
        .collect();
    create_all(Api::namespaced(client.clone(), names::KYMA_SYSTEM), labelled)
        .await
        .expect("labelled Secrets");
    eprintln!("  dataset created in {:.1?}", started.elapsed());

    // The manager, the credentials, the CR: Ready.
    btp_apiserver::spawn_deployment_controller(client.clone());
    let manager = Manager::start(&cluster.kubeconfig, &[]);
    let crs = cluster.provision(Default::default()).await;

    // Forced reconciles, one at a time, timed by the manager's own histogram.
    let before = manager.metrics_text().await;
    let prefix = "controller_runtime_reconcile_time_seconds_";
    let (sum0, count0) = (
        metric(&before, &format!("{prefix}sum{{")),
        metric(&before, &format!("{prefix}count{{")),
    );
    let forced = env_usize("BTP_BENCH_RECONCILES", 20);
    for _ in 0..forced {
        let patch = serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: "reconcile"}}});
        crs.patch(names::BTP_OPERATOR_NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("annotate");
        eventually(Duration::from_secs(10), "the forced reconcile ran", || async {
            crs.get(names::BTP_OPERATOR_NAME).await.is_ok_and(|c| {
                !c.metadata
                    .annotations
                    .unwrap_or_default()
                    .contains_key(names::OPERATION_ANNOTATION)
            })
        })
        .await;
    }
    let after = manager.metrics_text().await;
    let (sum1, count1) = (
        metric(&after, &format!("{prefix}sum{{")),
        metric(&after, &format!("{prefix}count{{")),
    );
    let errors = metric(
        &after,
        "controller_runtime_reconcile_total{controller=\"btpoperator\",result=\"error\"}",
    );
    assert!(is_ready(&crs).await, "the CR stays Ready under the dataset");
    let average_ms = (sum1 - sum0) / (count1 - count0) * 1000.0;
    println!(
        "stress dataset: {services} ServiceInstances + {services} ServiceBindings, {wide} ConfigMaps and {wide} \
         Secrets of 4,000 keys, {} Secrets of 64 KiB, 8 labelled Secrets of 512 KiB",
        scaled(100)
    );
    println!(
        "  {} reconciles while forcing {forced}: average {average_ms:.1} ms (target under 50 ms), {errors} errors; \
         CR Ready",
        count1 - count0
    );
    println!(
        "  manager peak RSS {:.1} MiB (target under 40 MiB), CPU {:.2} s in all",
        manager.peak_rss_mib(),
        manager.cpu_seconds()
    );
    drop(manager);
    cluster.shutdown().await;
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}
