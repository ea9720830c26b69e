//! Start-up and wiring of the `run` command; generated artifacts (CRD, webhook manifests).

use crate::cli::{ReconcilerArgs, RunArgs};
use crate::config::Config;
use crate::reconciler::{self, metrics::ReconcileMetrics, network_policies, resources, Context};
use crate::{embedded, ops, webhook_certs};
use anyhow::Context as _;
use btp_api::names;
use btp_webhooks::manifests::{Endpoint, WebhookManifests};
use btp_webhooks::metrics::WebhookMetrics;
use btp_webhooks::tls::{server_config, CertDir, SwappableCert};
use btp_webhooks::{KubeServiceCounter, RulesConfig, WebhookState};
use prometheus_client::registry::Registry;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The CRD as YAML (what `deploy/crd.yaml` holds).
pub fn crd_yaml() -> anyhow::Result<String> {
    let crd = btp_api::BtpOperator::crd().context("building the CRD")?;
    Ok(serde_saphyr::to_string(&crd)?)
}

/// `btp-manager crd`.
pub fn print_crd() -> anyhow::Result<()> {
    print!("{}", crd_yaml()?);
    Ok(())
}

/// The webhook configurations as YAML (what `deploy/webhooks.yaml` holds).
pub fn webhook_manifests_yaml(namespace: &str) -> anyhow::Result<String> {
    Ok(WebhookManifests::in_cluster(namespace).to_yaml()?)
}

/// `btp-manager webhook-manifests`.
pub fn print_webhook_manifests(namespace: &str) -> anyhow::Result<()> {
    print!("{}", webhook_manifests_yaml(namespace)?);
    Ok(())
}

/// A future that resolves once shutdown was requested.
pub async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

pub async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Where the API server reaches our webhooks and which names the serving certificate needs.
fn webhook_endpoint(args: &RunArgs) -> (Endpoint, Vec<String>, Vec<IpAddr>) {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let svc = format!("{}.{}.svc", names::webhook::SERVICE_NAME, args.namespace);
    let mut dns = vec![svc.clone(), format!("{svc}.cluster.local")];
    let mut ips = args.webhook.webhook_ips.clone();
    dns.extend(args.webhook.webhook_dns_names.iter().cloned());
    let url = match (&args.webhook.webhook_url, in_cluster) {
        (Some(url), _) => Some(url.clone()),
        (None, true) => None,
        (None, false) => Some(format!("https://127.0.0.1:{}", args.webhook_bind_address.port())),
    };
    let endpoint = match url {
        None => Endpoint::Service {
            namespace: args.namespace.clone(),
        },
        Some(url) => {
            let host = url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(|h| h.trim_matches(['[', ']']).to_string()));
            match host.as_deref().map(str::parse::<IpAddr>) {
                Some(Ok(ip)) => ips.push(ip),
                Some(Err(_)) => dns.extend(host),
                None => {}
            }
            Endpoint::Url(url)
        }
    };
    dns.sort();
    dns.dedup();
    ips.sort();
    ips.dedup();
    (endpoint, dns, ips)
}

/// `btp-manager run`: webhook server with self-managed certificates, metrics and health endpoints.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API (KUBECONFIG, ~/.kube/config or in-cluster)")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested");
        let _ = stop_tx.send(true);
    });

    let mut registry = Registry::default();
    let webhook_metrics = WebhookMetrics::register(&mut registry);
    let leader = args.leader_elect.then_some(args.namespace.as_str());
    start_reconciler(&args.reconciler, leader, client.clone(), &mut registry, stop_rx.clone()).await?;
    let ready = ops::Readiness::default();
    serve_ops(
        args.metrics_bind_address,
        args.health_probe_bind_address,
        registry,
        ready.clone(),
        &stop_rx,
    )
    .await?;

    let (endpoint, dns_names, ip_addresses) = webhook_endpoint(&args);
    let manifests = WebhookManifests {
        endpoint,
        secret_namespace: args.reconciler.chart_namespace.clone(),
        secret_name: args.reconciler.secret_name.clone(),
        ca_bundle: Vec::new(),
    };
    let cert: Arc<SwappableCert> = match &args.webhook.webhook_cert_dir {
        Some(dir) => {
            let files = CertDir::new(dir);
            let cert = files
                .load()
                .await
                .with_context(|| format!("loading webhook certificates from {}", dir.display()))?;
            tokio::spawn(files.watch(cert.clone(), Duration::from_secs(10)));
            tracing::info!(dir = %dir.display(), "serving webhook certificates from files; caBundle is not managed");
            cert
        }
        None => {
            let mut policy = btp_certs::rotation::Policy::new(dns_names, ip_addresses);
            policy.key = args.webhook.webhook_key_algorithm;
            let certs = webhook_certs::WebhookCerts::new(
                client.clone(),
                &args.namespace,
                &args.webhook.webhook_cert_secret,
                policy,
                manifests,
            );
            managed_webhook_certificate(certs, stop_rx.clone()).await?
        }
    };

    let rules = RulesConfig {
        secret_namespace: args.reconciler.chart_namespace.clone(),
        secret_name: args.reconciler.secret_name.clone(),
    };
    let state = WebhookState::new(rules, Arc::new(KubeServiceCounter::new(client.clone())))
        .with_metrics(webhook_metrics)
        .with_body_timeout(args.webhook.webhook_body_timeout);
    let listener = tokio::net::TcpListener::bind(args.webhook_bind_address)
        .await
        .with_context(|| format!("binding the webhook server to {}", args.webhook_bind_address))?;
    tracing::info!(address = %args.webhook_bind_address, "webhook server listening");
    ready.set(true);
    btp_webhooks::server::serve_with(
        listener,
        server_config(cert)?,
        btp_webhooks::router(state),
        args.webhook.limits(),
        Arc::default(),
        stopped(stop_rx),
    )
    .await
    .context("webhook server")?;
    tracing::info!("stopped");
    Ok(())
}

/// Settle the manager's own webhook certificate Secret, publish its CA bundle, keep both in step in the
/// background, and return the certificate to serve.
pub async fn managed_webhook_certificate(
    certs: webhook_certs::WebhookCerts,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Arc<SwappableCert>> {
    let stored = certs.settle().await.context("preparing the webhook certificates")?;
    let leaf = stored.leaf.as_ref().context("no serving certificate after settling")?;
    let cert = SwappableCert::from_pem(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes())?;
    certs
        .publish(&stored, &cert)
        .await
        .context("publishing the webhook CA bundle")?;
    tokio::spawn(certs.run(cert.clone(), stopped(stop)));
    Ok(cert)
}

/// The reconciler's configuration from the flags (no path: the empty path, the built-in copy).
pub fn config_from_args(args: &ReconcilerArgs) -> Config {
    Config {
        chart_namespace: args.chart_namespace.clone(),
        secret_name: args.secret_name.clone(),
        config_name: args.config_name.clone(),
        deployment_name: args.deployment_name.clone(),
        resources_path: args.resources_path.clone().unwrap_or_default(),
        manager_resources_path: args.manager_resources_path.clone().unwrap_or_default(),
        processing_state_requeue_interval: args.processing_state_requeue_interval,
        ready_state_requeue_interval: args.ready_state_requeue_interval,
        ready_timeout: args.ready_timeout,
        hard_delete_timeout: args.hard_delete_timeout,
        hard_delete_check_interval: args.hard_delete_check_interval,
        delete_request_timeout: args.delete_request_timeout,
        enable_limited_cache: args.enable_limited_cache.clone(),
        ..Config::default()
    }
}

/// Lease name (docs/behaviour.md#leader-election), the Go manager's.
pub const LEADER_LEASE: &str = "ec023d38.kyma-project.io";

/// Load the module resources and network policies and start the reconciler in the background: at once,
/// or, with `leader_namespace`, whenever this process holds the Lease there.
pub async fn start_reconciler(
    args: &ReconcilerArgs,
    leader_namespace: Option<&str>,
    client: kube::Client,
    registry: &mut Registry,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let image = args
        .operand_image
        .clone()
        .filter(|i| !i.is_empty())
        .context("SAP_BTP_SERVICE_OPERATOR (or --operand-image) must name the operand image")?;
    let config = config_from_args(args);
    let module = resources::load(&config.resources_path).with_context(|| {
        format!(
            "loading module resources from {}",
            embedded::describe(&config.resources_path)
        )
    })?;
    let policies = network_policies::load(&config.manager_resources_path).with_context(|| {
        format!(
            "loading network policies from {}",
            embedded::describe(&config.manager_resources_path)
        )
    })?;
    let metrics = ReconcileMetrics::register(registry);
    let ctx = Context::new(
        client.clone(),
        config,
        module,
        image,
        args.rbac_proxy_image.clone(),
        metrics,
    );
    let ctx = Arc::new(ctx.with_network_policies(policies));
    let Some(lease_namespace) = leader_namespace else {
        tokio::spawn(reconciler::run(ctx, stopped(stop)));
        return Ok(());
    };
    let identity = std::env::var("HOSTNAME").unwrap_or_else(|_| format!("btp-manager-{}", std::process::id()));
    let lease = kube_lease_manager::LeaseManagerBuilder::new(client, LEADER_LEASE)
        .with_namespace(lease_namespace.to_string())
        .with_identity(identity)
        .with_duration(15)
        .with_grace(5)
        .build()
        .await
        .context("preparing leader election")?;
    tokio::spawn(lead_and_reconcile(lease, ctx, stop));
    Ok(())
}

/// Reconcile while holding the lease; stop reconciling when it is lost, resume when regained.
async fn lead_and_reconcile(
    lease: kube_lease_manager::LeaseManager,
    ctx: Arc<Context>,
    mut stop: watch::Receiver<bool>,
) {
    let (mut leader, task) = lease.watch().await;
    loop {
        tokio::select! {
            _ = leader.wait_for(|l| *l) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        tracing::info!("leading: reconciling");
        let (mut lost, mut stopping) = (leader.clone(), stop.clone());
        reconciler::run(ctx.clone(), async move {
            tokio::select! {
                _ = lost.wait_for(|l| !*l) => {}
                _ = stopping.wait_for(|s| *s) => {}
            }
        })
        .await;
        if *stop.borrow() {
            break;
        }
        tracing::info!("lost the lease: not reconciling");
    }
    drop(leader);
    if let Ok(Ok(manager)) = task.await {
        let _ = manager.release().await;
    }
}

/// Serve `/metrics` (from `registry`) and `/healthz`, `/readyz` (from `ready`) in the background until
/// `stop`; returns the bound addresses (port 0 binds a free port).
pub async fn serve_ops(
    metrics: SocketAddr,
    health: SocketAddr,
    registry: Registry,
    ready: ops::Readiness,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let registry = Arc::new(Mutex::new(registry));
    let metrics = serve_plain(metrics, ops::metrics_router(registry), stopped(stop.clone()))
        .await
        .context("serving metrics")?;
    let health = serve_plain(health, ops::health_router(ready), stopped(stop.clone()))
        .await
        .context("serving the health endpoints")?;
    Ok((metrics, health))
}

/// Serve a plain-HTTP router in the background until `shutdown`; returns the bound address.
async fn serve_plain(
    addr: SocketAddr,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let bound = listener.local_addr().with_context(|| format!("binding {addr}"))?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
            tracing::error!(error = %e, addr = %bound, "HTTP server failed");
        }
    });
    Ok(bound)
}
