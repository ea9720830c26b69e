use super::*;
use crate::check_key_pem;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::time::UNIX_EPOCH;

const SEC: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(24 * 3600);
const BOUNDARY: Duration = Duration::from_secs(168 * 3600);

type Data = BTreeMap<String, Vec<u8>>;

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn settings() -> Settings {
    Settings::default()
}

fn new_ca(key: KeyAlgorithm, validity: Duration, now: SystemTime) -> CertPair {
    let spec = CaSpec {
        common_name: None,
        validity,
        key,
    };
    generate_ca(&spec, now).unwrap()
}

fn new_leaf(ca: &CertPair, key: KeyAlgorithm, validity: Duration, dns_names: Vec<String>, now: SystemTime) -> CertPair {
    let spec = LeafSpec {
        common_name: None,
        dns_names,
        ip_addresses: vec![],
        validity,
        key,
    };
    generate_leaf(ca, &spec, now).unwrap()
}

/// A CA (10 years) and a webhook certificate (1 year) for `kyma-system`, both issued at `t0`.
fn valid_pair() -> (CertPair, CertPair) {
    let s = settings();
    let ca = new_ca(KeyAlgorithm::EcdsaP256, s.ca_validity, t0());
    let leaf = new_leaf(&ca, KeyAlgorithm::EcdsaP256, s.webhook_validity, s.dns_names(), t0());
    (ca, leaf)
}

fn valid_data() -> (Data, Data) {
    let (ca, leaf) = valid_pair();
    (to_ca_secret_data(&ca), to_webhook_secret_data(&leaf))
}

fn decide_at(ca: &Data, webhook: &Data, now: SystemTime) -> Decision {
    decide(Some(ca), Some(webhook), now, &settings())
}

fn not_after(pem: &[u8]) -> SystemTime {
    parse_cert_pem(pem).unwrap().not_after
}

fn odt(t: SystemTime) -> time::OffsetDateTime {
    let secs = t.duration_since(UNIX_EPOCH).unwrap().as_secs();
    time::OffsetDateTime::from_unix_timestamp(secs as i64).unwrap()
}

/// A hand-made ECDSA certificate (for shapes `generate_ca`/`generate_leaf` never produce), issued at
/// `t0` for 30 days, self-signed or signed by `issuer`.
fn custom_cert(issuer: Option<&CertPair>, edit: impl FnOnce(&mut CertificateParams)) -> CertPair {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.not_before = odt(t0());
    params.not_after = odt(t0() + 30 * DAY);
    edit(&mut params);
    let key = KeyPair::generate().unwrap();
    let cert = match issuer {
        Some(ca) => {
            let ca_key = KeyPair::from_pem(&ca.key_pem).unwrap();
            let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).unwrap();
            params.signed_by(&key, &issuer).unwrap()
        }
        None => params.self_signed(&key).unwrap(),
    };
    CertPair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

fn service_sans(namespace: &str) -> Vec<SanType> {
    webhook_dns_names(namespace)
        .into_iter()
        .map(|n| SanType::DnsName(n.as_str().try_into().unwrap()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Settings and names

#[test]
fn default_settings_match_the_reference() {
    let s = Settings::default();
    assert_eq!(s.ca_validity, Duration::from_secs(87_600 * 3600));
    assert_eq!(s.webhook_validity, Duration::from_secs(8_760 * 3600));
    assert_eq!(s.expiration_boundary, BOUNDARY);
    assert_eq!(s.key, KeyAlgorithm::EcdsaP256);
    assert_eq!(s.namespace, "kyma-system");
}

#[test]
fn names() {
    assert_eq!(CA_SECRET, "ca-server-cert");
    assert_eq!(WEBHOOK_SECRET, "webhook-server-cert");
    assert_eq!(
        (keys::CA_CRT, keys::CA_KEY, keys::TLS_CRT, keys::TLS_KEY),
        ("ca.crt", "ca.key", "tls.crt", "tls.key")
    );
    assert_eq!(WEBHOOK_SERVICE, "sap-btp-operator-webhook-service");
    assert_eq!(
        WEBHOOK_CONFIGURATIONS,
        [
            "sap-btp-operator-mutating-webhook-configuration",
            "sap-btp-operator-validating-webhook-configuration"
        ]
    );
    assert_eq!(
        webhook_dns_names("btp-ns"),
        [
            "sap-btp-operator-webhook-service.btp-ns.svc",
            "sap-btp-operator-webhook-service.btp-ns",
            "sap-btp-operator-webhook-service.btp-ns.svc.cluster.local",
        ]
    );
    assert_eq!(settings().dns_names(), webhook_dns_names("kyma-system"));
}

// ---------------------------------------------------------------------------------------------
// Step 1 and 2: the CA Secret

#[test]
fn valid_pair_is_kept() {
    let (ca, webhook) = valid_data();
    assert_eq!(decide_at(&ca, &webhook, t0()), Decision::Keep);
    assert_eq!(decide_at(&ca, &webhook, t0() + 300 * DAY), Decision::Keep);
}

#[test]
fn missing_ca_secret_means_full_regeneration() {
    let (_, webhook) = valid_data();
    let full = Decision::Full(Reason::CaSecretMissing);
    assert_eq!(decide(None, Some(&webhook), t0(), &settings()), full);
    assert_eq!(decide(None, None, t0(), &settings()), full);
}

#[test]
fn missing_or_empty_ca_entries_mean_full_regeneration() {
    let (ca, webhook) = valid_data();
    let cases: [(&str, Option<&[u8]>, Reason); 6] = [
        (keys::CA_CRT, None, Reason::CaCertMissing),
        (keys::CA_KEY, None, Reason::CaKeyMissing),
        (keys::CA_CRT, Some(b""), Reason::CaCertEmpty),
        (keys::CA_KEY, Some(b""), Reason::CaKeyEmpty),
        (keys::CA_CRT, Some(b" \n\t"), Reason::CaCertEmpty),
        (keys::CA_KEY, Some(b"\n"), Reason::CaKeyEmpty),
    ];
    for (key, value, reason) in cases {
        let mut data = ca.clone();
        match value {
            None => data.remove(key),
            Some(v) => data.insert(key.to_string(), v.to_vec()),
        };
        assert_eq!(
            decide_at(&data, &webhook, t0()),
            Decision::Full(reason),
            "{key} = {value:?}"
        );
    }
    assert_eq!(
        decide_at(&Data::new(), &webhook, t0()),
        Decision::Full(Reason::CaCertMissing)
    );
}

#[test]
fn unparsable_ca_certificate_means_full_regeneration() {
    let (ca, webhook) = valid_data();
    let junk_block = pem::encode(&pem::Pem::new("CERTIFICATE", b"not DER".to_vec()));
    let key_only = ca[keys::CA_KEY].clone();
    let truncated = ca[keys::CA_CRT][..100].to_vec();
    for bad in [
        b"garbage".to_vec(),
        junk_block.into_bytes(),
        key_only,
        truncated,
        vec![0xff, 0xfe, 0x00],
    ] {
        let mut data = ca.clone();
        data.insert(keys::CA_CRT.into(), bad);
        assert_eq!(decide_at(&data, &webhook, t0()), Decision::Full(Reason::CaUnparsable));
    }
}

#[test]
fn ca_that_is_not_a_ca_means_full_regeneration() {
    let (_, leaf) = valid_pair();
    // The webhook certificate stored as the CA, and also as the webhook certificate.
    let ca = to_ca_secret_data(&leaf);
    let webhook = to_webhook_secret_data(&leaf);
    assert_eq!(decide_at(&ca, &webhook, t0()), Decision::Full(Reason::CaNotACa));
    assert_eq!(
        decide(Some(&ca), None, t0(), &settings()),
        Decision::Full(Reason::CaNotACa)
    );
}

#[test]
fn ca_without_cert_sign_or_server_auth_means_full_regeneration() {
    let no_cert_sign = custom_cert(None, |p| {
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    });
    assert_eq!(
        decide(Some(&to_ca_secret_data(&no_cert_sign)), None, t0(), &settings()),
        Decision::Full(Reason::CaCannotSignCertificates)
    );
    let client_only = custom_cert(None, |p| {
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyCertSign];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    });
    assert_eq!(
        decide(Some(&to_ca_secret_data(&client_only)), None, t0(), &settings()),
        Decision::Full(Reason::CaNotForServerAuth)
    );
    // Without keyUsage and extendedKeyUsage extensions a CA is unrestricted.
    let plain = custom_cert(None, |p| p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained));
    assert_eq!(
        decide(Some(&to_ca_secret_data(&plain)), None, t0(), &settings()),
        Decision::WebhookOnly(Reason::WebhookSecretMissing)
    );
}

#[test]
fn expired_ca_means_full_regeneration() {
    let (ca, webhook) = valid_data();
    let end = not_after(&ca[keys::CA_CRT]);
    let expiring = Decision::Full(Reason::CaExpiring { boundary: BOUNDARY });
    assert_eq!(decide_at(&ca, &webhook, end + SEC), expiring);
    assert_eq!(decide_at(&ca, &webhook, end + 365 * DAY), expiring);
}

#[test]
fn ca_expiry_boundary_is_exclusive() {
    // A 30-day CA and a 1-year webhook certificate (not capped at the CA's expiry), so that only
    // the CA is near its end.
    let ca = new_ca(KeyAlgorithm::EcdsaP256, 30 * DAY, t0());
    let leaf = new_leaf(&ca, KeyAlgorithm::EcdsaP256, 365 * DAY, settings().dns_names(), t0());
    assert!(not_after(leaf.cert_pem.as_bytes()) > not_after(ca.cert_pem.as_bytes()));
    let (ca_data, webhook) = (to_ca_secret_data(&ca), to_webhook_secret_data(&leaf));
    let limit = not_after(ca.cert_pem.as_bytes()) - BOUNDARY;
    // now == NotAfter - boundary: not expiring yet.
    assert_eq!(decide_at(&ca_data, &webhook, limit), Decision::Keep);
    // One second later: inside the boundary.
    assert_eq!(
        decide_at(&ca_data, &webhook, limit + SEC),
        Decision::Full(Reason::CaExpiring { boundary: BOUNDARY })
    );
    // A smaller configured boundary moves the limit.
    let short = Settings {
        expiration_boundary: DAY,
        ..settings()
    };
    assert_eq!(
        decide(Some(&ca_data), Some(&webhook), limit + SEC, &short),
        Decision::Keep
    );
}

#[test]
fn ca_not_valid_yet_means_full_regeneration() {
    let ca = new_ca(KeyAlgorithm::EcdsaP256, 365 * DAY, t0() + DAY);
    let leaf = new_leaf(
        &ca,
        KeyAlgorithm::EcdsaP256,
        30 * DAY,
        settings().dns_names(),
        t0() + DAY,
    );
    let (ca, webhook) = (to_ca_secret_data(&ca), to_webhook_secret_data(&leaf));
    assert_eq!(decide_at(&ca, &webhook, t0()), Decision::Full(Reason::CaNotYetValid));
    assert_eq!(decide_at(&ca, &webhook, t0() + DAY), Decision::Keep);
}

#[test]
fn ca_key_is_not_checked_when_the_webhook_certificate_is_kept() {
    // As in the Go manager: only presence of the key is checked.
    let (ca, webhook) = valid_data();
    let (other_ca, _) = valid_pair();
    for key in [b"garbage".to_vec(), other_ca.key_pem.into_bytes()] {
        let mut data = ca.clone();
        data.insert(keys::CA_KEY.into(), key);
        assert_eq!(decide_at(&data, &webhook, t0()), Decision::Keep);
        // ... but a CA that cannot sign is replaced when a new webhook certificate is needed.
        assert_eq!(
            decide(Some(&data), None, t0(), &settings()),
            Decision::Full(Reason::CaKeyUnusable)
        );
    }
}

#[test]
fn ca_with_a_named_subject_can_issue() {
    // Like the Go manager's older CAs (subject O=SAP).
    let ca = custom_cert(None, |p| {
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::OrganizationName, "SAP");
    });
    let data = to_ca_secret_data(&ca);
    let decision = decide(Some(&data), None, t0(), &settings());
    assert_eq!(decision, Decision::WebhookOnly(Reason::WebhookSecretMissing));
    let certs = regenerate(&decision, Some(&data), t0(), &settings()).unwrap().unwrap();
    verify_signed_by(certs.webhook.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();
    assert_eq!(
        decide(
            Some(&data),
            Some(&to_webhook_secret_data(&certs.webhook)),
            t0(),
            &settings()
        ),
        Decision::Keep
    );
}

// ---------------------------------------------------------------------------------------------
// Step 3 and 4: the webhook Secret

#[test]
fn missing_webhook_secret_means_webhook_only() {
    let (ca, _) = valid_data();
    assert_eq!(
        decide(Some(&ca), None, t0(), &settings()),
        Decision::WebhookOnly(Reason::WebhookSecretMissing)
    );
}

#[test]
fn missing_or_empty_webhook_entries_mean_webhook_only() {
    let (ca, webhook) = valid_data();
    let cases: [(&str, Option<&[u8]>, Reason); 5] = [
        (keys::TLS_CRT, None, Reason::WebhookCertMissing),
        (keys::TLS_KEY, None, Reason::WebhookKeyMissing),
        (keys::TLS_CRT, Some(b""), Reason::WebhookCertEmpty),
        (keys::TLS_KEY, Some(b""), Reason::WebhookKeyEmpty),
        (keys::TLS_KEY, Some(b"  \r\n"), Reason::WebhookKeyEmpty),
    ];
    for (key, value, reason) in cases {
        let mut data = webhook.clone();
        match value {
            None => data.remove(key),
            Some(v) => data.insert(key.to_string(), v.to_vec()),
        };
        assert_eq!(
            decide_at(&ca, &data, t0()),
            Decision::WebhookOnly(reason),
            "{key} = {value:?}"
        );
    }
    assert_eq!(
        decide_at(&ca, &Data::new(), t0()),
        Decision::WebhookOnly(Reason::WebhookCertMissing)
    );
}

#[test]
fn unparsable_webhook_certificate_means_webhook_only() {
    let (ca, webhook) = valid_data();
    let junk_block = pem::encode(&pem::Pem::new("CERTIFICATE", b"not DER".to_vec()));
    for bad in [
        b"garbage".to_vec(),
        junk_block.into_bytes(),
        webhook[keys::TLS_KEY].clone(),
    ] {
        let mut data = webhook.clone();
        data.insert(keys::TLS_CRT.into(), bad);
        assert_eq!(
            decide_at(&ca, &data, t0()),
            Decision::WebhookOnly(Reason::WebhookUnparsable)
        );
    }
}

#[test]
fn webhook_key_is_not_checked() {
    // As in the Go manager: a present, non-empty tls.key is accepted without parsing it.
    let (ca, webhook) = valid_data();
    let (_, other_leaf) = valid_pair();
    for key in [b"garbage".to_vec(), other_leaf.key_pem.into_bytes()] {
        let mut data = webhook.clone();
        data.insert(keys::TLS_KEY.into(), key);
        assert_eq!(decide_at(&ca, &data, t0()), Decision::Keep);
    }
}

#[test]
fn webhook_expiry_boundary_is_exclusive() {
    let (ca, webhook) = valid_data();
    let limit = not_after(&webhook[keys::TLS_CRT]) - BOUNDARY;
    let expiring = Decision::WebhookOnly(Reason::WebhookExpiring { boundary: BOUNDARY });
    assert_eq!(decide_at(&ca, &webhook, limit), Decision::Keep);
    assert_eq!(decide_at(&ca, &webhook, limit + SEC), expiring);
    assert_eq!(decide_at(&ca, &webhook, limit + BOUNDARY + SEC), expiring);
}

#[test]
fn webhook_for_another_namespace_means_webhook_only() {
    let (ca, webhook) = valid_data();
    let other_ns = Settings {
        namespace: "btp-ns".into(),
        ..settings()
    };
    assert_eq!(
        decide(Some(&ca), Some(&webhook), t0(), &other_ns),
        Decision::WebhookOnly(Reason::WebhookNamesMismatch)
    );
    // The Go manager's two names (without .svc.cluster.local) are enough.
    let (ca_pair, _) = valid_pair();
    let reference_names = webhook_dns_names("kyma-system")[..2].to_vec();
    let leaf = new_leaf(&ca_pair, KeyAlgorithm::EcdsaP256, 30 * DAY, reference_names, t0());
    assert_eq!(
        decide_at(&to_ca_secret_data(&ca_pair), &to_webhook_secret_data(&leaf), t0()),
        Decision::Keep
    );
}

#[test]
fn webhook_signed_by_a_foreign_ca_means_full_regeneration() {
    let (ca, _) = valid_data();
    let (_, foreign_leaf) = valid_pair();
    let webhook = to_webhook_secret_data(&foreign_leaf);
    assert_eq!(
        decide_at(&ca, &webhook, t0()),
        Decision::Full(Reason::WebhookNotSignedByCa)
    );
    // Expiry is checked before the chain, as in the Go manager.
    let near_end = not_after(foreign_leaf.cert_pem.as_bytes()) - SEC;
    assert_eq!(
        decide_at(&ca, &webhook, near_end),
        Decision::WebhookOnly(Reason::WebhookExpiring { boundary: BOUNDARY })
    );
}

#[test]
fn webhook_that_is_a_ca_means_full_regeneration() {
    let (ca, _) = valid_pair();
    let leaf_ca = custom_cert(Some(&ca), |p| {
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.subject_alt_names = service_sans("kyma-system");
    });
    assert_eq!(
        decide_at(&to_ca_secret_data(&ca), &to_webhook_secret_data(&leaf_ca), t0()),
        Decision::Full(Reason::WebhookIsCa)
    );
}

#[test]
fn webhook_without_server_auth_means_full_regeneration() {
    let (ca, _) = valid_pair();
    let client_only = custom_cert(Some(&ca), |p| {
        p.is_ca = IsCa::ExplicitNoCa;
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        p.subject_alt_names = service_sans("kyma-system");
    });
    assert_eq!(
        decide_at(&to_ca_secret_data(&ca), &to_webhook_secret_data(&client_only), t0()),
        Decision::Full(Reason::WebhookNotForServerAuth)
    );
    // No extendedKeyUsage extension at all: unrestricted.
    let unrestricted = custom_cert(Some(&ca), |p| p.subject_alt_names = service_sans("kyma-system"));
    assert_eq!(
        decide_at(&to_ca_secret_data(&ca), &to_webhook_secret_data(&unrestricted), t0()),
        Decision::Keep
    );
}

#[test]
fn webhook_not_valid_yet_means_full_regeneration() {
    let (ca, _) = valid_pair();
    let leaf = new_leaf(
        &ca,
        KeyAlgorithm::EcdsaP256,
        30 * DAY,
        settings().dns_names(),
        t0() + DAY,
    );
    let (ca, webhook) = (to_ca_secret_data(&ca), to_webhook_secret_data(&leaf));
    assert_eq!(
        decide_at(&ca, &webhook, t0()),
        Decision::Full(Reason::WebhookNotYetValid)
    );
    assert_eq!(decide_at(&ca, &webhook, t0() + DAY), Decision::Keep);
}

// ---------------------------------------------------------------------------------------------
// RSA (the only two RSA keys of these tests) and mixed algorithms

fn to_pkcs1_pem(pkcs8_pem: &str) -> String {
    use rsa::pkcs1::EncodeRsaPrivateKey;
    use rsa::pkcs8::DecodePrivateKey;
    let der = pem::parse(pkcs8_pem).unwrap().into_contents();
    let key = rsa::RsaPrivateKey::from_pkcs8_der(&der).unwrap();
    let pkcs1 = key.to_pkcs1_der().unwrap();
    pem::encode(&pem::Pem::new("RSA PRIVATE KEY", pkcs1.as_bytes().to_vec()))
}

#[test]
fn rsa_ca_with_ecdsa_webhook_certificate() {
    let s = settings();
    let mut ca = new_ca(KeyAlgorithm::Rsa2048, s.ca_validity, t0());
    // The Go manager stores PKCS#1 keys; signing with such a CA key must work.
    ca.key_pem = to_pkcs1_pem(&ca.key_pem);
    assert!(ca.key_pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    let leaf = new_leaf(&ca, KeyAlgorithm::EcdsaP256, s.webhook_validity, s.dns_names(), t0());
    let ca_data = to_ca_secret_data(&ca);
    assert_eq!(
        decide_at(&ca_data, &to_webhook_secret_data(&leaf), t0()),
        Decision::Keep
    );

    let decision = decide(Some(&ca_data), None, t0(), &s);
    assert_eq!(decision, Decision::WebhookOnly(Reason::WebhookSecretMissing));
    let certs = regenerate(&decision, Some(&ca_data), t0(), &s).unwrap().unwrap();
    assert_eq!(to_ca_secret_data(&certs.ca), ca_data);
    verify_signed_by(certs.webhook.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();
    assert_eq!(
        decide_at(&ca_data, &to_webhook_secret_data(&certs.webhook), t0()),
        Decision::Keep
    );
}

#[test]
fn ecdsa_ca_with_rsa_webhook_certificate() {
    let s = settings();
    let ca = new_ca(KeyAlgorithm::EcdsaP256, s.ca_validity, t0());
    let leaf = new_leaf(&ca, KeyAlgorithm::Rsa2048, s.webhook_validity, s.dns_names(), t0());
    assert_eq!(
        decide_at(&to_ca_secret_data(&ca), &to_webhook_secret_data(&leaf), t0()),
        Decision::Keep
    );
}

// ---------------------------------------------------------------------------------------------
// Regeneration

fn x509_usage(pem_text: &str) -> (bool, bool, bool, bool, bool) {
    let der = pem::parse(pem_text).unwrap().into_contents();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let ku = cert.key_usage().unwrap().unwrap().value;
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    (
        ku.digital_signature(),
        ku.key_cert_sign(),
        eku.server_auth,
        eku.client_auth,
        cert.subject().as_raw() == [0x30, 0x00],
    )
}

#[test]
fn keep_regenerates_nothing() {
    let (ca, _) = valid_data();
    assert_eq!(regenerate(&Decision::Keep, Some(&ca), t0(), &settings()), Ok(None));
}

#[test]
fn full_regeneration_produces_a_kept_pair_for_the_namespace() {
    let s = Settings {
        namespace: "btp-ns".into(),
        ..settings()
    };
    let decision = decide(None, None, t0(), &s);
    assert_eq!(decision, Decision::Full(Reason::CaSecretMissing));
    let certs = regenerate(&decision, None, t0(), &s).unwrap().unwrap();
    let (ca, webhook) = (to_ca_secret_data(&certs.ca), to_webhook_secret_data(&certs.webhook));
    assert_eq!(decide(Some(&ca), Some(&webhook), t0(), &s), Decision::Keep);
    assert_eq!(
        decide(Some(&ca), Some(&webhook), t0(), &settings()),
        Decision::WebhookOnly(Reason::WebhookNamesMismatch),
        "kyma-system names are not in a btp-ns certificate"
    );

    let ca_info = parse_cert_pem(certs.ca.cert_pem.as_bytes()).unwrap();
    assert!(ca_info.is_ca);
    assert_eq!(ca_info.subject, "");
    assert_eq!(ca_info.not_before, t0());
    assert_eq!(ca_info.not_after, t0() + s.ca_validity);
    let (digital_signature, cert_sign, server_auth, client_auth, empty_subject) = x509_usage(&certs.ca.cert_pem);
    assert!(digital_signature && cert_sign && server_auth && client_auth && empty_subject);

    let leaf_info = parse_cert_pem(certs.webhook.cert_pem.as_bytes()).unwrap();
    assert!(!leaf_info.is_ca);
    assert_eq!(leaf_info.subject, "");
    assert_eq!(leaf_info.dns_names, webhook_dns_names("btp-ns"));
    assert!(leaf_info.ip_addresses.is_empty());
    assert_eq!(leaf_info.not_before, t0());
    assert_eq!(leaf_info.not_after, t0() + s.webhook_validity);
    let (digital_signature, cert_sign, server_auth, client_auth, empty_subject) = x509_usage(&certs.webhook.cert_pem);
    assert!(digital_signature && !cert_sign && server_auth && client_auth && empty_subject);

    verify_signed_by(certs.webhook.cert_pem.as_bytes(), certs.ca.cert_pem.as_bytes()).unwrap();
    check_key_matches_cert(certs.ca.cert_pem.as_bytes(), certs.ca.key_pem.as_bytes()).unwrap();
    check_key_matches_cert(certs.webhook.cert_pem.as_bytes(), certs.webhook.key_pem.as_bytes()).unwrap();
    check_key_pem(certs.webhook.key_pem.as_bytes()).unwrap();
}

#[test]
fn full_regeneration_replaces_an_existing_ca() {
    let (ca, webhook) = valid_data();
    let (_, foreign) = valid_pair();
    let decision = decide_at(&ca, &to_webhook_secret_data(&foreign), t0());
    assert!(matches!(decision, Decision::Full(_)));
    let certs = regenerate(&decision, Some(&ca), t0(), &settings()).unwrap().unwrap();
    assert_ne!(certs.ca.cert_pem.as_bytes(), ca[keys::CA_CRT].as_slice());
    assert_ne!(certs.webhook.cert_pem.as_bytes(), webhook[keys::TLS_CRT].as_slice());
    assert_eq!(
        decide_at(
            &to_ca_secret_data(&certs.ca),
            &to_webhook_secret_data(&certs.webhook),
            t0()
        ),
        Decision::Keep
    );
}

#[test]
fn webhook_only_regeneration_keeps_the_ca_bytes() {
    let (ca, webhook) = valid_data();
    let now = not_after(&webhook[keys::TLS_CRT]) - SEC;
    let decision = decide_at(&ca, &webhook, now);
    assert_eq!(
        decision,
        Decision::WebhookOnly(Reason::WebhookExpiring { boundary: BOUNDARY })
    );
    let certs = regenerate(&decision, Some(&ca), now, &settings()).unwrap().unwrap();
    assert_eq!(to_ca_secret_data(&certs.ca), ca);
    assert_eq!(ca_bundle(Some(&ca), Some(&certs)), Some(ca[keys::CA_CRT].clone()));
    verify_signed_by(certs.webhook.cert_pem.as_bytes(), ca[keys::CA_CRT].as_slice()).unwrap();
    let info = parse_cert_pem(certs.webhook.cert_pem.as_bytes()).unwrap();
    assert_eq!(info.not_after, odt_to_system(now) + settings().webhook_validity);
    let new_webhook = to_webhook_secret_data(&certs.webhook);
    assert_eq!(decide_at(&ca, &new_webhook, now), Decision::Keep);
}

/// `now` truncated to whole seconds, as stored in a certificate.
fn odt_to_system(t: SystemTime) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(t.duration_since(UNIX_EPOCH).unwrap().as_secs())
}

#[test]
fn webhook_only_regeneration_needs_the_stored_ca() {
    let decision = Decision::WebhookOnly(Reason::WebhookSecretMissing);
    assert!(regenerate(&decision, None, t0(), &settings()).is_err());
    assert!(regenerate(&decision, Some(&Data::new()), t0(), &settings()).is_err());
    let (ca, _) = valid_data();
    let mut no_key = ca.clone();
    no_key.remove(keys::CA_KEY);
    assert!(regenerate(&decision, Some(&no_key), t0(), &settings()).is_err());
}

#[test]
fn lifecycle_over_ten_years() {
    let s = settings();
    let mut now = t0();
    let mut ca: Option<Data> = None;
    let mut webhook: Option<Data> = None;
    let mut log = Vec::new();
    // Check daily for a bit over ten years.
    for _ in 0..3700 {
        let decision = decide(ca.as_ref(), webhook.as_ref(), now, &s);
        if let Some(certs) = regenerate(&decision, ca.as_ref(), now, &s).unwrap() {
            log.push(decision);
            ca = Some(to_ca_secret_data(&certs.ca));
            webhook = Some(to_webhook_secret_data(&certs.webhook));
            assert_eq!(decide(ca.as_ref(), webhook.as_ref(), now, &s), Decision::Keep);
        }
        now += DAY;
    }
    let full = log.iter().filter(|d| matches!(d, Decision::Full(_))).count();
    let webhook_only = log.len() - full;
    // Initial creation plus one CA renewal a week before its 10-year end (day 3644); in between the
    // webhook certificate is renewed a week before each 1-year end (days 359, 718, ..., 3590).
    assert_eq!(full, 2, "{log:?}");
    assert_eq!(webhook_only, 10, "{log:?}");
    assert_eq!(log[0], Decision::Full(Reason::CaSecretMissing));
}

// ---------------------------------------------------------------------------------------------
// caBundle, Secret data, messages

#[test]
fn ca_bundle_is_the_raw_ca_certificate() {
    let (ca, _) = valid_data();
    assert_eq!(ca_bundle(Some(&ca), None), Some(ca[keys::CA_CRT].clone()));
    assert_eq!(ca_bundle(None, None), None);
    assert_eq!(ca_bundle(Some(&Data::new()), None), None);
    let certs = regenerate(
        &Decision::Full(Reason::CaExpiring { boundary: BOUNDARY }),
        Some(&ca),
        t0(),
        &settings(),
    )
    .unwrap()
    .unwrap();
    let bundle = ca_bundle(Some(&ca), Some(&certs)).unwrap();
    assert_eq!(bundle, certs.ca.cert_pem.as_bytes());
    assert_eq!(bundle, certs.ca_bundle());
    assert!(String::from_utf8(bundle).unwrap().contains("BEGIN CERTIFICATE"));
}

#[test]
fn secret_data_layout() {
    let (ca, leaf) = valid_pair();
    let data = to_ca_secret_data(&ca);
    assert_eq!(data.keys().collect::<Vec<_>>(), ["ca.crt", "ca.key"]);
    assert_eq!(data["ca.crt"], ca.cert_pem.as_bytes());
    assert_eq!(data["ca.key"], ca.key_pem.as_bytes());
    let data = to_webhook_secret_data(&leaf);
    assert_eq!(data.keys().collect::<Vec<_>>(), ["tls.crt", "tls.key"]);
    assert_eq!(data["tls.crt"], leaf.cert_pem.as_bytes());
    assert_eq!(data["tls.key"], leaf.key_pem.as_bytes());
}

#[test]
fn reasons_are_short_sentences_without_secret_content() {
    let all = [
        Reason::CaSecretMissing,
        Reason::CaCertMissing,
        Reason::CaKeyMissing,
        Reason::CaCertEmpty,
        Reason::CaKeyEmpty,
        Reason::CaUnparsable,
        Reason::CaExpiring { boundary: BOUNDARY },
        Reason::CaNotYetValid,
        Reason::CaNotACa,
        Reason::CaCannotSignCertificates,
        Reason::CaNotForServerAuth,
        Reason::CaKeyUnusable,
        Reason::CaSubjectUnsupported,
        Reason::WebhookSecretMissing,
        Reason::WebhookCertMissing,
        Reason::WebhookKeyMissing,
        Reason::WebhookCertEmpty,
        Reason::WebhookKeyEmpty,
        Reason::WebhookUnparsable,
        Reason::WebhookExpiring { boundary: BOUNDARY },
        Reason::WebhookNamesMismatch,
        Reason::WebhookNotSignedByCa,
        Reason::WebhookIsCa,
        Reason::WebhookNotForServerAuth,
        Reason::WebhookNotYetValid,
    ];
    let mut seen = std::collections::BTreeSet::new();
    for reason in all {
        let text = reason.to_string();
        assert!(!text.is_empty() && text.len() < 160, "{text}");
        assert!(!text.contains("PRIVATE KEY") && !text.contains("-----"), "{text}");
        assert!(!text.contains('\n'), "{text}");
        assert!(seen.insert(text.clone()), "duplicate message {text}");
        for decision in [Decision::WebhookOnly(reason), Decision::Full(reason)] {
            assert_eq!(decision.reason(), Some(reason));
            assert!(decision.to_string().ends_with(&text));
        }
    }
    assert_eq!(
        Reason::CaExpiring { boundary: BOUNDARY }.to_string(),
        "CA certificate expires within the 168h boundary"
    );
    assert_eq!(
        Reason::WebhookNotSignedByCa.to_string(),
        "webhook certificate is not signed by the current CA"
    );
    assert_eq!(Decision::Keep.reason(), None);
}

#[test]
fn reasons_from_secrets_holding_keys_do_not_leak_them() {
    let (ca, webhook) = valid_data();
    let mut bad_ca = ca.clone();
    bad_ca.insert(keys::CA_CRT.into(), ca[keys::CA_KEY].clone());
    let mut bad_webhook = webhook.clone();
    bad_webhook.insert(keys::TLS_CRT.into(), webhook[keys::TLS_KEY].clone());
    for decision in [decide_at(&bad_ca, &webhook, t0()), decide_at(&ca, &bad_webhook, t0())] {
        assert_ne!(decision, Decision::Keep);
        let text = format!("{decision} {decision:?}");
        assert!(!text.contains("PRIVATE KEY") && !text.contains("-----"), "{text}");
    }
}

#[test]
fn durations_are_printed_briefly() {
    assert_eq!(short_duration(BOUNDARY), "168h");
    assert_eq!(short_duration(Duration::from_secs(90 * 60)), "90m");
    assert_eq!(short_duration(Duration::from_secs(45)), "45s");
    assert_eq!(short_duration(Duration::ZERO), "0h");
    assert_eq!(short_duration(Duration::from_millis(1500)), "1.5s");
}

/// RSA keys are stored as the Go manager stores them (PKCS#1), so that after a rollback it can sign a renewed
/// serving certificate with the stored CA key; the pair stays valid for this manager, which renews from it too.
/// ECDSA keys stay PKCS#8.
#[test]
fn rsa_keys_are_stored_as_pkcs1_and_renew_from_the_stored_ca() {
    let s = Settings {
        key: KeyAlgorithm::Rsa2048,
        ..settings()
    };
    let certs = regenerate(&Decision::Full(Reason::CaSecretMissing), None, t0(), &s)
        .unwrap()
        .unwrap();
    let ca = to_ca_secret_data(&certs.ca);
    let webhook = to_webhook_secret_data(&certs.webhook);
    for key in [&ca[keys::CA_KEY], &webhook[keys::TLS_KEY]] {
        assert!(
            key.starts_with(b"-----BEGIN RSA PRIVATE KEY-----\n"),
            "{}",
            String::from_utf8_lossy(&key[..40])
        );
    }
    assert_eq!(decide(Some(&ca), Some(&webhook), t0(), &s), Decision::Keep);
    let renewed = regenerate(&Decision::WebhookOnly(Reason::WebhookCertMissing), Some(&ca), t0(), &s)
        .unwrap()
        .unwrap();
    assert_eq!(
        decide(Some(&ca), Some(&to_webhook_secret_data(&renewed.webhook)), t0(), &s),
        Decision::Keep
    );

    let (ecdsa_ca, _) = valid_data();
    assert!(ecdsa_ca[keys::CA_KEY].starts_with(b"-----BEGIN PRIVATE KEY-----"));
}
