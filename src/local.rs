//! `btp-manager local`: the whole manager against the embedded API server, no cluster needed.
//!
//! Starts the embedded API server, writes a kubeconfig for `kubectl`, installs the CRD and the manager's part
//! of `deploy/` (ServiceAccount, RBAC, Services, Deployment: a cluster as `kubectl apply -k deploy/` leaves it,
//! with this process as the manager's Pod, authenticated as its ServiceAccount and leader-elected), registers
//! the webhook configurations (pointing at the in-process webhook server on loopback), runs the reconciler,
//! creates an example credentials Secret (dummy values, its `tokenurl` at a stand-in token endpoint on loopback
//! whose CA goes into `CredentialsCheckCABundle`, so that the credentials check issues a token) and the
//! `BtpOperator`, plays the Deployment controller and the kubelet, serves metrics and health endpoints, and
//! prints every state change of the CR and of its `CredentialsValid` condition on stdout
//! (logs go to stderr, warnings only unless `RUST_LOG` says otherwise). `btp-manager doctor` passes on it.

use crate::app;
use crate::cli::LocalArgs;
use crate::credentials_check::stand_in::StandIn;
use crate::manager::webhooks::reachable;
use crate::manager::{manager_client, ManagerBuilder, Options};
use crate::telemetry::kube_message;
use crate::BoxedFuture;
use anyhow::Context as _;
use btp_api::{names, BtpOperator};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use std::time::Instant;
use tokio::sync::watch;

/// The example Secret's `clientid` and `clientsecret` (dummy values the stand-in token endpoint accepts).
const EXAMPLE_CLIENT_ID: &str = "dummy-client-id";
const EXAMPLE_CLIENT_SECRET: &str = "dummy-client-secret";

fn say(started: Instant, line: impl std::fmt::Display) {
    println!("[{:>7.3}s] {line}", started.elapsed().as_secs_f64());
}

async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .map_err(|e| anyhow::anyhow!(kube_message(&e)))
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Run `local`. Returns an error (non-zero exit) when `--once` does not reach Ready.
///
/// A boxed future: see [`BoxedFuture`].
pub fn run(args: LocalArgs) -> BoxedFuture<anyhow::Result<()>> {
    Box::pin(run_local(args))
}

async fn run_local(args: LocalArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let rec = &args.reconciler;
    let server = btp_apiserver::ApiServer::start(btp_apiserver::Config::default())
        .await
        .context("starting the embedded API server")?;
    let kubeconfig = args
        .kubeconfig
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("btp-manager-local.kubeconfig"));
    std::fs::write(&kubeconfig, server.kubeconfig_yaml())
        .with_context(|| format!("writing the kubeconfig to {}", kubeconfig.display()))?;
    say(started, format_args!("embedded API server at {}", server.url()));
    say(
        started,
        format_args!("kubeconfig: {}   (export KUBECONFIG={0})", kubeconfig.display()),
    );
    let client = server.client().await;

    create_namespace(&client, names::KYMA_SYSTEM).await?;
    if rec.chart_namespace != names::KYMA_SYSTEM {
        create_namespace(&client, &rec.chart_namespace).await?;
    }
    let crd = BtpOperator::crd()?;
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .map_err(|e| anyhow::anyhow!(kube_message(&e)))
        .context("installing the BtpOperator CRD")?;
    // Served only once established (a CR created before would be refused, 404).
    crate::objects::crd_established(
        &client,
        &kube::ResourceExt::name_any(&crd),
        std::time::Duration::from_secs(30),
    )
    .await
    .context("installing the BtpOperator CRD")?;
    say(started, "installed the BtpOperator CRD in namespace kyma-system");
    // As `kubectl apply -k deploy/` would have it, for the manager: its ServiceAccount and RBAC (the embedded
    // server enforces it for the manager, which runs as that ServiceAccount), Services and Deployment (whose
    // Pods this process plays).
    let mut manager_objects = Vec::new();
    for (file, text) in crate::shipped::FOR_LOCAL {
        manager_objects.extend(crate::shipped::objects(text).with_context(|| format!("reading deploy/{file}"))?);
    }
    crate::shipped::apply(&client, &manager_objects, "kubectl")
        .await
        .context("installing the manager's objects of deploy/")?;
    say(
        started,
        "installed the manager's ServiceAccount, RBAC, Services and Deployment from deploy/ (this process is its Pod)",
    );
    // The manager's own client: its ServiceAccount, bound to the shipped RBAC.
    // (Built as `run` builds it: without kube's own retry layer, docs/behaviour.md#retries-and-budgets.)
    let manager = manager_client(server.kube_config_as(&crate::shipped::manager_user(names::KYMA_SYSTEM)))?;

    // Wired as `run` wires it (leader-elected, as the shipped Deployment runs it), with the webhooks on
    // loopback (an ephemeral port unless told otherwise), registered by URL with a certificate for that
    // address.
    // The credentials check asks a stand-in token endpoint on loopback that accepts the example's credentials,
    // trusted through CredentialsCheckCABundle (after whatever bundle the flags give).
    let token_endpoint = StandIn::start(EXAMPLE_CLIENT_ID, EXAMPLE_CLIENT_SECRET)
        .await
        .context("starting the stand-in token endpoint")?;
    let mut options = Options::local(&args);
    let bundle = &mut options.config.credentials_check_ca_bundle;
    *bundle = format!(
        "{bundle}{}{}",
        if bundle.is_empty() { "" } else { "\n" },
        token_endpoint.ca_pem
    );
    say(
        started,
        format_args!(
            "stand-in token endpoint at {} (the example Secret's tokenurl; its CA is in CredentialsCheckCABundle)",
            token_endpoint.url
        ),
    );
    let (term_tx, term_rx) = watch::channel(false);
    let running = ManagerBuilder::new(manager, options)?.start(term_rx.clone()).await?;
    // Leader-elected: the webhooks are registered once this process leads and has issued the certificate.
    tokio::time::timeout(std::time::Duration::from_secs(30), running.admission_works())
        .await
        .context("the webhooks were not registered within 30 s (no leader?)")?;
    say(
        started,
        format_args!(
            "admission webhooks serving on https://{} (self-managed CA, caBundle registered)",
            reachable(running.webhook_addr)
        ),
    );
    btp_apiserver::spawn_workload_controller(client.clone());
    say(
        started,
        "reconciler running; playing the Deployment controller and the kubelet (the operand's Pod shows as Running)",
    );
    let (metrics, health) = (reachable(running.metrics_addr), reachable(running.health_addr));
    say(
        started,
        format_args!("metrics on http://{metrics}/metrics, health on http://{health}/healthz and /readyz"),
    );

    // The webhooks at work: a misnamed CR is refused.
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    match crs
        .create(&PostParams::default(), &BtpOperator::new("btpoperator-test"))
        .await
    {
        Err(kube::Error::Api(status)) => say(
            started,
            format_args!("refused as expected: kyma-system/btpoperator-test: {}", status.message),
        ),
        Err(e) => say(
            started,
            format_args!(
                "WARNING: creating a misnamed BtpOperator failed unexpectedly: {}",
                kube_message(&e)
            ),
        ),
        Ok(_) => say(started, "WARNING: a misnamed BtpOperator was accepted"),
    }

    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": rec.secret_name, "namespace": rec.chart_namespace,
                     "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_KEB}},
        "stringData": {"clientid": EXAMPLE_CLIENT_ID, "clientsecret": EXAMPLE_CLIENT_SECRET,
                       "sm_url": "https://service-manager.example.com", "tokenurl": token_endpoint.url,
                       "cluster_id": "local-cluster"}
    }))?;
    Api::<Secret>::namespaced(client.clone(), &rec.chart_namespace)
        .create(&PostParams::default(), &secret)
        .await
        .map_err(|e| anyhow::anyhow!(kube_message(&e)))
        .context("creating the example credentials Secret")?;
    say(
        started,
        format_args!(
            "created Secret {}/{} (dummy credentials)",
            rec.chart_namespace, rec.secret_name
        ),
    );
    crs.create(&PostParams::default(), &BtpOperator::new(names::BTP_OPERATOR_NAME))
        .await
        .map_err(|e| anyhow::anyhow!(kube_message(&e)))
        .context("creating kyma-system/btpoperator")?;
    say(
        started,
        "created BtpOperator kyma-system/btpoperator (its Events: kubectl describe btpoperator btpoperator -n kyma-system)",
    );

    let outcome = follow(started, crs, &args, &term_rx).await;
    let _ = term_tx.send(true);
    // As the process ends: nothing waits for the in-flight pass or the Lease.
    running.kill().await;
    // Dropping the handle stops the server; waiting for it would wait on clients' open watches.
    drop(server);
    drop(token_endpoint);
    outcome
}

/// Print every state change of the CR and of its `CredentialsValid` condition; with `--once` return when it is
/// Ready with a `CredentialsValid` condition (or fails).
async fn follow(
    started: Instant,
    crs: Api<BtpOperator>,
    args: &LocalArgs,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let config = watcher::Config::default().fields(&format!("metadata.name={}", names::BTP_OPERATOR_NAME));
    let mut events = watcher(crs, config).default_backoff().boxed();
    let mut last: Option<(String, String)> = None;
    let mut last_credentials: Option<(String, String)> = None;
    let deadline = tokio::time::sleep(args.timeout);
    tokio::pin!(deadline);
    let mut ctrl_c = std::pin::pin!(app::wait_for_signal());
    let mut stop = stop.clone();
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            () = &mut deadline, if args.once => {
                let (state, reason) = last.unwrap_or_default();
                anyhow::bail!("not Ready within {:?}; last state {state:?} ({reason})", args.timeout);
            }
            () = &mut ctrl_c => return Ok(()),
            _ = stop.wait_for(|s| *s) => return Ok(()),
        };
        let Some(Ok(watcher::Event::Apply(cr) | watcher::Event::InitApply(cr))) = event else {
            continue;
        };
        let Some(status) = cr.status else { continue };
        let credentials = status.conditions.iter().find(|c| c.type_ == btp_api::CREDENTIALS_VALID);
        let now_credentials = credentials.map(|c| (format!("{:?}", c.status), c.reason.clone()));
        if let (Some(c), true) = (credentials, now_credentials != last_credentials) {
            say(
                started,
                format_args!(
                    "BtpOperator kyma-system/btpoperator: CredentialsValid {} / {} — {}",
                    now_credentials.as_ref().map_or("", |n| n.0.as_str()),
                    c.reason,
                    c.message
                ),
            );
            last_credentials = now_credentials;
        }
        // `--once` ends at Ready once the credentials check has said something too.
        let done = status.state == btp_api::State::Ready && last_credentials.is_some();
        if args.once && done && last.as_ref().is_some_and(|(state, _)| state == "Ready") {
            return Ok(());
        }
        let condition = status.conditions.iter().find(|c| c.type_ == "Ready");
        let now = (
            status.state.as_str().to_string(),
            condition.map(|c| c.reason.clone()).unwrap_or_default(),
        );
        if last.as_ref() == Some(&now) {
            continue;
        }
        let message = condition.map(|c| c.message.as_str()).unwrap_or("");
        say(
            started,
            format_args!("BtpOperator kyma-system/btpoperator: {} / {} — {message}", now.0, now.1),
        );
        last = Some(now.clone());
        if args.once {
            match now.0.as_str() {
                "Ready" if done => return Ok(()),
                "Error" => anyhow::bail!("BtpOperator failed: {} — {message}", now.1),
                _ => {}
            }
        }
    }
}
