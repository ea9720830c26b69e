//! Deprovisioning benchmark: a force-delete with many ServiceInstances and ServiceBindings.
//!
//! The embedded API server runs in this process, with a stand-in for the operand (its webhooks, served with
//! the manager-issued certificate, and — for the hard delete — the removal of its finalizers, as the real
//! operand does after cleaning up in SAP BTP). The manager runs as its own process (`btp-manager run`), so
//! its peak memory (VmHWM) is its own.
//!
//! Prints, for `BTP_BENCH_SERVICES` instances and as many bindings (default 10,000 each) spread over
//! `BTP_BENCH_NAMESPACES` namespaces (default 100):
//! 1. hard delete: time from `kubectl delete` (with `force-delete=true`) until the CR is gone, and the
//!    manager's peak RSS;
//! 2. soft delete: the same when the operand never removes its finalizers (`--hard-delete-timeout 1s`, so
//!    the time includes that second).
//!
//! Run: `cargo bench -p btp-manager --bench deprovisioning`. With `BTP_BENCH_SUMMARY` set, the figures are
//! also appended to that file for `scripts/bench`'s table.

#[path = "../tests/common/operand.rs"]
mod operand;
mod support;

use support::summary::Summary;
use support::{env_usize, eventually, Cluster, Manager};

use btp_api::names;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// One run: returns (time from delete to gone, manager peak RSS in MiB, manager CPU seconds during the
/// deletion).
async fn run(services: usize, namespaces: usize, operand_removes_finalizers: bool) -> (Duration, f64, f64) {
    let cluster = Cluster::start(
        "deprovision",
        std::iter::once(names::KYMA_SYSTEM.to_string()).chain((0..namespaces).map(|i| format!("team-{i}"))),
    )
    .await;
    let (server, client) = (&cluster.server, cluster.client.clone());
    let started = Instant::now();
    futures::stream::iter(0..services)
        .map(|i| {
            let client = client.clone();
            async move {
                let ns = format!("team-{}", i % namespaces);
                let si = operand::service_instance(&ns, &format!("si-{i}"));
                let sb = operand::service_binding(&ns, &format!("sb-{i}"), None);
                Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &operand::services("ServiceInstance"))
                    .create(&PostParams::default(), &si)
                    .await?;
                Api::<DynamicObject>::namespaced_with(client, &ns, &operand::services("ServiceBinding"))
                    .create(&PostParams::default(), &sb)
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .expect("create services");
    eprintln!(
        "  created {services} ServiceInstances and {services} ServiceBindings in {:.1?}",
        started.elapsed()
    );

    // The manager, the credentials, the CR: Ready.
    btp_apiserver::testing::spawn_deployment_controller(client.clone());
    let extra: &[&str] = if operand_removes_finalizers {
        &[]
    } else {
        &["--hard-delete-timeout", "1s"]
    };
    let manager = Manager::start(&cluster.kubeconfig, extra);
    let crs = cluster
        .provision([(names::FORCE_DELETE_LABEL.to_string(), "true".to_string())].into())
        .await;
    let _webhooks = operand::serve_webhooks(server, &client).await;
    let remover = operand_removes_finalizers.then(|| operand::spawn_finalizer_remover(client.clone(), 32));

    let cpu_before = manager.cpu_seconds();
    let started = Instant::now();
    crs.delete(names::BTP_OPERATOR_NAME, &DeleteParams::default())
        .await
        .expect("delete the CR");
    eventually(Duration::from_secs(600), "the CR is gone", || async {
        matches!(crs.get_opt(names::BTP_OPERATOR_NAME).await, Ok(None))
    })
    .await;
    let took = started.elapsed();
    let cpu = manager.cpu_seconds() - cpu_before;
    let rss = manager.peak_rss_mib();
    drop(manager);
    if let Some(r) = remover {
        r.abort();
    }
    let left = {
        let mut n = 0;
        for kind in ["ServiceInstance", "ServiceBinding"] {
            let all: Api<DynamicObject> = Api::all_with(client.clone(), &operand::services(kind));
            n += all
                .list_metadata(&Default::default())
                .await
                .map_or(0, |l| l.items.len());
        }
        n
    };
    assert_eq!(left, 0, "every ServiceInstance and ServiceBinding is gone");
    cluster.shutdown().await;
    (took, rss, cpu)
}

fn main() -> ExitCode {
    let services = env_usize("BTP_BENCH_SERVICES", 10_000);
    let namespaces = env_usize("BTP_BENCH_NAMESPACES", 100).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("deprovisioning: {services} ServiceInstances + {services} ServiceBindings over {namespaces} namespaces");
    // The API server, the operand's webhooks and its finalizer removal run in this process: on a small
    // machine they take most of the time. The manager's own CPU time says what the manager costs.
    let (hard, hard_rss, hard_cpu) = rt.block_on(run(services, namespaces, true));
    println!(
        "  force-delete, hard delete (operand removes its finalizers): {:.2} s, manager CPU {:.2} s, manager peak RSS {:.1} MiB",
        hard.as_secs_f64(),
        hard_cpu,
        hard_rss
    );
    let (soft, soft_rss, soft_cpu) = rt.block_on(run(services, namespaces, false));
    println!(
        "  force-delete, soft delete (finalizers stay; HardDeleteTimeout 1 s): {:.2} s, manager CPU {:.2} s, manager peak RSS {:.1} MiB",
        soft.as_secs_f64(),
        soft_cpu,
        soft_rss
    );
    let mut summary = Summary::from_env(format!(
        "force-delete, {services} ServiceInstances + {services} ServiceBindings in {namespaces} namespaces"
    ));
    for (mode, took, rss, cpu) in [
        ("hard delete (operand removes its finalizers)", hard, hard_rss, hard_cpu),
        (
            "soft delete (finalizers stay; HardDeleteTimeout 1 s)",
            soft,
            soft_rss,
            soft_cpu,
        ),
    ] {
        summary.figure(
            &format!("{mode}: delete to CR gone"),
            &format!(
                "{:.2} s (manager CPU {cpu:.2} s, manager peak RSS {rss:.1} MiB)",
                took.as_secs_f64()
            ),
        );
    }
    summary.exit_code()
}
