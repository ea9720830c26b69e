//! Command line (flags and defaults: docs/configuration.md, docs/behaviour.md#configuration).

use crate::config::keys;
use clap::{Args, Parser, Subcommand};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// BTP Manager: installs and manages the SAP BTP service operator, and guards its inputs with
/// admission webhooks.
#[derive(Parser, Debug)]
#[command(name = "btp-manager", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run everything without a cluster: the embedded API server, the webhooks and the reconciler, with an
    /// example Secret and BtpOperator; prints every state change. Use the printed kubeconfig with kubectl.
    Local(Box<LocalArgs>),
    /// Run the manager against the cluster of the current kubeconfig (or in-cluster config).
    Run(Box<RunArgs>),
    /// Print the BtpOperator CustomResourceDefinition (the source of deploy/crd.yaml).
    Crd,
    /// Print the table of status reasons with what to do about each (the source of docs/status-reasons.md).
    StatusReasons,
    /// Check BTP Manager in the cluster of the current kubeconfig, read-only: version, CRD, RBAC, the manager's
    /// Deployment and leader, its webhooks end to end, certificates, the BtpOperator, the credentials Secret and
    /// the operand. Exits 0 when nothing failed (warnings allowed).
    Doctor(DoctorArgs),
    /// Check one thing for a script and exit 0 when it holds (`doctor` checks everything, for a person).
    #[command(subcommand)]
    Check(CheckCommand),
    /// Stop the manager and delete its own registrations, keeping the operand, the BtpOperator, its CRD and
    /// the objects the Go BTP Manager's install shares by name: the way back to the Go manager
    /// (docs/upgrading.md). Read-only unless --apply: it prints what it would do.
    Uninstall(UninstallArgs),
    /// Print the manager's own webhook configurations (the source of deploy/webhooks.yaml).
    WebhookManifests {
        /// Namespace of the manager's webhook Service.
        #[arg(long, default_value = btp_api::names::KYMA_SYSTEM)]
        namespace: String,
    },
}

/// Flags of `doctor`.
#[derive(Args, Debug, Clone)]
pub struct DoctorArgs {
    /// The manager's namespace (as installed by deploy/).
    #[arg(long, default_value = btp_api::names::KYMA_SYSTEM)]
    pub namespace: String,
    /// The manager's ServiceAccount (as installed by deploy/).
    #[arg(long, default_value = "btp-manager-controller-manager")]
    pub service_account: String,
    /// Output: `text` (a line per check) or `json`.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: DoctorOutput,
    /// A kubeconfig to use instead of the current one (`KUBECONFIG`, `~/.kube/config`).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// What `check` checks.
#[derive(Subcommand, Debug)]
pub enum CheckCommand {
    /// Whether admission works end to end: a server-side dry run (nothing is stored) of a misnamed BtpOperator,
    /// `default/btp-manager-admission-probe`, is refused by the manager's validating webhook through the API
    /// server. Install scripts run `check admission --wait=2m` after `kubectl rollout status`, before creating
    /// the Secret and the BtpOperator. Exits 0 once it works, non-zero with the last answer otherwise.
    Admission(CheckAdmissionArgs),
}

/// Flags of `check admission`.
#[derive(Args, Debug, Clone)]
pub struct CheckAdmissionArgs {
    /// Try again until admission works or DURATION has passed (`--wait` alone: 2m). Without it, one try.
    #[arg(long, value_name = "DURATION", num_args = 0..=1, default_missing_value = "2m", value_parser = parse_positive_duration)]
    pub wait: Option<std::time::Duration>,
    /// Print a line whenever the answer changes (by default only the exit code, and the error on failure).
    #[arg(short, long)]
    pub verbose: bool,
    /// A kubeconfig to use instead of the current one (`KUBECONFIG`, `~/.kube/config`).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Flags of `uninstall`.
#[derive(Args, Debug, Clone)]
pub struct UninstallArgs {
    /// Keep the operand and the BtpOperator (required: a full uninstall is docs/install.md#uninstalling).
    #[arg(long, required = true)]
    pub keep_operand: bool,
    /// Make the changes (without it, only print them).
    #[arg(long)]
    pub apply: bool,
    /// The manager's namespace (as installed by deploy/).
    #[arg(long, default_value = btp_api::names::KYMA_SYSTEM)]
    pub namespace: String,
    /// How long to wait for the manager's Pods to end after scaling it to zero.
    #[arg(long, default_value = "5m", value_parser = parse_positive_duration)]
    pub timeout: std::time::Duration,
    /// A kubeconfig to use instead of the current one (`KUBECONFIG`, `~/.kube/config`).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// How `doctor` prints its report.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoctorOutput {
    /// A line per check, with the fix below a failed or warning one.
    Text,
    /// The same as JSON.
    Json,
}

/// Flags of `run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Address of the Prometheus metrics endpoint (`/metrics`).
    #[arg(long, default_value = "0.0.0.0:8080", value_parser = parse_bind)]
    pub metrics_bind_address: SocketAddr,
    /// Address of the health endpoints (`/healthz`, `/readyz`).
    #[arg(long, default_value = "0.0.0.0:8081", value_parser = parse_bind)]
    pub health_probe_bind_address: SocketAddr,
    /// Address of the HTTPS admission webhook server.
    #[arg(long, default_value = "0.0.0.0:9443", value_parser = parse_bind)]
    pub webhook_bind_address: SocketAddr,
    /// Namespace the manager runs in (its webhook Service, certificate Secret and leader-election Lease
    /// live there).
    #[arg(long, env = "POD_NAMESPACE", default_value = btp_api::names::KYMA_SYSTEM)]
    pub namespace: String,
    /// Enable leader election (only the leader reconciles; every replica serves webhooks). Also accepts
    /// `--leader-elect=true|false`, as the Go manager's flag does.
    #[arg(long, num_args = 0..=1, default_value = "false", default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// How long a leader's Lease lasts without renewal: a standby takes over a crashed leader after this
    /// long (a leader that shuts down releases it at once). Renewed 5 s (at most a third) before expiry.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_election_lease_duration: std::time::Duration,
    /// On SIGTERM: how long the webhooks keep answering after `/readyz` turned false (endpoints take a
    /// moment to drop the pod). Reconciling stops and the Lease is released at once.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub shutdown_drain_delay: std::time::Duration,
    #[command(flatten)]
    pub reconciler: ReconcilerArgs,
    #[command(flatten)]
    pub webhook: WebhookArgs,
    #[command(flatten)]
    pub go_manager: GoManagerArgs,
}

/// Flags of the Go BTP Manager that have no effect here, accepted so that its Deployment's args start this
/// manager unchanged (each one given is logged once at start, with why).
#[derive(Args, Debug, Clone, PartialEq)]
pub struct GoManagerArgs {
    /// (Go manager; no effect: the chart version ships with the module resources.)
    #[arg(long, default_value = keys::CHART_PATH.default)]
    pub chart_path: String,
    /// (Go manager; no effect: the manager does not poll, the Deployment watch brings it back.)
    #[arg(long, default_value = keys::READY_CHECK_INTERVAL.default, value_parser = parse_duration)]
    pub ready_check_interval: std::time::Duration,
    /// (Go manager; no effect: its CA-bundle probe is replaced by --credentials-check-interval.)
    #[arg(long, default_value = keys::PROBE_INTERVAL.default, value_parser = parse_duration)]
    pub probe_interval: std::time::Duration,
    /// (Go manager; no effect: a status is written once per change, retried on transient errors.)
    #[arg(long, default_value = keys::STATUS_UPDATE_TIMEOUT.default, value_parser = parse_duration)]
    pub status_update_timeout: std::time::Duration,
    /// (Go manager; no effect: as --status-update-timeout.)
    #[arg(long, default_value = keys::STATUS_UPDATE_CHECK_INTERVAL.default, value_parser = parse_duration)]
    pub status_update_check_interval: std::time::Duration,
    /// (Go manager's zap logging; no effect: RUST_LOG sets the level, logs are JSON off a terminal.)
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub zap_devel: Option<bool>,
    /// (zap; no effect, see --zap-devel.)
    #[arg(long)]
    pub zap_encoder: Option<String>,
    /// (zap; no effect, see --zap-devel.)
    #[arg(long)]
    pub zap_log_level: Option<String>,
    /// (zap; no effect, see --zap-devel.)
    #[arg(long)]
    pub zap_stacktrace_level: Option<String>,
    /// (zap; no effect, see --zap-devel.)
    #[arg(long)]
    pub zap_time_encoding: Option<String>,
}

impl GoManagerArgs {
    /// The flags given with a non-default value, each with why it has no effect here.
    pub fn ignored(&self) -> Vec<(&'static str, &'static str)> {
        let defaults = Cli::try_parse_from(["btp-manager", "run"])
            .ok()
            .and_then(|c| match c.command {
                Command::Run(r) => Some(r.go_manager),
                _ => None,
            });
        let Some(d) = defaults else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut note = |given: bool, flag, why| {
            if given {
                out.push((flag, why));
            }
        };
        // The Go manager's flags with a runtime ConfigMap key: why they have no effect is the key's.
        let mut unused = |given: bool, key: &keys::Key| note(given, key.flag, key.meaning);
        unused(self.chart_path != d.chart_path, &keys::CHART_PATH);
        unused(
            self.ready_check_interval != d.ready_check_interval,
            &keys::READY_CHECK_INTERVAL,
        );
        unused(self.probe_interval != d.probe_interval, &keys::PROBE_INTERVAL);
        unused(
            self.status_update_timeout != d.status_update_timeout,
            &keys::STATUS_UPDATE_TIMEOUT,
        );
        unused(
            self.status_update_check_interval != d.status_update_check_interval,
            &keys::STATUS_UPDATE_CHECK_INTERVAL,
        );
        let zap = "RUST_LOG sets the level; logs are JSON when stderr is not a terminal";
        note(self.zap_devel.is_some(), "--zap-devel", zap);
        note(self.zap_encoder.is_some(), "--zap-encoder", zap);
        note(self.zap_log_level.is_some(), "--zap-log-level", zap);
        note(self.zap_stacktrace_level.is_some(), "--zap-stacktrace-level", zap);
        note(self.zap_time_encoding.is_some(), "--zap-time-encoding", zap);
        out
    }
}

/// Flags of the reconciler, shared by `run` and `local`.
#[derive(Args, Debug, Clone)]
pub struct ReconcilerArgs {
    /// Namespace of the operand and of the required credentials Secret.
    #[arg(long, default_value = keys::CHART_NAMESPACE.default)]
    pub chart_namespace: String,
    /// Name of the required credentials Secret.
    #[arg(long, default_value = keys::SECRET_NAME.default)]
    pub secret_name: String,
    /// Name of the runtime configuration ConfigMap (in --chart-namespace).
    #[arg(long, default_value = keys::CONFIG_NAME.default)]
    pub config_name: String,
    /// Name of the operand Deployment.
    #[arg(long, default_value = keys::DEPLOYMENT_NAME.default)]
    pub deployment_name: String,
    /// Directory with the operand manifests (`apply/`, `delete/`, `chart-version`) to use instead of the
    /// copy built into the binary.
    #[arg(long)]
    pub resources_path: Option<PathBuf>,
    /// Directory with `network-policies/` to use instead of the copy built into the binary.
    #[arg(long)]
    pub manager_resources_path: Option<PathBuf>,
    /// How long the operand Deployment may take to become available.
    #[arg(long, default_value = keys::READY_TIMEOUT.default, value_parser = parse_duration)]
    pub ready_timeout: std::time::Duration,
    /// Periodic re-check while Processing.
    #[arg(long, default_value = keys::PROCESSING_STATE_REQUEUE_INTERVAL.default, value_parser = parse_duration)]
    pub processing_state_requeue_interval: std::time::Duration,
    /// Periodic re-check while Ready.
    #[arg(long, default_value = keys::READY_STATE_REQUEUE_INTERVAL.default, value_parser = parse_duration)]
    pub ready_state_requeue_interval: std::time::Duration,
    /// How long the hard delete of ServiceInstances/ServiceBindings may take before the soft delete.
    #[arg(long, default_value = keys::HARD_DELETE_TIMEOUT.default, value_parser = parse_duration)]
    pub hard_delete_timeout: std::time::Duration,
    /// How often a running hard delete checks what is left (each deletion also wakes it).
    #[arg(long, default_value = keys::HARD_DELETE_CHECK_INTERVAL.default, value_parser = parse_duration)]
    pub hard_delete_check_interval: std::time::Duration,
    /// Budget of the delete requests of one kind in the hard delete.
    #[arg(long, default_value = keys::DELETE_REQUEST_TIMEOUT.default, value_parser = parse_duration)]
    pub delete_request_timeout: std::time::Duration,
    /// `ENABLE_LIMITED_CACHE` for the operand.
    #[arg(long, default_value = keys::ENABLE_LIMITED_CACHE.default)]
    pub enable_limited_cache: String,
    /// How often to ask the token endpoint for a token with the credentials (condition `CredentialsValid`); 0: never.
    #[arg(long, default_value = keys::CREDENTIALS_CHECK_INTERVAL.default, value_parser = parse_duration)]
    pub credentials_check_interval: std::time::Duration,
    /// PEM certificates the credentials check trusts besides the system roots.
    #[arg(long)]
    pub credentials_check_ca_bundle: Option<String>,
    /// The operand image (container `manager` of the operand Deployment). Required for `run`; `local`
    /// defaults to the image of the built-in chart.
    #[arg(long, env = keys::OPERAND_IMAGE.env)]
    pub operand_image: Option<String>,
    /// Image for a `kube-rbac-proxy` container in the operand Deployment, if it has one.
    #[arg(long, env = keys::RBAC_PROXY_IMAGE.env)]
    pub rbac_proxy_image: Option<String>,
}

impl ReconcilerArgs {
    /// The reconciler's configuration from the flags (no path: the empty path, the built-in copy).
    pub fn config(&self) -> crate::config::Config {
        crate::config::Config {
            chart_namespace: self.chart_namespace.clone(),
            secret_name: self.secret_name.clone(),
            config_name: self.config_name.clone(),
            deployment_name: self.deployment_name.clone(),
            resources_path: self.resources_path.clone().unwrap_or_default(),
            manager_resources_path: self.manager_resources_path.clone().unwrap_or_default(),
            processing_state_requeue_interval: self.processing_state_requeue_interval,
            ready_state_requeue_interval: self.ready_state_requeue_interval,
            ready_timeout: self.ready_timeout,
            hard_delete_timeout: self.hard_delete_timeout,
            hard_delete_check_interval: self.hard_delete_check_interval,
            delete_request_timeout: self.delete_request_timeout,
            enable_limited_cache: self.enable_limited_cache.clone(),
            credentials_check_interval: self.credentials_check_interval,
            credentials_check_ca_bundle: self.credentials_check_ca_bundle.clone().unwrap_or_default(),
            ..crate::config::Config::default()
        }
    }
}

/// Flags of `local`. It binds loopback ports of its own choosing unless told otherwise, and prints them.
#[derive(Args, Debug, Clone)]
pub struct LocalArgs {
    /// Exit 0 as soon as the BtpOperator is Ready; non-zero with the reason on failure or timeout.
    #[arg(long)]
    pub once: bool,
    /// With --once: give up after this long.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub timeout: std::time::Duration,
    /// Where to write the kubeconfig (default: a file in the temp directory).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the Prometheus metrics endpoint (`/metrics`); port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_bind)]
    pub metrics_bind_address: SocketAddr,
    /// Address of the health endpoints (`/healthz`, `/readyz`); port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_bind)]
    pub health_probe_bind_address: SocketAddr,
    /// Address of the HTTPS admission webhook server; port 0 picks a free one. The embedded API server
    /// calls it on this address (127.0.0.1 when it is 0.0.0.0).
    #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_bind)]
    pub webhook_bind_address: SocketAddr,
    /// Key algorithm of the webhook certificates: ecdsa-p256, rsa-2048, rsa-3072 or rsa-4096.
    #[arg(long, default_value = "ecdsa-p256")]
    pub webhook_key_algorithm: btp_certs::KeyAlgorithm,
    #[command(flatten)]
    pub reconciler: ReconcilerArgs,
}

/// Webhook TLS flags.
#[derive(Args, Debug, Clone)]
pub struct WebhookArgs {
    /// Serve `tls.crt`/`tls.key` from this directory (e.g. a cert-manager Secret volume), reloaded when
    /// they change, instead of certificates the manager creates. The caBundle is then not managed.
    #[arg(long)]
    pub webhook_cert_dir: Option<PathBuf>,
    /// Secret (in --namespace) holding the manager's own webhook CA and serving certificate.
    #[arg(long, default_value = btp_api::names::webhook::CERT_SECRET_NAME)]
    pub webhook_cert_secret: String,
    /// Register the webhook configurations with this base URL instead of the in-cluster Service (for a
    /// manager running outside the cluster). Default outside a cluster: https://<webhook bind address>
    /// (127.0.0.1 for an unspecified one).
    #[arg(long)]
    pub webhook_url: Option<String>,
    /// Extra DNS names for the serving certificate.
    #[arg(long = "webhook-dns-name")]
    pub webhook_dns_names: Vec<String>,
    /// Extra IP addresses for the serving certificate.
    #[arg(long = "webhook-ip")]
    pub webhook_ips: Vec<IpAddr>,
    /// Key algorithm of the webhook certificates: ecdsa-p256, rsa-2048, rsa-3072 or rsa-4096.
    #[arg(long, default_value = "ecdsa-p256")]
    pub webhook_key_algorithm: btp_certs::KeyAlgorithm,
    /// How long a webhook client may take for the TLS handshake.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub webhook_handshake_timeout: std::time::Duration,
    /// How long a webhook client may take to send HTTP/1.1 request headers (also ends idle keep-alive
    /// connections).
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub webhook_header_read_timeout: std::time::Duration,
    /// Answer 408 to an admission request whose body has not fully arrived this long after its headers.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub webhook_body_timeout: std::time::Duration,
    /// Close a webhook connection on which no byte moved in either direction for this long.
    #[arg(long, default_value = "60s", value_parser = parse_positive_duration)]
    pub webhook_idle_timeout: std::time::Duration,
    /// Open webhook connections at most; a connection beyond it is closed at once.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub webhook_max_connections: u32,
    /// HTTP/2 concurrent streams per webhook connection at most.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub webhook_max_concurrent_streams: u32,
}

impl WebhookArgs {
    /// The webhook server's limits from these flags (the rest at their defaults).
    pub fn limits(&self) -> btp_webhooks::server::Limits {
        btp_webhooks::server::Limits {
            handshake_timeout: self.webhook_handshake_timeout,
            header_read_timeout: self.webhook_header_read_timeout,
            idle_timeout: self.webhook_idle_timeout,
            max_connections: self.webhook_max_connections as usize,
            h2_max_concurrent_streams: self.webhook_max_concurrent_streams,
            ..btp_webhooks::server::Limits::default()
        }
    }
}

/// A Go duration greater than zero.
fn parse_positive_duration(value: &str) -> Result<std::time::Duration, String> {
    match parse_duration(value)? {
        d if d.is_zero() => Err(format!("{value:?} must be greater than zero")),
        d => Ok(d),
    }
}

/// A Go duration such as `30s`, `5m`, `1h`.
fn parse_duration(value: &str) -> Result<std::time::Duration, String> {
    crate::config::parse_go_duration(value).ok_or_else(|| format!("{value:?} is not a duration like 30s, 5m or 1h"))
}

/// Accept Go-style `:8080` as well as `host:port`.
fn parse_bind(value: &str) -> Result<SocketAddr, String> {
    let full = if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_string()
    };
    full.parse()
        .map_err(|e| format!("{value:?} is not an address like :8080 or 127.0.0.1:8080 ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_flags_are_the_key_tables() {
        let cli = Cli::command();
        for command in ["run", "local"] {
            let sub = cli.find_subcommand(command).expect("subcommand");
            for key in crate::config::KEYS.iter().filter(|k| !k.flag.is_empty()) {
                let arg = sub
                    .get_arguments()
                    .find(|a| a.get_long().is_some_and(|l| format!("--{l}") == key.flag));
                let Some(arg) = arg else {
                    // `local` offers the reconciler's flags, not the Go manager's.
                    assert!(
                        command == "local" && key.applies == crate::config::Applies::NotUsed,
                        "{command} {}",
                        key.flag
                    );
                    continue;
                };
                let defaults: Vec<String> = arg
                    .get_default_values()
                    .iter()
                    .map(|d| d.to_string_lossy().into_owned())
                    .collect();
                let expected: Vec<&str> = Some(key.default).filter(|d| !d.is_empty()).into_iter().collect();
                assert_eq!(defaults, expected, "{command} {}: default", key.flag);
                let env = arg
                    .get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default();
                assert_eq!(env, key.env, "{command} {}: environment", key.flag);
            }
        }
    }

    #[test]
    fn go_style_bind_addresses_are_accepted() {
        assert_eq!(parse_bind(":8080").unwrap(), "0.0.0.0:8080".parse().unwrap());
        assert_eq!(parse_bind("127.0.0.1:9443").unwrap(), "127.0.0.1:9443".parse().unwrap());
        assert!(parse_bind("8080").unwrap_err().contains("not an address"));
    }

    #[test]
    fn run_defaults_match_the_reference() {
        let cli = Cli::try_parse_from(["btp-manager", "run"]).unwrap();
        let Command::Run(args) = cli.command else { panic!("run") };
        let args = *args;
        assert_eq!(args.metrics_bind_address.port(), 8080);
        assert_eq!(args.health_probe_bind_address.port(), 8081);
        assert_eq!(args.webhook_bind_address.port(), 9443);
        assert_eq!(args.reconciler.chart_namespace, "kyma-system");
        assert_eq!(args.reconciler.secret_name, "sap-btp-manager");
        assert_eq!(args.reconciler.resources_path, None, "the built-in copy by default");
        assert_eq!(
            args.reconciler.manager_resources_path, None,
            "the built-in copy by default"
        );
        assert_eq!(args.webhook.webhook_key_algorithm, btp_certs::KeyAlgorithm::EcdsaP256);
        assert_eq!(args.shutdown_drain_delay, std::time::Duration::from_secs(5));
        assert_eq!(args.webhook.limits(), btp_webhooks::server::Limits::default());
        assert_eq!(
            args.webhook.webhook_body_timeout,
            btp_webhooks::handlers::DEFAULT_BODY_TIMEOUT
        );
        assert!(Cli::try_parse_from(["btp-manager", "run", "--webhook-key-algorithm", "dsa"]).is_err());
    }

    #[test]
    fn the_go_managers_deployment_args_start_this_manager() {
        // The upstream Deployment's args, and every flag of the Go manager's command line.
        let cli = Cli::try_parse_from([
            "btp-manager",
            "run",
            "--leader-elect",
            "--health-probe-bind-address=:8081",
            "--metrics-bind-address=127.0.0.1:8080",
            "--chart-namespace=kyma-system",
            "--secret-name=sap-btp-manager",
            "--config-name=sap-btp-manager",
            "--deployment-name=sap-btp-operator-controller-manager",
            "--chart-path=./module-chart/chart",
            "--resources-path=./module-resources",
            "--manager-resources-path=./manager-resources",
            "--processing-state-requeue-interval=5m",
            "--ready-state-requeue-interval=15m",
            "--ready-timeout=5m",
            "--ready-check-interval=30s",
            "--hard-delete-timeout=20m",
            "--hard-delete-check-interval=10s",
            "--delete-request-timeout=5m",
            "--enable-limited-cache=true",
            "--probe-interval=1h",
            "--status-update-timeout=10s",
            "--status-update-check-interval=500ms",
            "--zap-devel=false",
            "--zap-encoder=json",
            "--zap-log-level=info",
            "--zap-stacktrace-level=error",
            "--zap-time-encoding=iso8601",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else { panic!("run") };
        assert!(args.leader_elect);
        assert_eq!(args.health_probe_bind_address, "0.0.0.0:8081".parse().unwrap());
        let ignored: Vec<&str> = args.go_manager.ignored().into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            ignored,
            [
                "--zap-devel",
                "--zap-encoder",
                "--zap-log-level",
                "--zap-stacktrace-level",
                "--zap-time-encoding"
            ],
            "flags at their defaults are not worth a log line"
        );
        for value in ["true", "false"] {
            let cli = Cli::try_parse_from(["btp-manager", "run", &format!("--leader-elect={value}")]).unwrap();
            let Command::Run(args) = cli.command else { panic!("run") };
            assert_eq!(args.leader_elect, value == "true");
        }
        let cli = Cli::try_parse_from(["btp-manager", "run", "--probe-interval=0"]).unwrap();
        let Command::Run(args) = cli.command else { panic!("run") };
        assert_eq!(args.go_manager.ignored().len(), 1);
    }

    #[test]
    fn check_admission_waits_only_when_told() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["btp-manager", "check", "admission"][..], args].concat());
            cli.map(|c| match c.command {
                Command::Check(CheckCommand::Admission(a)) => a,
                other => panic!("{other:?}"),
            })
        };
        let once = parse(&[]).unwrap();
        assert_eq!((once.wait, once.verbose), (None, false));
        let minutes = |m: u64| Some(std::time::Duration::from_secs(60 * m));
        assert_eq!(parse(&["--wait"]).unwrap().wait, minutes(2));
        assert_eq!(parse(&["--wait=5m"]).unwrap().wait, minutes(5));
        assert_eq!(parse(&["--wait", "5m"]).unwrap().wait, minutes(5));
        let verbose = parse(&["--wait", "-v"]).unwrap();
        assert_eq!((verbose.wait, verbose.verbose), (minutes(2), true));
        assert!(parse(&["--wait=0s"]).is_err(), "a wait of nothing is a mistake");
        assert!(parse(&["--wait=soon"]).is_err());
    }

    #[test]
    fn local_offers_only_what_it_honours() {
        let cli = Cli::try_parse_from([
            "btp-manager",
            "local",
            "--metrics-bind-address",
            "127.0.0.1:18080",
            "--resources-path",
            "/tmp/m",
        ])
        .unwrap();
        let Command::Local(args) = cli.command else {
            panic!("local")
        };
        assert_eq!(args.metrics_bind_address, "127.0.0.1:18080".parse().unwrap());
        assert_eq!(args.health_probe_bind_address, "127.0.0.1:0".parse().unwrap());
        assert_eq!(args.reconciler.resources_path, Some(PathBuf::from("/tmp/m")));
        // `run`-only flags (leader election, certificates from files, a registration URL) are not offered.
        for flag in [
            "--leader-elect",
            "--webhook-cert-dir=/x",
            "--webhook-url=https://x",
            "--namespace=x",
        ] {
            assert!(Cli::try_parse_from(["btp-manager", "local", flag]).is_err(), "{flag}");
        }
    }
}
