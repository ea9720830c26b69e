//! Generation, parsing and chain checks with ECDSA P-256 keys (fast), plus error handling.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use btp_certs::{
    check_key_matches_cert, check_key_pem, expires_within, generate_ca, generate_leaf, generate_leaf_with_key,
    parse_bundle_pem, parse_cert_pem, pem_blocks_equal_certs, verify_signed_by, CaSpec, CertError, CertPair,
    KeyAlgorithm, LeafSpec,
};
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::oid_registry::{
    OID_SIG_ECDSA_WITH_SHA256, OID_X509_EXT_AUTHORITY_KEY_IDENTIFIER, OID_X509_EXT_SUBJECT_KEY_IDENTIFIER,
};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn ca_spec(cn: Option<&str>) -> CaSpec {
    CaSpec {
        common_name: cn.map(str::to_string),
        validity: 3650 * DAY,
        key: KeyAlgorithm::EcdsaP256,
    }
}

fn leaf_spec() -> LeafSpec {
    LeafSpec {
        common_name: Some("btp-manager-webhook-service.kyma-system.svc".into()),
        dns_names: vec![
            "btp-manager-webhook-service".into(),
            "btp-manager-webhook-service.kyma-system.svc".into(),
            "btp-manager-webhook-service.kyma-system.svc.cluster.local".into(),
        ],
        ip_addresses: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V6(Ipv6Addr::LOCALHOST)],
        validity: 30 * DAY,
        key: KeyAlgorithm::EcdsaP256,
    }
}

fn new_ca() -> CertPair {
    generate_ca(&ca_spec(Some("btp-manager-ca")), SystemTime::now()).unwrap()
}

fn pem_der(pem_str: &str) -> Vec<u8> {
    pem::parse(pem_str).unwrap().into_contents()
}

fn secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

fn assert_within_a_second(got: SystemTime, want: SystemTime) {
    let diff = (secs(got) - secs(want)).abs();
    assert!(diff <= 1.0, "got {got:?}, want {want:?} (diff {diff}s)");
}

#[test]
fn ca_fields_parse_back() {
    let now = SystemTime::now();
    let spec = ca_spec(Some("btp-manager-ca"));
    let ca = generate_ca(&spec, now).unwrap();
    assert!(ca.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(ca.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    check_key_pem(ca.key_pem.as_bytes()).unwrap();
    check_key_matches_cert(ca.cert_pem.as_bytes(), ca.key_pem.as_bytes()).unwrap();

    let info = parse_cert_pem(ca.cert_pem.as_bytes()).unwrap();
    assert!(info.is_ca);
    assert_eq!(info.subject, "CN=btp-manager-ca");
    assert!(info.dns_names.is_empty() && info.ip_addresses.is_empty());
    assert_within_a_second(info.not_before, now);
    assert_within_a_second(info.not_after, now + spec.validity);
    assert!(!info.serial_hex.is_empty() && info.serial_hex.len() <= 32);
}

#[test]
fn ca_x509_details() {
    let ca = new_ca();
    let der = pem_der(&ca.cert_pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();

    let bc = cert.basic_constraints().unwrap().unwrap();
    assert!(bc.critical && bc.value.ca);
    assert_eq!(bc.value.path_len_constraint, None);
    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(ku.digital_signature() && ku.key_cert_sign() && ku.crl_sign());
    assert!(!ku.key_encipherment());
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && eku.client_auth);
    assert!(cert
        .get_extension_unique(&OID_X509_EXT_SUBJECT_KEY_IDENTIFIER)
        .unwrap()
        .is_some());
    assert_eq!(cert.signature_algorithm.algorithm, OID_SIG_ECDSA_WITH_SHA256);
    assert_eq!(cert.issuer().as_raw(), cert.subject().as_raw());
    // 16 random bytes, positive: DER drops a leading zero byte, never needs to add one.
    let serial = cert.raw_serial();
    assert!(!serial.is_empty() && serial.len() <= 16, "{serial:?}");
    assert_eq!(serial[0] & 0x80, 0);
    // Self-signed signature verifies.
    cert.verify_signature(None).unwrap();
}

#[test]
fn empty_subject_when_no_common_name() {
    for cn in [None, Some("")] {
        let ca = generate_ca(&ca_spec(cn), SystemTime::now()).unwrap();
        let info = parse_cert_pem(ca.cert_pem.as_bytes()).unwrap();
        assert_eq!(info.subject, "");
        let der = pem_der(&ca.cert_pem);
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        // An empty RDNSequence, not rcgen's default "rcgen self signed cert".
        assert_eq!(cert.subject().as_raw(), &[0x30, 0x00]);

        let leaf_spec = LeafSpec {
            common_name: None,
            ..leaf_spec()
        };
        let leaf = generate_leaf(&ca, &leaf_spec, SystemTime::now()).unwrap();
        let info = parse_cert_pem(leaf.cert_pem.as_bytes()).unwrap();
        assert_eq!(info.subject, "");
        verify_signed_by(leaf.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();
    }
}

#[test]
fn serials_differ() {
    let a = parse_cert_pem(new_ca().cert_pem.as_bytes()).unwrap();
    let b = parse_cert_pem(new_ca().cert_pem.as_bytes()).unwrap();
    assert_ne!(a.serial_hex, b.serial_hex);
}

#[test]
fn leaf_fields_parse_back_and_chain_verifies() {
    let ca = new_ca();
    let now = SystemTime::now();
    let spec = leaf_spec();
    let leaf = generate_leaf(&ca, &spec, now).unwrap();
    assert!(leaf.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    check_key_pem(leaf.key_pem.as_bytes()).unwrap();
    check_key_matches_cert(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).unwrap();
    assert_eq!(
        check_key_matches_cert(leaf.cert_pem.as_bytes(), ca.key_pem.as_bytes()),
        Err(CertError::KeyMismatch)
    );

    let info = parse_cert_pem(leaf.cert_pem.as_bytes()).unwrap();
    assert!(!info.is_ca);
    assert_eq!(info.subject, "CN=btp-manager-webhook-service.kyma-system.svc");
    assert_eq!(info.dns_names, spec.dns_names);
    assert_eq!(info.ip_addresses, spec.ip_addresses);
    assert_within_a_second(info.not_before, now);
    assert_within_a_second(info.not_after, now + spec.validity);

    verify_signed_by(leaf.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();
}

#[test]
fn leaf_x509_details() {
    let ca = new_ca();
    let leaf = generate_leaf(&ca, &leaf_spec(), SystemTime::now()).unwrap();
    let ca_der = pem_der(&ca.cert_pem);
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    let der = pem_der(&leaf.cert_pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();

    // Explicit CA:false.
    let bc = cert.basic_constraints().unwrap().unwrap();
    assert!(!bc.value.ca);
    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(ku.digital_signature());
    assert!(!ku.key_cert_sign() && !ku.key_encipherment());
    assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());
    assert_eq!(cert.signature_algorithm.algorithm, OID_SIG_ECDSA_WITH_SHA256);

    let ski_of = |c: &x509_parser::certificate::X509Certificate<'_>| match c
        .get_extension_unique(&OID_X509_EXT_SUBJECT_KEY_IDENTIFIER)
        .unwrap()
        .unwrap()
        .parsed_extension()
    {
        ParsedExtension::SubjectKeyIdentifier(id) => id.0.to_vec(),
        other => panic!("unexpected {other:?}"),
    };
    assert_ne!(ski_of(&cert), ski_of(&ca_cert));
    let aki = match cert
        .get_extension_unique(&OID_X509_EXT_AUTHORITY_KEY_IDENTIFIER)
        .unwrap()
        .expect("authority key identifier present")
        .parsed_extension()
    {
        ParsedExtension::AuthorityKeyIdentifier(aki) => aki.key_identifier.as_ref().unwrap().0,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(aki, ski_of(&ca_cert).as_slice());

    let san = cert.subject_alternative_name().unwrap().unwrap().value;
    assert!(san
        .general_names
        .iter()
        .any(|n| matches!(n, GeneralName::DNSName("btp-manager-webhook-service"))));
}

#[test]
fn renewal_with_an_existing_key() {
    let ca = new_ca();
    let first = generate_leaf(&ca, &leaf_spec(), SystemTime::now()).unwrap();
    let renewed = generate_leaf_with_key(&ca, &leaf_spec(), &first.key_pem, SystemTime::now()).unwrap();
    assert_eq!(renewed.key_pem, first.key_pem);
    assert_ne!(renewed.cert_pem, first.cert_pem);
    check_key_matches_cert(renewed.cert_pem.as_bytes(), first.key_pem.as_bytes()).unwrap();
    verify_signed_by(renewed.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();
    let (a, b) = (
        parse_cert_pem(first.cert_pem.as_bytes()).unwrap(),
        parse_cert_pem(renewed.cert_pem.as_bytes()).unwrap(),
    );
    assert_ne!(a.serial_hex, b.serial_hex);
    assert_eq!(a.dns_names, b.dns_names);
    // Garbage key.
    assert!(matches!(
        generate_leaf_with_key(&ca, &leaf_spec(), "garbage", SystemTime::now()),
        Err(CertError::InvalidKey(_))
    ));
}

/// What a rustls-free consumer (e.g. a webhook client config check) would look at.
#[test]
fn x509_parser_sees_server_auth_eku_on_leaf() {
    let ca = new_ca();
    let leaf = generate_leaf(&ca, &leaf_spec(), SystemTime::now()).unwrap();
    for block in x509_parser::pem::Pem::iter_from_buffer(leaf.cert_pem.as_bytes()) {
        let block = block.unwrap();
        let cert = block.parse_x509().unwrap();
        let eku = cert.extended_key_usage().unwrap().unwrap();
        assert!(!eku.critical);
        assert!(eku.value.server_auth);
        assert!(eku.value.client_auth);
    }
}

#[test]
fn chain_errors_have_distinct_variants() {
    let ca = new_ca();
    let other_ca = generate_ca(&ca_spec(Some("btp-manager-ca")), SystemTime::now()).unwrap();
    let leaf = generate_leaf(&ca, &leaf_spec(), SystemTime::now()).unwrap();
    let (l, c, o) = (
        leaf.cert_pem.as_bytes(),
        ca.cert_pem.as_bytes(),
        other_ca.cert_pem.as_bytes(),
    );

    assert_eq!(verify_signed_by(l, o), Err(CertError::BadSignature));
    assert_eq!(verify_signed_by(c, c), Err(CertError::LeafIsCa));
    assert_eq!(verify_signed_by(o, c), Err(CertError::LeafIsCa));
    assert_eq!(verify_signed_by(l, l), Err(CertError::NotACa));
    assert_eq!(verify_signed_by(b"", c), Err(CertError::NoCertificate));
    assert_eq!(verify_signed_by(l, b""), Err(CertError::NoCertificate));
    // A bundle is checked by its first certificate.
    let bundle = format!("{}{}", leaf.cert_pem, other_ca.cert_pem);
    verify_signed_by(bundle.as_bytes(), c).unwrap();
}

#[test]
fn issuer_mismatch_is_reported_when_signature_verifies() {
    // Two CA certificates for the same key with different subjects.
    let ca_a = generate_ca(&ca_spec(Some("ca-a")), SystemTime::now()).unwrap();
    let key = rcgen::KeyPair::from_pem(&ca_a.key_pem).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, "ca-b");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_b = params.self_signed(&key).unwrap().pem();

    let leaf = generate_leaf(&ca_a, &leaf_spec(), SystemTime::now()).unwrap();
    match verify_signed_by(leaf.cert_pem.as_bytes(), ca_b.as_bytes()) {
        Err(CertError::IssuerMismatch { issuer, ca_subject }) => {
            assert_eq!(issuer, "CN=ca-a");
            assert_eq!(ca_subject, "CN=ca-b");
        }
        other => panic!("expected IssuerMismatch, got {other:?}"),
    }
}

#[test]
fn generate_leaf_rejects_bad_issuers() {
    let ca = new_ca();
    let other_ca = new_ca();
    let leaf = generate_leaf(&ca, &leaf_spec(), SystemTime::now()).unwrap();
    let now = SystemTime::now();

    // A leaf is not a CA.
    assert_eq!(generate_leaf(&leaf, &leaf_spec(), now), Err(CertError::NotACa));
    // Key of another CA.
    let mixed = CertPair {
        cert_pem: ca.cert_pem.clone(),
        key_pem: other_ca.key_pem.clone(),
    };
    assert_eq!(generate_leaf(&mixed, &leaf_spec(), now), Err(CertError::KeyMismatch));
    // Garbage key / certificate.
    let bad_key = CertPair {
        cert_pem: ca.cert_pem.clone(),
        key_pem: "garbage".into(),
    };
    assert!(matches!(
        generate_leaf(&bad_key, &leaf_spec(), now),
        Err(CertError::InvalidKey(_))
    ));
    let bad_cert = CertPair {
        cert_pem: "garbage".into(),
        key_pem: ca.key_pem.clone(),
    };
    assert_eq!(
        generate_leaf(&bad_cert, &leaf_spec(), now),
        Err(CertError::NoCertificate)
    );
    // Non-ASCII DNS name.
    let spec = LeafSpec {
        dns_names: vec!["bücher.example".into()],
        ..leaf_spec()
    };
    assert!(matches!(generate_leaf(&ca, &spec, now), Err(CertError::Generate(_))));
}

#[test]
fn invalid_validity_is_an_error_not_a_panic() {
    let now = SystemTime::now();
    for validity in [
        Duration::ZERO,
        Duration::from_millis(999),
        Duration::MAX,
        Duration::from_secs(u64::MAX / 2),
        Duration::from_secs(9000 * 365 * 24 * 3600),
    ] {
        let spec = CaSpec {
            validity,
            ..ca_spec(None)
        };
        let err = generate_ca(&spec, now).unwrap_err();
        assert!(matches!(err, CertError::InvalidValidity(_)), "{validity:?}: {err}");
        let leaf = LeafSpec {
            validity,
            ..leaf_spec()
        };
        let ca = new_ca();
        assert!(matches!(
            generate_leaf(&ca, &leaf, now),
            Err(CertError::InvalidValidity(_))
        ));
    }
    // Clock before the epoch.
    let before_epoch = UNIX_EPOCH - Duration::from_secs(1);
    assert!(matches!(
        generate_ca(&ca_spec(None), before_epoch),
        Err(CertError::InvalidValidity(_))
    ));
}

#[test]
fn long_validity_uses_generalized_time() {
    // NotAfter past 2049 must be written as GeneralizedTime; 100 years still parse back exactly.
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let spec = CaSpec {
        validity: 100 * 365 * DAY,
        ..ca_spec(None)
    };
    let ca = generate_ca(&spec, now).unwrap();
    let info = parse_cert_pem(ca.cert_pem.as_bytes()).unwrap();
    assert_eq!(info.not_before, now);
    assert_eq!(info.not_after, now + spec.validity);
    // A fixed `now` is honoured as well: the certificate is not yet valid before it.
    assert!(expires_within(&info, now - Duration::from_secs(1), Duration::ZERO));
    assert!(!expires_within(&info, now, DAY));
}

#[test]
fn expires_within_on_a_generated_certificate() {
    let now = SystemTime::now();
    let leaf_spec = leaf_spec();
    let leaf = generate_leaf(&new_ca(), &leaf_spec, now).unwrap();
    let info = parse_cert_pem(leaf.cert_pem.as_bytes()).unwrap();
    // Validity is 30 days.
    assert!(!expires_within(&info, now, 29 * DAY));
    assert!(expires_within(&info, now, 31 * DAY));
    assert!(expires_within(&info, now + 30 * DAY, Duration::ZERO));
    assert!(expires_within(&info, now - 2 * DAY, DAY));
}

#[test]
fn bundles_parse_in_order_and_skip_other_blocks() {
    let ca = new_ca();
    let leaf = generate_leaf(&ca, &leaf_spec(), SystemTime::now()).unwrap();
    let bundle = format!(
        "subject=whatever\n{}\n{}\r\n\n{}",
        leaf.cert_pem, leaf.key_pem, ca.cert_pem
    );
    let infos = parse_bundle_pem(bundle.as_bytes()).unwrap();
    assert_eq!(infos.len(), 2);
    assert!(!infos[0].is_ca);
    assert!(infos[1].is_ca);
    assert_eq!(infos[0], parse_cert_pem(leaf.cert_pem.as_bytes()).unwrap());
    // parse_cert_pem takes the first certificate.
    assert_eq!(parse_cert_pem(bundle.as_bytes()).unwrap(), infos[0]);
    // A key-only PEM has no certificate.
    assert_eq!(parse_bundle_pem(leaf.key_pem.as_bytes()), Err(CertError::NoCertificate));
    assert_eq!(parse_cert_pem(leaf.key_pem.as_bytes()), Err(CertError::NoCertificate));
}

#[test]
fn pem_blocks_equal_certs_compares_der_sets() {
    let ca = new_ca();
    let leaf = generate_leaf(&ca, &leaf_spec(), SystemTime::now()).unwrap();
    let ab = format!("{}{}", ca.cert_pem, leaf.cert_pem);
    let ba_crlf = format!("{}\r\n\r\n{}  \n", leaf.cert_pem, ca.cert_pem).replace('\n', "\r\n");
    assert!(pem_blocks_equal_certs(ab.as_bytes(), ba_crlf.as_bytes()));
    assert!(pem_blocks_equal_certs(
        ca.cert_pem.as_bytes(),
        format!("{}{}", ca.cert_pem, ca.key_pem).as_bytes()
    ));
    // Re-wrapped base64 (one long line) is the same certificate.
    let der = pem_der(&ca.cert_pem);
    let one_line = pem::encode_config(
        &pem::Pem::new("CERTIFICATE", der),
        pem::EncodeConfig::new().set_line_wrap(4096),
    );
    assert!(pem_blocks_equal_certs(one_line.as_bytes(), ca.cert_pem.as_bytes()));

    assert!(!pem_blocks_equal_certs(ca.cert_pem.as_bytes(), ab.as_bytes()));
    assert!(!pem_blocks_equal_certs(
        ca.cert_pem.as_bytes(),
        leaf.cert_pem.as_bytes()
    ));
    assert!(!pem_blocks_equal_certs(b"", b""));
    assert!(!pem_blocks_equal_certs(b"garbage", ca.cert_pem.as_bytes()));
}

#[test]
fn garbage_input_is_an_error_not_a_panic() {
    let ca = new_ca();
    let b64: String = ca.cert_pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let truncated_b64 = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        &b64[..b64.len() / 2 + 1]
    );
    let truncated_block = &ca.cert_pem[..ca.cert_pem.len() / 2];
    let inputs: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"garbage".to_vec(),
        vec![0xff, 0x00, 0x80, 0xfe],
        ca.key_pem.clone().into_bytes(),
        truncated_b64.into_bytes(),
        truncated_block.as_bytes().to_vec(),
        b"-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n".to_vec(),
        b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_vec(),
        b"-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE".to_vec(),
        b"-----BEGIN CERTIFICATE-----\nMAA=\n-----END PRIVATE KEY-----\n".to_vec(),
        b"-----BEGIN CERTIFICATE-----\n\n-----END CERTIFICATE-----\n".to_vec(),
    ];
    for input in &inputs {
        let shown = String::from_utf8_lossy(input);
        assert!(parse_cert_pem(input).is_err(), "{shown}");
        assert!(parse_bundle_pem(input).is_err(), "{shown}");
        assert!(verify_signed_by(input, ca.cert_pem.as_bytes()).is_err());
        assert!(verify_signed_by(ca.cert_pem.as_bytes(), input).is_err());
        assert!(check_key_pem(input).is_err() || input == ca.key_pem.as_bytes());
        let pair = CertPair {
            cert_pem: shown.to_string(),
            key_pem: ca.key_pem.clone(),
        };
        assert!(generate_leaf(&pair, &leaf_spec(), SystemTime::now()).is_err());
    }
    // Valid DER followed by trailing bytes.
    let mut der = pem_der(&ca.cert_pem);
    der.extend_from_slice(&[0, 0]);
    let trailing = pem::encode(&pem::Pem::new("CERTIFICATE", der));
    assert!(matches!(
        parse_cert_pem(trailing.as_bytes()),
        Err(CertError::Parse { .. })
    ));
}

#[test]
fn corrupted_der_never_panics() {
    let ca = new_ca();
    let leaf = generate_leaf(&ca, &leaf_spec(), SystemTime::now()).unwrap();
    let der = pem_der(&leaf.cert_pem);
    let reencode = |d: &[u8]| pem::encode(&pem::Pem::new("CERTIFICATE", d.to_vec()));
    // Every truncation.
    for len in 0..der.len() {
        let p = reencode(&der[..len]);
        assert!(parse_cert_pem(p.as_bytes()).is_err(), "truncated to {len}");
    }
    // The signed bytes (TBS) and the signature value, as offsets into `der`. The outer
    // AlgorithmIdentifier is not signed; x509-parser tolerates some corruptions there.
    let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
    let offset = |s: &[u8]| s.as_ptr() as usize - der.as_ptr() as usize;
    let tbs = parsed.tbs_certificate.as_ref();
    let sig = parsed.signature_value.data.as_ref();
    let signed = offset(tbs)..offset(tbs) + tbs.len();
    let signature = offset(sig)..offset(sig) + sig.len();
    assert!(signed.len() > der.len() / 2 && signature.len() >= 64);
    // Every single-byte corruption: may parse or not, must not panic; a corrupted TBS or
    // signature must never verify.
    let mut verified = Vec::new();
    for i in 0..der.len() {
        let mut d = der.clone();
        d[i] ^= 0x5a;
        let p = reencode(&d);
        let _ = parse_cert_pem(p.as_bytes());
        let _ = parse_bundle_pem(p.as_bytes());
        let ok = verify_signed_by(p.as_bytes(), ca.cert_pem.as_bytes()).is_ok();
        if ok && (signed.contains(&i) || signature.contains(&i)) {
            verified.push(i);
        }
        let _ = verify_signed_by(ca.cert_pem.as_bytes(), p.as_bytes());
        let pair = CertPair {
            cert_pem: p,
            key_pem: ca.key_pem.clone(),
        };
        let _ = generate_leaf(&pair, &leaf_spec(), SystemTime::now());
    }
    assert!(verified.is_empty(), "corrupted bytes {verified:?} verified");
}

#[test]
fn cert_pair_debug_redacts_the_key() {
    let ca = new_ca();
    let debug = format!("{ca:?}");
    assert!(debug.contains("<redacted>"));
    assert!(debug.contains("BEGIN CERTIFICATE"));
    assert!(!debug.contains("PRIVATE KEY"));
    for line in ca.key_pem.lines().filter(|l| !l.starts_with("-----")) {
        assert!(!debug.contains(line));
    }
    let pretty = format!("{ca:#?}");
    assert!(!pretty.contains("PRIVATE KEY"));
}

#[test]
fn key_errors_do_not_leak_key_material() {
    let ca = new_ca();
    let body: Vec<&str> = ca.key_pem.lines().filter(|l| !l.starts_with("-----")).collect();
    // Corrupt the key: flip a character in the middle of the base64.
    let mut corrupted = ca.key_pem.clone().into_bytes();
    let mid = corrupted.len() / 2;
    corrupted[mid] = if corrupted[mid] == b'A' { b'B' } else { b'A' };
    let truncated = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        &body.concat()[..40]
    );
    for input in [corrupted, truncated.into_bytes()] {
        if let Err(err) = check_key_pem(&input) {
            let msg = format!("{err} {err:?}");
            for line in &body {
                assert!(!msg.contains(line));
                assert!(!msg.contains(&line[..16]));
            }
        }
        let pair = CertPair {
            cert_pem: ca.cert_pem.clone(),
            key_pem: String::from_utf8_lossy(&input).into_owned(),
        };
        if let Err(err) = generate_leaf(&pair, &leaf_spec(), SystemTime::now()) {
            let msg = format!("{err} {err:?}");
            for line in &body {
                assert!(!msg.contains(&line[..16]));
            }
        }
    }
}
