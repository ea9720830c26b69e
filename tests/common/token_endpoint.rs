//! The credentials check's counterpart in the test kit: a token endpoint on loopback over HTTPS with a CA of
//! its own (the manager's stand-in, `btp_manager::credentials_check::stand_in`), the Secret that points at
//! it, and waiting for the `CredentialsValid` condition.

use super::{credentials, eventually, Env};
use btp_api::{names, BtpOperator, CredentialsReason, CREDENTIALS_VALID};
#[allow(unused_imports)]
pub use btp_manager::credentials_check::stand_in::{Behaviour, StandIn};
use std::time::Duration;

/// The client secret the endpoint accepts.
pub const SECRET: &str = "stand-in-client-secret";

/// A token endpoint accepting the suites' `clientid` with [`SECRET`].
pub async fn start() -> StandIn {
    let id = credentials()["clientid"].as_str().unwrap_or_default().to_string();
    StandIn::start(&id, SECRET)
        .await
        .expect("the stand-in token endpoint starts")
}

/// The suites' credentials with `tokenurl` at `endpoint` and `clientsecret`.
pub fn credentials_at(endpoint: &StandIn, client_secret: &str) -> serde_json::Value {
    let mut creds = credentials();
    creds["tokenurl"] = serde_json::json!(endpoint.url);
    creds["clientsecret"] = serde_json::json!(client_secret);
    creds
}

/// The `CredentialsValid` condition's (status, reason), if any.
pub fn condition(cr: &BtpOperator) -> Option<(String, String)> {
    let c = cr
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == CREDENTIALS_VALID)?;
    Some((format!("{:?}", c.status), c.reason.clone()))
}

/// Wait until `kyma-system/btpoperator` has `CredentialsValid` with `reason`; the CR then.
pub async fn wait_credentials(env: &Env, reason: CredentialsReason, secs: u64) -> BtpOperator {
    let crs = env.crs(names::KYMA_SYSTEM);
    eventually(
        Duration::from_secs(secs),
        &format!("CredentialsValid shows {reason}"),
        || async {
            let cr = crs.get_opt(names::BTP_OPERATOR_NAME).await.ok().flatten()?;
            (condition(&cr).map(|(_, r)| r).as_deref() == Some(reason.as_str())).then_some(cr)
        },
    )
    .await
}
