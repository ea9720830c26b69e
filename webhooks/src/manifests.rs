//! The manager's own `ValidatingWebhookConfiguration` and `MutatingWebhookConfiguration`.
//!
//! One definition serves both places they are used: `deploy/webhooks.yaml` is generated from it (a test
//! fails when the checked-in file drifts), and the manager applies it at start with the current CA in
//! `caBundle`, pointing either at its Service (in a cluster) or at a URL (outside one).
//!
//! Choices (docs/behaviour.md#admission-webhooks):
//! - narrow rules: BtpOperators on CREATE (and DELETE for the validating warning), Secrets on CREATE and
//!   UPDATE only in the manager's namespace (`namespaceSelector`) and only the required Secret
//!   (`matchConditions` on the name, so unrelated Secrets never leave the API server);
//! - `failurePolicy: Fail` for BtpOperator CREATE (a misnamed CR must never slip through); `Ignore` for
//!   BtpOperator DELETE (its own webhook entry: DELETE only warns, so a down manager must never block a
//!   deletion) and for the Secret: if the manager is down, credentials can still be rotated; the
//!   reconciler re-validates them anyway, so the cost of `Ignore` is a later error in the CR status
//!   instead of an immediate denial;
//! - Kubernetes before 1.28 has no `matchConditions` (1.27 only behind an alpha gate): there the
//!   configurations are built without them ([`WebhookManifests::match_conditions`] `false`, decided by
//!   [`supports_match_conditions`] from `/version`). The handlers filter by name themselves, so the only
//!   cost is that every Secret CREATE/UPDATE in the namespace reaches the webhook;
//! - `sideEffects: None`, `admissionReviewVersions: [v1]`, `timeoutSeconds: 5`;
//! - mutating `reinvocationPolicy: IfNeeded` (the mutations are idempotent).

use btp_api::names::{self, webhook};
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::ByteString;
use std::collections::BTreeMap;

/// Why the manifests could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// JSON conversion failed.
    #[error("rendering as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// YAML rendering failed.
    #[error("rendering as YAML: {0}")]
    Yaml(#[from] serde_saphyr::SerializeError),
}

/// Where the API server reaches the webhook server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// In a cluster: the webhook Service in `namespace`, port 443.
    Service {
        /// Namespace of the Service (the manager's namespace).
        namespace: String,
    },
    /// Outside a cluster: a base URL such as `https://127.0.0.1:9443`.
    Url(String),
}

/// What goes into the configurations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookManifests {
    /// Where to send requests.
    pub endpoint: Endpoint,
    /// Namespace of the required Secret (the chart namespace).
    pub secret_namespace: String,
    /// Name of the required Secret.
    pub secret_name: String,
    /// PEM of the CA(s) the API server trusts for the webhook; empty in `deploy/` (the manager fills it).
    pub ca_bundle: Vec<u8>,
    /// Whether to restrict the Secret webhooks with `matchConditions` (Kubernetes 1.28 and later).
    pub match_conditions: bool,
}

/// The validating webhook for BtpOperator CREATE (`failurePolicy: Fail`).
pub const VALIDATING_BTP_OPERATOR: &str = "vbtpoperator.operator.kyma-project.io";
/// The validating webhook for BtpOperator DELETE (`failurePolicy: Ignore`; it only warns).
pub const VALIDATING_BTP_OPERATOR_DELETE: &str = "vbtpoperator-delete.operator.kyma-project.io";

/// The oldest Kubernetes minor version (1.x) whose API server knows `matchConditions` by default.
pub const MATCH_CONDITIONS_SINCE_MINOR: u32 = 28;

/// Whether an API server reporting `major`/`minor` (as in `/version`; providers append `+` and the like,
/// e.g. `"28+"`) accepts `matchConditions` in webhook configurations. An unreadable version is taken as
/// a current one: the manager then falls back when the server refuses the field (see
/// [`is_match_conditions_schema_error`]).
pub fn supports_match_conditions(major: &str, minor: &str) -> bool {
    let number = |s: &str| -> Option<u32> {
        let digits: String = s.trim().chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    match (number(major), number(minor)) {
        (Some(1), Some(minor)) => minor >= MATCH_CONDITIONS_SINCE_MINOR,
        (Some(major), _) if major > 1 => true,
        (Some(0), _) => false,
        _ => true,
    }
}

/// Whether an API server error message says that `matchConditions` is not part of its schema (what
/// Kubernetes before 1.27/1.28 answers to a server-side apply carrying them).
pub fn is_match_conditions_schema_error(message: &str) -> bool {
    message.contains("matchConditions")
        && (message.contains("not declared in schema") || message.contains("unknown field"))
}

impl WebhookManifests {
    /// Defaults for a cluster: Service in `kyma-system`, Secret `kyma-system/sap-btp-manager`.
    pub fn in_cluster(namespace: &str) -> Self {
        Self {
            endpoint: Endpoint::Service {
                namespace: namespace.into(),
            },
            secret_namespace: names::KYMA_SYSTEM.into(),
            secret_name: names::REQUIRED_SECRET_NAME.into(),
            ca_bundle: Vec::new(),
            match_conditions: true,
        }
    }

    fn client_config(&self, path: &str) -> WebhookClientConfig {
        let ca_bundle = (!self.ca_bundle.is_empty()).then(|| ByteString(self.ca_bundle.clone()));
        match &self.endpoint {
            Endpoint::Service { namespace } => WebhookClientConfig {
                ca_bundle,
                service: Some(ServiceReference {
                    name: webhook::SERVICE_NAME.into(),
                    namespace: namespace.clone(),
                    path: Some(path.into()),
                    port: Some(443),
                }),
                url: None,
            },
            Endpoint::Url(base) => WebhookClientConfig {
                ca_bundle,
                service: None,
                url: Some(format!("{}{path}", base.trim_end_matches('/'))),
            },
        }
    }

    fn labels() -> BTreeMap<String, String> {
        names::manager_labels()
    }

    fn btp_operator_rule(operations: &[&str]) -> RuleWithOperations {
        RuleWithOperations {
            api_groups: Some(vec![names::GROUP.into()]),
            api_versions: Some(vec![names::VERSION.into()]),
            operations: Some(operations.iter().map(|s| s.to_string()).collect()),
            resources: Some(vec![names::PLURAL.into()]),
            scope: Some("Namespaced".into()),
        }
    }

    fn secret_rule() -> RuleWithOperations {
        RuleWithOperations {
            api_groups: Some(vec![String::new()]),
            api_versions: Some(vec!["v1".into()]),
            operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
            resources: Some(vec!["secrets".into()]),
            scope: Some("Namespaced".into()),
        }
    }

    fn secret_namespace_selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "kubernetes.io/metadata.name".into(),
                self.secret_namespace.clone(),
            )])),
            match_expressions: None,
        }
    }

    fn secret_match_conditions(&self) -> Option<Vec<MatchCondition>> {
        self.match_conditions.then(|| {
            vec![MatchCondition {
                name: "required-secret-only".into(),
                expression: format!("object.metadata.name == '{}'", self.secret_name.replace('\'', "")),
            }]
        })
    }

    /// The validating configuration.
    pub fn validating(&self) -> ValidatingWebhookConfiguration {
        let common = |name: &str, rules, failure: &str| ValidatingWebhook {
            name: name.into(),
            admission_review_versions: vec!["v1".into()],
            client_config: self.client_config(webhook::VALIDATE_PATH),
            failure_policy: Some(failure.into()),
            match_policy: Some("Equivalent".into()),
            rules: Some(vec![rules]),
            side_effects: "None".into(),
            timeout_seconds: Some(5),
            ..ValidatingWebhook::default()
        };
        ValidatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(webhook::VALIDATING_CONFIGURATION.into()),
                labels: Some(Self::labels()),
                ..ObjectMeta::default()
            },
            webhooks: Some(vec![
                common(VALIDATING_BTP_OPERATOR, Self::btp_operator_rule(&["CREATE"]), "Fail"),
                common(
                    VALIDATING_BTP_OPERATOR_DELETE,
                    Self::btp_operator_rule(&["DELETE"]),
                    "Ignore",
                ),
                ValidatingWebhook {
                    namespace_selector: Some(self.secret_namespace_selector()),
                    match_conditions: self.secret_match_conditions(),
                    ..common("vsecret.operator.kyma-project.io", Self::secret_rule(), "Ignore")
                },
            ]),
        }
    }

    /// The mutating configuration.
    pub fn mutating(&self) -> MutatingWebhookConfiguration {
        let common = |name: &str, rules, failure: &str| MutatingWebhook {
            name: name.into(),
            admission_review_versions: vec!["v1".into()],
            client_config: self.client_config(webhook::MUTATE_PATH),
            failure_policy: Some(failure.into()),
            match_policy: Some("Equivalent".into()),
            reinvocation_policy: Some("IfNeeded".into()),
            rules: Some(vec![rules]),
            side_effects: "None".into(),
            timeout_seconds: Some(5),
            ..MutatingWebhook::default()
        };
        MutatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(webhook::MUTATING_CONFIGURATION.into()),
                labels: Some(Self::labels()),
                ..ObjectMeta::default()
            },
            webhooks: Some(vec![
                common(
                    "mbtpoperator.operator.kyma-project.io",
                    Self::btp_operator_rule(&["CREATE"]),
                    "Fail",
                ),
                MutatingWebhook {
                    namespace_selector: Some(self.secret_namespace_selector()),
                    match_conditions: self.secret_match_conditions(),
                    ..common("msecret.operator.kyma-project.io", Self::secret_rule(), "Ignore")
                },
            ]),
        }
    }

    /// Both configurations as one multi-document YAML (what `deploy/webhooks.yaml` holds).
    pub fn to_yaml(&self) -> Result<String, ManifestError> {
        let mut validating = serde_json::to_value(self.validating())?;
        let mut mutating = serde_json::to_value(self.mutating())?;
        for (doc, kind) in [
            (&mut validating, "ValidatingWebhookConfiguration"),
            (&mut mutating, "MutatingWebhookConfiguration"),
        ] {
            doc["apiVersion"] = "admissionregistration.k8s.io/v1".into();
            doc["kind"] = kind.into();
        }
        Ok(format!(
            "{}---\n{}",
            serde_saphyr::to_string(&validating)?,
            serde_saphyr::to_string(&mutating)?
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_narrow_and_policies_as_decided() {
        let m = WebhookManifests::in_cluster("kyma-system");
        let v = m.validating();
        let hooks = v.webhooks.unwrap();
        assert_eq!(hooks.len(), 3);
        for h in &hooks {
            assert_eq!(h.admission_review_versions, ["v1"]);
            assert_eq!(h.side_effects, "None");
            assert!(h.timeout_seconds.unwrap() <= 10);
            let svc = h.client_config.service.as_ref().unwrap();
            assert_eq!(
                (svc.name.as_str(), svc.namespace.as_str(), svc.path.as_deref()),
                (webhook::SERVICE_NAME, "kyma-system", Some("/validate"))
            );
        }
        let operations = |h: &ValidatingWebhook| h.rules.as_ref().unwrap()[0].operations.clone().unwrap();
        // BtpOperator CREATE must never slip through; DELETE only warns, so a down manager must not block it.
        assert_eq!(hooks[0].name, VALIDATING_BTP_OPERATOR);
        assert_eq!(operations(&hooks[0]), ["CREATE"]);
        assert_eq!(hooks[0].failure_policy.as_deref(), Some("Fail"));
        assert_eq!(hooks[1].name, VALIDATING_BTP_OPERATOR_DELETE);
        assert_eq!(operations(&hooks[1]), ["DELETE"]);
        assert_eq!(hooks[1].failure_policy.as_deref(), Some("Ignore"));
        assert_eq!(hooks[2].failure_policy.as_deref(), Some("Ignore"));
        let secret_rule = &hooks[2].rules.as_ref().unwrap()[0];
        assert_eq!(secret_rule.operations.as_deref().unwrap(), ["CREATE", "UPDATE"]);
        assert_eq!(secret_rule.resources.as_deref().unwrap(), ["secrets"]);
        let selector = hooks[2]
            .namespace_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap();
        assert_eq!(selector["kubernetes.io/metadata.name"], "kyma-system");
        assert!(hooks[2].match_conditions.as_ref().unwrap()[0]
            .expression
            .contains("'sap-btp-manager'"));

        let mutating = m.mutating().webhooks.unwrap();
        assert_eq!(
            mutating[0].rules.as_ref().unwrap()[0].operations.as_deref().unwrap(),
            ["CREATE"]
        );
        assert!(mutating
            .iter()
            .all(|h| h.reinvocation_policy.as_deref() == Some("IfNeeded")));
    }

    #[test]
    fn url_endpoint_and_ca_bundle() {
        let m = WebhookManifests {
            endpoint: Endpoint::Url("https://127.0.0.1:9443/".into()),
            ca_bundle: b"PEM".to_vec(),
            ..WebhookManifests::in_cluster("kyma-system")
        };
        for h in m.mutating().webhooks.unwrap() {
            assert_eq!(h.client_config.url.as_deref(), Some("https://127.0.0.1:9443/mutate"));
            assert!(h.client_config.service.is_none());
            assert_eq!(h.client_config.ca_bundle.as_ref().unwrap().0, b"PEM");
        }
    }

    #[test]
    fn match_conditions_from_1_28_on() {
        for (major, minor, expected) in [
            ("1", "24", false),
            ("1", "27", false),
            ("1", "27+", false),
            ("1", "28", true),
            ("1", "28+", true),
            ("1", "36", true),
            ("2", "0", true),
            ("", "", true),
            ("1", "x", true),
        ] {
            assert_eq!(supports_match_conditions(major, minor), expected, "{major}.{minor}");
        }
    }

    #[test]
    fn without_match_conditions_nothing_else_changes() {
        let full = WebhookManifests::in_cluster("kyma-system");
        let old = WebhookManifests {
            match_conditions: false,
            ..full.clone()
        };
        let (v, m) = (old.validating(), old.mutating());
        assert!(v
            .webhooks
            .as_ref()
            .unwrap()
            .iter()
            .all(|h| h.match_conditions.is_none()));
        assert!(m
            .webhooks
            .as_ref()
            .unwrap()
            .iter()
            .all(|h| h.match_conditions.is_none()));
        let yaml = old.to_yaml().unwrap();
        assert!(!yaml.contains("matchConditions"), "{yaml}");
        assert!(full.to_yaml().unwrap().contains("matchConditions"));
        // Same webhooks, rules, selectors and policies otherwise.
        let strip = |mut v: ValidatingWebhookConfiguration| {
            for h in v.webhooks.iter_mut().flatten() {
                h.match_conditions = None;
            }
            v
        };
        assert_eq!(strip(full.validating()), v);
    }

    #[test]
    fn schema_errors_about_match_conditions_are_recognised() {
        let real = "failed to create typed patch object (/btp-manager-validating-webhook-configuration; \
                    admissionregistration.k8s.io/v1, Kind=ValidatingWebhookConfiguration): \
                    .webhooks[name=\"vsecret.operator.kyma-project.io\"].matchConditions: field not declared in schema";
        assert!(is_match_conditions_schema_error(real));
        assert!(!is_match_conditions_schema_error(
            "field not declared in schema: .spec.foo"
        ));
        assert!(!is_match_conditions_schema_error("connection refused"));
    }
}
