//! The crate's error type.
//!
//! No variant ever carries private-key material: errors raised while handling keys use fixed,
//! hand-written reasons instead of forwarding the messages of the underlying parsers.

/// Everything that can go wrong while generating, parsing or checking certificates and keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// The input contains no `CERTIFICATE` PEM block.
    #[error("no CERTIFICATE PEM block found")]
    NoCertificate,
    /// The input could not be decoded (PEM framing, base64, DER or X.509 structure).
    #[error("cannot parse {what}: {reason}")]
    Parse {
        /// What was being parsed ("PEM", "certificate", ...).
        what: &'static str,
        /// Why it failed (never contains key material).
        reason: String,
    },
    /// The certificate used as issuer does not have basicConstraints CA:true.
    #[error("the issuer certificate is not a CA (basicConstraints CA:true is missing)")]
    NotACa,
    /// The certificate checked as a leaf is itself a CA.
    #[error("the leaf certificate is a CA certificate (basicConstraints CA:true)")]
    LeafIsCa,
    /// The leaf's signature does not verify with the CA's public key.
    #[error("the certificate signature does not verify with the CA public key")]
    BadSignature,
    /// The leaf's issuer name differs from the CA's subject although the signature verifies.
    #[error("the certificate issuer {issuer:?} does not match the CA subject {ca_subject:?}")]
    IssuerMismatch {
        /// The leaf's issuer DN.
        issuer: String,
        /// The CA's subject DN.
        ca_subject: String,
    },
    /// The certificate is signed with an algorithm this crate cannot verify.
    #[error("unsupported signature algorithm {0}")]
    UnsupportedSignatureAlgorithm(String),
    /// Key or certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Generate(String),
    /// The requested validity period is unusable (zero, too large, before 1970...).
    #[error("invalid validity period: {0}")]
    InvalidValidity(String),
    /// An unknown key algorithm name or RSA key size.
    #[error("unsupported key algorithm {value:?}; allowed values: {allowed}")]
    UnsupportedKeyAlgorithm {
        /// What was asked for.
        value: String,
        /// The accepted values.
        allowed: &'static str,
    },
    /// The private key PEM could not be parsed or is not a usable private key.
    #[error("invalid private key: {0}")]
    InvalidKey(String),
    /// The private key does not belong to the certificate.
    #[error("the private key does not match the certificate's public key")]
    KeyMismatch,
}

impl CertError {
    pub(crate) fn parse(what: &'static str, reason: impl ToString) -> Self {
        CertError::Parse {
            what,
            reason: reason.to_string(),
        }
    }
}
