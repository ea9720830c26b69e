//! The manager's own webhook certificates: what is stored, when to renew, and what the `caBundle` holds.
//!
//! All replicas share ONE CA, kept with the serving certificate in one Secret; every step below is a
//! whole-Secret write with optimistic concurrency, so concurrent replicas converge on the same content.
//!
//! Steps, decided by [`decide`] from what is stored and the time, carried out by [`advance`]:
//! 1. no usable CA → [`Step::Bootstrap`]: a new CA and a leaf from it.
//! 2. a next CA was staged at least `overlap` ago → [`Step::PromoteNextCa`]: the leaf is re-issued from
//!    the next CA, which becomes current; the old CA stays in the bundle as "previous".
//! 3. the CA enters its renewal window and no next CA is staged → [`Step::StageNextCa`]: a new CA is
//!    generated and added to the bundle, but nothing is signed with it yet. This is the overlap: the API
//!    server learns to trust the new CA before any replica serves a leaf signed by it.
//! 4. the leaf is missing, broken, not signed by the current CA, for other names, or in its renewal
//!    window → [`Step::IssueLeaf`] from the current CA (the bundle does not change).
//! 5. a previous CA retired at least `overlap` ago → [`Step::DropPreviousCa`]: by then every replica
//!    has picked up the new leaf from the Secret, so the old CA leaves the bundle.

use crate::{
    expires_within, generate_ca, generate_leaf, parse_cert_pem, verify_signed_by, CaSpec, CertError, CertPair,
    KeyAlgorithm, LeafSpec,
};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Secret keys (kept compatible with the usual `ca.crt`/`tls.crt`/`tls.key` layout).
pub mod keys {
    /// Current CA certificate.
    pub const CA_CRT: &str = "ca.crt";
    /// Current CA key.
    pub const CA_KEY: &str = "ca.key";
    /// Serving certificate.
    pub const TLS_CRT: &str = "tls.crt";
    /// Serving key.
    pub const TLS_KEY: &str = "tls.key";
    /// Staged next CA certificate.
    pub const NEXT_CA_CRT: &str = "next-ca.crt";
    /// Staged next CA key.
    pub const NEXT_CA_KEY: &str = "next-ca.key";
    /// When the next CA was staged (Unix seconds).
    pub const NEXT_CA_STAGED_AT: &str = "next-ca.staged-at";
    /// The CA replaced by the last promotion (certificate only; no key is kept).
    pub const PREVIOUS_CA_CRT: &str = "previous-ca.crt";
    /// When the previous CA was retired (Unix seconds).
    pub const PREVIOUS_CA_RETIRED_AT: &str = "previous-ca.retired-at";
    /// The trust bundle to publish: current, next and previous CA.
    pub const CA_BUNDLE: &str = "ca-bundle.crt";
}

/// Lifetimes, renewal windows and names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Validity of a new CA.
    pub ca_validity: Duration,
    /// Validity of a new serving certificate (capped at the CA's expiry).
    pub leaf_validity: Duration,
    /// Stage the next CA when the current one expires within this window.
    pub ca_renew_before: Duration,
    /// Re-issue the serving certificate when it expires within this window.
    pub leaf_renew_before: Duration,
    /// Minimum time a new CA is in the bundle before anything is signed with it, and an old CA stays in
    /// it after its last leaf was replaced.
    pub overlap: Duration,
    /// Key algorithm of new keys.
    pub key: KeyAlgorithm,
    /// DNS SANs of the serving certificate.
    pub dns_names: Vec<String>,
    /// IP SANs of the serving certificate.
    pub ip_addresses: Vec<IpAddr>,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

impl Policy {
    /// CA 10 years (renewed 1 year ahead), leaf 1 year (renewed 30 days ahead), 10-minute overlap.
    pub fn new(dns_names: Vec<String>, ip_addresses: Vec<IpAddr>) -> Self {
        Self {
            ca_validity: 3650 * DAY,
            leaf_validity: 365 * DAY,
            ca_renew_before: 365 * DAY,
            leaf_renew_before: 30 * DAY,
            overlap: Duration::from_secs(600),
            key: KeyAlgorithm::EcdsaP256,
            dns_names,
            ip_addresses,
        }
    }
}

/// What the Secret holds, decoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// Current CA.
    pub ca: Option<CertPair>,
    /// Serving certificate.
    pub leaf: Option<CertPair>,
    /// Staged next CA and when it was staged.
    pub next_ca: Option<(CertPair, SystemTime)>,
    /// Retired CA certificate and when it was retired.
    pub previous_ca: Option<(String, SystemTime)>,
}

fn pair(map: &BTreeMap<String, Vec<u8>>, crt: &str, key: &str) -> Option<CertPair> {
    let text = |k: &str| {
        map.get(k)
            .and_then(|v| String::from_utf8(v.clone()).ok())
            .filter(|s| !s.trim().is_empty())
    };
    Some(CertPair {
        cert_pem: text(crt)?,
        key_pem: text(key)?,
    })
}

fn time_at(map: &BTreeMap<String, Vec<u8>>, key: &str) -> Option<SystemTime> {
    let secs: u64 = std::str::from_utf8(map.get(key)?).ok()?.trim().parse().ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

fn unix(t: SystemTime) -> Vec<u8> {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
        .to_string()
        .into_bytes()
}

impl Stored {
    /// Decode Secret data. Unreadable entries count as absent (and get replaced).
    pub fn from_data(map: &BTreeMap<String, Vec<u8>>) -> Self {
        Self {
            ca: pair(map, keys::CA_CRT, keys::CA_KEY),
            leaf: pair(map, keys::TLS_CRT, keys::TLS_KEY),
            next_ca: pair(map, keys::NEXT_CA_CRT, keys::NEXT_CA_KEY).zip(time_at(map, keys::NEXT_CA_STAGED_AT)),
            previous_ca: map
                .get(keys::PREVIOUS_CA_CRT)
                .and_then(|v| String::from_utf8(v.clone()).ok())
                .zip(time_at(map, keys::PREVIOUS_CA_RETIRED_AT)),
        }
    }

    /// Encode as Secret data, including [`keys::CA_BUNDLE`].
    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        let mut map = BTreeMap::new();
        if let Some(ca) = &self.ca {
            map.insert(keys::CA_CRT.into(), ca.cert_pem.clone().into_bytes());
            map.insert(keys::CA_KEY.into(), ca.key_pem.clone().into_bytes());
        }
        if let Some(leaf) = &self.leaf {
            map.insert(keys::TLS_CRT.into(), leaf.cert_pem.clone().into_bytes());
            map.insert(keys::TLS_KEY.into(), leaf.key_pem.clone().into_bytes());
        }
        if let Some((next, at)) = &self.next_ca {
            map.insert(keys::NEXT_CA_CRT.into(), next.cert_pem.clone().into_bytes());
            map.insert(keys::NEXT_CA_KEY.into(), next.key_pem.clone().into_bytes());
            map.insert(keys::NEXT_CA_STAGED_AT.into(), unix(*at));
        }
        if let Some((previous, at)) = &self.previous_ca {
            map.insert(keys::PREVIOUS_CA_CRT.into(), previous.clone().into_bytes());
            map.insert(keys::PREVIOUS_CA_RETIRED_AT.into(), unix(*at));
        }
        map.insert(keys::CA_BUNDLE.into(), self.ca_bundle().into_bytes());
        map
    }

    /// The PEM bundle the webhook configurations' `caBundle` must hold: current, next, previous CA.
    pub fn ca_bundle(&self) -> String {
        let mut bundle = String::new();
        let certs = [
            self.ca.as_ref().map(|c| c.cert_pem.as_str()),
            self.next_ca.as_ref().map(|(c, _)| c.cert_pem.as_str()),
            self.previous_ca.as_ref().map(|(c, _)| c.as_str()),
        ];
        for pem in certs.into_iter().flatten() {
            bundle.push_str(pem.trim_end());
            bundle.push('\n');
        }
        bundle
    }
}

/// One step towards a healthy state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Everything is fine until [`next_check`].
    Keep,
    /// New CA and leaf; why.
    Bootstrap(String),
    /// A new leaf from the current CA; why.
    IssueLeaf(String),
    /// Generate the next CA and add it to the bundle.
    StageNextCa,
    /// Sign the leaf with the next CA and make it current.
    PromoteNextCa,
    /// Remove the retired CA from the bundle.
    DropPreviousCa,
}

fn ca_problem(ca: Option<&CertPair>, now: SystemTime) -> Option<String> {
    let Some(ca) = ca else {
        return Some("no CA stored".into());
    };
    let info = match parse_cert_pem(ca.cert_pem.as_bytes()) {
        Ok(info) => info,
        Err(e) => return Some(format!("CA certificate unusable: {e}")),
    };
    if !info.is_ca {
        return Some("stored CA certificate is not a CA".into());
    }
    if crate::check_key_matches_cert(ca.cert_pem.as_bytes(), ca.key_pem.as_bytes()).is_err() {
        return Some("CA key missing, unreadable or not matching the CA certificate".into());
    }
    expires_within(&info, now, Duration::ZERO).then(|| "CA expired".into())
}

fn leaf_problem(leaf: Option<&CertPair>, ca: &CertPair, now: SystemTime, policy: &Policy) -> Option<String> {
    let Some(leaf) = leaf else {
        return Some("no serving certificate stored".into());
    };
    let info = match parse_cert_pem(leaf.cert_pem.as_bytes()) {
        Ok(info) => info,
        Err(e) => return Some(format!("serving certificate unusable: {e}")),
    };
    if crate::check_key_matches_cert(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).is_err() {
        return Some("serving key missing, unreadable or not matching the certificate".into());
    }
    if let Err(e) = verify_signed_by(leaf.cert_pem.as_bytes(), ca.cert_pem.as_bytes()) {
        return Some(format!("serving certificate not issued by the current CA: {e}"));
    }
    let mut want_dns = policy.dns_names.clone();
    let mut have_dns = info.dns_names.clone();
    want_dns.sort();
    have_dns.sort();
    let mut want_ip = policy.ip_addresses.clone();
    let mut have_ip = info.ip_addresses.clone();
    want_ip.sort();
    have_ip.sort();
    if want_dns != have_dns || want_ip != have_ip {
        return Some("serving certificate names differ from the configured ones".into());
    }
    // Due for renewal, unless a new leaf from this CA would expire no later (it is capped at the CA's
    // expiry): then renewing would repeat forever, and the CA's own renewal takes care of it.
    let ca_not_after = parse_cert_pem(ca.cert_pem.as_bytes()).map(|i| i.not_after).ok();
    let better_possible = ca_not_after.is_some_and(|ca_end| info.not_after + Duration::from_secs(60) < ca_end);
    if expires_within(&info, now, policy.leaf_renew_before) && better_possible {
        return Some("serving certificate is due for renewal".into());
    }
    None
}

fn elapsed_since(then: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(then).unwrap_or_default()
}

/// The next step for `stored` at `now`.
pub fn decide(stored: &Stored, now: SystemTime, policy: &Policy) -> Step {
    if let Some(why) = ca_problem(stored.ca.as_ref(), now) {
        return Step::Bootstrap(why);
    }
    let Some(ca) = stored.ca.as_ref() else {
        return Step::Bootstrap("no CA stored".into());
    };
    match &stored.next_ca {
        Some((next, _)) if ca_problem(Some(next), now).is_some() => return Step::StageNextCa,
        Some((_, staged_at)) if elapsed_since(*staged_at, now) >= policy.overlap => return Step::PromoteNextCa,
        Some(_) => {}
        None => {
            let renew = parse_cert_pem(ca.cert_pem.as_bytes())
                .map(|info| expires_within(&info, now, policy.ca_renew_before))
                .unwrap_or(true);
            if renew {
                return Step::StageNextCa;
            }
        }
    }
    if let Some(why) = leaf_problem(stored.leaf.as_ref(), ca, now, policy) {
        return Step::IssueLeaf(why);
    }
    match &stored.previous_ca {
        Some((_, retired_at)) if elapsed_since(*retired_at, now) >= policy.overlap => Step::DropPreviousCa,
        _ => Step::Keep,
    }
}

fn new_ca(now: SystemTime, policy: &Policy) -> Result<CertPair, CertError> {
    generate_ca(
        &CaSpec {
            common_name: Some("btp-manager-webhook-ca".into()),
            validity: policy.ca_validity,
            key: policy.key,
        },
        now,
    )
}

fn new_leaf(ca: &CertPair, now: SystemTime, policy: &Policy) -> Result<CertPair, CertError> {
    let ca_left = parse_cert_pem(ca.cert_pem.as_bytes())?
        .not_after
        .duration_since(now)
        .unwrap_or_default();
    let spec = LeafSpec {
        common_name: None,
        dns_names: policy.dns_names.clone(),
        ip_addresses: policy.ip_addresses.clone(),
        validity: policy.leaf_validity.min(ca_left),
        key: policy.key,
    };
    generate_leaf(ca, &spec, now)
}

/// Carry out `step`, returning the new content. `Keep` returns `stored` unchanged.
pub fn advance(stored: &Stored, step: &Step, now: SystemTime, policy: &Policy) -> Result<Stored, CertError> {
    let mut next = stored.clone();
    match step {
        Step::Keep => {}
        Step::Bootstrap(_) => {
            let ca = new_ca(now, policy)?;
            next = Stored {
                leaf: Some(new_leaf(&ca, now, policy)?),
                ca: Some(ca),
                next_ca: None,
                previous_ca: None,
            };
        }
        Step::IssueLeaf(_) => {
            let ca = stored.ca.as_ref().ok_or(CertError::NoCertificate)?;
            next.leaf = Some(new_leaf(ca, now, policy)?);
        }
        Step::StageNextCa => next.next_ca = Some((new_ca(now, policy)?, now)),
        Step::PromoteNextCa => {
            let (ca, _) = stored.next_ca.clone().ok_or(CertError::NoCertificate)?;
            next.leaf = Some(new_leaf(&ca, now, policy)?);
            next.previous_ca = stored.ca.as_ref().map(|old| (old.cert_pem.clone(), now));
            next.ca = Some(ca);
            next.next_ca = None;
        }
        Step::DropPreviousCa => next.previous_ca = None,
    }
    Ok(next)
}

/// Bring `stored` to a steady state at `now`: repeat [`decide`]/[`advance`] until `Keep` or a step
/// that must wait (`StageNextCa` starts an overlap, so it is the last step of a round). Returns the new
/// content and the steps taken (empty when nothing changed).
pub fn settle(stored: &Stored, now: SystemTime, policy: &Policy) -> Result<(Stored, Vec<Step>), CertError> {
    let mut current = stored.clone();
    let mut steps = Vec::new();
    for _ in 0..4 {
        let step = decide(&current, now, policy);
        if step == Step::Keep {
            break;
        }
        current = advance(&current, &step, now, policy)?;
        let waits = step == Step::StageNextCa;
        steps.push(step);
        if waits {
            break;
        }
    }
    Ok((current, steps))
}

/// When [`decide`] could next return something other than `Keep` for `stored` (assuming it is settled).
pub fn next_check(stored: &Stored, policy: &Policy) -> Option<SystemTime> {
    let not_after = |pem: &str| parse_cert_pem(pem.as_bytes()).ok().map(|i| i.not_after);
    let candidates = [
        // The CA's renewal window matters only until a next CA is staged.
        stored
            .ca
            .as_ref()
            .filter(|_| stored.next_ca.is_none())
            .and_then(|c| not_after(&c.cert_pem))
            .and_then(|t| t.checked_sub(policy.ca_renew_before)),
        stored
            .leaf
            .as_ref()
            .and_then(|c| not_after(&c.cert_pem))
            .and_then(|t| t.checked_sub(policy.leaf_renew_before)),
        stored
            .next_ca
            .as_ref()
            .and_then(|(_, at)| at.checked_add(policy.overlap)),
        stored
            .previous_ca
            .as_ref()
            .and_then(|(_, at)| at.checked_add(policy.overlap)),
    ];
    candidates.into_iter().flatten().min()
}

#[cfg(test)]
mod tests;
