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

impl Default for Config {
    fn default() -> Self {
        Self {
            chart_namespace: btp_api::names::KYMA_SYSTEM.into(),
            secret_name: btp_api::names::REQUIRED_SECRET_NAME.into(),
            config_name: "sap-btp-manager".into(),
            deployment_name: "sap-btp-operator-controller-manager".into(),
            resources_path: PathBuf::new(),
            manager_resources_path: PathBuf::new(),
            processing_state_requeue_interval: Duration::from_secs(5 * 60),
            ready_state_requeue_interval: Duration::from_secs(15 * 60),
            ready_timeout: Duration::from_secs(5 * 60),
            hard_delete_timeout: Duration::from_secs(20 * 60),
            hard_delete_check_interval: Duration::from_secs(10),
            delete_request_timeout: Duration::from_secs(5 * 60),
            enable_limited_cache: "true".into(),
            ca_certificate_expiration: Duration::from_secs(87600 * 3600),
            webhook_certificate_expiration: Duration::from_secs(8760 * 3600),
            expiration_boundary: Duration::from_secs(168 * 3600),
            key_algorithm: btp_certs::KeyAlgorithm::EcdsaP256,
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
