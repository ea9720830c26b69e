//! The `CredentialsValid` condition (docs/behaviour.md#credentials-check, docs/status-reasons.md): whether the
//! token endpoint of the credentials Secret issues a token for its credentials. A second condition beside
//! `Ready`; it never changes the state or the `Ready` condition.

use crate::types::ConditionStatus;

/// The condition type.
pub const CREDENTIALS_VALID: &str = "CredentialsValid";

macro_rules! credentials_reasons {
    ($($variant:ident => $status:ident, $meaning:expr, $action:expr;)*) => {
        /// A `CredentialsValid` condition reason.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum CredentialsReason { $($variant,)* }

        impl CredentialsReason {
            /// Every reason, in the order docs/status-reasons.md lists them.
            pub const ALL: [CredentialsReason; 8] = [$(CredentialsReason::$variant,)*];

            /// The CamelCase string written to the condition's `reason`.
            pub fn as_str(self) -> &'static str {
                match self { $(CredentialsReason::$variant => stringify!($variant),)* }
            }

            /// The condition status that goes with this reason.
            pub fn condition_status(self) -> ConditionStatus {
                match self { $(CredentialsReason::$variant => ConditionStatus::$status,)* }
            }

            /// What the reason means, for users (docs/status-reasons.md).
            pub fn meaning(self) -> &'static str {
                match self { $(CredentialsReason::$variant => $meaning,)* }
            }

            /// What a user should do about it (docs/status-reasons.md, and the condition's message).
            pub fn what_to_do(self) -> &'static str {
                match self { $(CredentialsReason::$variant => $action,)* }
            }
        }
    };
}

credentials_reasons! {
    TokenIssued => True,
        "The token endpoint (`tokenurl` and the token path) issued a token for `clientid` and `clientsecret`, as \
         the operand asks for one.",
        "Nothing.";
    Unauthorized => False,
        "The token endpoint refused the credentials (HTTP 401 or 400): the client secret was rotated or mistyped, \
         or the Service Manager binding was deleted in SAP BTP.",
        "Rotate the Secret: put the current `clientid` and `clientsecret` of the Service Manager binding into \
         `kubectl edit secret sap-btp-manager -n kyma-system`; the check runs again at once.";
    TLSUntrusted => False,
        "The token endpoint's certificate does not verify against the system roots and `CredentialsCheckCABundle` \
         (an unknown CA, an expired certificate or one for another host name).",
        "If the endpoint sits behind a private CA or a TLS-inspecting proxy, add its CA certificate (PEM) to \
         `CredentialsCheckCABundle` in the runtime ConfigMap (the operand must trust it too); else check `tokenurl`.";
    Unreachable => False,
        "The token endpoint could not be reached: the host name does not resolve, the connection is refused, no \
         answer came within 5 seconds, or it answered with a server error (5xx).",
        "Check `tokenurl` and the cluster's egress (network policies, firewall, proxy) to it; a 5xx is the \
         endpoint's own problem and usually passes. The check runs again every `CredentialsCheckInterval`.";
    UnexpectedResponse => False,
        "The token endpoint answered, but not as a token endpoint does: another status (for example 403 or 404), \
         or a success without an access token.",
        "Check `tokenurl` (and `tokenurlsuffix`, `/oauth/token` when absent): it must be the Service Manager \
         binding's `url` of its `uaa` section.";
    Disabled => Unknown,
        "`CredentialsCheckInterval` is `0`: the manager does not ask the token endpoint.",
        "Nothing; set `CredentialsCheckInterval` (for example `1h`) to have the credentials checked.";
    NotChecked => Unknown,
        "The credentials were not checked: the Secret is missing or invalid (the `Ready` condition says why), the \
         first check has not finished yet, or the check cannot reproduce the operand's request (a Secret without \
         `clientsecret`, whose client certificate the operand would use; `HTTPS_PROXY` set for the manager).",
        "Fix what the `Ready` condition reports; the check follows.";
    CheckFailed => Unknown,
        "The check could not be made: `CredentialsCheckCABundle` holds no usable PEM certificate, or `tokenurl` \
         is not a URL the check can call.",
        "Fix `CredentialsCheckCABundle` in the runtime ConfigMap (PEM `CERTIFICATE` blocks), or `tokenurl`.";
}

/// The reasons' section of docs/status-reasons.md.
pub fn credentials_reasons_markdown() -> String {
    let mut out = String::from(
        "## CredentialsValid\n\n\
         A second condition, of type `CredentialsValid`, says whether the credentials of the Secret work: the \
         leading manager asks the token endpoint for a token with them, as the operand does, when the Secret \
         changes and every `CredentialsCheckInterval` (see [the behaviour contract](behaviour.md#credentials-check)). \
         It never changes the `state` or the `Ready` condition, and never holds a value of the Secret.\n\n\
         | Reason | CredentialsValid | Meaning | What to do |\n\
         |---|---|---|---|\n",
    );
    for reason in CredentialsReason::ALL {
        let status = match reason.condition_status() {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        };
        out.push_str(&format!(
            "| `{}` | {status} | {} | {} |\n",
            reason.as_str(),
            reason.meaning(),
            reason.what_to_do()
        ));
    }
    out
}

impl std::fmt::Display for CredentialsReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_token_is_true_and_only_answers_about_the_credentials_are_false() {
        for r in CredentialsReason::ALL {
            assert!(!r.meaning().contains('|') && !r.what_to_do().contains('|'), "{r}");
            let expected = match r {
                CredentialsReason::TokenIssued => ConditionStatus::True,
                CredentialsReason::Disabled | CredentialsReason::NotChecked | CredentialsReason::CheckFailed => {
                    ConditionStatus::Unknown
                }
                _ => ConditionStatus::False,
            };
            assert_eq!(r.condition_status(), expected, "{r}");
        }
        let doc = credentials_reasons_markdown();
        assert!(doc.contains("| `Unauthorized` | False |"), "{doc}");
    }
}
