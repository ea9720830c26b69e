//! The provisioning benchmark's real-server mode (`BTP_BENCH_MODE=real`): CR to Ready on real API servers of
//! `../shared/realk8s` ([`super::realk8s`]), a fresh control plane per round.
//!
//! Each round: a fresh server; what `kubectl apply -k deploy/namespace` and `kubectl apply -k deploy/` install
//! ([`deploy_files`]: all of it but the webhook configurations, which the manager in this process registers
//! itself, by URL on loopback, as `run` does outside a cluster; its Deployment is written, its Pods never run);
//! the credentials Secret (its `tokenurl` a stand-in token endpoint on loopback, whose CA the manager is given
//! as `CredentialsCheckCABundle`, so that nothing leaves the machine). The manager runs in-process with the
//! options `btp-manager run` builds from `deploy/deployment.yaml`'s arguments (`--leader-elect` among them) and
//! a loopback address for each listener, as a client of the shipped ServiceAccount (a token from the
//! TokenRequest API). A watch plays a fast Deployment controller (the server runs without its own): it marks
//! every Deployment Available as soon as it changes. Before each CR, the install's documented wait:
//! `btp-manager check admission --wait`'s probe until the manager's webhook refuses it through the API server.
//!
//! Cold: the first CR on the fresh server, to Ready. Warm (`BTP_BENCH_REAL_WARM` per server, default 3): the
//! CR deleted while no manager ran (so the operand stayed), a freshly started manager, a new CR, to Ready.
//! `BTP_BENCH_REAL_ROUNDS` servers (default 5). `BTP_BENCH_LOG=<filter>` prints the manager's logs with timestamps.

use super::{create_until_ready_with, figures, ms, Manager, Run};
use crate::realk8s::RealK8s;
use crate::shipped::{self, deploy_objects};
use crate::summary::Summary;
use crate::timeline::Timeline;
use btp_api::names;
use btp_manager::credentials_check::stand_in::StandIn;
use btp_manager::manager::Options;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use std::time::Duration;

const CLIENT_ID: &str = "bench-client";
const CLIENT_SECRET: &str = "bench-secret";

/// `btp-manager run` with the arguments and the operand image of `deploy/deployment.yaml`, every listener
/// on a free loopback port, as the manager's own CLI parses them.
fn shipped_options(token_endpoint_ca: &str) -> Options {
    use clap::Parser as _;
    let deployment = deploy_objects("deployment.yaml")
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("deploy/deployment.yaml holds the Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("the manager's args")
        .iter()
        .filter_map(|a| a.as_str().map(String::from))
        .collect();
    let image = container["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == "SAP_BTP_SERVICE_OPERATOR"))
        .and_then(|e| e["value"].as_str())
        .expect("the operand image in deploy/deployment.yaml");
    let mut argv = vec!["btp-manager".to_string()];
    argv.extend(args);
    for flag in [
        "--webhook-bind-address",
        "--metrics-bind-address",
        "--health-probe-bind-address",
    ] {
        argv.push(format!("{flag}=127.0.0.1:0"));
    }
    argv.push(format!("--operand-image={image}"));
    let cli = btp_manager::cli::Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let btp_manager::cli::Command::Run(args) = cli.command else {
        panic!("deploy/deployment.yaml's args are not `run`: {argv:?}");
    };
    let mut options = Options::run(&args);
    // What `CredentialsCheckCABundle` in the runtime ConfigMap would say: the stand-in's CA.
    options.config.credentials_check_ca_bundle = token_endpoint_ca.to_string();
    options
}

/// A token of the shipped ServiceAccount (TokenRequest, an hour), and a client configuration with it.
pub async fn manager_config(admin: &kube::Client, admin_config: &kube::Config) -> kube::Config {
    let token = shipped::service_account_token(admin, names::KYMA_SYSTEM, shipped::SERVICE_ACCOUNT).await;
    let mut config = admin_config.clone();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    config
}

/// The files the bench applies: every resource of `deploy/kustomization.yaml` but `webhooks.yaml` (the manager
/// in this process registers its webhooks itself, by URL on loopback). The manager's Deployment, Services,
/// PodDisruptionBudget and NetworkPolicies are written as the install writes them, though nothing runs their
/// Pods: the first write of a kind costs a fresh API server once (a Deployment ~25 ms more than the next one,
/// a NetworkPolicy ~3 ms, `kubectl create -v=6` on v1.36), which no install pays for the operand's, since its
/// own came first.
fn deploy_files() -> Vec<String> {
    let kustomization = deploy_objects("kustomization.yaml");
    let resources = kustomization
        .first()
        .and_then(|k| k["resources"].as_array())
        .expect("deploy/kustomization.yaml lists its resources");
    resources
        .iter()
        .map(|r| {
            r.as_str()
                .expect("a resource of deploy/kustomization.yaml is a file name")
        })
        .filter(|file| *file != "webhooks.yaml")
        .map(str::to_string)
        .collect()
}

/// The admin's client of a fresh server, and its configuration.
pub async fn admin_client(up: &crate::realk8s::Up) -> Result<(kube::Client, kube::Config), String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(&up.kubeconfig).map_err(|e| e.to_string())?;
    let admin_config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let admin = kube::Client::try_from(admin_config.clone()).map_err(|e| e.to_string())?;
    Ok((admin, admin_config))
}

/// What `kubectl apply -k deploy/namespace` and `kubectl apply -k deploy/` install ([`deploy_files`]), the
/// BtpOperator CRD established.
pub async fn install_deploy(admin: &kube::Client) {
    let mut objects = deploy_objects("namespace/namespace.yaml");
    for file in deploy_files() {
        objects.extend(deploy_objects(&file));
    }
    shipped::apply(admin, &objects).await;
    // The CRD established (as `kubectl rollout status` of the manager would find it long after).
    btp_manager::objects::crd_established(admin, names::CRD_NAME, Duration::from_secs(60))
        .await
        .expect("the BtpOperator CRD is established");
}

/// What the install puts on a fresh server before the manager starts (see the module's comment).
async fn install(admin: &kube::Client, token_endpoint: &StandIn) {
    install_deploy(admin).await;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": names::REQUIRED_SECRET_NAME, "namespace": names::KYMA_SYSTEM,
                     "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_KEB}},
        "stringData": {"clientid": CLIENT_ID, "clientsecret": CLIENT_SECRET, "sm_url": "https://sm.example.com",
                       "tokenurl": token_endpoint.url, "cluster_id": "cluster-1"}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(admin.clone(), names::KYMA_SYSTEM)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the credentials Secret");
}

/// The install's documented wait (`btp-manager check admission --wait`): the manager's webhook refuses a
/// misnamed BtpOperator through the API server.
async fn admission_works(admin: &kube::Client) {
    btp_manager::doctor::wait::until_admission_works(admin, Duration::from_secs(60), |_, _| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A CR deleted while no manager runs: the manager stopped, then [`super::delete_cr_while_no_manager_runs`].
async fn delete_without_manager(admin: &kube::Client, manager: Manager) {
    manager.stop().await;
    super::delete_cr_while_no_manager_runs(admin).await;
}

/// One fresh server: its cold run and `warm` warm runs.
async fn round(k8s: &RealK8s, warm: usize) -> Result<(Run, Vec<Run>), String> {
    let up = k8s.fresh()?;
    let (admin, admin_config) = admin_client(&up).await?;
    let token_endpoint = StandIn::start(CLIENT_ID, CLIENT_SECRET)
        .await
        .map_err(|e| format!("the stand-in token endpoint: {e}"))?;
    install(&admin, &token_endpoint).await;
    let config = manager_config(&admin, &admin_config).await;
    // The fast Deployment controller, its requests timed for the trace.
    let controller = Timeline::default();
    let stand_in_client = controller.client(admin_config.clone());
    let stand_in = btp_apiserver::testing::spawn_deployment_controller(stand_in_client.clone());
    let client = admin.clone();
    let others = [("deployment controller", &controller)];

    let start = || async {
        let manager = Manager::start(config.clone(), shipped_options(&token_endpoint.ca_pem), &admin).await;
        admission_works(&admin).await;
        manager
    };
    let trace = std::env::var_os("BTP_BENCH_TRACE").is_some();
    let mut manager = start().await;
    if trace {
        println!("cold, on a fresh server:");
    }
    let cpu = || {
        let mut all = up.cpu();
        all.extend(crate::realk8s::cpu_seconds("self").map(|s| ("this process (the manager, the bench)", s)));
        all
    };
    // Where the CPU went during a CR to Ready (the machine has two cores, shared with whatever else runs).
    let port: u16 = k8s.api_port().parse().unwrap_or(0);
    let said = |(before, connections): (Vec<(&str, f64)>, usize), run: &Run| {
        if trace {
            println!(
                "  connections to the API server: {connections} before the CR, {} at Ready",
                crate::realk8s::connections_to(port)
            );
            let after = cpu();
            let used: Vec<String> = before
                .iter()
                .filter_map(|(name, b)| {
                    let (_, a) = after.iter().find(|(n, _)| n == name)?;
                    Some(format!("{name} {:.0} ms", (a - b) * 1e3))
                })
                .collect();
            println!(
                "  CPU used from the POST until this line ({} to Ready): {}",
                ms(run.elapsed),
                used.join(", ")
            );
        }
    };
    stand_in_connected(&stand_in_client).await;
    let before = (cpu(), crate::realk8s::connections_to(port));
    perf_control("enable");
    let cold = create_until_ready_with(&client, &manager, &others).await;
    perf_control("disable");
    said(before, &cold);
    let mut warms = Vec::new();
    for i in 0..warm {
        delete_without_manager(&admin, manager).await;
        manager = start().await;
        if trace {
            println!("warm {}:", i + 1);
        }
        stand_in_connected(&stand_in_client).await;
        let before = (cpu(), crate::realk8s::connections_to(port));
        let run = create_until_ready_with(&client, &manager, &others).await;
        said(before, &run);
        warms.push(run);
    }
    manager.stop().await;
    stand_in.abort();
    drop(up);
    Ok((cold, warms))
}

/// The Deployment stand-in's client holds a connection open for its status write, as a real Deployment
/// controller does (client-go keeps one HTTP/2 connection to the API server): its watch holds a connection of
/// its own, and a write that had to open one (a TLS handshake with a busy fresh server) took 40-50 ms more in
/// the traces, a cost of the bench's stand-in rather than of a cluster. One answered request leaves an idle
/// connection in its pool.
async fn stand_in_connected(client: &kube::Client) {
    if let Err(e) = client.apiserver_version().await {
        println!("the Deployment stand-in's client could not reach the API server: {e}");
    }
}

/// `BTP_BENCH_PERF_CTL=<ctl fifo>[,<ack fifo>]`: `command` (`enable`, `disable`) to a `perf record
/// --delay=-1 --control=fifo:<ctl>[,<ack>]` (waiting for its ack when given), so that a profile holds the cold
/// CRs to Ready and nothing else (docs/benchmarks.md).
fn perf_control(command: &str) {
    use std::io::{Read, Write};
    let Ok(fifos) = std::env::var("BTP_BENCH_PERF_CTL") else {
        return;
    };
    let mut fifos = fifos.splitn(2, ',');
    let ctl = fifos.next().unwrap_or_default();
    if let Err(e) = std::fs::OpenOptions::new()
        .write(true)
        .open(ctl)
        .and_then(|mut f| f.write_all(format!("{command}\n").as_bytes()))
    {
        println!("BTP_BENCH_PERF_CTL: {ctl}: {e}");
        return;
    }
    if let Some(ack) = fifos.next() {
        let mut answer = [0u8; 5];
        if let Err(e) = std::fs::File::open(ack).and_then(|mut f| f.read_exact(&mut answer)) {
            println!("BTP_BENCH_PERF_CTL: {ack}: {e}");
        }
    }
}

/// The real-server mode: its lines, and its rows in `summary`.
pub async fn run(summary: &mut Summary) -> Result<(), String> {
    let Some(k8s) = RealK8s::from_env_or_report(
        summary,
        "provisioning/real API server",
        "CR to Ready on a real API server",
    ) else {
        return Ok(());
    };
    // `BTP_BENCH_LOG=<filter>`: the manager's logs (and the bench's), with microsecond timestamps, to see
    // where a pass spends its time between the requests the trace shows.
    if let Ok(filter) = std::env::var("BTP_BENCH_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
    let rounds = super::env_usize("BTP_BENCH_REAL_ROUNDS", 5).max(1);
    let warm = super::env_usize("BTP_BENCH_REAL_WARM", 3).max(1);
    let label = format!("real kube-apiserver v{}, fresh server per round", k8s.version);
    let mut colds = Vec::new();
    let mut warms = Vec::new();
    for r in 0..rounds {
        let (cold, w) = round(&k8s, warm).await?;
        println!(
            "provisioning/real round {}: cold {} ({} sequential, {} requests); warm {}; load {}",
            r + 1,
            ms(cold.elapsed),
            cold.sequential,
            cold.requests,
            w.iter().map(|w| ms(w.elapsed)).collect::<Vec<_>>().join(", "),
            super::load()
        );
        colds.push(cold);
        warms.extend(w);
    }
    let c = figures(&colds);
    let w = figures(&warms);
    let max = |runs: &[Run]| runs.iter().map(|r| r.elapsed).max().unwrap_or_default();
    for (kind, f, runs) in [("cold", &c, &colds), ("warm", &w, &warms)] {
        println!(
            "provisioning/create-to-ready {kind} ({label}): median {}, p90 {}, max {} (n={}); {} sequential round \
             trips ({} of them on module objects), {} requests",
            ms(f.median),
            ms(f.p90),
            ms(max(runs)),
            runs.len(),
            f.sequential,
            f.sequential_apply,
            f.requests
        );
    }
    summary.against(
        &format!("CR to Ready, cold (median of {rounds}, {label})"),
        &format!("{} (max {})", ms(c.median), ms(max(&colds))),
        "at most 150 ms",
        c.median <= Duration::from_millis(150),
    );
    summary.against(
        &format!("CR to Ready, warm (median of {}, {label})", warms.len()),
        &format!("{} (p90 {})", ms(w.median), ms(w.p90)),
        "at most 15 ms",
        w.median <= Duration::from_millis(15),
    );
    summary.against(
        &format!("CR to Ready, warm: the slowest of {} ({label})", warms.len()),
        &ms(max(&warms)),
        "at most 50 ms",
        max(&warms) <= Duration::from_millis(50),
    );
    summary.figure(
        "cold CR to Ready on a real API server: sequential round trips (all / on module objects) and requests",
        &format!("{} / {}, {} requests", c.sequential, c.sequential_apply, c.requests),
    );
    Ok(())
}
