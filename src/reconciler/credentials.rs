//! The required credentials Secret (docs/behaviour.md#credentials-secret-validation, #preparation), as a pure check.
//!
//! Messages list keys and names, never a value.

use btp_api::names;
use btp_webhooks::rules;
use std::collections::BTreeMap;

/// What the Secret provides once valid.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Every key of the Secret (values as bytes).
    pub data: BTreeMap<String, Vec<u8>>,
    /// `cluster_id`.
    pub cluster_id: String,
    /// `credentials_namespace`, or the chart namespace when absent or empty.
    pub credentials_namespace: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .field("cluster_id", &"<redacted>")
            .field("credentials_namespace", &self.credentials_namespace)
            .finish()
    }
}

impl Credentials {
    /// The operand Secret's data: every key except `cluster_id` and `credentials_namespace`.
    pub fn operand_secret_data(&self) -> BTreeMap<String, Vec<u8>> {
        self.data
            .iter()
            .filter(|(k, _)| k.as_str() != "cluster_id" && k.as_str() != names::CREDENTIALS_NAMESPACE_KEY)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Why the Secret cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretProblem {
    /// Not found (`Warning/MissingSecret`). `unlabelled` when a Secret of that name exists but lacks the
    /// managed-by label that makes it visible to the manager.
    Missing {
        /// The message.
        message: String,
    },
    /// Keys missing or empty (`Error/InvalidSecret`).
    Invalid {
        /// The message.
        message: String,
    },
}

/// The Secret as read: absent, present without the managed-by label, or present and visible.
pub enum Observed<'a> {
    /// No Secret of that name.
    Absent,
    /// Present, but without `app.kubernetes.io/managed-by` in {btp-manager, kcp-kyma-environment-broker}.
    Unlabelled,
    /// Present and labelled: its data.
    Present(&'a BTreeMap<String, Vec<u8>>),
}

/// Validate the required Secret.
pub fn validate(
    observed: Observed<'_>,
    secret_name: &str,
    chart_namespace: &str,
) -> Result<Credentials, SecretProblem> {
    let data = match observed {
        Observed::Absent => {
            return Err(SecretProblem::Missing {
                message: format!("{secret_name} Secret in {chart_namespace} namespace not found"),
            })
        }
        Observed::Unlabelled => {
            return Err(SecretProblem::Missing {
                message: format!(
                    "{secret_name} Secret in {chart_namespace} namespace not found: a Secret of that name exists but \
                     lacks the label {}={} (or ={}), so the manager ignores it",
                    names::MANAGED_BY_LABEL,
                    names::MANAGED_BY_KEB,
                    names::MANAGED_BY_BTP_MANAGER
                ),
            })
        }
        Observed::Present(data) => data,
    };
    // The webhooks' rules, enforced again: the Secret webhook may not have been called (failurePolicy
    // Ignore, a manager that was down, a Secret created before the webhooks existed).
    let blank = |v: &Vec<u8>| rules::is_blank(v);
    let missing: Vec<&str> = names::REQUIRED_SECRET_KEYS
        .iter()
        .copied()
        .filter(|k| !data.contains_key(*k))
        .collect();
    let empty: Vec<&str> = names::REQUIRED_SECRET_KEYS
        .iter()
        .copied()
        .filter(|k| data.get(*k).is_some_and(blank))
        .collect();
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("key(s) {} not found", missing.join(", ")));
    }
    if !empty.is_empty() {
        parts.push(format!("missing value(s) for {} key(s)", empty.join(", ")));
    }
    let not_https: Vec<&str> = names::URL_SECRET_KEYS
        .iter()
        .copied()
        .filter(|k| data.get(*k).is_some_and(|v| !blank(v) && !rules::is_https_url(v)))
        .collect();
    if !not_https.is_empty() {
        parts.push(format!(
            "key(s) {} must hold an https URL (for example https://service-manager.example.com)",
            not_https.join(", ")
        ));
    }
    if !parts.is_empty() {
        return Err(SecretProblem::Invalid {
            message: parts.join(", "),
        });
    }
    let text = |k: &str| {
        data.get(k)
            .map(|v| String::from_utf8_lossy(v).trim().to_string())
            .unwrap_or_default()
    };
    let credentials_namespace = Some(text(names::CREDENTIALS_NAMESPACE_KEY))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| chart_namespace.to_string());
    // Values as the mutating webhook would have stored them: the operand never sees surrounding whitespace.
    let data = data
        .iter()
        .map(|(k, v)| {
            let value = if names::REQUIRED_SECRET_KEYS.contains(&k.as_str()) {
                rules::trim_bytes(v).to_vec()
            } else {
                v.clone()
            };
            (k.clone(), value)
        })
        .collect();
    Ok(Credentials {
        data,
        cluster_id: text("cluster_id"),
        credentials_namespace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    fn full() -> BTreeMap<String, Vec<u8>> {
        data(&[
            ("clientid", "id"),
            ("clientsecret", "CANARY-VALUE"),
            ("sm_url", "https://sm"),
            ("tokenurl", "https://t"),
            ("cluster_id", "c-1"),
            ("extra", "x"),
        ])
    }

    #[test]
    fn missing_and_unlabelled_are_warnings_with_the_reference_message() {
        assert_eq!(
            validate(Observed::Absent, "sap-btp-manager", "kyma-system"),
            Err(SecretProblem::Missing {
                message: "sap-btp-manager Secret in kyma-system namespace not found".into()
            })
        );
        let Err(SecretProblem::Missing { message }) = validate(Observed::Unlabelled, "sap-btp-manager", "kyma-system")
        else {
            panic!()
        };
        assert!(message.contains("lacks the label app.kubernetes.io/managed-by=kcp-kyma-environment-broker"));
    }

    #[test]
    fn missing_and_empty_keys_use_the_reference_wording() {
        let mut d = full();
        d.remove("cluster_id");
        d.remove("clientsecret");
        d.insert("sm_url".into(), b"".to_vec());
        d.insert("tokenurl".into(), b" \n".to_vec());
        let Err(SecretProblem::Invalid { message }) = validate(Observed::Present(&d), "s", "ns") else {
            panic!()
        };
        assert_eq!(
            message,
            "key(s) clientsecret, cluster_id not found, missing value(s) for sm_url, tokenurl key(s)"
        );
    }

    #[test]
    fn urls_must_be_https_and_values_reach_the_operand_trimmed() {
        let mut d = full();
        d.insert("sm_url".into(), b"http://sm.example.com".to_vec());
        d.insert("tokenurl".into(), b"https://".to_vec());
        let Err(SecretProblem::Invalid { message }) = validate(Observed::Present(&d), "s", "ns") else {
            panic!()
        };
        assert_eq!(
            message,
            "key(s) sm_url, tokenurl must hold an https URL (for example https://service-manager.example.com)"
        );
        assert!(!message.contains("sm.example.com"), "no value in the message");
        let mut d = full();
        d.insert("clientid".into(), b"  id\n".to_vec());
        d.insert("cluster_id".into(), b"\tc-1 ".to_vec());
        d.insert("extra".into(), b" kept as is ".to_vec());
        let c = validate(Observed::Present(&d), "s", "ns").unwrap();
        assert_eq!(c.operand_secret_data()["clientid"], b"id");
        assert_eq!(c.cluster_id, "c-1");
        assert_eq!(
            c.operand_secret_data()["extra"],
            b" kept as is ",
            "only the required keys are trimmed"
        );
    }

    #[test]
    fn valid_secret_maps_credentials_without_leaking_in_debug() {
        let c = validate(Observed::Present(&full()), "s", "kyma-system").unwrap();
        assert_eq!(c.cluster_id, "c-1");
        assert_eq!(c.credentials_namespace, "kyma-system");
        let operand = c.operand_secret_data();
        assert!(operand.contains_key("clientsecret") && operand.contains_key("extra"));
        assert!(!operand.contains_key("cluster_id"));
        assert!(!format!("{c:?}").contains("CANARY"));
        let mut d = full();
        d.insert("credentials_namespace".into(), b"custom".to_vec());
        let c = validate(Observed::Present(&d), "s", "kyma-system").unwrap();
        assert_eq!(c.credentials_namespace, "custom");
        assert!(!c.operand_secret_data().contains_key("credentials_namespace"));
    }
}

/// Property tests (issue 12, part 2): [`validate`] never panics and its messages never contain a value.
/// `PROPTEST_CASES` sets the number of cases (default here: 256).
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn arb_key() -> impl Strategy<Value = String> {
        let known: Vec<String> = names::REQUIRED_SECRET_KEYS
            .iter()
            .chain(&[names::CREDENTIALS_NAMESPACE_KEY, "extra"])
            .map(|k| k.to_string())
            .collect();
        prop_oneof![4 => prop::sample::select(known), 1 => "[a-z_]{1,10}"]
    }

    /// A value holding `canary`, or one without content.
    fn arb_value(canary: String) -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            1 => Just(Vec::new()),
            1 => "[ \t\r\n]{1,4}".prop_map(String::into_bytes),
            4 => ("[ \t\n]{0,2}", ".{0,6}", ".{0,6}", "[ \t\n]{0,2}")
                .prop_map(move |(a, b, c, d)| format!("{a}{b}{canary}{c}{d}").into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..12).prop_map(|mut v| { v.extend_from_slice(b"CANARYbytes!"); v }),
        ]
    }

    fn arb_data() -> impl Strategy<Value = BTreeMap<String, Vec<u8>>> {
        "[A-Za-z0-9]{8}"
            .prop_flat_map(|s| prop::collection::btree_map(arb_key(), arb_value(format!("CANARY{s}")), 0..9))
    }

    proptest! {
        #![proptest_config(crate::proptest_config(256))]

        #[test]
        fn validate_never_panics_and_never_shows_a_value(
            data in arb_data(),
            observed in 0u8..3,
            secret_name in "[a-z-]{1,12}",
            namespace in "[a-z-]{1,12}",
        ) {
            let observed = match observed {
                0 => Observed::Absent,
                1 => Observed::Unlabelled,
                _ => Observed::Present(&data),
            };
            let present = matches!(observed, Observed::Present(_));
            match validate(observed, &secret_name, &namespace) {
                Err(SecretProblem::Missing { message }) | Err(SecretProblem::Invalid { message }) => {
                    prop_assert!(!message.contains("CANARY"), "a value in {message:?}");
                    if present {
                        // Some required key is missing or blank.
                        prop_assert!(names::REQUIRED_SECRET_KEYS.iter().any(|k| message.contains(k)));
                    }
                }
                Ok(credentials) => {
                    prop_assert!(present);
                    for key in names::REQUIRED_SECRET_KEYS {
                        let value = &data[key];
                        prop_assert!(!String::from_utf8_lossy(value).trim().is_empty(), "{key} blank but accepted");
                    }
                    // The namespace is shown (it is not a credential); nothing else of the Secret is.
                    let shown = format!("{credentials:?}").replace(&credentials.credentials_namespace, "");
                    prop_assert!(!shown.contains("CANARY"), "{shown}");
                    prop_assert!(!credentials.credentials_namespace.is_empty());
                }
            }
        }
    }
}
