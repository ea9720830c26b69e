//! What a check concludes, as a pure decision: the token endpoint's answer (or why there was none) becomes a
//! [`Verdict`], the `CredentialsValid` condition's reason and message. Messages say what to do and never hold a
//! value of the Secret or of the response (not even the URL: `tokenurl` is one of the Secret's values).

use btp_api::{ConditionStatus, CredentialsReason};

/// The result of a check (or why none was made).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The condition's reason (it implies its status).
    pub reason: CredentialsReason,
    /// The condition's message: what happened and what to do, no value.
    pub message: String,
}

impl Verdict {
    /// A verdict with `reason` and a message that starts with `what` and ends with what to do.
    pub fn new(reason: CredentialsReason, what: impl std::fmt::Display) -> Self {
        let message = match reason.condition_status() {
            ConditionStatus::True => format!("{what}."),
            _ => format!("{what}. {}", reason.what_to_do()),
        };
        Self { reason, message }
    }

    /// The condition status.
    pub fn status(&self) -> ConditionStatus {
        self.reason.condition_status()
    }

    /// `btpmanager_credential_probe_status`, with the Go manager's meaning: 1 when the endpoint's TLS is not
    /// trusted, else 0.
    pub fn probe_status(&self) -> i64 {
        i64::from(self.reason == CredentialsReason::TLSUntrusted)
    }

    /// The check is off (`CredentialsCheckInterval` is `0`).
    pub fn disabled() -> Self {
        Self::new(
            CredentialsReason::Disabled,
            "The credentials check is off (CredentialsCheckInterval is 0)",
        )
    }

    /// No usable Secret: the `Ready` condition reports why.
    pub fn no_secret() -> Self {
        Self::new(
            CredentialsReason::NotChecked,
            "The credentials Secret is missing or invalid, so its credentials were not checked",
        )
    }
}

/// Why no HTTP answer came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The host name did not resolve.
    Dns,
    /// No connection (refused, unreachable network, reset).
    Connect,
    /// Nothing within the bound (connect, handshake or answer).
    Timeout,
    /// The certificate does not verify against the roots.
    Untrusted(Untrusted),
    /// The TLS handshake failed for another reason (a protocol error, an alert).
    Handshake,
    /// The HTTP exchange failed (the connection closed, a malformed answer).
    Http,
}

/// How the endpoint's certificate failed verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Untrusted {
    /// Not signed by a trusted CA.
    UnknownIssuer,
    /// Expired or not yet valid.
    Expired,
    /// Issued for another host name.
    WrongName,
    /// Any other verification failure (revoked, bad signature, unsupported).
    Other,
}

/// The verdict for an HTTP answer: `status`, and whether its body held an access token (dropped unread
/// beyond its presence).
pub fn from_answer(status: u16, has_token: bool) -> Verdict {
    use CredentialsReason as R;
    match status {
        200..=299 if has_token => Verdict::new(R::TokenIssued, "The token endpoint issued a token for the credentials"),
        200..=299 => Verdict::new(
            R::UnexpectedResponse,
            format!("The token endpoint answered HTTP {status} without an access token"),
        ),
        400 | 401 => Verdict::new(
            R::Unauthorized,
            format!("The token endpoint refused the credentials (HTTP {status})"),
        ),
        500..=599 => Verdict::new(
            R::Unreachable,
            format!("The token endpoint answered with a server error (HTTP {status})"),
        ),
        _ => Verdict::new(
            R::UnexpectedResponse,
            format!("The token endpoint answered HTTP {status}, not as a token endpoint does"),
        ),
    }
}

/// The verdict when no answer came (`bound`: the time limit, for the message).
pub fn from_failure(failure: Failure, bound: std::time::Duration) -> Verdict {
    use CredentialsReason as R;
    match failure {
        Failure::Dns => Verdict::new(R::Unreachable, "The token endpoint's host name does not resolve"),
        Failure::Connect => Verdict::new(R::Unreachable, "No connection to the token endpoint"),
        Failure::Timeout => Verdict::new(
            R::Unreachable,
            format!("The token endpoint did not answer within {}s", bound.as_secs()),
        ),
        Failure::Untrusted(why) => Verdict::new(
            R::TLSUntrusted,
            format!(
                "The token endpoint's certificate is not trusted: {}",
                match why {
                    Untrusted::UnknownIssuer =>
                        "it is not signed by a CA of the system roots or of CredentialsCheckCABundle",
                    Untrusted::Expired => "it has expired or is not valid yet",
                    Untrusted::WrongName => "it is issued for another host name",
                    Untrusted::Other => "it does not verify",
                }
            ),
        ),
        Failure::Handshake => Verdict::new(R::Unreachable, "The TLS handshake with the token endpoint failed"),
        Failure::Http => Verdict::new(R::Unreachable, "The HTTP exchange with the token endpoint failed"),
    }
}

/// Whether a token endpoint's 2xx body holds an access token, as the operand's OAuth client reads it: JSON
/// with a non-empty string `access_token`, or for a form-encoded (or plain text) answer an `access_token`
/// field with a value. Pure; the value is not kept.
pub fn has_access_token(content_type: &str, body: &[u8]) -> bool {
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if media == "application/x-www-form-urlencoded" || media == "text/plain" {
        return body
            .split(|b| *b == b'&')
            .any(|pair| pair.strip_prefix(b"access_token=").is_some_and(|v| !v.is_empty()));
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("access_token").and_then(|t| t.as_str().map(|t| !t.is_empty())))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use btp_api::CredentialsReason as R;
    use std::time::Duration;

    #[test]
    fn answers_map_to_reasons() {
        assert_eq!(from_answer(200, true).reason, R::TokenIssued);
        assert_eq!(from_answer(200, false).reason, R::UnexpectedResponse);
        assert_eq!(from_answer(401, false).reason, R::Unauthorized);
        assert_eq!(from_answer(400, false).reason, R::Unauthorized);
        assert_eq!(from_answer(403, false).reason, R::UnexpectedResponse);
        assert_eq!(from_answer(404, false).reason, R::UnexpectedResponse);
        assert_eq!(from_answer(500, false).reason, R::Unreachable);
        assert_eq!(from_answer(503, true).reason, R::Unreachable);
        assert!(from_answer(401, false).message.contains("HTTP 401"));
        assert!(from_answer(401, false).message.contains("Rotate the Secret"));
        assert_eq!(
            from_answer(200, true).message,
            "The token endpoint issued a token for the credentials."
        );
    }

    #[test]
    fn failures_map_to_reasons() {
        let bound = Duration::from_secs(5);
        for f in [
            Failure::Dns,
            Failure::Connect,
            Failure::Timeout,
            Failure::Handshake,
            Failure::Http,
        ] {
            assert_eq!(from_failure(f, bound).reason, R::Unreachable, "{f:?}");
        }
        assert!(from_failure(Failure::Timeout, bound).message.contains("within 5s"));
        let untrusted = from_failure(Failure::Untrusted(Untrusted::UnknownIssuer), bound);
        assert_eq!(untrusted.reason, R::TLSUntrusted);
        assert_eq!(untrusted.probe_status(), 1);
        assert!(
            untrusted.message.contains("CredentialsCheckCABundle"),
            "{}",
            untrusted.message
        );
        assert_eq!(from_answer(200, true).probe_status(), 0);
        assert_eq!(from_failure(Failure::Connect, bound).probe_status(), 0);
    }

    #[test]
    fn an_access_token_is_recognised_in_json_and_forms() {
        assert!(has_access_token(
            "application/json",
            br#"{"access_token":"x","token_type":"bearer"}"#
        ));
        assert!(has_access_token(
            "application/json;charset=UTF-8",
            br#"{"access_token":"x"}"#
        ));
        assert!(!has_access_token("application/json", br#"{"access_token":""}"#));
        assert!(!has_access_token("application/json", br#"{"error":"invalid_client"}"#));
        assert!(!has_access_token("text/html", b"<html>login</html>"));
        assert!(has_access_token(
            "application/x-www-form-urlencoded",
            b"token_type=bearer&access_token=x"
        ));
        assert!(!has_access_token(
            "application/x-www-form-urlencoded",
            b"access_token=&x=1"
        ));
        // The oauth2 library reads an answer without a content type as JSON.
        assert!(has_access_token("", br#"{"access_token":"x"}"#));
    }

    #[test]
    fn unknown_and_disabled_are_not_failures() {
        assert_eq!(Verdict::disabled().status(), ConditionStatus::Unknown);
        assert_eq!(Verdict::no_secret().status(), ConditionStatus::Unknown);
    }
}
