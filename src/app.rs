//! Start-up and wiring of the `run` command; generated artifacts (CRD, webhook manifests).

use crate::cli::{ReconcilerArgs, RunArgs};
use crate::config::Config;
use crate::reconciler::{self, metrics::ReconcileMetrics, network_policies, resources, Context};
use crate::BoxedFuture;
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

/// The webhook configurations as YAML (what `deploy/webhooks.yaml` holds): without `matchConditions`, so
/// that every supported Kubernetes version accepts the install (1.24–1.27 reject the field); the manager
/// adds them at start where the API server has them (`match_conditions_supported`).
pub fn webhook_manifests_yaml(namespace: &str) -> anyhow::Result<String> {
    let manifests = WebhookManifests {
        match_conditions: false,
        ..WebhookManifests::in_cluster(namespace)
    };
    Ok(manifests.to_yaml()?)
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
fn webhook_endpoint(args: &RunArgs, bound_port: u16) -> (Endpoint, Vec<String>, Vec<IpAddr>) {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let svc = format!("{}.{}.svc", names::webhook::SERVICE_NAME, args.namespace);
    let mut dns = vec![svc.clone(), format!("{svc}.cluster.local")];
    let mut ips = args.webhook.webhook_ips.clone();
    dns.extend(args.webhook.webhook_dns_names.iter().cloned());
    let url = match (&args.webhook.webhook_url, in_cluster) {
        (Some(url), _) => Some(url.clone()),
        (None, true) => None,
        (None, false) => Some(format!("https://127.0.0.1:{bound_port}")),
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

/// Whether the API server takes `matchConditions` in webhook configurations, from `/version`.
pub async fn match_conditions_supported(client: &kube::Client) -> bool {
    match client.apiserver_version().await {
        Ok(v) => {
            let supported = btp_webhooks::manifests::supports_match_conditions(&v.major, &v.minor);
            if supported {
                tracing::info!(version = %v.git_version, "Kubernetes API server");
            } else {
                tracing::warn!(
                    version = %v.git_version,
                    "Kubernetes before 1.28: the webhook configurations are registered without matchConditions \
                     (every Secret CREATE/UPDATE in the chart namespace reaches the webhook, which ignores all but \
                     the required Secret); full function from 1.28 on"
                );
            }
            supported
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading /version failed; assuming a current Kubernetes");
            true
        }
    }
}

/// `btp-manager run`: webhook server with self-managed certificates, metrics and health endpoints.
///
/// Shutdown (SIGTERM or Ctrl-C): `/readyz` turns false at once and reconciling stops (the in-flight
/// reconcile finishes, then the Lease is released); the webhooks keep answering for
/// `--shutdown-drain-delay` so that the endpoints controller can take the pod out of the Service, then
/// they stop accepting and finish what is in flight; the process exits 0.
///
/// A boxed future: see [`BoxedFuture`].
pub fn run(args: RunArgs) -> BoxedFuture<anyhow::Result<()>> {
    Box::pin(run_manager(args))
}

async fn run_manager(args: RunArgs) -> anyhow::Result<()> {
    for (flag, why) in args.go_manager.ignored() {
        tracing::info!(flag, why, "flag of the Go BTP Manager accepted; it has no effect here");
    }
    let config = kube::Config::infer()
        .await
        .context("connecting to the Kubernetes API (KUBECONFIG, ~/.kube/config or in-cluster)")?;
    let client = manager_client(config)?;
    let (term_tx, term_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        let _ = term_tx.send(true);
    });
    start(&args, client, term_rx).await?.shut_down().await
}

/// The manager's client for `config`: without kube's own retry layer, so that the reconciler's
/// ([`reconciler::cluster::retrying`]) is the only one (docs/behaviour.md#retries-and-budgets).
pub fn manager_client(config: kube::Config) -> anyhow::Result<kube::Client> {
    kube::Client::try_from(reconciler::cluster::client_config(config)).context("building the Kubernetes client")
}

/// A manager started by [`start`]: the webhook server, the reconciler (behind leader election when
/// asked), metrics and health endpoints, and the tasks that keep the webhook certificate current.
pub struct Manager {
    /// Where the webhooks are served (the port actually bound).
    pub webhook_addr: SocketAddr,
    /// Where `/metrics` is served.
    pub metrics_addr: SocketAddr,
    /// Where `/healthz` and `/readyz` are served.
    pub health_addr: SocketAddr,
    plan: ShutdownPlan,
}

/// Start everything `run` runs, with `client`, until `term` turns true (then see [`Manager::shut_down`]).
pub async fn start(args: &RunArgs, client: kube::Client, term: watch::Receiver<bool>) -> anyhow::Result<Manager> {
    // `term`: shutdown requested (stop reconciling, not ready); `stop`: the drain is over (stop serving).
    let (stop_tx, stop_rx) = watch::channel(false);
    // Everything started below ends with `stop` (dropping `stop_tx` sets nothing, so a failed start stops
    // what it started explicitly).
    let started = StopOnError(Some(stop_tx));
    let match_conditions = match_conditions_supported(&client).await;

    let mut registry = Registry::default();
    let webhook_metrics = WebhookMetrics::register(&mut registry);
    let election = args
        .leader_elect
        .then(|| LeaderElection::new(client.clone(), &args.namespace, args.leader_election_lease_duration));
    let reconcile_metrics = ReconcileMetrics::register(&mut registry);
    let certificate_expiry = reconcile_metrics.certificates();
    let reconciler = spawn_reconciler(
        &args.reconciler,
        election,
        client.clone(),
        reconcile_metrics,
        term.clone(),
    )
    .await?;
    // From here on the reconciler runs: a failed start must not leave it running.
    let reconciler = AbortOnDrop::new(reconciler);
    let ready = ops::Readiness::default();
    let (metrics_addr, health_addr) = serve_ops(
        args.metrics_bind_address,
        args.health_probe_bind_address,
        registry,
        ready.clone(),
        &stop_rx,
    )
    .await?;

    // Bound before the certificate is made, so that the endpoint names the port actually bound.
    let listener = tokio::net::TcpListener::bind(args.webhook_bind_address)
        .await
        .with_context(|| format!("binding the webhook server to {}", args.webhook_bind_address))?;
    let webhook_addr = listener
        .local_addr()
        .with_context(|| format!("binding the webhook server to {}", args.webhook_bind_address))?;
    let (endpoint, dns_names, ip_addresses) = webhook_endpoint(args, webhook_addr.port());
    let manifests = WebhookManifests {
        endpoint,
        secret_namespace: args.reconciler.chart_namespace.clone(),
        secret_name: args.reconciler.secret_name.clone(),
        ca_bundle: Vec::new(),
        match_conditions,
    };
    let cert: Arc<SwappableCert> = match &args.webhook.webhook_cert_dir {
        Some(dir) => {
            let files = CertDir::new(dir);
            let cert = files
                .load()
                .await
                .with_context(|| format!("loading webhook certificates from {}", dir.display()))?;
            let watch = files.watch(cert.clone(), Duration::from_secs(10));
            tokio::spawn(until(stopped(stop_rx.clone()), watch));
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
            )
            .with_expiry_metrics(certificate_expiry);
            managed_webhook_certificate(certs, stop_rx.clone()).await?
        }
    };

    // The Secret the webhook guards is the one the reconciler reads: flags, then the runtime ConfigMap.
    let effective = reconciler::controller::startup_config(&client, &config_from_args(&args.reconciler)).await;
    let rules = RulesConfig {
        secret_namespace: effective.chart_namespace,
        secret_name: effective.secret_name,
    };
    let state = WebhookState::new(rules, Arc::new(KubeServiceCounter::new(client.clone())))
        .with_metrics(webhook_metrics)
        .with_body_timeout(args.webhook.webhook_body_timeout);
    tracing::info!(address = %webhook_addr, "webhook server listening");
    let webhooks = tokio::spawn(btp_webhooks::server::serve_with(
        listener,
        server_config(cert)?,
        btp_webhooks::router(state),
        args.webhook.limits(),
        Arc::default(),
        stopped(stop_rx),
    ));
    if !*term.borrow() {
        ready.set(true);
    }
    Ok(Manager {
        webhook_addr,
        metrics_addr,
        health_addr,
        plan: ShutdownPlan {
            term,
            stop: started.disarm(),
            ready,
            drain_delay: args.shutdown_drain_delay,
            reconciler: reconciler.disarm(),
            webhooks,
        },
    })
}

impl Manager {
    /// Wait until shutdown is requested, then shut down gracefully (see [`run`]).
    pub async fn shut_down(self) -> anyhow::Result<()> {
        shut_down(self.plan).await
    }

    /// Stop at once, as a killed process would: the in-flight reconcile is abandoned, a held Lease is not
    /// released (it expires), open webhook connections are dropped.
    pub async fn kill(self) {
        let ShutdownPlan {
            stop,
            ready,
            reconciler,
            webhooks,
            ..
        } = self.plan;
        ready.set(false);
        reconciler.abort();
        webhooks.abort();
        let _ = reconciler.await;
        let _ = webhooks.await;
        // What remains (metrics, health, certificate rotation) has nothing in flight: it ends at once.
        let _ = stop.send(true);
    }
}

/// A spawned task aborted when this guard is dropped (a dropped `JoinHandle` would leave it running).
pub struct AbortOnDrop<T>(Option<tokio::task::JoinHandle<T>>);

impl<T> AbortOnDrop<T> {
    pub fn new(task: tokio::task::JoinHandle<T>) -> Self {
        Self(Some(task))
    }

    /// The handle, to await (still aborted when the guard is dropped).
    pub fn handle(&mut self) -> &mut tokio::task::JoinHandle<T> {
        self.0
            .as_mut()
            .expect("the handle is only taken by disarm, which consumes the guard")
    }

    /// The handle, no longer aborted on drop.
    pub fn disarm(mut self) -> tokio::task::JoinHandle<T> {
        self.0
            .take()
            .expect("the handle is only taken here, which consumes the guard")
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// The `stop` sender of a start in progress: set if the start fails half-way (what was started ends).
struct StopOnError(Option<watch::Sender<bool>>);

impl StopOnError {
    fn disarm(mut self) -> watch::Sender<bool> {
        match self.0.take() {
            Some(stop) => stop,
            None => watch::channel(false).0,
        }
    }
}

impl Drop for StopOnError {
    fn drop(&mut self) {
        if let Some(stop) = &self.0 {
            let _ = stop.send(true);
        }
    }
}

/// Run `task` until `stop` resolves.
async fn until(stop: impl std::future::Future<Output = ()>, task: impl std::future::Future<Output = ()>) {
    tokio::select! {
        () = stop => {}
        () = task => {}
    }
}

/// How long the in-flight reconcile and the Lease release may take after SIGTERM (deploy/deployment.yaml's
/// `terminationGracePeriodSeconds` is larger than this plus the drain delay).
pub const RECONCILER_STOP_BUDGET: Duration = Duration::from_secs(15);

struct ShutdownPlan {
    term: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    ready: ops::Readiness,
    drain_delay: Duration,
    reconciler: tokio::task::JoinHandle<()>,
    webhooks: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Wait for the shutdown request, then: not ready at once, reconciler stopped and Lease released (it
/// saw `term` too), webhooks served through the drain delay, then stopped.
async fn shut_down(plan: ShutdownPlan) -> anyhow::Result<()> {
    let ShutdownPlan {
        mut term,
        stop,
        ready,
        drain_delay,
        reconciler,
        webhooks,
    } = plan;
    let _ = term.wait_for(|t| *t).await;
    ready.set(false);
    let started = tokio::time::Instant::now();
    tracing::info!(drain_delay = ?drain_delay, "shutdown requested: not ready; webhooks keep serving through the drain delay");
    let reconciler = async move {
        let mut reconciler = AbortOnDrop::new(reconciler);
        match tokio::time::timeout(RECONCILER_STOP_BUDGET, reconciler.handle()).await {
            Ok(_) => tracing::info!(after = ?started.elapsed(), "reconciler stopped (lease released if held)"),
            // Dropping the guard aborts it: it must not go on (holding the Lease) after we said it stopped.
            Err(_) => tracing::warn!(budget = ?RECONCILER_STOP_BUDGET, "reconciler did not stop in time; aborted"),
        }
    };
    let drain = async move {
        tokio::time::sleep(drain_delay).await;
        let _ = stop.send(true);
        let result = webhooks.await;
        tracing::info!(after = ?started.elapsed(), "webhook server stopped");
        result
    };
    let ((), served) = tokio::join!(reconciler, drain);
    served.context("webhook server task")?.context("webhook server")?;
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
/// or, with `leader_namespace`, whenever this process holds the Lease there (see [`spawn_reconciler`]).
pub async fn start_reconciler(
    args: &ReconcilerArgs,
    leader_namespace: Option<&str>,
    client: kube::Client,
    metrics: ReconcileMetrics,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let election = leader_namespace.map(|ns| LeaderElection::new(client.clone(), ns, DEFAULT_LEASE_DURATION));
    spawn_reconciler(args, election, client, metrics, stop).await.map(drop)
}

/// The Lease duration when none is given (`--leader-election-lease-duration`).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);

/// Start the reconciler (behind `election` if given); the task ends once `stop` is set, after the
/// in-flight reconcile and, when leading, after releasing the Lease.
pub async fn spawn_reconciler(
    args: &ReconcilerArgs,
    election: Option<LeaderElection>,
    client: kube::Client,
    metrics: ReconcileMetrics,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
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
    let ctx = Context::new(
        client.clone(),
        config,
        module,
        image,
        args.rbac_proxy_image.clone(),
        metrics,
    );
    let ctx = Arc::new(ctx.with_network_policies(policies));
    let Some(election) = election else {
        return Ok(tokio::spawn(async move {
            ctx.metrics.set_leading(true);
            reconciler::run(ctx.clone(), stopped(stop)).await;
            ctx.metrics.set_leading(false);
        }));
    };
    // The Lease must be readable (and creatable) before we say we started.
    election.manager().await.context("preparing leader election")?;
    Ok(tokio::spawn(lead_and_reconcile(election, ctx, stop)))
}

/// 64 random bits from the standard library's per-instance hash keys (no random-number crate needed for an
/// identity suffix).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// Who competes for [`LEADER_LEASE`], and where.
#[derive(Clone)]
pub struct LeaderElection {
    /// The client.
    pub client: kube::Client,
    /// Namespace of the Lease (the manager's).
    pub namespace: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// How long the Lease lasts without renewal (`--leader-election-lease-duration`).
    pub lease_duration: Duration,
}

impl LeaderElection {
    /// Compete in `namespace` as this instance: the pod name (`HOSTNAME`, else a name from the process id)
    /// and a random suffix, as controller-runtime does, so that a restarted container does not take the
    /// Lease of the process it replaces for its own before that Lease expires.
    pub fn new(client: kube::Client, namespace: &str, lease_duration: Duration) -> Self {
        let pod = std::env::var("HOSTNAME").unwrap_or_else(|_| format!("btp-manager-{}", std::process::id()));
        let identity = format!("{pod}_{:016x}", random_u64());
        Self {
            client,
            namespace: namespace.to_string(),
            identity,
            lease_duration,
        }
    }

    /// A fresh lease manager (it reads the Lease, creating it when absent).
    pub async fn manager(&self) -> Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError> {
        let duration = self.lease_duration.as_secs().max(2);
        kube_lease_manager::LeaseManagerBuilder::new(self.client.clone(), LEADER_LEASE)
            .with_namespace(self.namespace.clone())
            .with_identity(self.identity.clone())
            .with_duration(duration)
            .with_grace(5.min(duration / 3))
            .build()
            .await
    }
}

/// Reconcile while holding the lease; stop reconciling when it is lost, resume when regained. When `stop`
/// is set: let the in-flight reconcile finish, then release the Lease, then return.
pub async fn lead_and_reconcile(election: LeaderElection, ctx: Arc<Context>, mut stop: watch::Receiver<bool>) {
    let (leader_tx, mut leader) = watch::channel(false);
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    // Aborted with this task: a killed manager must not keep renewing the Lease.
    let elect = AbortOnDrop::new(tokio::spawn(elect(election, leader_tx, release_rx)));
    loop {
        let won = tokio::select! {
            won = leader.wait_for(|l| *l) => won.is_ok(),
            _ = stop.wait_for(|s| *s) => break,
        };
        if !won {
            // The election task ended (it only does when told to): wait for the stop.
            let _ = stop.wait_for(|s| *s).await;
            break;
        }
        if *stop.borrow() {
            // Won just as the shutdown came: there is nothing to start.
            break;
        }
        tracing::info!("leading: reconciling");
        ctx.metrics.set_leading(true);
        let (mut lost, mut stopping) = (leader.clone(), stop.clone());
        reconciler::run(ctx.clone(), async move {
            tokio::select! {
                _ = lost.wait_for(|l| !*l) => {}
                _ = stopping.wait_for(|s| *s) => {}
            }
        })
        .await;
        ctx.metrics.set_leading(false);
        if *stop.borrow() {
            break;
        }
        if *leader.borrow() {
            // The controller ended while we lead (stuck at its start): a new term begins at once.
            tracing::info!("the controller's term ended while leading: a new one begins");
            continue;
        }
        tracing::info!("lost the lease: not reconciling");
    }
    // The reconciler has stopped: hand the Lease over.
    let _ = release_tx.send(());
    let _ = elect.disarm().await;
}

/// Keep competing for the Lease, publishing whether we lead, until `release`: then release it if held.
///
/// kube-lease-manager sleeps until the holder's lease would expire; a Lease released early (a leader
/// shutting down) is seen through a watch instead, and a fresh manager takes it at once.
async fn elect(
    election: LeaderElection,
    leader_tx: watch::Sender<bool>,
    mut release: tokio::sync::oneshot::Receiver<()>,
) {
    use futures::StreamExt as _;
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::runtime::{watcher, WatchStreamExt as _};
    let leases: kube::Api<Lease> = kube::Api::namespaced(election.client.clone(), &election.namespace);
    let by_name = watcher::Config::default().fields(&format!("metadata.name={LEADER_LEASE}"));
    let mut released = watcher(leases, by_name)
        .backoff(crate::watch_backoff::WatchBackoff::default())
        .applied_objects()
        .filter_map(|lease| async move {
            let lease = lease.ok()?;
            let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            holder.is_empty().then_some(())
        })
        .boxed();
    let mut manager: Option<kube_lease_manager::LeaseManager> = None;
    let mut leading = false;
    loop {
        let Some(current) = manager.as_ref() else {
            match election.manager().await {
                Ok(m) => manager = Some(m),
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: reading the Lease failed");
                    tokio::select! {
                        _ = &mut release => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
            continue;
        };
        tokio::select! {
            biased;
            _ = &mut release => break,
            changed = current.changed() => match changed {
                Ok(now) => {
                    leading = now;
                    tracing::info!(leading = now, "leader election: this replica {} the Lease", if now { "holds" } else { "no longer holds" });
                    let _ = leader_tx.send(now);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: renewing or taking the Lease failed");
                    tokio::select! {
                        _ = &mut release => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            },
            Some(()) = released.next(), if !leading => {
                // Released by its holder: look again now rather than at its old expiry.
                manager = None;
            }
        }
    }
    if leading {
        if let Some(manager) = &manager {
            // One call, within the budget of one call: a shutdown must not wait on an API server that
            // does not answer (the Lease expires by itself).
            match tokio::time::timeout(reconciler::cluster::CALL_BUDGET, manager.release()).await {
                Ok(Ok(())) => tracing::info!("lease released"),
                Ok(Err(e)) => tracing::warn!(error = %e, "releasing the lease failed; it expires by itself"),
                Err(_) => tracing::warn!("releasing the lease took too long; it expires by itself"),
            }
        }
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
