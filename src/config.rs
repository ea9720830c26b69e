//! Runtime configuration (docs/behaviour.md#configuration, docs/configuration.md): defaults, CLI flags, and
//! the runtime ConfigMap keys.

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
}

/// Defaults of the flags and runtime ConfigMap keys, written once: clap's `default_value`s and
/// [`Config::default`] both come from here (Go duration syntax where a duration), and the operand's certificate
/// defaults from `btp_certs::operand::Settings::default`.
pub mod defaults {
    /// `--config-name`, `ConfigName`.
    pub const CONFIG_NAME: &str = "sap-btp-manager";
    /// `--processing-state-requeue-interval`.
    pub const PROCESSING_STATE_REQUEUE_INTERVAL: &str = "5m";
    /// `--ready-state-requeue-interval`.
    pub const READY_STATE_REQUEUE_INTERVAL: &str = "15m";
    /// `--ready-timeout`.
    pub const READY_TIMEOUT: &str = "5m";
    /// `--hard-delete-timeout`.
    pub const HARD_DELETE_TIMEOUT: &str = "20m";
    /// `--hard-delete-check-interval`.
    pub const HARD_DELETE_CHECK_INTERVAL: &str = "10s";
    /// `--delete-request-timeout`.
    pub const DELETE_REQUEST_TIMEOUT: &str = "5m";
    /// `--enable-limited-cache`.
    pub const ENABLE_LIMITED_CACHE: &str = "true";
    /// Go manager flags accepted without effect: `--chart-path`.
    pub const CHART_PATH: &str = "./module-chart/chart";
    /// `--ready-check-interval` (no effect).
    pub const READY_CHECK_INTERVAL: &str = "30s";
    /// `--probe-interval` (no effect).
    pub const PROBE_INTERVAL: &str = "1h";
    /// `--status-update-timeout` (no effect).
    pub const STATUS_UPDATE_TIMEOUT: &str = "10s";
    /// `--status-update-check-interval` (no effect).
    pub const STATUS_UPDATE_CHECK_INTERVAL: &str = "500ms";
}

/// A default duration (a unit test proves each parses).
fn default_duration(go: &str) -> Duration {
    parse_go_duration(go).unwrap_or_default()
}

impl Default for Config {
    fn default() -> Self {
        let certs = btp_certs::operand::Settings::default();
        Self {
            chart_namespace: btp_api::names::KYMA_SYSTEM.into(),
            secret_name: btp_api::names::REQUIRED_SECRET_NAME.into(),
            config_name: defaults::CONFIG_NAME.into(),
            deployment_name: btp_api::names::operand::DEPLOYMENT.into(),
            resources_path: PathBuf::new(),
            manager_resources_path: PathBuf::new(),
            processing_state_requeue_interval: default_duration(defaults::PROCESSING_STATE_REQUEUE_INTERVAL),
            ready_state_requeue_interval: default_duration(defaults::READY_STATE_REQUEUE_INTERVAL),
            ready_timeout: default_duration(defaults::READY_TIMEOUT),
            hard_delete_timeout: default_duration(defaults::HARD_DELETE_TIMEOUT),
            hard_delete_check_interval: default_duration(defaults::HARD_DELETE_CHECK_INTERVAL),
            delete_request_timeout: default_duration(defaults::DELETE_REQUEST_TIMEOUT),
            enable_limited_cache: defaults::ENABLE_LIMITED_CACHE.into(),
            ca_certificate_expiration: certs.ca_validity,
            webhook_certificate_expiration: certs.webhook_validity,
            expiration_boundary: certs.expiration_boundary,
            key_algorithm: certs.key,
        }
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

/// Keys of the Go manager that this manager accepts and does not use, with why.
pub const INERT_KEYS: [(&str, &str); 5] = [
    (
        "ChartPath",
        "not used: the chart version ships with the module resources (chart-version)",
    ),
    (
        "ReadyCheckInterval",
        "not used: the manager does not poll; the operand Deployment's watch brings it back",
    ),
    (
        "StatusUpdateTimeout",
        "not used: a status is written once per change, retried on transient errors",
    ),
    (
        "StatusUpdateCheckInterval",
        "not used: a status is written once per change, retried on transient errors",
    ),
    (
        "ProbeInterval",
        "not used: the CA-bundle probe is not part of this manager",
    ),
];

/// Every runtime ConfigMap key this manager knows (docs/configuration.md lists each; a test compares).
pub const CONFIGMAP_KEYS: [&str; 23] = [
    "ChartNamespace",
    "SecretName",
    "ConfigName",
    "DeploymentName",
    "ResourcesPath",
    "ManagerResourcesPath",
    "ProcessingStateRequeueInterval",
    "ReadyStateRequeueInterval",
    "ReadyTimeout",
    "HardDeleteTimeout",
    "HardDeleteCheckInterval",
    "DeleteRequestTimeout",
    "EnableLimitedCache",
    "CaCertificateExpiration",
    "WebhookCertificateExpiration",
    "ExpirationBoundary",
    "KeyAlgorithm",
    "RsaKeyBits",
    "ChartPath",
    "ReadyCheckInterval",
    "StatusUpdateTimeout",
    "StatusUpdateCheckInterval",
    "ProbeInterval",
];

/// Keys naming watched objects: they apply when the manager starts (the ConfigMap is read before the
/// controller), and a change while it runs takes effect at the next start.
pub const RESTART_KEYS: [&str; 4] = ["ChartNamespace", "SecretName", "ConfigName", "DeploymentName"];

impl Config {
    /// Keep the running values of [`RESTART_KEYS`] in `self` (a configuration computed while running); returns
    /// the keys whose new value waits for a restart.
    pub fn keep_restart_only(&mut self, running: &Config) -> Vec<&'static str> {
        let mut waiting = Vec::new();
        for (key, next, now) in [
            ("ChartNamespace", &mut self.chart_namespace, &running.chart_namespace),
            ("SecretName", &mut self.secret_name, &running.secret_name),
            ("ConfigName", &mut self.config_name, &running.config_name),
            ("DeploymentName", &mut self.deployment_name, &running.deployment_name),
        ] {
            if next != now {
                waiting.push(key);
                next.clone_from(now);
            }
        }
        waiting
    }

    /// Apply the runtime ConfigMap's data on top of `self` (docs/behaviour.md#runtime-configmap). Unknown keys and unparsable
    /// values are reported and leave the previous value. Returns the problems.
    pub fn apply_configmap(&mut self, data: &BTreeMap<String, String>) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        for (key, value) in data {
            let value = value.trim();
            let mut duration = |target: &mut Duration| match parse_go_duration(value) {
                Some(d) => *target = d,
                None => problems.push(ConfigProblem {
                    key: key.clone(),
                    reason: format!("{value:?} is not a duration like 30s, 5m or 1h"),
                }),
            };
            match key.as_str() {
                "ChartNamespace" => self.chart_namespace = value.into(),
                "SecretName" => self.secret_name = value.into(),
                "ConfigName" => self.config_name = value.into(),
                "DeploymentName" => self.deployment_name = value.into(),
                "ResourcesPath" => self.resources_path = value.into(),
                "ManagerResourcesPath" => self.manager_resources_path = value.into(),
                "ProcessingStateRequeueInterval" => duration(&mut self.processing_state_requeue_interval),
                "ReadyStateRequeueInterval" => duration(&mut self.ready_state_requeue_interval),
                "ReadyTimeout" => duration(&mut self.ready_timeout),
                "HardDeleteTimeout" => duration(&mut self.hard_delete_timeout),
                "HardDeleteCheckInterval" => duration(&mut self.hard_delete_check_interval),
                "DeleteRequestTimeout" => duration(&mut self.delete_request_timeout),
                "CaCertificateExpiration" => duration(&mut self.ca_certificate_expiration),
                "WebhookCertificateExpiration" => duration(&mut self.webhook_certificate_expiration),
                "ExpirationBoundary" => match parse_go_duration(value.trim_start_matches('-')) {
                    // The Go manager stores the boundary as a negative offset from NotAfter; we keep the window.
                    Some(d) => self.expiration_boundary = d,
                    None => problems.push(ConfigProblem {
                        key: key.clone(),
                        reason: format!("{value:?} is not a duration"),
                    }),
                },
                "EnableLimitedCache" => self.enable_limited_cache = value.into(),
                "RsaKeyBits" => match value.parse::<u32>().ok().map(btp_certs::KeyAlgorithm::from_rsa_bits) {
                    Some(Ok(k)) => self.key_algorithm = k,
                    _ => problems.push(ConfigProblem {
                        key: key.clone(),
                        reason: format!("{value:?}: use 2048, 3072 or 4096"),
                    }),
                },
                "KeyAlgorithm" => match value.parse::<btp_certs::KeyAlgorithm>() {
                    Ok(k) => self.key_algorithm = k,
                    Err(e) => problems.push(ConfigProblem {
                        key: key.clone(),
                        reason: e.to_string(),
                    }),
                },
                // Accepted for compatibility with the Go manager; nothing here uses them.
                "ChartPath"
                | "ReadyCheckInterval"
                | "StatusUpdateTimeout"
                | "StatusUpdateCheckInterval"
                | "ProbeInterval" => problems.push(ConfigProblem {
                    key: key.clone(),
                    reason: INERT_KEYS
                        .iter()
                        .find(|(k, _)| k == key)
                        .map_or("not used by this manager", |(_, why)| why)
                        .into(),
                }),
                _ => problems.push(ConfigProblem {
                    key: key.clone(),
                    reason: "unknown key, ignored".into(),
                }),
            }
        }
        problems
    }
}

/// Parse a Go duration (`1h30m`, `10s`, `500ms`, `0`). Negative values are refused.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return None;
        }
        let number: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * factor;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_parses_and_matches_the_go_manager() {
        for d in [
            defaults::PROCESSING_STATE_REQUEUE_INTERVAL,
            defaults::READY_STATE_REQUEUE_INTERVAL,
            defaults::READY_TIMEOUT,
            defaults::HARD_DELETE_TIMEOUT,
            defaults::HARD_DELETE_CHECK_INTERVAL,
            defaults::DELETE_REQUEST_TIMEOUT,
            defaults::READY_CHECK_INTERVAL,
            defaults::PROBE_INTERVAL,
            defaults::STATUS_UPDATE_TIMEOUT,
            defaults::STATUS_UPDATE_CHECK_INTERVAL,
        ] {
            assert!(parse_go_duration(d).is_some_and(|d| !d.is_zero()), "{d}");
        }
        let c = Config::default();
        assert_eq!(c.ready_state_requeue_interval, Duration::from_secs(15 * 60));
        assert_eq!(c.hard_delete_timeout, Duration::from_secs(20 * 60));
        assert_eq!(c.ca_certificate_expiration, Duration::from_secs(87_600 * 3600));
        assert_eq!(c.expiration_boundary, Duration::from_secs(168 * 3600));
    }

    #[test]
    fn every_listed_key_is_known() {
        for key in CONFIGMAP_KEYS {
            let data = BTreeMap::from([(key.to_string(), "x".to_string())]);
            let problems = Config::default().apply_configmap(&data);
            assert!(
                problems.iter().all(|p| !p.reason.contains("unknown key")),
                "{key}: {problems:?}"
            );
        }
        let unknown = BTreeMap::from([("Nonsense".to_string(), "1".to_string())]);
        assert!(Config::default().apply_configmap(&unknown)[0]
            .reason
            .contains("unknown key"));
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("87600h"), Some(Duration::from_secs(87600 * 3600)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "10", "5x", "h", "-5s", "1.2.3s"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
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
        assert_eq!(keys, ["Nonsense", "ProcessingStateRequeueInterval", "RsaKeyBits"]);
    }
}

/// Property tests (issue 12, part 2): the runtime ConfigMap parser never panics, a value that fails keeps
/// the previous one and its problem names the key, and generated Go durations round-trip.
/// `PROPTEST_CASES` sets the number of cases (default here: 256).
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    const DURATION_KEYS: [&str; 8] = [
        "ProcessingStateRequeueInterval",
        "ReadyStateRequeueInterval",
        "ReadyTimeout",
        "HardDeleteTimeout",
        "HardDeleteCheckInterval",
        "DeleteRequestTimeout",
        "CaCertificateExpiration",
        "WebhookCertificateExpiration",
    ];
    const OTHER_KEYS: [&str; 15] = [
        "ExpirationBoundary",
        "RsaKeyBits",
        "KeyAlgorithm",
        "ChartNamespace",
        "SecretName",
        "ConfigName",
        "DeploymentName",
        "ResourcesPath",
        "ManagerResourcesPath",
        "EnableLimitedCache",
        "ChartPath",
        "ReadyCheckInterval",
        "StatusUpdateTimeout",
        "StatusUpdateCheckInterval",
        "ProbeInterval",
    ];

    fn duration_field(c: &Config, key: &str) -> Duration {
        match key {
            "ProcessingStateRequeueInterval" => c.processing_state_requeue_interval,
            "ReadyStateRequeueInterval" => c.ready_state_requeue_interval,
            "ReadyTimeout" => c.ready_timeout,
            "HardDeleteTimeout" => c.hard_delete_timeout,
            "HardDeleteCheckInterval" => c.hard_delete_check_interval,
            "DeleteRequestTimeout" => c.delete_request_timeout,
            "CaCertificateExpiration" => c.ca_certificate_expiration,
            "WebhookCertificateExpiration" => c.webhook_certificate_expiration,
            "ExpirationBoundary" => c.expiration_boundary,
            other => unreachable!("{other}"),
        }
    }

    fn arb_key() -> impl Strategy<Value = String> {
        let known: Vec<String> = DURATION_KEYS
            .iter()
            .chain(OTHER_KEYS.iter())
            .map(|k| k.to_string())
            .collect();
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
                if DURATION_KEYS.contains(&key.as_str()) || key == "ExpirationBoundary" {
                    let text = if key == "ExpirationBoundary" { value.trim_start_matches('-') } else { value };
                    match parse_go_duration(text) {
                        Some(d) => {
                            prop_assert_eq!(duration_field(&after, key), d);
                            prop_assert!(problem(key).is_none());
                        }
                        None => {
                            prop_assert_eq!(duration_field(&after, key), duration_field(&before, key), "{} changed", key);
                            prop_assert!(problem(key).is_some(), "no problem names {}", key);
                        }
                    }
                } else if !OTHER_KEYS.contains(&key.as_str()) {
                    prop_assert!(problem(key).is_some(), "unknown key {:?} not reported", key);
                }
            }
            // The key algorithm changes only through a key that was accepted.
            let algorithm_keys: Vec<&String> = data.keys().filter(|k| *k == "RsaKeyBits" || *k == "KeyAlgorithm").collect();
            if algorithm_keys.iter().all(|k| problem(k).is_some()) {
                prop_assert_eq!(after.key_algorithm, before.key_algorithm);
            }
        }

        #[test]
        fn go_durations_round_trip(
            hours in prop::option::of(0u64..200_000),
            minutes in prop::option::of(0u64..600),
            seconds in prop::option::of(0u64..6000),
            millis in prop::option::of(0u64..100_000),
        ) {
            let mut text = String::new();
            let mut expected = Duration::ZERO;
            for (n, unit, scale) in [(hours, "h", 3_600_000_u64), (minutes, "m", 60_000), (seconds, "s", 1000), (millis, "ms", 1)] {
                if let Some(n) = n {
                    text.push_str(&format!("{n}{unit}"));
                    expected += Duration::from_millis(n * scale);
                }
            }
            prop_assume!(!text.is_empty());
            let parsed = parse_go_duration(&text).expect("a valid Go duration parses");
            if millis.is_none() {
                prop_assert_eq!(parsed, expected, "{}", text);
            } else {
                // Sub-second units go through f64: exact to well under a microsecond.
                let error = parsed.abs_diff(expected);
                prop_assert!(error < Duration::from_micros(1), "{text}: {parsed:?} vs {expected:?}");
            }
            // Surrounding whitespace is ignored, a sign is refused.
            prop_assert_eq!(parse_go_duration(&format!(" {text}\n")), Some(parsed));
            prop_assert_eq!(parse_go_duration(&format!("-{text}")), None);
        }

        #[test]
        fn parse_go_duration_never_panics(text in ".{0,32}") {
            let _ = parse_go_duration(&text);
        }
    }
}
