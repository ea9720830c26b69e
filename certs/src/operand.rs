//! The operand's (SAP BTP service operator's) admission-webhook certificates
//! (docs/behaviour.md#operand-certificates).
//!
//! Two Secrets in the operand's namespace hold them: [`CA_SECRET`] (`ca.crt`, `ca.key`: a self-signed
//! CA) and [`WEBHOOK_SECRET`] (`tls.crt`, `tls.key`: the serving certificate, signed by that CA and
//! mounted by the operand Deployment). The raw PEM of `ca.crt` is the `caBundle` of every webhook of
//! both [`WEBHOOK_CONFIGURATIONS`].
//!
//! Everything here is a pure function of the Secret data (`BTreeMap<String, Vec<u8>>`), the time and
//! the [`Settings`]: [`decide`] says whether to regenerate and why, [`regenerate`] produces the new
//! certificates, and [`to_ca_secret_data`] / [`to_webhook_secret_data`] / [`ca_bundle`] give what to
//! write. The caller applies the Secrets and webhook configurations and counts regenerations.
//!
//! [`decide`] follows the decision procedure of docs/behaviour.md#operand-certificates; where this module
//! differs from the Go manager or adds to it, the difference is documented at [`decide`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use crate::parse::{first_cert_der, parse_der};
use crate::{
    check_key_matches_cert, generate_ca, generate_leaf, parse_cert_pem, verify_signed_by, CaSpec, CertError, CertInfo,
    CertPair, KeyAlgorithm, LeafSpec,
};

pub use btp_api::names::operand::{
    CA_SECRET, MUTATING_WEBHOOK_CONFIGURATION, VALIDATING_WEBHOOK_CONFIGURATION, WEBHOOK_SECRET, WEBHOOK_SERVICE,
};
/// Both webhook configurations; every `webhooks[].clientConfig.caBundle` of each gets [`ca_bundle`].
pub const WEBHOOK_CONFIGURATIONS: [&str; 2] = [MUTATING_WEBHOOK_CONFIGURATION, VALIDATING_WEBHOOK_CONFIGURATION];
/// The operand's default namespace (the Go manager's ChartNamespace default).
pub const DEFAULT_NAMESPACE: &str = "kyma-system";

/// Keys of the two Secrets' data.
pub mod keys {
    /// CA certificate (PEM) in [`super::CA_SECRET`]; also the `caBundle`.
    pub const CA_CRT: &str = "ca.crt";
    /// CA private key (PEM) in [`super::CA_SECRET`].
    pub const CA_KEY: &str = "ca.key";
    /// Serving certificate (PEM) in [`super::WEBHOOK_SECRET`].
    pub const TLS_CRT: &str = "tls.crt";
    /// Serving private key (PEM) in [`super::WEBHOOK_SECRET`].
    pub const TLS_KEY: &str = "tls.key";
}

const HOUR: Duration = Duration::from_secs(3600);

/// Lifetimes, expiry boundary, key type and namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Validity of a new CA (the Go manager's `CaCertificateExpiration`, default 87600h = 10 years).
    pub ca_validity: Duration,
    /// Validity of a new webhook certificate (the Go manager's `WebhookCertificateExpiration`, default
    /// 8760h = 1 year). Not capped at the CA's remaining validity (the Go manager does not cap it).
    pub webhook_validity: Duration,
    /// How long before NotAfter a certificate counts as expiring: it is expiring when
    /// `now > NotAfter - expiration_boundary`. The Go manager's `ExpirationBoundary` is the negative
    /// offset `-168h` added to NotAfter; this is its magnitude (default 168h = 7 days).
    pub expiration_boundary: Duration,
    /// Key type of new certificates (default ECDSA P-256).
    pub key: KeyAlgorithm,
    /// The operand's namespace (ChartNamespace, default `kyma-system`): where the Secrets live and
    /// what the serving certificate's DNS names are derived from.
    pub namespace: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            ca_validity: 87_600 * HOUR,
            webhook_validity: 8_760 * HOUR,
            expiration_boundary: 168 * HOUR,
            key: KeyAlgorithm::EcdsaP256,
            namespace: DEFAULT_NAMESPACE.to_string(),
        }
    }
}

impl Settings {
    /// The serving certificate's DNS names for [`Settings::namespace`]; see [`webhook_dns_names`].
    pub fn dns_names(&self) -> Vec<String> {
        webhook_dns_names(&self.namespace)
    }
}

/// DNS names of the serving certificate: `sap-btp-operator-webhook-service.<ns>.svc` (the name the
/// API server connects to), `sap-btp-operator-webhook-service.<ns>` (both as in the Go manager, which
/// hard-codes `kyma-system`) and `sap-btp-operator-webhook-service.<ns>.svc.cluster.local`.
pub fn webhook_dns_names(namespace: &str) -> Vec<String> {
    vec![
        format!("{WEBHOOK_SERVICE}.{namespace}.svc"),
        format!("{WEBHOOK_SERVICE}.{namespace}"),
        format!("{WEBHOOK_SERVICE}.{namespace}.svc.cluster.local"),
    ]
}

/// Why certificates are regenerated. The [`fmt::Display`] text is a short sentence for a Kubernetes
/// Event or a log line; it never contains Secret content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The CA Secret does not exist.
    CaSecretMissing,
    /// The CA Secret has no `ca.crt`.
    CaCertMissing,
    /// The CA Secret has no `ca.key`.
    CaKeyMissing,
    /// `ca.crt` is empty (or only whitespace).
    CaCertEmpty,
    /// `ca.key` is empty (or only whitespace).
    CaKeyEmpty,
    /// `ca.crt` is not a PEM X.509 certificate.
    CaUnparsable,
    /// The CA certificate expires within the boundary (or has expired).
    CaExpiring {
        /// The configured [`Settings::expiration_boundary`].
        boundary: Duration,
    },
    /// The CA certificate's NotBefore is after now.
    CaNotYetValid,
    /// `ca.crt` does not have basicConstraints CA:true.
    CaNotACa,
    /// `ca.crt` has a keyUsage extension without keyCertSign.
    CaCannotSignCertificates,
    /// `ca.crt` has an extendedKeyUsage extension without serverAuth.
    CaNotForServerAuth,
    /// A new webhook certificate is needed, but `ca.key` is unreadable, not usable for signing or
    /// does not belong to `ca.crt`.
    CaKeyUnusable,
    /// A new webhook certificate is needed, but the CA's subject (an empty or multi-valued RDN)
    /// cannot be used as the issuer name.
    CaSubjectUnsupported,
    /// The webhook Secret does not exist.
    WebhookSecretMissing,
    /// The webhook Secret has no `tls.crt`.
    WebhookCertMissing,
    /// The webhook Secret has no `tls.key`.
    WebhookKeyMissing,
    /// `tls.crt` is empty (or only whitespace).
    WebhookCertEmpty,
    /// `tls.key` is empty (or only whitespace).
    WebhookKeyEmpty,
    /// `tls.crt` is not a PEM X.509 certificate.
    WebhookUnparsable,
    /// The webhook certificate expires within the boundary (or has expired).
    WebhookExpiring {
        /// The configured [`Settings::expiration_boundary`].
        boundary: Duration,
    },
    /// The webhook certificate does not name `sap-btp-operator-webhook-service.<namespace>.svc`.
    WebhookNamesMismatch,
    /// The webhook certificate is not signed by the current CA.
    WebhookNotSignedByCa,
    /// The webhook certificate is itself a CA.
    WebhookIsCa,
    /// The webhook certificate has an extendedKeyUsage extension without serverAuth.
    WebhookNotForServerAuth,
    /// The webhook certificate's NotBefore is after now.
    WebhookNotYetValid,
}

/// `168h`, `90m`, `45s` (or the `Debug` form for sub-second values).
fn short_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let (hours, minutes) = (secs / 3600, secs / 60);
    if d.subsec_nanos() != 0 {
        format!("{d:?}")
    } else if hours * 3600 == secs {
        format!("{hours}h")
    } else if minutes * 60 == secs {
        format!("{minutes}m")
    } else {
        format!("{secs}s")
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use keys::{CA_CRT, CA_KEY, TLS_CRT, TLS_KEY};
        match self {
            Reason::CaSecretMissing => write!(f, "Secret {CA_SECRET} does not exist"),
            Reason::CaCertMissing => write!(f, "Secret {CA_SECRET} has no {CA_CRT} entry"),
            Reason::CaKeyMissing => write!(f, "Secret {CA_SECRET} has no {CA_KEY} entry"),
            Reason::CaCertEmpty => write!(f, "{CA_CRT} in Secret {CA_SECRET} is empty"),
            Reason::CaKeyEmpty => write!(f, "{CA_KEY} in Secret {CA_SECRET} is empty"),
            Reason::CaUnparsable => write!(f, "{CA_CRT} in Secret {CA_SECRET} is not a valid PEM X.509 certificate"),
            Reason::CaExpiring { boundary } => write!(
                f,
                "CA certificate expires within the {} boundary",
                short_duration(*boundary)
            ),
            Reason::CaNotYetValid => f.write_str("CA certificate is not valid yet"),
            Reason::CaNotACa => write!(f, "{CA_CRT} in Secret {CA_SECRET} is not a CA certificate"),
            Reason::CaCannotSignCertificates => f.write_str("CA certificate's key usage does not allow signing certificates"),
            Reason::CaNotForServerAuth => {
                f.write_str("CA certificate's extended key usage does not allow server authentication")
            }
            Reason::CaKeyUnusable => write!(
                f,
                "{CA_KEY} in Secret {CA_SECRET} cannot sign a new webhook certificate (unreadable, unsupported or not matching {CA_CRT})"
            ),
            Reason::CaSubjectUnsupported => {
                f.write_str("CA certificate's subject cannot be used as the issuer of a new webhook certificate")
            }
            Reason::WebhookSecretMissing => write!(f, "Secret {WEBHOOK_SECRET} does not exist"),
            Reason::WebhookCertMissing => write!(f, "Secret {WEBHOOK_SECRET} has no {TLS_CRT} entry"),
            Reason::WebhookKeyMissing => write!(f, "Secret {WEBHOOK_SECRET} has no {TLS_KEY} entry"),
            Reason::WebhookCertEmpty => write!(f, "{TLS_CRT} in Secret {WEBHOOK_SECRET} is empty"),
            Reason::WebhookKeyEmpty => write!(f, "{TLS_KEY} in Secret {WEBHOOK_SECRET} is empty"),
            Reason::WebhookUnparsable => write!(
                f,
                "{TLS_CRT} in Secret {WEBHOOK_SECRET} is not a valid PEM X.509 certificate"
            ),
            Reason::WebhookExpiring { boundary } => write!(
                f,
                "webhook certificate expires within the {} boundary",
                short_duration(*boundary)
            ),
            Reason::WebhookNamesMismatch => write!(
                f,
                "webhook certificate is not valid for the webhook Service name in the operand namespace"
            ),
            Reason::WebhookNotSignedByCa => f.write_str("webhook certificate is not signed by the current CA"),
            Reason::WebhookIsCa => f.write_str("webhook certificate is a CA certificate"),
            Reason::WebhookNotForServerAuth => {
                f.write_str("webhook certificate's extended key usage does not allow server authentication")
            }
            Reason::WebhookNotYetValid => f.write_str("webhook certificate is not valid yet"),
        }
    }
}

/// What to do with the operand's certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Both Secrets are fine; the webhooks get the existing `ca.crt` as `caBundle`.
    Keep,
    /// A new webhook certificate signed by the existing CA; only the webhook Secret is written.
    WebhookOnly(Reason),
    /// A new CA and a new webhook certificate; both Secrets are written.
    Full(Reason),
}

impl Decision {
    /// Why certificates are regenerated; `None` for [`Decision::Keep`].
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Decision::Keep => None,
            Decision::WebhookOnly(r) | Decision::Full(r) => Some(*r),
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Keep => f.write_str("certificates are valid"),
            Decision::WebhookOnly(r) => write!(f, "regenerating the webhook certificate: {r}"),
            Decision::Full(r) => write!(f, "regenerating the CA and webhook certificates: {r}"),
        }
    }
}

/// The certificate entry of one Secret whose cert and key entries are both present and non-empty,
/// or which one is missing/empty (the key's content is not looked at).
enum Entries<'a> {
    Ok(&'a [u8]),
    CertMissing,
    KeyMissing,
    CertEmpty,
    KeyEmpty,
}

fn is_blank(value: &[u8]) -> bool {
    value.iter().all(u8::is_ascii_whitespace)
}

fn entries<'a>(data: &'a BTreeMap<String, Vec<u8>>, cert_key: &str, key_key: &str) -> Entries<'a> {
    let (Some(cert), Some(key)) = (data.get(cert_key), data.get(key_key)) else {
        return if data.contains_key(cert_key) {
            Entries::KeyMissing
        } else {
            Entries::CertMissing
        };
    };
    if is_blank(cert) {
        Entries::CertEmpty
    } else if is_blank(key) {
        Entries::KeyEmpty
    } else {
        Entries::Ok(cert)
    }
}

/// The Go manager's expiry test: `now > NotAfter + ExpirationBoundary` with a negative boundary.
fn expiring(info: &CertInfo, now: SystemTime, boundary: Duration) -> bool {
    info.not_after.checked_sub(boundary).is_none_or(|limit| now > limit)
}

/// What the keyUsage / extendedKeyUsage extensions allow (`true` when the extension is absent).
struct Usage {
    cert_sign: bool,
    server_auth: bool,
}

fn usage(cert_pem: &[u8]) -> Result<Usage, CertError> {
    let der = first_cert_der(cert_pem)?;
    let cert = parse_der(&der)?;
    let ku = cert
        .key_usage()
        .map_err(|e| CertError::parse("certificate keyUsage", e))?;
    let eku = cert
        .extended_key_usage()
        .map_err(|e| CertError::parse("certificate extendedKeyUsage", e))?;
    Ok(Usage {
        cert_sign: ku.is_none_or(|ext| ext.value.key_cert_sign()),
        server_auth: eku.is_none_or(|ext| ext.value.any || ext.value.server_auth),
    })
}

/// Step 2: the CA Secret is usable. Returns `ca.crt`.
fn check_ca<'a>(data: &'a BTreeMap<String, Vec<u8>>, now: SystemTime, settings: &Settings) -> Result<&'a [u8], Reason> {
    let cert = match entries(data, keys::CA_CRT, keys::CA_KEY) {
        Entries::Ok(cert) => cert,
        Entries::CertMissing => return Err(Reason::CaCertMissing),
        Entries::KeyMissing => return Err(Reason::CaKeyMissing),
        Entries::CertEmpty => return Err(Reason::CaCertEmpty),
        Entries::KeyEmpty => return Err(Reason::CaKeyEmpty),
    };
    let info = parse_cert_pem(cert).map_err(|_| Reason::CaUnparsable)?;
    let usage = usage(cert).map_err(|_| Reason::CaUnparsable)?;
    if expiring(&info, now, settings.expiration_boundary) {
        return Err(Reason::CaExpiring {
            boundary: settings.expiration_boundary,
        });
    }
    // The Go manager finds these at chain-verification time (Go's x509 Verify with the CA as root),
    // which leads to full regeneration as well; checking them here also covers a missing webhook
    // Secret, where the Go manager would first issue a leaf from an unusable CA.
    if now < info.not_before {
        return Err(Reason::CaNotYetValid);
    }
    if !info.is_ca {
        return Err(Reason::CaNotACa);
    }
    if !usage.cert_sign {
        return Err(Reason::CaCannotSignCertificates);
    }
    if !usage.server_auth {
        return Err(Reason::CaNotForServerAuth);
    }
    Ok(cert)
}

/// Step 4: the webhook Secret. `Err(Decision)` when something must be regenerated.
fn check_webhook(
    data: &BTreeMap<String, Vec<u8>>,
    ca_cert: &[u8],
    now: SystemTime,
    settings: &Settings,
) -> Result<(), Decision> {
    use Decision::{Full, WebhookOnly};
    let cert = match entries(data, keys::TLS_CRT, keys::TLS_KEY) {
        Entries::Ok(cert) => cert,
        Entries::CertMissing => return Err(WebhookOnly(Reason::WebhookCertMissing)),
        Entries::KeyMissing => return Err(WebhookOnly(Reason::WebhookKeyMissing)),
        Entries::CertEmpty => return Err(WebhookOnly(Reason::WebhookCertEmpty)),
        Entries::KeyEmpty => return Err(WebhookOnly(Reason::WebhookKeyEmpty)),
    };
    let info = parse_cert_pem(cert).map_err(|_| WebhookOnly(Reason::WebhookUnparsable))?;
    let usage = usage(cert).map_err(|_| WebhookOnly(Reason::WebhookUnparsable))?;
    if expiring(&info, now, settings.expiration_boundary) {
        return Err(WebhookOnly(Reason::WebhookExpiring {
            boundary: settings.expiration_boundary,
        }));
    }
    let service_name = format!("{WEBHOOK_SERVICE}.{}.svc", settings.namespace);
    if !info.dns_names.iter().any(|n| n.eq_ignore_ascii_case(&service_name)) {
        return Err(WebhookOnly(Reason::WebhookNamesMismatch));
    }
    // Chain verification: any failure means full regeneration.
    match verify_signed_by(cert, ca_cert) {
        Ok(()) => {}
        Err(CertError::LeafIsCa) => return Err(Full(Reason::WebhookIsCa)),
        Err(CertError::NotACa) => return Err(Full(Reason::CaNotACa)),
        Err(_) => return Err(Full(Reason::WebhookNotSignedByCa)),
    }
    if !usage.server_auth {
        return Err(Full(Reason::WebhookNotForServerAuth));
    }
    if now < info.not_before {
        return Err(Full(Reason::WebhookNotYetValid));
    }
    Ok(())
}

/// Whether the stored CA can issue a new webhook certificate (what [`regenerate`] needs for
/// [`Decision::WebhookOnly`]).
fn check_can_issue(ca_data: &BTreeMap<String, Vec<u8>>) -> Result<(), Reason> {
    let (Some(cert), Some(key)) = (ca_data.get(keys::CA_CRT), ca_data.get(keys::CA_KEY)) else {
        return Err(Reason::CaKeyUnusable);
    };
    check_key_matches_cert(cert, key).map_err(|_| Reason::CaKeyUnusable)?;
    let der = first_cert_der(cert).map_err(|_| Reason::CaUnparsable)?;
    let parsed = parse_der(&der).map_err(|_| Reason::CaUnparsable)?;
    // The signer re-encodes the issuer name and supports only single-valued RDNs.
    if parsed.subject().iter().any(|rdn| rdn.iter().count() != 1) {
        return Err(Reason::CaSubjectUnsupported);
    }
    Ok(())
}

/// Decides whether the operand's certificates must be regenerated (docs/behaviour.md#operand-certificates).
///
/// `ca_secret` / `webhook_secret` are the data of [`CA_SECRET`] / [`WEBHOOK_SECRET`], `None` when the
/// Secret does not exist.
///
/// 1. No CA Secret ⇒ [`Decision::Full`].
/// 2. The CA Secret must have non-empty `ca.crt` and `ca.key`, `ca.crt` must parse as X.509 and must
///    not be expiring (`now > NotAfter - expiration_boundary`); it must also be usable as the only
///    root of a chain: CA:true, keyCertSign (if keyUsage is present), serverAuth (if
///    extendedKeyUsage is present), NotBefore not after now. Any failure ⇒ [`Decision::Full`].
/// 3. No webhook Secret ⇒ [`Decision::WebhookOnly`].
/// 4. The webhook Secret must have non-empty `tls.crt` and `tls.key`, `tls.crt` must parse and must
///    not be expiring, else [`Decision::WebhookOnly`]. Then chain verification, where any failure
///    ⇒ [`Decision::Full`]: signed by `ca.crt` (signature and issuer name), not a CA itself,
///    serverAuth (if extendedKeyUsage is present), NotBefore not after now.
/// 5. Otherwise [`Decision::Keep`].
///
/// As in the Go manager, private keys are not parsed nor checked against their certificates (a
/// garbage `tls.key` is kept, and the operand fails to serve with it until someone fixes or deletes
/// the Secret); only their presence is. Empty counts as whitespace-only.
///
/// Differences from the Go manager:
/// * The Go manager verifies the chain with Go's `x509.Verify`, which also checks validity dates,
///   the CA's keyCertSign and the serverAuth usage; these are checked explicitly here. The CA's own
///   properties are checked in step 2 (⇒ full regeneration even without a webhook Secret).
/// * Step 4 also requires the webhook certificate to name `sap-btp-operator-webhook-service.<ns>.svc`
///   (⇒ [`Reason::WebhookNamesMismatch`], webhook only): the Go manager hard-codes `kyma-system` in
///   the names and never checks them, which would keep a certificate the API server rejects after
///   the namespace changed or when taking over the Go manager's Secrets in another namespace.
/// * A webhook-only decision becomes [`Decision::Full`] when the stored CA cannot sign the new
///   certificate ([`Reason::CaKeyUnusable`], [`Reason::CaSubjectUnsupported`]); the Go manager would
///   fail to generate on every reconcile instead.
pub fn decide(
    ca_secret: Option<&BTreeMap<String, Vec<u8>>>,
    webhook_secret: Option<&BTreeMap<String, Vec<u8>>>,
    now: SystemTime,
    settings: &Settings,
) -> Decision {
    let Some(ca_data) = ca_secret else {
        return Decision::Full(Reason::CaSecretMissing);
    };
    let ca_cert = match check_ca(ca_data, now, settings) {
        Ok(cert) => cert,
        Err(reason) => return Decision::Full(reason),
    };
    let decision = match webhook_secret {
        None => Decision::WebhookOnly(Reason::WebhookSecretMissing),
        Some(data) => match check_webhook(data, ca_cert, now, settings) {
            Ok(()) => Decision::Keep,
            Err(decision) => decision,
        },
    };
    match decision {
        Decision::WebhookOnly(_) => match check_can_issue(ca_data) {
            Ok(()) => decision,
            Err(reason) => Decision::Full(reason),
        },
        other => other,
    }
}

/// A CA and a webhook certificate signed by it, as written to the two Secrets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperandCerts {
    /// The CA ([`CA_SECRET`]); for a webhook-only regeneration, the stored one unchanged.
    pub ca: CertPair,
    /// The webhook serving certificate ([`WEBHOOK_SECRET`]).
    pub webhook: CertPair,
}

impl OperandCerts {
    /// The `caBundle`: the PEM of the CA certificate.
    pub fn ca_bundle(&self) -> Vec<u8> {
        self.ca.cert_pem.as_bytes().to_vec()
    }
}

fn new_webhook(ca: &CertPair, now: SystemTime, settings: &Settings) -> Result<CertPair, CertError> {
    let spec = LeafSpec {
        common_name: None,
        dns_names: settings.dns_names(),
        ip_addresses: vec![],
        validity: settings.webhook_validity,
        key: settings.key,
    };
    generate_leaf(ca, &spec, now)
}

fn stored_ca(ca_secret: Option<&BTreeMap<String, Vec<u8>>>) -> Result<CertPair, CertError> {
    let data = ca_secret.ok_or(CertError::NoCertificate)?;
    let cert = data.get(keys::CA_CRT).ok_or(CertError::NoCertificate)?;
    let key = data
        .get(keys::CA_KEY)
        .ok_or_else(|| CertError::InvalidKey(format!("{} has no {}", CA_SECRET, keys::CA_KEY)))?;
    Ok(CertPair {
        cert_pem: String::from_utf8(cert.clone()).map_err(|_| CertError::parse("CA certificate", "not UTF-8"))?,
        key_pem: String::from_utf8(key.clone()).map_err(|_| CertError::InvalidKey("the CA key is not UTF-8".into()))?,
    })
}

/// Carries out `decision`: [`Decision::Keep`] ⇒ `None`; [`Decision::Full`] ⇒ a new CA (empty subject,
/// `ca_validity`, CA:true, keyUsage digitalSignature + keyCertSign (+ cRLSign), extendedKeyUsage
/// serverAuth + clientAuth) and a webhook certificate signed by it; [`Decision::WebhookOnly`] ⇒ a
/// webhook certificate signed by the CA in `ca_secret`, which is returned byte-for-byte unchanged.
///
/// The webhook certificate has an empty subject, the DNS names of [`webhook_dns_names`] for
/// [`Settings::namespace`], CA:false, keyUsage digitalSignature (+ keyEncipherment for RSA),
/// extendedKeyUsage serverAuth + clientAuth, NotBefore `now` and NotAfter `now + webhook_validity`,
/// not capped at the CA's NotAfter (as in the Go manager). The Secrets store RSA keys as PKCS#1 PEM, as
/// the Go manager does, and ECDSA keys as PKCS#8 (see [`to_ca_secret_data`]).
pub fn regenerate(
    decision: &Decision,
    ca_secret: Option<&BTreeMap<String, Vec<u8>>>,
    now: SystemTime,
    settings: &Settings,
) -> Result<Option<OperandCerts>, CertError> {
    let ca = match decision {
        Decision::Keep => return Ok(None),
        Decision::Full(_) => generate_ca(
            &CaSpec {
                common_name: None,
                validity: settings.ca_validity,
                key: settings.key,
            },
            now,
        )?,
        Decision::WebhookOnly(_) => stored_ca(ca_secret)?,
    };
    let webhook = new_webhook(&ca, now, settings)?;
    Ok(Some(OperandCerts { ca, webhook }))
}

/// The `caBundle` for both webhook configurations: the raw PEM of the regenerated CA if there is one,
/// else the stored `ca.crt`. `None` when neither exists.
pub fn ca_bundle(ca_secret: Option<&BTreeMap<String, Vec<u8>>>, regenerated: Option<&OperandCerts>) -> Option<Vec<u8>> {
    match regenerated {
        Some(certs) => Some(certs.ca_bundle()),
        None => ca_secret.and_then(|data| data.get(keys::CA_CRT)).cloned(),
    }
}

/// Data of [`CA_SECRET`]: `ca.crt` and `ca.key` (see [`stored_key`]).
pub fn to_ca_secret_data(ca: &CertPair) -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([
        (keys::CA_CRT.to_string(), ca.cert_pem.as_bytes().to_vec()),
        (keys::CA_KEY.to_string(), stored_key(&ca.key_pem)),
    ])
}

/// Data of [`WEBHOOK_SECRET`]: `tls.crt` and `tls.key` (see [`stored_key`]).
pub fn to_webhook_secret_data(webhook: &CertPair) -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([
        (keys::TLS_CRT.to_string(), webhook.cert_pem.as_bytes().to_vec()),
        (keys::TLS_KEY.to_string(), stored_key(&webhook.key_pem)),
    ])
}

/// A private key as the operand's certificate Secrets store it: an RSA key as PKCS#1 PEM (`RSA PRIVATE
/// KEY`), the one form the Go BTP Manager reads when it signs a renewed serving certificate with the stored
/// CA key, so that a cluster rolled back to it keeps working (docs/upgrading.md#rolling-back-to-the-go-btp-manager);
/// any other key (ECDSA) as it is.
fn stored_key(key_pem: &str) -> Vec<u8> {
    use rsa::pkcs1::EncodeRsaPrivateKey as _;
    use rsa::pkcs8::DecodePrivateKey as _;
    let unchanged = || key_pem.as_bytes().to_vec();
    let Ok(block) = pem::parse(key_pem) else {
        return unchanged();
    };
    if block.tag() != "PRIVATE KEY" {
        return unchanged();
    }
    let Ok(key) = rsa::RsaPrivateKey::from_pkcs8_der(block.contents()) else {
        return unchanged();
    };
    match key.to_pkcs1_der() {
        Ok(der) => pem::encode_config(
            &pem::Pem::new("RSA PRIVATE KEY", der.as_bytes().to_vec()),
            pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
        )
        .into_bytes(),
        Err(_) => unchanged(),
    }
}

#[cfg(test)]
mod tests;
