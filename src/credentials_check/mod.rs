//! The credentials check (docs/behaviour.md#credentials-check): the leading manager asks the token endpoint of
//! the credentials Secret for a token with the Secret's credentials, the way the operand does, and reports the
//! answer as the CR's `CredentialsValid` condition. It runs beside the reconciler, never in a pass: a pass hands
//! it the Secret's credentials and the settings ([`Exchange::submit`]) and writes the last verdict
//! ([`Exchange::verdict`]); a new verdict brings a pass. It never changes the state or the `Ready` condition.
//!
//! - [`verdict`]: an answer, or why none came, as a reason and a message (pure);
//! - [`schedule`]: when to check (pure);
//! - [`request`]: the request (the network part);
//! - [`runner`]: the task of one leadership term;
//! - [`stand_in`]: a token endpoint on loopback, for `btp-manager local` and the tests.
//!
//! The request, as the operand's OAuth client makes it (SAP BTP service operator, `client/sm`): `POST` to
//! `tokenurl` followed by `tokenurlsuffix` (`/oauth/token` when the Secret has none, as the operand Secret's
//! manifest says), form `grant_type=client_credentials&client_id=…&client_secret=…` (credentials in the form,
//! not as basic auth). The operand's other variant, a client certificate instead of a client secret, applies
//! only when `clientsecret` is empty, which the Secret's validation refuses: such a Secret is `NotChecked`.

pub mod request;
pub mod runner;
pub mod schedule;
pub mod stand_in;
pub mod verdict;

pub use verdict::Verdict;

use crate::reconciler::credentials::Credentials;
use btp_api::CredentialsReason;
use std::time::Duration;
use tokio::sync::watch;

/// The token path the operand appends when the Secret has no `tokenurlsuffix`.
pub const DEFAULT_TOKEN_PATH: &str = "/oauth/token";

/// The bound of one request: connect, TLS, request and answer.
pub const REQUEST_BOUND: Duration = Duration::from_secs(5);

/// Where and with what to ask for a token. `Debug` shows no value.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// `tokenurl` + `tokenurlsuffix`.
    pub token_url: String,
    /// `clientid`.
    pub client_id: String,
    /// `clientsecret`.
    pub client_secret: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Target(<redacted>)")
    }
}

/// What the operand would ask with these (validated) credentials; a verdict instead when the check cannot
/// reproduce it. Pure.
pub fn target(credentials: &Credentials) -> Result<Target, Verdict> {
    let text = |key: &str| {
        credentials
            .data
            .get(key)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let client_secret = text("clientsecret").unwrap_or_default();
    if client_secret.is_empty() {
        return Err(Verdict::new(
            CredentialsReason::NotChecked,
            "The Secret has no clientsecret: the operand would authenticate with a client certificate, which this \
             check does not reproduce",
        ));
    }
    let suffix = text("tokenurlsuffix").unwrap_or_else(|| DEFAULT_TOKEN_PATH.to_string());
    Ok(Target {
        token_url: format!("{}{suffix}", text("tokenurl").unwrap_or_default()),
        client_id: text("clientid").unwrap_or_default(),
        client_secret,
    })
}

/// What a pass hands the checker: the target (or why there is none) and the settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// The target, or the verdict without a request (no usable Secret).
    pub target: Result<Target, Verdict>,
    /// `CredentialsCheckInterval`.
    pub interval: Duration,
    /// `CredentialsCheckCABundle`.
    pub ca_bundle: String,
}

impl Input {
    /// The input of a pass: `credentials` (None: the Secret is missing or invalid) with the settings.
    pub fn new(credentials: Option<&Credentials>, config: &crate::config::Config) -> Self {
        Self {
            target: credentials.map_or_else(|| Err(Verdict::no_secret()), target),
            interval: config.credentials_check_interval,
            ca_bundle: config.credentials_check_ca_bundle.clone(),
        }
    }

    /// Whether a check of `self` asks the same as one of `other` (the interval aside).
    pub fn same_check(&self, other: &Input) -> bool {
        self.target == other.target && self.ca_bundle == other.ca_bundle
    }
}

/// The checker's side of a term: the last input passes handed it, and its last verdict.
#[derive(Debug)]
pub struct Exchange {
    input: watch::Sender<Option<Input>>,
    verdict: watch::Sender<Option<Verdict>>,
}

impl Default for Exchange {
    fn default() -> Self {
        Self {
            input: watch::Sender::new(None),
            verdict: watch::Sender::new(None),
        }
    }
}

impl Exchange {
    /// A pass hands over what it read; the checker sees only changes.
    pub fn submit(&self, input: Input) {
        self.input.send_if_modified(|current| {
            let changed = current.as_ref() != Some(&input);
            if changed {
                *current = Some(input);
            }
            changed
        });
    }

    /// The verdict to report now: at once when the check is off, else the checker's last (None before the
    /// first).
    pub fn verdict(&self, config: &crate::config::Config) -> Option<Verdict> {
        if config.credentials_check_interval.is_zero() {
            return Some(Verdict::disabled());
        }
        self.verdict.borrow().clone()
    }

    /// The checker publishes a verdict; true when it differs from the last.
    pub fn publish(&self, verdict: Verdict) -> bool {
        self.verdict.send_if_modified(|current| {
            let changed = current.as_ref() != Some(&verdict);
            if changed {
                *current = Some(verdict);
            }
            changed
        })
    }

    /// Forget the last verdict without bringing a pass (the check is off: passes report that themselves).
    pub fn forget(&self) {
        self.verdict.send_if_modified(|current| {
            *current = None;
            false
        });
    }

    /// The inputs as passes hand them over.
    pub fn inputs(&self) -> watch::Receiver<Option<Input>> {
        self.input.subscribe()
    }

    /// The verdicts as they change.
    pub fn verdicts(&self) -> watch::Receiver<Option<Verdict>> {
        self.verdict.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn credentials(pairs: &[(&str, &str)]) -> Credentials {
        Credentials {
            data: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect::<BTreeMap<_, _>>(),
            cluster_id: "c".into(),
            credentials_namespace: "kyma-system".into(),
        }
    }

    #[test]
    fn the_token_url_is_the_operands() {
        let base = [
            ("clientid", "id"),
            ("clientsecret", "s"),
            ("tokenurl", "https://auth.example.test"),
        ];
        let t = target(&credentials(&base)).unwrap();
        assert_eq!(t.token_url, "https://auth.example.test/oauth/token");
        assert_eq!((t.client_id.as_str(), t.client_secret.as_str()), ("id", "s"));
        let mut with_suffix = base.to_vec();
        with_suffix.push(("tokenurlsuffix", "/custom/token"));
        assert_eq!(
            target(&credentials(&with_suffix)).unwrap().token_url,
            "https://auth.example.test/custom/token"
        );
        assert_eq!(format!("{t:?}"), "Target(<redacted>)");
    }

    #[test]
    fn without_a_client_secret_the_check_is_not_made() {
        let v = target(&credentials(&[("clientid", "id"), ("tokenurl", "https://a.test")])).unwrap_err();
        assert_eq!(v.reason, CredentialsReason::NotChecked);
    }

    #[test]
    fn a_disabled_check_reports_at_once_and_only_changes_are_handed_over() {
        let exchange = Exchange::default();
        let off = crate::config::Config {
            credentials_check_interval: Duration::ZERO,
            ..Default::default()
        };
        assert_eq!(exchange.verdict(&off), Some(Verdict::disabled()));
        assert_eq!(exchange.verdict(&crate::config::Config::default()), None);
        let mut inputs = exchange.inputs();
        let input = Input::new(None, &crate::config::Config::default());
        exchange.submit(input.clone());
        assert!(inputs.has_changed().unwrap());
        inputs.mark_unchanged();
        exchange.submit(input);
        assert!(!inputs.has_changed().unwrap(), "the same input again is no change");
        assert!(exchange.publish(Verdict::no_secret()));
        assert!(!exchange.publish(Verdict::no_secret()));
    }
}
