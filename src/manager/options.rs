//! What a manager is started with: the parsed configuration, and where `run`, `local` and the in-process
//! harnesses differ (identity, leader election, how the webhooks are reached).

use super::leader::DEFAULT_LEASE_DURATION;
use super::probes::Probes;
use super::webhooks::{Reach, WebhookOptions};
use crate::cli::{LocalArgs, RunArgs};
use crate::config::Config;
use btp_api::names;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The operand image of the built-in chart: `local`'s unless `SAP_BTP_SERVICE_OPERATOR`/`--operand-image`
/// says otherwise.
pub const LOCAL_OPERAND_IMAGE: &str =
    "europe-docker.pkg.dev/kyma-project/prod/external/ghcr.io/sap/sap-btp-service-operator/controller:v0.11.10";

/// Everything a manager is started with.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The reconciler's configuration from defaults and flags (the runtime ConfigMap is read on top).
    pub config: Config,
    /// The operand image (`SAP_BTP_SERVICE_OPERATOR`); a start without one fails.
    pub operand_image: Option<String>,
    /// `KUBE_RBAC_PROXY`.
    pub rbac_proxy_image: Option<String>,
    /// The manager's namespace (`--namespace`): its Lease, its webhook Service and certificate Secret.
    pub namespace: String,
    /// The Lease duration when the manager competes for the Lease (`--leader-elect`); None: it reconciles
    /// at once.
    pub leader_election: Option<Duration>,
    /// The webhook server.
    pub webhooks: WebhookOptions,
    /// The metrics and health endpoints.
    pub probes: Probes,
    /// How long the webhooks keep serving after a shutdown request (`--shutdown-drain-delay`).
    pub shutdown_drain_delay: Duration,
}

impl Options {
    /// `btp-manager run`'s, from its flags.
    pub fn run(args: &RunArgs) -> Self {
        let webhook = &args.webhook;
        Self {
            config: args.reconciler.config(),
            operand_image: args.reconciler.operand_image.clone(),
            rbac_proxy_image: args.reconciler.rbac_proxy_image.clone(),
            namespace: args.namespace.clone(),
            leader_election: args.leader_elect.then_some(args.leader_election_lease_duration),
            webhooks: WebhookOptions {
                bind: args.webhook_bind_address,
                reach: Reach::run(webhook.webhook_url.clone()),
                dns_names: webhook.webhook_dns_names.clone(),
                ips: webhook.webhook_ips.clone(),
                cert_dir: webhook.webhook_cert_dir.clone(),
                cert_secret: webhook.webhook_cert_secret.clone(),
                key_algorithm: webhook.webhook_key_algorithm,
                body_timeout: webhook.webhook_body_timeout,
                limits: webhook.limits(),
            },
            probes: Probes {
                metrics: args.metrics_bind_address,
                health: args.health_probe_bind_address,
            },
            shutdown_drain_delay: args.shutdown_drain_delay,
        }
    }

    /// `btp-manager local`'s: as the shipped Deployment runs `run` (in `kyma-system`, leader-elected), its
    /// webhooks reached at the address they are bound to, the built-in chart's operand image by default.
    pub fn local(args: &LocalArgs) -> Self {
        let operand_image = match &args.reconciler.operand_image {
            Some(image) if !image.is_empty() => image.clone(),
            _ => LOCAL_OPERAND_IMAGE.into(),
        };
        let mut options = Self::in_process(args.reconciler.config(), &operand_image);
        options.rbac_proxy_image = args.reconciler.rbac_proxy_image.clone();
        options.leader_election = Some(DEFAULT_LEASE_DURATION);
        options.webhooks.bind = args.webhook_bind_address;
        options.webhooks.key_algorithm = args.webhook_key_algorithm;
        options.probes = Probes {
            metrics: args.metrics_bind_address,
            health: args.health_probe_bind_address,
        };
        options
    }

    /// In-process (tests and benchmarks): `config` and `operand_image`, in `kyma-system`, no leader
    /// election, the webhooks and probes (if started) on free loopback ports, no drain delay; every other
    /// setting at `run`'s default.
    pub fn in_process(config: Config, operand_image: &str) -> Self {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        Self {
            config,
            operand_image: Some(operand_image.into()),
            rbac_proxy_image: None,
            namespace: names::KYMA_SYSTEM.into(),
            leader_election: None,
            webhooks: WebhookOptions {
                bind: loopback,
                reach: Reach::Bound,
                dns_names: Vec::new(),
                ips: Vec::new(),
                cert_dir: None,
                cert_secret: names::webhook::CERT_SECRET_NAME.into(),
                key_algorithm: btp_certs::KeyAlgorithm::default(),
                body_timeout: btp_webhooks::handlers::DEFAULT_BODY_TIMEOUT,
                limits: btp_webhooks::server::Limits::default(),
            },
            probes: Probes {
                metrics: loopback,
                health: loopback,
            },
            shutdown_drain_delay: Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser as _;

    fn run_args(flags: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(["btp-manager", "run"].iter().chain(flags)).unwrap();
        let Command::Run(args) = cli.command else { panic!("run") };
        *args
    }

    fn local_args(flags: &[&str]) -> LocalArgs {
        let cli = Cli::try_parse_from(["btp-manager", "local"].iter().chain(flags)).unwrap();
        let Command::Local(args) = cli.command else {
            panic!("local")
        };
        *args
    }

    #[test]
    fn run_without_flags_reconciles_at_once_and_serves_as_the_in_process_defaults_do() {
        let args = run_args(&[]);
        let options = Options::run(&args);
        assert_eq!(options.leader_election, None);
        assert_eq!(options.namespace, args.namespace);
        assert_eq!(options.shutdown_drain_delay, Duration::from_secs(5));
        assert!(matches!(options.webhooks.reach, Reach::Run { url: None, .. }));
        assert_eq!(options.webhooks.bind, "0.0.0.0:9443".parse().unwrap());
        assert_eq!(options.probes.metrics, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(options.probes.health, "0.0.0.0:8081".parse().unwrap());
        // Everything but where and how they are reached is the same as the harness's defaults.
        let in_process = Options::in_process(Config::default(), "image");
        assert_eq!(
            WebhookOptions {
                bind: in_process.webhooks.bind,
                reach: Reach::Bound,
                ..options.webhooks
            },
            in_process.webhooks
        );
        assert_eq!(
            options.config,
            Config::default(),
            "the flags' defaults are the configuration's"
        );
    }

    #[test]
    fn run_flags_reach_the_options() {
        let options = Options::run(&run_args(&[
            "--leader-elect",
            "--leader-election-lease-duration=3s",
            "--namespace=team",
            "--shutdown-drain-delay=0s",
            "--webhook-url=https://hooks.example.com",
            "--webhook-cert-secret=my-cert",
            "--operand-image=example.test/op:v1",
            "--secret-name=creds",
        ]));
        assert_eq!(options.leader_election, Some(Duration::from_secs(3)));
        assert_eq!(options.namespace, "team");
        assert_eq!(options.shutdown_drain_delay, Duration::ZERO);
        assert!(matches!(&options.webhooks.reach, Reach::Run { url: Some(u), .. } if u == "https://hooks.example.com"));
        assert_eq!(options.webhooks.cert_secret, "my-cert");
        assert_eq!(options.operand_image.as_deref(), Some("example.test/op:v1"));
        assert_eq!(options.config.secret_name, "creds");
    }

    #[test]
    fn local_runs_as_the_shipped_deployment_does_with_the_built_in_operand_image() {
        let options = Options::local(&local_args(&[]));
        assert_eq!(options.leader_election, Some(DEFAULT_LEASE_DURATION));
        assert_eq!(options.namespace, names::KYMA_SYSTEM);
        assert_eq!(options.webhooks.reach, Reach::Bound);
        assert_eq!(options.webhooks.bind, "127.0.0.1:0".parse().unwrap());
        assert_eq!(options.webhooks.cert_secret, names::webhook::CERT_SECRET_NAME);
        let given = Options::local(&local_args(&["--operand-image=example.test/op:v2"]));
        assert_eq!(given.operand_image.as_deref(), Some("example.test/op:v2"));
        let empty = Options::local(&local_args(&["--operand-image="]));
        assert_eq!(empty.operand_image.as_deref(), Some(LOCAL_OPERAND_IMAGE));
    }
}
