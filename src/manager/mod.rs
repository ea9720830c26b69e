//! One place wires the manager: [`ManagerBuilder`] makes everything `btp-manager run` starts — the
//! reconciler's context and controller, leader election, the webhook server with its certificates, the
//! metrics and health endpoints — from [`Options`]. `run`, `local`, the test harness and the benchmarks
//! all start it here; where they differ is in their [`Options`].
//!
//! - [`options`]: what a manager is started with (`run`'s flags, `local`'s, the in-process defaults);
//! - [`leader`]: leader election, and reconciling while leading;
//! - [`webhooks`]: the webhook server, its endpoint and certificate;
//! - [`probes`]: the metrics and health endpoints;
//! - [`shutdown`]: the graceful shutdown and the kill.
//!
//! Task plumbing (`AbortOnDrop`, stop signals) is in [`crate::tasks`], below this and the reconciler.

pub mod leader;
pub mod lease;
pub mod options;
pub mod probes;
pub mod shutdown;
pub mod webhooks;

pub use leader::DEFAULT_LEASE_DURATION;
pub use lease::{LeaderElection, LEADER_LEASE};
pub use options::Options;
pub use probes::Probes;
pub use shutdown::RECONCILER_STOP_BUDGET;
pub use webhooks::{Reach, WebhookOptions};

use crate::config::Settings;
use crate::fence::Fence;
use crate::first_writes::FirstWrites;
use crate::ops;
use crate::reconciler::{self, metrics::ReconcileMetrics, Context};
use crate::rest_client::{self, RestMetrics};
use crate::tasks::{stopped, AbortOnDrop, StopOnError};
use anyhow::Context as _;
use btp_webhooks::metrics::WebhookMetrics;
use prometheus_client::registry::Registry;
use shutdown::ShutdownPlan;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;

/// The manager's client for `config`: without kube's own retry layer, so that the reconciler's
/// ([`reconciler::cluster::retrying`]) is the only one (docs/behaviour.md#retries-and-budgets).
pub fn manager_client(config: kube::Config) -> anyhow::Result<kube::Client> {
    kube::Client::try_from(reconciler::cluster::client_config(config)).context("building the Kubernetes client")
}

/// A client for the commands that act on a cluster from outside it (`doctor`, `check admission`,
/// `uninstall`): from `kubeconfig` when given, else the current kubeconfig or the in-cluster configuration;
/// its requests say `User-Agent: btp-manager/<version> (<command>)`.
pub async fn kubeconfig_client(kubeconfig: Option<&std::path::Path>, command: &str) -> anyhow::Result<kube::Client> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("using the kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("connecting with the current kubeconfig (or in-cluster configuration)")?,
    };
    // Who sent a request can be told from the API server's side (its audit log), as for the manager's own.
    if let Ok(agent) = http::HeaderValue::from_str(&format!("btp-manager/{} ({command})", env!("CARGO_PKG_VERSION"))) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    kube::Client::try_from(config).context("building the API client")
}

/// A manager about to start: its options, the reconciler's context (the module resources and network
/// policies loaded), and the metrics registry. [`ManagerBuilder::start`] starts everything `run` runs;
/// [`ManagerBuilder::start_reconciler`] only the reconciler (behind leader election if asked).
pub struct ManagerBuilder {
    /// The client every part of the manager sends through ([`crate::rest_client::guard`]).
    client: kube::Client,
    options: Options,
    ctx: Arc<Context>,
    registry: Registry,
    webhook_metrics: WebhookMetrics,
    /// This process's identity (the Lease holder, the `User-Agent` of its requests).
    identity: String,
    /// The right to write (open without leader election).
    fence: Fence,
    /// Whether this replica leads: the elector publishes it (always true without leader election); taken
    /// by the reconciler's start.
    leading: Option<watch::Sender<bool>>,
    /// The same, for the webhook certificate keeper.
    leads: watch::Receiver<bool>,
    /// With leader election: the first writes a follower may make ([`crate::first_writes`]), through a client
    /// of their own that the fence does not hold back.
    first_writes: Option<FirstWrites>,
    /// `btpmanager_leader_election_conflicts_total`.
    lease_conflicts: prometheus_client::metrics::counter::Counter,
}

impl ManagerBuilder {
    /// Check the options and load what the reconciler works from: the operand image must be named, the
    /// module resources and network policies must load (built in, or from the configured directories).
    pub fn new(client: kube::Client, options: Options) -> anyhow::Result<Self> {
        let image = options
            .operand_image
            .clone()
            .filter(|i| !i.is_empty())
            .context("SAP_BTP_SERVICE_OPERATOR (or --operand-image) must name the operand image")?;
        let base = Settings::load(options.config.clone())?;
        let mut registry = Registry::default();
        let webhook_metrics = WebhookMetrics::register(&mut registry);
        let metrics = ReconcileMetrics::register(&mut registry);
        let requests = RestMetrics::register(&mut registry);
        let lease_conflicts = lease::register_conflicts(&mut registry);
        let identity = leader::process_identity();
        let fence = match options.leader_election {
            Some(_) => Fence::shut(),
            None => Fence::open(),
        };
        let agent = format!("btp-manager/{} ({identity})", env!("CARGO_PKG_VERSION"));
        let first_writes = options.leader_election.is_some().then(|| {
            FirstWrites::new(rest_client::guard(
                client.clone(),
                Fence::open(),
                Some(requests.clone()),
                &agent,
            ))
        });
        let client = rest_client::guard(client, fence.clone(), Some(requests), &agent);
        let ctx = Context::new(
            client.clone(),
            base,
            image,
            options.rbac_proxy_image.clone(),
            metrics,
            fence.clone(),
        )
        .with_watch_failing_limit(options.leader_election.unwrap_or(DEFAULT_LEASE_DURATION));
        let (leading, leads) = watch::channel(options.leader_election.is_none());
        Ok(Self {
            client,
            ctx: Arc::new(ctx),
            options,
            registry,
            webhook_metrics,
            identity,
            fence,
            leading: Some(leading),
            leads,
            first_writes,
            lease_conflicts,
        })
    }

    /// The reconciler's shared state (the same for every leadership term of this manager).
    pub fn context(&self) -> Arc<Context> {
        self.ctx.clone()
    }

    /// Start the reconciler alone (no webhooks, no endpoints), until `term` turns true: at once, or while
    /// this process holds the Lease when the options ask for leader election.
    pub async fn start_reconciler(mut self, term: watch::Receiver<bool>) -> anyhow::Result<Reconciler> {
        let task = self.spawn_reconciler(term).await?;
        Ok(Reconciler {
            ctx: self.ctx,
            registry: self.registry,
            task,
        })
    }

    /// Start the reconciler (behind leader election if asked); the task ends once `stop` is set, after the
    /// in-flight reconcile and, when leading, after releasing the Lease.
    async fn spawn_reconciler(&mut self, stop: watch::Receiver<bool>) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let ctx = self.ctx.clone();
        let leading = self.leading.take().context("the reconciler is started once")?;
        let Some(lease_duration) = self.options.leader_election else {
            return Ok(tokio::spawn(async move {
                ctx.metrics.set_leading(true);
                reconciler::run(ctx.clone(), stopped(stop)).await;
                ctx.metrics.set_leading(false);
                drop(leading);
            }));
        };
        let election = LeaderElection {
            client: self.client.clone(),
            namespace: self.options.namespace.clone(),
            identity: self.identity.clone(),
            lease_duration,
            fence: self.fence.clone(),
            conflicts: self.lease_conflicts.clone(),
        };
        // The Lease must be readable (and creatable) before we say we started.
        election.prepare().await.context("preparing leader election")?;
        Ok(tokio::spawn(leader::lead_and_reconcile(election, ctx, leading, stop)))
    }

    /// Start everything `run` runs until `term` turns true (then see [`Manager::shut_down`]): the
    /// reconciler, the metrics and health endpoints, and the webhook server; ready once they all serve.
    /// A start that fails half-way stops what it started.
    pub async fn start(mut self, term: watch::Receiver<bool>) -> anyhow::Result<Manager> {
        // `term`: shutdown requested (stop reconciling, not ready); `stop`: the drain is over (stop serving).
        let (stop_tx, stop_rx) = watch::channel(false);
        // Everything started below ends with `stop` (dropping `stop_tx` sets nothing, so a failed start stops
        // what it started explicitly).
        let started = StopOnError::new(stop_tx);
        let match_conditions = webhooks::match_conditions_supported(&self.client).await;
        let reconciler = self.spawn_reconciler(term.clone()).await?;
        // From here on the reconciler runs: a failed start must not leave it running.
        let reconciler = AbortOnDrop::new(reconciler);
        let Self {
            client,
            options,
            ctx,
            registry,
            webhook_metrics,
            leads,
            first_writes,
            ..
        } = self;
        let ready = ops::Readiness::default();
        let live = ops::Liveness::default();
        let (metrics_addr, health_addr) =
            probes::serve(options.probes, registry, ready.clone(), live.clone(), &stop_rx).await?;
        let wiring = webhooks::Wiring {
            client: &client,
            namespace: &options.namespace,
            flags: &options.config,
            match_conditions,
            metrics: webhook_metrics,
            certificate_expiry: ctx.metrics.certificates(),
            leading: leads,
            first_writes,
            ready: ready.clone(),
            live: live.clone(),
        };
        let (webhook_addr, webhooks) = webhooks::start(&options.webhooks, wiring, (&term, &stop_rx)).await?;
        // A task that ends before the shutdown fails `/healthz` (a panic, a server that stopped serving).
        let mut reconciler = reconciler;
        live.watch("the reconciler", task_alive(reconciler.handle(), &term));
        live.watch("the webhook server", task_alive(&webhooks, &term));
        if !*term.borrow() {
            ready.set(true);
        }
        Ok(Manager {
            webhook_addr,
            metrics_addr,
            health_addr,
            ctx,
            plan: ShutdownPlan {
                term,
                stop: started.disarm(),
                ready,
                drain_delay: options.shutdown_drain_delay,
                reconciler_budget: RECONCILER_STOP_BUDGET,
                reconciler: reconciler.disarm(),
                webhooks,
            },
        })
    }
}

/// Whether a task runs, for `/healthz`: a task may end only once the shutdown was asked for.
fn task_alive<T>(task: &tokio::task::JoinHandle<T>, term: &watch::Receiver<bool>) -> impl Fn() -> bool + Send + Sync {
    let (finished, term) = (task.abort_handle(), term.clone());
    move || !finished.is_finished() || *term.borrow()
}

/// A reconciler started by [`ManagerBuilder::start_reconciler`].
pub struct Reconciler {
    /// Its shared state.
    pub ctx: Arc<Context>,
    /// Its metrics (what `/metrics` would serve).
    pub registry: Registry,
    /// The task: it ends after `term` turned true (the in-flight reconcile finished, a held Lease released).
    pub task: tokio::task::JoinHandle<()>,
}

/// A manager started by [`ManagerBuilder::start`]: the webhook server, the reconciler (behind leader
/// election when asked), metrics and health endpoints, and the tasks that keep the webhook certificate
/// current.
pub struct Manager {
    /// Where the webhooks are served (the port actually bound).
    pub webhook_addr: SocketAddr,
    /// Where `/metrics` is served.
    pub metrics_addr: SocketAddr,
    /// Where `/healthz` and `/readyz` are served.
    pub health_addr: SocketAddr,
    /// The reconciler's shared state.
    pub ctx: Arc<Context>,
    plan: ShutdownPlan,
}

impl Manager {
    /// Wait until shutdown is requested, then shut down gracefully: `/readyz` turns false at once and
    /// reconciling stops (the in-flight reconcile finishes, then the Lease is released, within
    /// [`RECONCILER_STOP_BUDGET`]); the webhooks keep answering for the drain delay so that the endpoints
    /// controller can take the pod out of the Service, then they stop accepting and finish what is in flight.
    pub async fn shut_down(self) -> anyhow::Result<()> {
        self.plan.shut_down().await
    }

    /// Wait until admission through this manager works: the webhook server serves the certificate that the
    /// registered caBundle trusts (with leader election, once a leader has issued and registered it).
    pub async fn admission_works(&self) {
        self.plan.ready.admission_works().await
    }

    /// Stop at once, as a killed process would: the in-flight reconcile is abandoned, a held Lease is not
    /// released (it expires), open webhook connections are dropped.
    pub async fn kill(self) {
        self.plan.kill().await
    }
}
