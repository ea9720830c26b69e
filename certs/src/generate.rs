//! CA and leaf certificate generation.

use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use rsa::rand_core::{OsRng, RngCore};
use time::OffsetDateTime;

use crate::algorithm::KeyAlgorithm;
use crate::error::CertError;
use crate::keys::{generate_key, key_algorithm_of, load_signing_key};
use crate::parse::{first_cert_der, parse_der};
use crate::verify::verify_signed_by;

/// A PEM certificate with its PEM private key (PKCS#8 `PRIVATE KEY` when generated here).
///
/// `Debug` never prints the key.
#[derive(Clone, PartialEq, Eq)]
pub struct CertPair {
    /// The certificate, one `CERTIFICATE` PEM block.
    pub cert_pem: String,
    /// The private key PEM.
    pub key_pem: String,
}

impl fmt::Debug for CertPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertPair")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// What to put into a self-signed CA certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaSpec {
    /// Subject CN; `None` (or an empty string) gives an empty subject DN.
    pub common_name: Option<String>,
    /// NotAfter - NotBefore; at least one second.
    pub validity: Duration,
    /// Key type of the CA.
    pub key: KeyAlgorithm,
}

/// What to put into a leaf (serving/client) certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafSpec {
    /// Subject CN; `None` (or an empty string) gives an empty subject DN.
    pub common_name: Option<String>,
    /// DNS subjectAltNames (ASCII; IDNs must already be punycode).
    pub dns_names: Vec<String>,
    /// IP subjectAltNames.
    pub ip_addresses: Vec<IpAddr>,
    /// NotAfter - NotBefore; at least one second.
    pub validity: Duration,
    /// Key type of the leaf.
    pub key: KeyAlgorithm,
}

/// Converts to whole seconds since the epoch (X.509 times have second resolution), within the
/// range X.509 can express (years 1970..=9999 here).
fn to_x509_time(t: SystemTime, what: &str) -> Result<OffsetDateTime, CertError> {
    let since_epoch = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| CertError::InvalidValidity(format!("{what} is before 1970-01-01")))?;
    let out_of_range = || CertError::InvalidValidity(format!("{what} is after year 9999"));
    let secs = i64::try_from(since_epoch.as_secs()).map_err(|_| out_of_range())?;
    let dt = OffsetDateTime::from_unix_timestamp(secs).map_err(|_| out_of_range())?;
    if dt.year() > 9999 {
        return Err(out_of_range());
    }
    Ok(dt)
}

/// NotBefore = now, NotAfter = now + validity.
fn validity_window(now: SystemTime, validity: Duration) -> Result<(OffsetDateTime, OffsetDateTime), CertError> {
    if validity < Duration::from_secs(1) {
        return Err(CertError::InvalidValidity(format!(
            "validity must be at least one second, got {validity:?}"
        )));
    }
    let not_before = to_x509_time(now, "NotBefore (now)")?;
    let end = now
        .checked_add(validity)
        .ok_or_else(|| CertError::InvalidValidity(format!("now + {validity:?} overflows the clock")))?;
    let not_after = to_x509_time(end, "NotAfter (now + validity)")?;
    Ok((not_before, not_after))
}

/// A random positive 16-byte serial number.
fn random_serial() -> Result<SerialNumber, CertError> {
    let mut bytes = [0u8; 16];
    OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| CertError::Generate(format!("random serial number: {e}")))?;
    bytes[0] &= 0x7f;
    // A zero serial is invalid; astronomically unlikely, but cheap to exclude.
    if bytes.iter().all(|b| *b == 0) {
        bytes[15] = 1;
    }
    Ok(SerialNumber::from_slice(&bytes))
}

fn subject(common_name: &Option<String>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(cn) = common_name.as_deref().filter(|cn| !cn.is_empty()) {
        dn.push(DnType::CommonName, cn);
    }
    dn
}

/// Parameters shared by CA and leaf certificates. `CertificateParams::default()` carries a
/// "rcgen self signed cert" CN, which is replaced here.
fn base_params(
    common_name: &Option<String>,
    validity: Duration,
    now: SystemTime,
) -> Result<CertificateParams, CertError> {
    let (not_before, not_after) = validity_window(now, validity)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = subject(common_name);
    params.not_before = not_before;
    params.not_after = not_after;
    params.serial_number = Some(random_serial()?);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    Ok(params)
}

fn rcgen_err(context: &str) -> impl Fn(rcgen::Error) -> CertError + '_ {
    move |e| CertError::Generate(format!("{context}: {e}"))
}

/// Generates a self-signed CA: basicConstraints CA:true (no path length limit), KeyUsage
/// digitalSignature + keyCertSign + cRLSign, ExtKeyUsage serverAuth + clientAuth, a subject key
/// identifier, NotBefore = `now`, NotAfter = `now + validity` (both truncated to whole seconds).
pub fn generate_ca(spec: &CaSpec, now: SystemTime) -> Result<CertPair, CertError> {
    let mut params = base_params(&spec.common_name, spec.validity, now)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    let key = generate_key(spec.key)?;
    let cert = params.self_signed(&key).map_err(rcgen_err("self-signing the CA"))?;
    Ok(CertPair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Builds an rcgen issuer from a CA certificate and its key, checking that they belong together.
fn ca_issuer(ca: &CertPair) -> Result<Issuer<'static, KeyPair>, CertError> {
    let ca_der = first_cert_der(ca.cert_pem.as_bytes())?;
    let ca_cert = parse_der(&ca_der)?;
    if !crate::parse::is_ca(&ca_cert)? {
        return Err(CertError::NotACa);
    }
    // rcgen re-encodes the issuer DN and panics on an empty RDN; only single-valued RDNs work.
    if ca_cert.subject().iter().any(|rdn| rdn.iter().count() != 1) {
        return Err(CertError::parse(
            "CA certificate",
            "subject has an empty or multi-valued RDN, which is not supported for signing",
        ));
    }
    let key = load_signing_key(ca.key_pem.as_bytes())?;
    if key.public_key_raw() != ca_cert.public_key().subject_public_key.data.as_ref() {
        return Err(CertError::KeyMismatch);
    }
    Issuer::from_ca_cert_der(&ca_der.as_slice().into(), key).map_err(rcgen_err("loading the CA certificate as issuer"))
}

/// Generates a leaf certificate signed by `ca` (whose key is parsed from `ca.key_pem`; PKCS#8,
/// PKCS#1 and SEC1 are accepted) with a fresh `spec.key` key. The leaf is explicitly CA:false,
/// has KeyUsage digitalSignature (+ keyEncipherment for RSA keys), ExtKeyUsage serverAuth +
/// clientAuth, the given DNS/IP SANs, subject and authority key identifiers, and issuer = CA
/// subject. NotBefore = `now`, NotAfter = `now + validity` (truncated to whole seconds).
pub fn generate_leaf(ca: &CertPair, spec: &LeafSpec, now: SystemTime) -> Result<CertPair, CertError> {
    let params = leaf_params(spec, now)?;
    let issuer = ca_issuer(ca)?;
    let key = generate_key(spec.key)?;
    sign_leaf(ca, &params, &issuer, &key)
}

/// Like [`generate_leaf`], but certifies an existing private key (e.g. to renew a certificate
/// without rotating its key). `key_pem` may be PKCS#8, PKCS#1 or SEC1 and must be of the
/// `spec.key` algorithm; the returned `key_pem` is the same key as PKCS#8.
pub fn generate_leaf_with_key(
    ca: &CertPair,
    spec: &LeafSpec,
    key_pem: &str,
    now: SystemTime,
) -> Result<CertPair, CertError> {
    let params = leaf_params(spec, now)?;
    let issuer = ca_issuer(ca)?;
    let key = load_signing_key(key_pem.as_bytes())?;
    let actual = key_algorithm_of(&key)?;
    if actual != spec.key {
        return Err(CertError::InvalidKey(format!(
            "the key is {actual} but the leaf spec asks for {}",
            spec.key
        )));
    }
    sign_leaf(ca, &params, &issuer, &key)
}

fn leaf_params(spec: &LeafSpec, now: SystemTime) -> Result<CertificateParams, CertError> {
    let mut params = base_params(&spec.common_name, spec.validity, now)?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    if spec.key.is_rsa() {
        params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
    }
    for name in &spec.dns_names {
        let ia5 = name
            .as_str()
            .try_into()
            .map_err(|_| CertError::Generate(format!("DNS name {name:?} is not an ASCII (IA5) string")))?;
        params.subject_alt_names.push(SanType::DnsName(ia5));
    }
    params
        .subject_alt_names
        .extend(spec.ip_addresses.iter().copied().map(SanType::IpAddress));
    Ok(params)
}

fn sign_leaf(
    ca: &CertPair,
    params: &CertificateParams,
    issuer: &Issuer<'_, KeyPair>,
    key: &KeyPair,
) -> Result<CertPair, CertError> {
    let cert = params.signed_by(key, issuer).map_err(rcgen_err("signing the leaf"))?;
    let pair = CertPair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    };
    // Cheap self-check (one signature verification): the leaf must chain to the CA.
    verify_signed_by(pair.cert_pem.as_bytes(), ca.cert_pem.as_bytes())?;
    Ok(pair)
}
