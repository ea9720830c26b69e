//! The configuration's keys, written once (docs/configuration.md): each with its runtime ConfigMap key, its
//! flag and environment variable, its default, when a change applies and where its value goes. clap's
//! defaults ([`crate::cli`]), [`Config::default`], the ConfigMap parser ([`Config::apply_configmap`]) and
//! the tables of docs/configuration.md ([`super::doc`]) all come from [`KEYS`].

use super::duration::parse_go_duration;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Everything the reconciler reads from configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Namespace the operand is installed in.
    pub chart_namespace: String,
    /// Name of the required credentials Secret.
    pub secret_name: String,
    /// Name of the runtime ConfigMap.
    pub config_name: String,
    /// Name of the operand Deployment.
    pub deployment_name: String,
    /// Directory with `apply/`, `delete/` and `chart-version`; empty: the copy built into the binary.
    pub resources_path: PathBuf,
    /// Directory with `network-policies/`; empty: the copy built into the binary.
    pub manager_resources_path: PathBuf,
    /// Periodic re-check while Processing.
    pub processing_state_requeue_interval: Duration,
    /// Periodic re-check while Ready.
    pub ready_state_requeue_interval: Duration,
    /// How long the operand Deployment may take to become available.
    pub ready_timeout: Duration,
    /// How long the hard delete of ServiceInstances/ServiceBindings may take before the soft delete.
    pub hard_delete_timeout: Duration,
    /// How often a running hard delete checks what is left (deletions wake it sooner).
    pub hard_delete_check_interval: Duration,
    /// Budget of the delete requests of one kind in the hard delete.
    pub delete_request_timeout: Duration,
    /// `ENABLE_LIMITED_CACHE` for the operand ConfigMap.
    pub enable_limited_cache: String,
    /// CA validity of the operand's webhook certificates.
    pub ca_certificate_expiration: Duration,
    /// Leaf validity of the operand's webhook certificates.
    pub webhook_certificate_expiration: Duration,
    /// Regenerate certificates expiring within this window.
    pub expiration_boundary: Duration,
    /// Key algorithm for the operand's certificates.
    pub key_algorithm: btp_certs::KeyAlgorithm,
    /// How often the credentials are checked at the token endpoint; zero: never.
    pub credentials_check_interval: Duration,
    /// PEM certificates the credentials check trusts besides the system roots.
    pub credentials_check_ca_bundle: String,
}

/// When a change of a key takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applies {
    /// At once: the next pass uses it.
    AtRuntime,
    /// At the next start: the key names objects the watches and the webhook rules select (a change while
    /// running is logged and waits).
    AtStart,
    /// Never: a key of the Go manager, accepted and logged once ([`Key::meaning`] says why).
    NotUsed,
}

impl Applies {
    /// As docs/configuration.md says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AtRuntime => "at runtime",
            Self::AtStart => "at start",
            Self::NotUsed => "not used",
        }
    }
}

/// Where a key's value goes, and how it is parsed.
#[derive(Clone, Copy)]
pub enum Field {
    /// Text, as given.
    Text(fn(&mut Config) -> &mut String),
    /// A directory; the empty path selects the copy built into the binary.
    Path(fn(&mut Config) -> &mut PathBuf),
    /// A Go duration ([`parse_go_duration`]).
    Duration(fn(&mut Config) -> &mut Duration),
    /// Parsed by a rule of its own; `Err` says why a value is refused.
    Parsed(fn(&mut Config, &str) -> Result<(), String>),
    /// Not in [`Config`]: a key accepted without effect, or a flag the reconciler's context holds.
    Outside,
}

/// One key of the configuration.
#[derive(Clone, Copy)]
pub struct Key {
    /// The runtime ConfigMap key (`ReadyTimeout`); empty for a flag the ConfigMap does not set.
    pub name: &'static str,
    /// The flag (`--ready-timeout`); empty when there is none.
    pub flag: &'static str,
    /// The environment variable the flag also reads; empty when there is none.
    pub env: &'static str,
    /// The default as a flag or the ConfigMap gives a value (`5m`); empty when there is no value by default.
    pub default: &'static str,
    /// The default as the docs say it, when the value alone would not say it (`built in`, "`168h` (7 days)").
    pub documented_default: &'static str,
    /// When a change applies.
    pub applies: Applies,
    /// What it sets; for a key that is not used, why.
    pub meaning: &'static str,
    /// What the ConfigMap table adds about a change while running.
    pub runtime_note: &'static str,
    /// Where the value goes.
    pub field: Field,
}

impl Key {
    const fn new(
        name: &'static str,
        flag: &'static str,
        applies: Applies,
        meaning: &'static str,
        field: Field,
    ) -> Self {
        Self {
            name,
            flag,
            env: "",
            default: "",
            documented_default: "",
            applies,
            meaning,
            runtime_note: "",
            field,
        }
    }

    const fn with_default(self, default: &'static str) -> Self {
        Self { default, ..self }
    }

    const fn documented(self, documented_default: &'static str) -> Self {
        Self {
            documented_default,
            ..self
        }
    }

    const fn with_env(self, env: &'static str) -> Self {
        Self { env, ..self }
    }

    const fn with_note(self, runtime_note: &'static str) -> Self {
        Self { runtime_note, ..self }
    }

    /// Set `value` into `config`; `Err` says why it was not applied (`config` is then unchanged).
    pub fn apply(&self, config: &mut Config, value: &str) -> Result<(), String> {
        if self.applies == Applies::NotUsed {
            return Err(format!("not used: {}", self.meaning));
        }
        match self.field {
            Field::Text(field) => *field(config) = value.into(),
            Field::Path(field) => *field(config) = value.into(),
            Field::Duration(field) => match parse_go_duration(value) {
                Some(d) => *field(config) = d,
                None => return Err(format!("{value:?} is not a duration like 30s, 5m or 1h")),
            },
            Field::Parsed(parse) => return parse(config, value),
            Field::Outside => return Err("not a runtime ConfigMap key".into()),
        }
        Ok(())
    }
}

use Applies::{AtRuntime, AtStart, NotUsed};

/// `ChartNamespace`, `--chart-namespace`.
pub const CHART_NAMESPACE: Key = Key::new(
    "ChartNamespace",
    "--chart-namespace",
    AtStart,
    "namespace of the operand and of the credentials Secret",
    Field::Text(|c| &mut c.chart_namespace),
)
.with_default(btp_api::names::KYMA_SYSTEM);
/// `SecretName`, `--secret-name`.
pub const SECRET_NAME: Key = Key::new(
    "SecretName",
    "--secret-name",
    AtStart,
    "the credentials Secret",
    Field::Text(|c| &mut c.secret_name),
)
.with_default(btp_api::names::REQUIRED_SECRET_NAME);
/// `ConfigName`, `--config-name`.
pub const CONFIG_NAME: Key = Key::new(
    "ConfigName",
    "--config-name",
    AtStart,
    "the runtime ConfigMap, in the chart namespace",
    Field::Text(|c| &mut c.config_name),
)
.with_default("sap-btp-manager");
/// `DeploymentName`, `--deployment-name`.
pub const DEPLOYMENT_NAME: Key = Key::new(
    "DeploymentName",
    "--deployment-name",
    AtStart,
    "the operand Deployment",
    Field::Text(|c| &mut c.deployment_name),
)
.with_default(btp_api::names::operand::DEPLOYMENT);
/// `ResourcesPath`, `--resources-path`.
pub const RESOURCES_PATH: Key = Key::new(
    "ResourcesPath",
    "--resources-path",
    AtRuntime,
    "the operand's manifests: `DIR/apply/`, `DIR/delete/`, `DIR/chart-version`",
    Field::Path(|c| &mut c.resources_path),
)
.documented("built in")
.with_note("the module resources are reloaded when it changes");
/// `ManagerResourcesPath`, `--manager-resources-path`.
pub const MANAGER_RESOURCES_PATH: Key = Key::new(
    "ManagerResourcesPath",
    "--manager-resources-path",
    AtRuntime,
    "the network policies: `DIR/network-policies/`",
    Field::Path(|c| &mut c.manager_resources_path),
)
.documented("built in")
.with_note("the network policies are reloaded when it changes");
/// `ProcessingStateRequeueInterval`, `--processing-state-requeue-interval`.
pub const PROCESSING_STATE_REQUEUE_INTERVAL: Key = Key::new(
    "ProcessingStateRequeueInterval",
    "--processing-state-requeue-interval",
    AtRuntime,
    "periodic re-check while `Processing`; `0`: none",
    Field::Duration(|c| &mut c.processing_state_requeue_interval),
)
.with_default("5m")
.with_note("`0`: no periodic re-check");
/// `ReadyStateRequeueInterval`, `--ready-state-requeue-interval`.
pub const READY_STATE_REQUEUE_INTERVAL: Key = Key::new(
    "ReadyStateRequeueInterval",
    "--ready-state-requeue-interval",
    AtRuntime,
    "periodic re-check while `Ready`; `0`: none",
    Field::Duration(|c| &mut c.ready_state_requeue_interval),
)
.with_default("15m")
.with_note("`0`: no periodic re-check");
/// `ReadyTimeout`, `--ready-timeout`.
pub const READY_TIMEOUT: Key = Key::new(
    "ReadyTimeout",
    "--ready-timeout",
    AtRuntime,
    "how long the operand Deployment may take to become available",
    Field::Duration(|c| &mut c.ready_timeout),
)
.with_default("5m");
/// `HardDeleteTimeout`, `--hard-delete-timeout`.
pub const HARD_DELETE_TIMEOUT: Key = Key::new(
    "HardDeleteTimeout",
    "--hard-delete-timeout",
    AtRuntime,
    "how long the hard delete of ServiceInstances/ServiceBindings may take before the soft delete",
    Field::Duration(|c| &mut c.hard_delete_timeout),
)
.with_default("20m");
/// `HardDeleteCheckInterval`, `--hard-delete-check-interval`.
pub const HARD_DELETE_CHECK_INTERVAL: Key = Key::new(
    "HardDeleteCheckInterval",
    "--hard-delete-check-interval",
    AtRuntime,
    "how often a running hard delete checks what is left; each deletion also wakes it",
    Field::Duration(|c| &mut c.hard_delete_check_interval),
)
.with_default("10s");
/// `DeleteRequestTimeout`, `--delete-request-timeout`.
pub const DELETE_REQUEST_TIMEOUT: Key = Key::new(
    "DeleteRequestTimeout",
    "--delete-request-timeout",
    AtRuntime,
    "budget of the delete requests of one kind in the hard delete",
    Field::Duration(|c| &mut c.delete_request_timeout),
)
.with_default("5m");
/// `EnableLimitedCache`, `--enable-limited-cache`.
pub const ENABLE_LIMITED_CACHE: Key = Key::new(
    "EnableLimitedCache",
    "--enable-limited-cache",
    AtRuntime,
    "`ENABLE_LIMITED_CACHE` in the operand ConfigMap",
    Field::Text(|c| &mut c.enable_limited_cache),
)
.with_default("true");
/// `CaCertificateExpiration`.
pub const CA_CERTIFICATE_EXPIRATION: Key = Key::new(
    "CaCertificateExpiration",
    "",
    AtRuntime,
    "validity of a new operand CA",
    Field::Duration(|c| &mut c.ca_certificate_expiration),
)
.with_default("87600h")
.documented("`87600h` (10 years)");
/// `WebhookCertificateExpiration`.
pub const WEBHOOK_CERTIFICATE_EXPIRATION: Key = Key::new(
    "WebhookCertificateExpiration",
    "",
    AtRuntime,
    "validity of a new operand serving certificate",
    Field::Duration(|c| &mut c.webhook_certificate_expiration),
)
.with_default("8760h")
.documented("`8760h` (1 year)");
/// `ExpirationBoundary`.
pub const EXPIRATION_BOUNDARY: Key = Key::new(
    "ExpirationBoundary",
    "",
    AtRuntime,
    "regenerate operand certificates this long before they expire",
    Field::Parsed(|c, value| {
        // The Go manager stores the boundary as a negative offset from NotAfter; we keep the window.
        match parse_go_duration(value.trim_start_matches('-')) {
            Some(d) => {
                c.expiration_boundary = d;
                Ok(())
            }
            None => Err(format!("{value:?} is not a duration")),
        }
    }),
)
.with_default("168h")
.documented("`168h` (7 days; `-168h` is accepted)");
/// `KeyAlgorithm`.
pub const KEY_ALGORITHM: Key = Key::new(
    "KeyAlgorithm",
    "",
    AtRuntime,
    "key type of new operand certificates: `ecdsa-p256`, `rsa-2048`, `rsa-3072`, `rsa-4096`",
    Field::Parsed(|c, value| {
        c.key_algorithm = value.parse::<btp_certs::KeyAlgorithm>().map_err(|e| e.to_string())?;
        Ok(())
    }),
)
.with_default("ecdsa-p256");
/// `RsaKeyBits`.
pub const RSA_KEY_BITS: Key = Key::new(
    "RsaKeyBits",
    "",
    AtRuntime,
    "`2048`, `3072` or `4096`: RSA keys of that size for the operand certificates",
    Field::Parsed(
        |c, value| match value.parse::<u32>().ok().map(btp_certs::KeyAlgorithm::from_rsa_bits) {
            Some(Ok(k)) => {
                c.key_algorithm = k;
                Ok(())
            }
            _ => Err(format!("{value:?}: use 2048, 3072 or 4096")),
        },
    ),
)
.documented("(unset)");
/// `CredentialsCheckInterval`, `--credentials-check-interval`.
pub const CREDENTIALS_CHECK_INTERVAL: Key = Key::new(
    "CredentialsCheckInterval",
    "--credentials-check-interval",
    AtRuntime,
    "how often the leading manager asks the token endpoint for a token with the credentials Secret's values \
     (condition `CredentialsValid`); a Secret change is checked at once; `0`: never",
    Field::Duration(|c| &mut c.credentials_check_interval),
)
.with_default("1h")
.with_note("`0`: no check (`CredentialsValid` is `Unknown/Disabled`)");
/// `CredentialsCheckCABundle`, `--credentials-check-ca-bundle`.
pub const CREDENTIALS_CHECK_CA_BUNDLE: Key = Key::new(
    "CredentialsCheckCABundle",
    "--credentials-check-ca-bundle",
    AtRuntime,
    "PEM certificates the credentials check trusts besides the system roots (a token endpoint behind a private \
     CA or a TLS-inspecting proxy)",
    Field::Text(|c| &mut c.credentials_check_ca_bundle),
)
.documented("none")
.with_note("a change checks the credentials again at once");
/// `ChartPath`, `--chart-path` (Go manager; not used).
pub const CHART_PATH: Key = Key::new(
    "ChartPath",
    "--chart-path",
    NotUsed,
    "the chart version ships with the module resources (chart-version)",
    Field::Outside,
)
.with_default("./module-chart/chart");
/// `ReadyCheckInterval`, `--ready-check-interval` (Go manager; not used).
pub const READY_CHECK_INTERVAL: Key = Key::new(
    "ReadyCheckInterval",
    "--ready-check-interval",
    NotUsed,
    "the manager does not poll; the operand Deployment's watch brings it back",
    Field::Outside,
)
.with_default("30s");
/// `StatusUpdateTimeout`, `--status-update-timeout` (Go manager; not used).
pub const STATUS_UPDATE_TIMEOUT: Key = Key::new(
    "StatusUpdateTimeout",
    "--status-update-timeout",
    NotUsed,
    "a status is written once per change, retried on transient errors",
    Field::Outside,
)
.with_default("10s");
/// `StatusUpdateCheckInterval`, `--status-update-check-interval` (Go manager; not used).
pub const STATUS_UPDATE_CHECK_INTERVAL: Key = Key::new(
    "StatusUpdateCheckInterval",
    "--status-update-check-interval",
    NotUsed,
    "a status is written once per change, retried on transient errors",
    Field::Outside,
)
.with_default("500ms");
/// `ProbeInterval`, `--probe-interval` (Go manager; not used).
pub const PROBE_INTERVAL: Key = Key::new(
    "ProbeInterval",
    "--probe-interval",
    NotUsed,
    "the Go manager's CA-bundle probe Job is replaced by the credentials check (`CredentialsCheckInterval`)",
    Field::Outside,
)
.with_default("1h");
/// `--operand-image`, `SAP_BTP_SERVICE_OPERATOR` (no ConfigMap key).
pub const OPERAND_IMAGE: Key = Key::new(
    "",
    "--operand-image",
    AtStart,
    "image of the operand's `manager` container",
    Field::Outside,
)
.with_env("SAP_BTP_SERVICE_OPERATOR")
.documented("`run`: required; `local`: the chart's v0.11.10 image");
/// `--rbac-proxy-image`, `KUBE_RBAC_PROXY` (no ConfigMap key).
pub const RBAC_PROXY_IMAGE: Key = Key::new(
    "",
    "--rbac-proxy-image",
    AtStart,
    "image of a `kube-rbac-proxy` container, if the operand Deployment has one",
    Field::Outside,
)
.with_env("KUBE_RBAC_PROXY")
.documented("none");

/// Every key, in the order docs/configuration.md lists them.
pub static KEYS: [Key; 27] = [
    CHART_NAMESPACE,
    SECRET_NAME,
    CONFIG_NAME,
    DEPLOYMENT_NAME,
    RESOURCES_PATH,
    MANAGER_RESOURCES_PATH,
    PROCESSING_STATE_REQUEUE_INTERVAL,
    READY_STATE_REQUEUE_INTERVAL,
    READY_TIMEOUT,
    HARD_DELETE_TIMEOUT,
    HARD_DELETE_CHECK_INTERVAL,
    DELETE_REQUEST_TIMEOUT,
    ENABLE_LIMITED_CACHE,
    CA_CERTIFICATE_EXPIRATION,
    WEBHOOK_CERTIFICATE_EXPIRATION,
    EXPIRATION_BOUNDARY,
    KEY_ALGORITHM,
    RSA_KEY_BITS,
    CREDENTIALS_CHECK_INTERVAL,
    CREDENTIALS_CHECK_CA_BUNDLE,
    CHART_PATH,
    READY_CHECK_INTERVAL,
    STATUS_UPDATE_TIMEOUT,
    STATUS_UPDATE_CHECK_INTERVAL,
    PROBE_INTERVAL,
    OPERAND_IMAGE,
    RBAC_PROXY_IMAGE,
];

/// The runtime ConfigMap key `name`, if there is one.
pub fn configmap_key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| !k.name.is_empty() && k.name == name)
}

/// Every runtime ConfigMap key.
pub fn configmap_keys() -> impl Iterator<Item = &'static Key> {
    KEYS.iter().filter(|k| !k.name.is_empty())
}

impl Default for Config {
    /// Every key at its default ([`Key::default`]).
    fn default() -> Self {
        let mut config = Self {
            chart_namespace: String::new(),
            secret_name: String::new(),
            config_name: String::new(),
            deployment_name: String::new(),
            resources_path: PathBuf::new(),
            manager_resources_path: PathBuf::new(),
            processing_state_requeue_interval: Duration::ZERO,
            ready_state_requeue_interval: Duration::ZERO,
            ready_timeout: Duration::ZERO,
            hard_delete_timeout: Duration::ZERO,
            hard_delete_check_interval: Duration::ZERO,
            delete_request_timeout: Duration::ZERO,
            enable_limited_cache: String::new(),
            ca_certificate_expiration: Duration::ZERO,
            webhook_certificate_expiration: Duration::ZERO,
            expiration_boundary: Duration::ZERO,
            key_algorithm: btp_certs::KeyAlgorithm::default(),
            credentials_check_interval: Duration::ZERO,
            credentials_check_ca_bundle: String::new(),
        };
        for key in KEYS.iter().filter(|k| !k.default.is_empty() && k.applies != NotUsed) {
            // Every default applies: a unit test proves it.
            let _ = key.apply(&mut config, key.default);
        }
        config
    }
}

/// A ConfigMap key that could not be applied (the previous value stays).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The key.
    pub key: String,
    /// Why.
    pub reason: String,
}

impl ConfigProblem {
    /// Whether the key is one the manager accepts without using it ([`Applies::NotUsed`]).
    pub fn not_used(&self) -> bool {
        configmap_key(&self.key).is_some_and(|k| k.applies == NotUsed)
    }
}

impl Config {
    /// Keep the running values of the keys that apply at start ([`Applies::AtStart`]) in `self` (a
    /// configuration computed while running); returns the keys whose new value waits for a restart.
    pub fn keep_restart_only(&mut self, running: &Config) -> Vec<&'static str> {
        let mut running = running.clone();
        let mut waiting = Vec::new();
        for key in configmap_keys().filter(|k| k.applies == AtStart) {
            if let Field::Text(field) = key.field {
                let now = field(&mut running);
                let next = field(self);
                if next != now {
                    waiting.push(key.name);
                    next.clone_from(now);
                }
            }
        }
        waiting
    }

    /// Apply the runtime ConfigMap's data on top of `self` (docs/behaviour.md#runtime-configmap). Unknown keys and unparsable
    /// values are reported and leave the previous value. Returns the problems.
    pub fn apply_configmap(&mut self, data: &BTreeMap<String, String>) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        for (key, value) in data {
            let applied = match configmap_key(key) {
                Some(k) => k.apply(self, value.trim()),
                None => Err("unknown key, ignored".into()),
            };
            if let Err(reason) = applied {
                problems.push(ConfigProblem {
                    key: key.clone(),
                    reason,
                });
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_default_parses_and_matches_the_go_manager() {
        for key in KEYS.iter().filter(|k| !k.default.is_empty()) {
            if key.applies == NotUsed {
                // The Go manager's flags without effect: their defaults are durations but for the path.
                if key.name != "ChartPath" {
                    assert!(
                        parse_go_duration(key.default).is_some_and(|d| !d.is_zero()),
                        "{}",
                        key.name
                    );
                }
                continue;
            }
            assert_eq!(key.apply(&mut Config::default(), key.default), Ok(()), "{}", key.name);
        }
        let c = Config::default();
        assert_eq!(c.chart_namespace, "kyma-system");
        assert_eq!(c.secret_name, "sap-btp-manager");
        assert_eq!(c.config_name, "sap-btp-manager");
        assert_eq!(c.deployment_name, "sap-btp-operator-controller-manager");
        assert_eq!(c.resources_path, PathBuf::new(), "the built-in copy");
        assert_eq!(c.manager_resources_path, PathBuf::new(), "the built-in copy");
        assert_eq!(c.processing_state_requeue_interval, Duration::from_secs(5 * 60));
        assert_eq!(c.ready_state_requeue_interval, Duration::from_secs(15 * 60));
        assert_eq!(c.ready_timeout, Duration::from_secs(5 * 60));
        assert_eq!(c.hard_delete_timeout, Duration::from_secs(20 * 60));
        assert_eq!(c.hard_delete_check_interval, Duration::from_secs(10));
        assert_eq!(c.delete_request_timeout, Duration::from_secs(5 * 60));
        assert_eq!(c.enable_limited_cache, "true");
        assert_eq!(c.ca_certificate_expiration, Duration::from_secs(87_600 * 3600));
        assert_eq!(c.expiration_boundary, Duration::from_secs(168 * 3600));
        assert_eq!(c.credentials_check_interval, Duration::from_secs(3600));
        assert_eq!(c.credentials_check_ca_bundle, "");
        // The operand's certificates default as btp_certs does.
        let certs = btp_certs::operand::Settings::default();
        assert_eq!(c.ca_certificate_expiration, certs.ca_validity);
        assert_eq!(c.webhook_certificate_expiration, certs.webhook_validity);
        assert_eq!(c.expiration_boundary, certs.expiration_boundary);
        assert_eq!(c.key_algorithm, certs.key);
    }

    #[test]
    fn names_and_flags_are_unique_and_only_start_keys_wait() {
        let names: Vec<&str> = configmap_keys().map(|k| k.name).collect();
        assert_eq!(names.len(), 25);
        assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), names.len(), "{names:?}");
        let flags: Vec<&str> = KEYS.iter().map(|k| k.flag).filter(|f| !f.is_empty()).collect();
        assert_eq!(flags.iter().collect::<BTreeSet<_>>().len(), flags.len(), "{flags:?}");
        for key in &KEYS {
            assert!(!key.name.is_empty() || !key.flag.is_empty(), "a key without a name");
            if key.name.is_empty() {
                assert!(
                    matches!(key.field, Field::Outside),
                    "{}: a flag the ConfigMap cannot set",
                    key.flag
                );
            }
            if key.applies == AtStart && !key.name.is_empty() {
                // `keep_restart_only` keeps text.
                assert!(matches!(key.field, Field::Text(_)), "{}", key.name);
            }
            if key.applies == NotUsed {
                assert!(matches!(key.field, Field::Outside), "{}", key.name);
            }
        }
        let start: Vec<&str> = configmap_keys()
            .filter(|k| k.applies == AtStart)
            .map(|k| k.name)
            .collect();
        assert_eq!(start, ["ChartNamespace", "SecretName", "ConfigName", "DeploymentName"]);
    }

    #[test]
    fn names_of_watched_objects_wait_for_a_restart() {
        let running = Config::default();
        let mut next = Config {
            secret_name: "other".into(),
            deployment_name: "elsewhere".into(),
            ready_timeout: Duration::from_secs(1),
            ..Config::default()
        };
        assert_eq!(next.keep_restart_only(&running), ["SecretName", "DeploymentName"]);
        assert_eq!(
            next,
            Config {
                ready_timeout: Duration::from_secs(1),
                ..Config::default()
            }
        );
    }

    #[test]
    fn every_listed_key_is_known() {
        for key in configmap_keys() {
            let data = BTreeMap::from([(key.name.to_string(), "x".to_string())]);
            let problems = Config::default().apply_configmap(&data);
            assert!(
                problems.iter().all(|p| !p.reason.contains("unknown key")),
                "{}: {problems:?}",
                key.name
            );
        }
        let unknown = BTreeMap::from([("Nonsense".to_string(), "1".to_string())]);
        assert!(Config::default().apply_configmap(&unknown)[0]
            .reason
            .contains("unknown key"));
    }

    #[test]
    fn configmap_keys_apply_and_bad_values_keep_the_previous_one() {
        let mut c = Config::default();
        let data: BTreeMap<String, String> = [
            ("ReadyTimeout", "10s"),
            ("ProcessingStateRequeueInterval", "soon"),
            ("EnableLimitedCache", "false"),
            ("ExpirationBoundary", "-24h"),
            ("RsaKeyBits", "1024"),
            ("Nonsense", "1"),
            ("ProbeInterval", "1h"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let problems = c.apply_configmap(&data);
        assert_eq!(c.ready_timeout, Duration::from_secs(10));
        assert_eq!(
            c.processing_state_requeue_interval,
            Config::default().processing_state_requeue_interval
        );
        assert_eq!(c.enable_limited_cache, "false");
        assert_eq!(c.expiration_boundary, Duration::from_secs(24 * 3600));
        assert_eq!(c.key_algorithm, btp_certs::KeyAlgorithm::EcdsaP256);
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "Nonsense",
                "ProbeInterval",
                "ProcessingStateRequeueInterval",
                "RsaKeyBits"
            ]
        );
        let not_used: Vec<&str> = problems
            .iter()
            .filter(|p| p.not_used())
            .map(|p| p.key.as_str())
            .collect();
        assert_eq!(not_used, ["ProbeInterval"]);
        assert_eq!(
            problems[1].reason,
            "not used: the Go manager's CA-bundle probe Job is replaced by the credentials check \
             (`CredentialsCheckInterval`)"
        );
    }
}

/// Property tests (issue 12, part 2): the runtime ConfigMap parser never panics, and a value that fails keeps
/// the previous one and its problem names the key. `PROPTEST_CASES` sets the number of cases (default
/// here: 256).
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// The keys whose value is a Go duration, with the field it sets (`ExpirationBoundary` too, which also
    /// accepts a sign).
    fn duration_field(c: &Config, key: &str) -> Option<Duration> {
        if key == "ExpirationBoundary" {
            return Some(c.expiration_boundary);
        }
        match configmap_key(key)?.field {
            Field::Duration(field) => Some(*field(&mut c.clone())),
            _ => None,
        }
    }

    fn arb_key() -> impl Strategy<Value = String> {
        let known: Vec<String> = configmap_keys().map(|k| k.name.to_string()).collect();
        prop_oneof![4 => prop::sample::select(known), 1 => ".{0,12}"]
    }

    fn arb_value() -> impl Strategy<Value = String> {
        prop_oneof![
            ".{0,16}",
            "[ \t]{0,2}-?[0-9]{0,25}(\\.[0-9]{0,3})?(ns|us|µs|ms|s|m|h|d|x)?([0-9]{1,3}(ns|us|µs|ms|s|m|h))?[ \t\n]{0,2}",
            "(2048|3072|4096|1024|0|-1|99999999999)",
            "(ecdsa-p256|rsa-2048|rsa-3072|rsa-4096|dsa|RSA-2048)",
        ]
    }

    proptest! {
        #![proptest_config(crate::proptest_config(256))]

        #[test]
        fn apply_configmap_never_panics_and_failures_keep_the_previous_value(
            data in prop::collection::btree_map(arb_key(), arb_value(), 0..10),
        ) {
            let before = Config::default();
            let mut after = before.clone();
            let problems = after.apply_configmap(&data);
            let problem = |key: &str| problems.iter().find(|p| p.key == key);
            for p in &problems {
                prop_assert!(data.contains_key(&p.key), "problem for a key not in the data: {p:?}");
                prop_assert!(!p.reason.is_empty());
            }
            for (key, value) in &data {
                let value = value.trim();
                if let Some(applied) = duration_field(&after, key) {
                    let text = if key == "ExpirationBoundary" { value.trim_start_matches('-') } else { value };
                    match parse_go_duration(text) {
                        Some(d) => {
                            prop_assert_eq!(applied, d);
                            prop_assert!(problem(key).is_none());
                        }
                        None => {
                            prop_assert_eq!(Some(applied), duration_field(&before, key), "{} changed", key);
                            prop_assert!(problem(key).is_some(), "no problem names {}", key);
                        }
                    }
                } else if configmap_key(key).is_none() {
                    prop_assert!(problem(key).is_some(), "unknown key {:?} not reported", key);
                }
            }
            // The key algorithm changes only through a key that was accepted.
            let algorithm_keys: Vec<&String> = data.keys().filter(|k| *k == "RsaKeyBits" || *k == "KeyAlgorithm").collect();
            if algorithm_keys.iter().all(|k| problem(k).is_some()) {
                prop_assert_eq!(after.key_algorithm, before.key_algorithm);
            }
        }
    }
}
