//! `cargo bench -p btp-apiserver`: create throughput, watch delivery latency, memory. With
//! `BTP_BENCH_SUMMARY` set, the figures are also appended to that file for `scripts/bench`'s table.

#[path = "../../benches/support/summary.rs"]
mod summary;

use btp_apiserver::{ApiServer, Config};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams, WatchParams};
use kube::core::WatchEvent;
use serde_json::json;
use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn cm(name: &str, payload: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"payload": payload}})).unwrap()
}

async fn ns(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .unwrap();
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let mut summary = summary::Summary::from_env("embedded API server (server and client in one process)");
    let rss_start = rss_kib();
    let srv = ApiServer::start(Config::default()).await.unwrap();
    let client = srv.client().await;

    // 1. create throughput: 2,000 ConfigMaps, 8 concurrent tasks
    ns(&client, "tput").await;
    let n = 2_000;
    let tasks = 8;
    let t0 = Instant::now();
    let mut handles = vec![];
    for t in 0..tasks {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "tput");
        handles.push(tokio::spawn(async move {
            for i in (t..n).step_by(tasks) {
                api.create(&PostParams::default(), &cm(&format!("c{i}"), "x"))
                    .await
                    .unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "creates: {n} ConfigMaps with {tasks} tasks in {secs:.2}s = {:.0} creates/s",
        n as f64 / secs
    );
    summary.figure(
        &format!("create throughput ({n} ConfigMaps, {tasks} tasks)"),
        &format!("{:.0} creates/s", n as f64 / secs),
    );

    // 2. watch latency: 10 watchers, 500 sequential creates
    ns(&client, "lat").await;
    let watchers = 10;
    let events = 500;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "lat");
    let rv = api
        .create(&PostParams::default(), &cm("start", "x"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut ws = vec![];
    for _ in 0..watchers {
        let api = api.clone();
        let tx = tx.clone();
        let rv = rv.clone();
        ws.push(tokio::spawn(async move {
            let mut s = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
            let mut got = 0;
            while let Some(ev) = s.next().await {
                if let Ok(WatchEvent::Added(o)) = ev {
                    let _ = tx.send((o.metadata.name.unwrap(), Instant::now()));
                    got += 1;
                    if got == events {
                        break;
                    }
                }
            }
        }));
    }
    let mut created: HashMap<String, (Instant, Instant)> = HashMap::new();
    for i in 0..events {
        let name = format!("l{i}");
        let sent = Instant::now();
        api.create(&PostParams::default(), &cm(&name, "x")).await.unwrap();
        created.insert(name, (sent, Instant::now()));
    }
    for w in ws {
        w.await.unwrap();
    }
    drop(tx);
    let mut lat = vec![];
    let mut from_sent = vec![];
    let mut early = 0;
    while let Some((name, at)) = rx.recv().await {
        if let Some((sent, done)) = created.get(&name) {
            if at < *done {
                early += 1;
            }
            lat.push(at.saturating_duration_since(*done));
            from_sent.push(at.saturating_duration_since(*sent));
        }
    }
    lat.sort();
    from_sent.sort();
    println!(
        "watch latency (create request sent -> event): p50 {:?} p99 {:?}; {early} of {} events arrived before the create response",
        pct(&from_sent, 0.5),
        pct(&from_sent, 0.99),
        from_sent.len()
    );
    println!(
        "watch latency ({watchers} watchers x {events} events, create response -> event): p50 {:?} p99 {:?} max {:?} ({} samples)",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat.last().copied().unwrap_or_default(),
        lat.len()
    );
    summary.figure(
        &format!("watch latency, create request sent to event ({watchers} watchers x {events} events): p50 / p99"),
        &format!("{} / {}", ms(pct(&from_sent, 0.5)), ms(pct(&from_sent, 0.99))),
    );

    // 3. memory: 10,000 ConfigMaps of 1 KiB
    ns(&client, "mem").await;
    let before = rss_kib();
    let payload = "x".repeat(1024);
    let mut handles = vec![];
    for t in 0..tasks {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "mem");
        let payload = payload.clone();
        handles.push(tokio::spawn(async move {
            for i in (t..10_000).step_by(tasks) {
                api.create(&PostParams::default(), &cm(&format!("m{i}"), &payload))
                    .await
                    .unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let after = rss_kib();
    println!(
        "memory (VmRSS, server + client in one process): start {} MiB, before 10k x 1KiB ConfigMaps {} MiB, after {} MiB (+{} MiB)",
        rss_start / 1024,
        before / 1024,
        after / 1024,
        after.saturating_sub(before) / 1024
    );
    summary.figure(
        "memory for 10,000 ConfigMaps of 1 KiB (VmRSS growth)",
        &format!("{} MiB", after.saturating_sub(before) / 1024),
    );

    // 4. list and namespace deletion at that size
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "mem");
    let t0 = Instant::now();
    let n = api.list(&Default::default()).await.unwrap().items.len();
    let listed = t0.elapsed();
    println!("list: {n} ConfigMaps in {listed:?}");
    summary.figure(&format!("list of {n} ConfigMaps"), &ms(listed));
    // Deletion is asynchronous: the namespace is Terminating for `namespace_termination_delay`, then its
    // content goes, then the namespace.
    let t0 = Instant::now();
    let nsapi: Api<Namespace> = Api::all(client.clone());
    nsapi.delete("mem", &Default::default()).await.unwrap();
    while nsapi.get_opt("mem").await.unwrap().is_some() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "namespace mem still there after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let deleted = t0.elapsed();
    let delay = Config::default().namespace_termination_delay;
    println!("namespace deletion with 10,000 ConfigMaps: {deleted:?} until gone (of which {delay:?} is the termination delay)");
    summary.figure(
        "namespace deletion with 10,000 ConfigMaps, until gone",
        &format!(
            "{} (including the {} ms termination delay)",
            ms(deleted),
            delay.as_millis()
        ),
    );
    srv.shutdown().await;
    summary.exit_code()
}
