//! Chain checks: CA -> leaf signature verification, key/certificate matching.

use x509_parser::error::X509Error;

use crate::error::CertError;
use crate::keys;
use crate::parse::{first_cert_der, is_ca, parse_der};

/// Checks that the first certificate of `leaf_pem` was issued by the first certificate of
/// `ca_pem`: the CA must have basicConstraints CA:true ([`CertError::NotACa`]), the leaf must not
/// ([`CertError::LeafIsCa`]), the leaf signature must verify with the CA public key (ECDSA
/// P-256/P-384, RSA PKCS#1 v1.5 / PSS, Ed25519; [`CertError::BadSignature`]) and the leaf issuer
/// must equal the CA subject ([`CertError::IssuerMismatch`]). Validity dates are not checked.
pub fn verify_signed_by(leaf_pem: &[u8], ca_pem: &[u8]) -> Result<(), CertError> {
    let leaf_der = first_cert_der(leaf_pem)?;
    let ca_der = first_cert_der(ca_pem)?;
    let leaf = parse_der(&leaf_der)?;
    let ca = parse_der(&ca_der)?;
    if !is_ca(&ca)? {
        return Err(CertError::NotACa);
    }
    if is_ca(&leaf)? {
        return Err(CertError::LeafIsCa);
    }
    // RFC 5280 4.1.1.2: the outer (unsigned) algorithm must equal the signed one.
    if leaf.signature_algorithm != leaf.tbs_certificate.signature {
        return Err(CertError::parse(
            "certificate",
            "signatureAlgorithm differs from the TBS signature field",
        ));
    }
    leaf.verify_signature(Some(ca.public_key())).map_err(|e| match e {
        X509Error::SignatureVerificationError => CertError::BadSignature,
        X509Error::SignatureUnsupportedAlgorithm => {
            let sig_oid = leaf.signature_algorithm.algorithm.to_id_string();
            let key_oid = ca.public_key().algorithm.algorithm.to_id_string();
            match (sig_family(&sig_oid), key_family(&key_oid)) {
                // e.g. an ECDSA signature checked against an RSA CA key: that CA did not
                // sign this certificate.
                (Some(sig), Some(key)) if sig != key => CertError::BadSignature,
                _ => CertError::UnsupportedSignatureAlgorithm(sig_oid),
            }
        }
        other => CertError::parse("certificate signature", other),
    })?;
    if leaf.issuer().as_raw() != ca.subject().as_raw() {
        return Err(CertError::IssuerMismatch {
            issuer: leaf.issuer().to_string(),
            ca_subject: ca.subject().to_string(),
        });
    }
    Ok(())
}

#[derive(PartialEq, Eq)]
enum Family {
    Ecdsa,
    Rsa,
    Ed25519,
}

fn sig_family(oid: &str) -> Option<Family> {
    if oid.starts_with("1.2.840.10045.4.") {
        Some(Family::Ecdsa)
    } else if oid.starts_with("1.2.840.113549.1.1.") {
        Some(Family::Rsa)
    } else if oid == "1.3.101.112" {
        Some(Family::Ed25519)
    } else {
        None
    }
}

fn key_family(oid: &str) -> Option<Family> {
    match oid {
        "1.2.840.10045.2.1" => Some(Family::Ecdsa),
        "1.2.840.113549.1.1.1" | "1.2.840.113549.1.1.10" => Some(Family::Rsa),
        "1.3.101.112" => Some(Family::Ed25519),
        _ => None,
    }
}

/// Checks that `key_pem` parses as a private key: PKCS#8 `PRIVATE KEY`, PKCS#1
/// `RSA PRIVATE KEY` or SEC1 `EC PRIVATE KEY` (the first such block; other blocks are skipped).
/// Keys are structurally and mathematically validated, but not compared with any certificate
/// (see [`check_key_matches_cert`]). Encrypted keys are rejected.
pub fn check_key_pem(key_pem: &[u8]) -> Result<(), CertError> {
    keys::check_key(key_pem)
}

/// Checks that `key_pem` is a usable signing key whose public key is the one in the first
/// certificate of `cert_pem`, algorithm and parameters included ([`CertError::KeyMismatch`] otherwise).
pub fn check_key_matches_cert(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), CertError> {
    let der = first_cert_der(cert_pem)?;
    let cert = parse_der(&der)?;
    let key = keys::load_signing_key(key_pem)?;
    if key.public_key_raw() != cert.public_key().subject_public_key.data.as_ref() {
        return Err(CertError::KeyMismatch);
    }
    // The whole SubjectPublicKeyInfo, not only the key bits: a certificate whose key algorithm or curve
    // parameters are damaged carries the right bits, but nothing it signs can be verified against it.
    if rcgen::PublicKeyData::subject_public_key_info(&key) != cert.public_key().raw {
        return Err(CertError::KeyMismatch);
    }
    Ok(())
}
