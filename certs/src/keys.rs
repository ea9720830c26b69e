//! Private keys: generation, PEM loading (PKCS#8, PKCS#1, SEC1) and validation.
//!
//! Error messages here are fixed strings: the messages of the PEM/DER/crypto parsers are never
//! forwarded because some of them quote bytes of their input.

use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_RSA_SHA256};
use rsa::pkcs1::DecodeRsaPublicKey;
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use rsa::rand_core::OsRng;
use rsa::traits::PublicKeyParts;
use rsa::{RsaPrivateKey, RsaPublicKey};

use crate::algorithm::KeyAlgorithm;
use crate::algorithm::ALLOWED_NAMES;
use crate::error::CertError;

/// DER of `AlgorithmIdentifier { rsaEncryption, NULL }`.
const RSA_ALG_ID: &[u8] = &[
    0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
];
/// DER of `AlgorithmIdentifier { id-ecPublicKey, prime256v1 }`.
const EC_P256_ALG_ID: &[u8] = &[
    0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03,
    0x01, 0x07,
];
/// DER of `AlgorithmIdentifier { id-ecPublicKey, secp384r1 }`.
const EC_P384_ALG_ID: &[u8] = &[
    0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22,
];

fn invalid(reason: &str) -> CertError {
    CertError::InvalidKey(reason.to_string())
}

/// Generates a fresh signing key for `alg`.
pub(crate) fn generate_key(alg: KeyAlgorithm) -> Result<KeyPair, CertError> {
    match alg.rsa_bits() {
        None => KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(|e| CertError::Generate(format!("ECDSA P-256 key generation: {e}"))),
        Some(bits) => {
            let key = RsaPrivateKey::new(&mut OsRng, bits)
                .map_err(|e| CertError::Generate(format!("RSA-{bits} key generation: {e}")))?;
            let pkcs8 = key
                .to_pkcs8_der()
                .map_err(|_| CertError::Generate(format!("RSA-{bits} PKCS#8 encoding failed")))?;
            let pair = KeyPair::try_from(pkcs8.as_bytes())
                .map_err(|_| CertError::Generate(format!("RSA-{bits} key rejected by the signer")))?;
            if pair.algorithm() != &PKCS_RSA_SHA256 {
                return Err(CertError::Generate(format!(
                    "RSA-{bits} key loaded with an unexpected signature algorithm"
                )));
            }
            Ok(pair)
        }
    }
}

/// The [`KeyAlgorithm`] of a loaded key (only ECDSA P-256 and RSA 2048/3072/4096 qualify).
pub(crate) fn key_algorithm_of(key: &KeyPair) -> Result<KeyAlgorithm, CertError> {
    if key.algorithm() == &PKCS_ECDSA_P256_SHA256 {
        return Ok(KeyAlgorithm::EcdsaP256);
    }
    if key.algorithm() == &PKCS_RSA_SHA256 {
        let public = RsaPublicKey::from_pkcs1_der(key.public_key_raw())
            .map_err(|_| invalid("cannot decode the RSA public key"))?;
        let bits = u32::try_from(public.n().bits()).unwrap_or(u32::MAX);
        return KeyAlgorithm::from_rsa_bits(bits);
    }
    Err(CertError::UnsupportedKeyAlgorithm {
        value: "a key that is neither ECDSA P-256 nor RSA".to_string(),
        allowed: ALLOWED_NAMES,
    })
}

/// Encodes a DER length.
fn push_der_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
        return;
    }
    let bytes = len.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    let significant = &bytes[skip..];
    out.push(0x80 | significant.len() as u8);
    out.extend_from_slice(significant);
}

/// Wraps a PKCS#1 or SEC1 private key into a PKCS#8 `PrivateKeyInfo` (version 0).
fn wrap_pkcs8(alg_id: &[u8], inner: &[u8]) -> Vec<u8> {
    let mut octets = vec![0x04];
    push_der_len(&mut octets, inner.len());
    octets.extend_from_slice(inner);

    let body_len = 3 + alg_id.len() + octets.len();
    let mut out = Vec::with_capacity(body_len + 6);
    out.push(0x30);
    push_der_len(&mut out, body_len);
    out.extend_from_slice(&[0x02, 0x01, 0x00]);
    out.extend_from_slice(alg_id);
    out.extend_from_slice(&octets);
    out
}

/// The private-key blocks we understand.
enum KeyDer {
    Pkcs8(Vec<u8>),
    Pkcs1(Vec<u8>),
    Sec1(Vec<u8>),
}

/// Finds the first private-key PEM block (other blocks, e.g. certificates, are skipped).
fn private_key_block(key_pem: &[u8]) -> Result<KeyDer, CertError> {
    // pem's error messages can quote an input byte, so they are not forwarded.
    let blocks = pem::parse_many(key_pem).map_err(|_| invalid("malformed PEM"))?;
    for block in blocks {
        match block.tag() {
            "PRIVATE KEY" => return Ok(KeyDer::Pkcs8(block.into_contents())),
            "RSA PRIVATE KEY" => return Ok(KeyDer::Pkcs1(block.into_contents())),
            "EC PRIVATE KEY" => return Ok(KeyDer::Sec1(block.into_contents())),
            "ENCRYPTED PRIVATE KEY" => return Err(invalid("encrypted private keys are not supported")),
            _ => {}
        }
    }
    Err(invalid(
        "no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY PEM block found",
    ))
}

/// Normalises a key block to PKCS#8 DER candidates (SEC1 keys without curve parameters may be
/// either P-256 or P-384, so both wrappings are returned).
fn pkcs8_candidates(key: KeyDer) -> Vec<Vec<u8>> {
    match key {
        KeyDer::Pkcs8(der) => vec![der],
        KeyDer::Pkcs1(der) => vec![wrap_pkcs8(RSA_ALG_ID, &der)],
        KeyDer::Sec1(der) => vec![wrap_pkcs8(EC_P256_ALG_ID, &der), wrap_pkcs8(EC_P384_ALG_ID, &der)],
    }
}

/// Loads a private key PEM (PKCS#8, PKCS#1 or SEC1) as an rcgen signing key.
///
/// Supported by the signer (ring): ECDSA P-256/P-384 (SEC1 keys must embed their public key),
/// Ed25519 and RSA 2048..=8192 bits. RSA keys sign with PKCS#1 v1.5 SHA-256.
pub(crate) fn load_signing_key(key_pem: &[u8]) -> Result<KeyPair, CertError> {
    let block = private_key_block(key_pem)?;
    let is_rsa = matches!(block, KeyDer::Pkcs1(_));
    for der in pkcs8_candidates(block) {
        if let Ok(pair) = KeyPair::try_from(der.as_slice()) {
            return Ok(pair);
        }
    }
    Err(invalid(if is_rsa {
        "not a usable RSA private key (2048 to 8192 bits required)"
    } else {
        "not a usable private key (ECDSA P-256/P-384, Ed25519 or RSA expected)"
    }))
}

/// Checks that `key_pem` holds a well-formed private key; see [`crate::check_key_pem`].
pub(crate) fn check_key(key_pem: &[u8]) -> Result<(), CertError> {
    let block = private_key_block(key_pem)?;
    let is_ec = matches!(block, KeyDer::Sec1(_));
    for der in pkcs8_candidates(block) {
        if KeyPair::try_from(der.as_slice()).is_ok() {
            return Ok(());
        }
        // RSA keys outside ring's signing range (e.g. 1024 bits) are still private keys.
        if !is_ec {
            if let Ok(rsa_key) = RsaPrivateKey::from_pkcs8_der(&der) {
                if rsa_key.validate().is_ok() {
                    return Ok(());
                }
            }
        }
    }
    Err(invalid(if is_ec {
        "not a valid EC private key (P-256 or P-384 with embedded public key expected)"
    } else {
        "not a valid private key"
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_lengths() {
        let mut v = Vec::new();
        push_der_len(&mut v, 0x7f);
        assert_eq!(v, [0x7f]);
        v.clear();
        push_der_len(&mut v, 0x80);
        assert_eq!(v, [0x81, 0x80]);
        v.clear();
        push_der_len(&mut v, 0x1234);
        assert_eq!(v, [0x82, 0x12, 0x34]);
    }

    fn reencode(tag: &str, der: &[u8]) -> String {
        pem::encode(&pem::Pem::new(tag, der.to_vec()))
    }

    /// Strips the PKCS#8 wrapper of a ring-generated P-256 key: the OCTET STRING payload is the
    /// SEC1 `ECPrivateKey` (ring omits its optional curve parameters).
    fn sec1_from_ring_pkcs8(pkcs8: &[u8]) -> Vec<u8> {
        // SEQUENCE(len) INTEGER 0 AlgId OCTET STRING(len) ECPrivateKey
        let body_start = if pkcs8[1] & 0x80 != 0 {
            2 + usize::from(pkcs8[1] & 0x7f)
        } else {
            2
        };
        let alg_end = body_start + 3 + EC_P256_ALG_ID.len();
        assert_eq!(&pkcs8[body_start + 3..alg_end], EC_P256_ALG_ID);
        assert_eq!(pkcs8[alg_end], 0x04);
        let len = usize::from(pkcs8[alg_end + 1]);
        pkcs8[alg_end + 2..alg_end + 2 + len].to_vec()
    }

    /// Inserts the `[0] namedCurve prime256v1` parameters, as OpenSSL writes them.
    fn sec1_with_curve_params(sec1: &[u8]) -> Vec<u8> {
        // 30 len | 02 01 01 | 04 20 <32 bytes> | a1 ... (short-form lengths throughout)
        assert_eq!(&sec1[2..7], &[0x02, 0x01, 0x01, 0x04, 0x20]);
        let split = 2 + 3 + 34;
        let params = [0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
        let mut content = sec1[2..split].to_vec();
        content.extend_from_slice(&params);
        content.extend_from_slice(&sec1[split..]);
        let mut out = vec![0x30];
        push_der_len(&mut out, content.len());
        out.extend_from_slice(&content);
        out
    }

    #[test]
    fn sec1_ec_key_is_accepted_and_usable() {
        let pair = generate_key(KeyAlgorithm::EcdsaP256).unwrap();
        let sec1 = sec1_from_ring_pkcs8(pair.serialized_der());
        for der in [sec1.clone(), sec1_with_curve_params(&sec1)] {
            let pem = reencode("EC PRIVATE KEY", &der);
            check_key(pem.as_bytes()).unwrap();
            let loaded = load_signing_key(pem.as_bytes()).unwrap();
            assert_eq!(loaded.public_key_raw(), pair.public_key_raw());
            assert_eq!(loaded.algorithm(), &PKCS_ECDSA_P256_SHA256);
        }
    }

    #[test]
    fn small_pkcs1_rsa_key_is_a_key_but_not_a_signing_key() {
        use rsa::pkcs1::EncodeRsaPrivateKey;
        let key = RsaPrivateKey::new(&mut OsRng, 1024).unwrap();
        let der = key.to_pkcs1_der().unwrap();
        let pem = reencode("RSA PRIVATE KEY", der.as_bytes());
        check_key(pem.as_bytes()).unwrap();
        let err = load_signing_key(pem.as_bytes()).unwrap_err();
        assert!(matches!(err, CertError::InvalidKey(_)), "{err}");
    }

    #[test]
    fn garbage_keys_are_rejected_without_echoing_input() {
        let secret = "c2VjcmV0LWtleS1tYXRlcmlhbA";
        let inputs = [
            String::new(),
            "not a pem".to_string(),
            format!("-----BEGIN PRIVATE KEY-----\n{secret}\n-----END PRIVATE KEY-----\n"),
            format!("-----BEGIN RSA PRIVATE KEY-----\n{secret}==\n-----END RSA PRIVATE KEY-----\n"),
            format!("-----BEGIN EC PRIVATE KEY-----\nAAAA{secret}\n-----END EC PRIVATE KEY-----\n"),
            "-----BEGIN PRIVATE KEY-----\nMAA=\n-----END PRIVATE KEY-----\n".to_string(),
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMAA=\n-----END ENCRYPTED PRIVATE KEY-----\n".to_string(),
            "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n".to_string(),
        ];
        for input in &inputs {
            let err = check_key(input.as_bytes()).unwrap_err();
            assert!(matches!(err, CertError::InvalidKey(_)), "{input:?}: {err}");
            assert!(!err.to_string().contains(secret));
            assert!(!format!("{err:?}").contains(secret));
            assert!(load_signing_key(input.as_bytes()).is_err());
        }
    }
}
