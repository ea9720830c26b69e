//! RSA generation and chains. RSA key generation is slow in debug builds, so the whole file
//! generates three RSA-2048 keys, one RSA-3072 key and one RSA-4096 key, sharing fixtures.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use btp_certs::{
    check_key_matches_cert, check_key_pem, generate_ca, generate_leaf, parse_cert_pem,
    verify_signed_by, CaSpec, CertError, CertPair, KeyAlgorithm, LeafSpec,
};
use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey;
use x509_parser::oid_registry::{OID_PKCS1_RSAENCRYPTION, OID_PKCS1_SHA256WITHRSA};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn ca_spec(key: KeyAlgorithm) -> CaSpec {
    CaSpec {
        common_name: Some(format!("btp-manager-ca-{key}")),
        validity: 365 * DAY,
        key,
    }
}

fn leaf_spec(key: KeyAlgorithm) -> LeafSpec {
    LeafSpec {
        common_name: None,
        dns_names: vec!["btp-manager-webhook-service.kyma-system.svc".into()],
        ip_addresses: vec![],
        validity: 30 * DAY,
        key,
    }
}

/// The RSA-2048 CA shared by the tests of this file (one key generation).
fn rsa_ca() -> &'static CertPair {
    static CA: OnceLock<CertPair> = OnceLock::new();
    CA.get_or_init(|| generate_ca(&ca_spec(KeyAlgorithm::Rsa2048), SystemTime::now()).unwrap())
}

fn ecdsa_ca() -> &'static CertPair {
    static CA: OnceLock<CertPair> = OnceLock::new();
    CA.get_or_init(|| generate_ca(&ca_spec(KeyAlgorithm::EcdsaP256), SystemTime::now()).unwrap())
}

fn der(pem_str: &str) -> Vec<u8> {
    pem::parse(pem_str).unwrap().into_contents()
}

/// Checks public key type/size and the signature algorithm of a certificate.
fn assert_rsa_cert(cert_pem: &str, bits: usize, signed_with_rsa: bool) {
    let der = der(cert_pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let spki = cert.public_key();
    assert_eq!(spki.algorithm.algorithm, OID_PKCS1_RSAENCRYPTION);
    match spki.parsed().unwrap() {
        x509_parser::public_key::PublicKey::RSA(rsa) => assert_eq!(rsa.key_size(), bits),
        other => panic!("unexpected public key {other:?}"),
    }
    if signed_with_rsa {
        assert_eq!(cert.signature_algorithm.algorithm, OID_PKCS1_SHA256WITHRSA);
    }
}

fn assert_pkcs8_rsa_key(key_pem: &str, bits: usize) {
    assert!(key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    check_key_pem(key_pem.as_bytes()).unwrap();
    let key = rsa::RsaPrivateKey::from_pkcs8_der(&der(key_pem)).unwrap();
    assert_eq!(rsa::traits::PublicKeyParts::size(&key) * 8, bits);
}

#[test]
fn rsa_2048_ca_and_rsa_leaf() {
    let ca = rsa_ca();
    assert_rsa_cert(&ca.cert_pem, 2048, true);
    assert_pkcs8_rsa_key(&ca.key_pem, 2048);
    assert!(parse_cert_pem(ca.cert_pem.as_bytes()).unwrap().is_ca);

    let leaf = generate_leaf(ca, &leaf_spec(KeyAlgorithm::Rsa2048), SystemTime::now()).unwrap();
    assert_rsa_cert(&leaf.cert_pem, 2048, true);
    assert_pkcs8_rsa_key(&leaf.key_pem, 2048);
    check_key_matches_cert(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
    verify_signed_by(leaf.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();

    let der = der(&leaf.cert_pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(ku.digital_signature() && ku.key_encipherment() && !ku.key_cert_sign());
    assert!(cert.extended_key_usage().unwrap().unwrap().value.server_auth);
    let info = parse_cert_pem(leaf.cert_pem.as_bytes()).unwrap();
    assert!(!info.is_ca);
    assert_eq!(info.subject, "");

    // Verified against the wrong CA (an ECDSA one): bad signature, not a parse error.
    assert_eq!(
        verify_signed_by(leaf.cert_pem.as_bytes(), ecdsa_ca().cert_pem.as_bytes()),
        Err(CertError::BadSignature)
    );
}

#[test]
fn ecdsa_ca_with_rsa_leaf() {
    let ca = ecdsa_ca();
    let leaf = generate_leaf(ca, &leaf_spec(KeyAlgorithm::Rsa2048), SystemTime::now()).unwrap();
    // RSA public key, ECDSA signature from the CA.
    assert_rsa_cert(&leaf.cert_pem, 2048, false);
    verify_signed_by(leaf.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();
    assert_eq!(
        verify_signed_by(leaf.cert_pem.as_bytes(), rsa_ca().cert_pem.as_bytes()),
        Err(CertError::BadSignature)
    );
}

#[test]
fn rsa_ca_with_ecdsa_leaf() {
    let ca = rsa_ca();
    let leaf = generate_leaf(ca, &leaf_spec(KeyAlgorithm::EcdsaP256), SystemTime::now()).unwrap();
    verify_signed_by(leaf.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();
    let der = der(&leaf.cert_pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    assert_eq!(cert.signature_algorithm.algorithm, OID_PKCS1_SHA256WITHRSA);
    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(!ku.key_encipherment());
}

/// A CA key stored as PKCS#1 `RSA PRIVATE KEY` (as older tooling writes it) still signs.
#[test]
fn pkcs1_ca_key_is_accepted() {
    let ca = rsa_ca();
    let key = rsa::RsaPrivateKey::from_pkcs8_der(&der(&ca.key_pem)).unwrap();
    let pkcs1 = key.to_pkcs1_der().unwrap();
    let pkcs1_pem = pem::encode(&pem::Pem::new("RSA PRIVATE KEY", pkcs1.as_bytes().to_vec()));
    check_key_pem(pkcs1_pem.as_bytes()).unwrap();
    let pair = CertPair {
        cert_pem: ca.cert_pem.clone(),
        key_pem: pkcs1_pem,
    };
    let leaf =
        generate_leaf(&pair, &leaf_spec(KeyAlgorithm::EcdsaP256), SystemTime::now()).unwrap();
    verify_signed_by(leaf.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();
    // The CA and its PKCS#1 key are a matching pair; the leaf's key is not the CA's.
    check_key_matches_cert(ca.cert_pem.as_bytes(), pair.key_pem.as_bytes()).unwrap();
    assert_eq!(
        check_key_matches_cert(ca.cert_pem.as_bytes(), leaf.key_pem.as_bytes()),
        Err(CertError::KeyMismatch)
    );
}

/// RSA-3072 and RSA-4096 CAs (one key each), each signing an ECDSA leaf.
#[test]
fn rsa_3072_and_4096_cas() {
    for (alg, bits) in [(KeyAlgorithm::Rsa3072, 3072), (KeyAlgorithm::Rsa4096, 4096)] {
        let now = SystemTime::now();
        let ca = generate_ca(&ca_spec(alg), now).unwrap();
        assert_rsa_cert(&ca.cert_pem, bits, true);
        assert_pkcs8_rsa_key(&ca.key_pem, bits);
        let info = parse_cert_pem(ca.cert_pem.as_bytes()).unwrap();
        assert!(info.is_ca);
        assert_eq!(info.subject, format!("CN=btp-manager-ca-{alg}"));

        let leaf = generate_leaf(&ca, &leaf_spec(KeyAlgorithm::EcdsaP256), now).unwrap();
        verify_signed_by(leaf.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();
        assert_eq!(
            verify_signed_by(leaf.cert_pem.as_bytes(), rsa_ca().cert_pem.as_bytes()),
            Err(CertError::BadSignature)
        );
    }
}
