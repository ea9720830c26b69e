//! Property tests (issue 12, part 2) of the operand certificate decision ([`operand::decide`]): random PEM
//! garbage, random bytes, truncated and bit-flipped real PEMs, random validity windows and clock values
//! never panic, and `Keep` is only decided for a CA and a webhook certificate that parse, chain, are
//! valid now and outside the expiry boundary (checked with the crate's own parse and verify functions).
//!
//! `PROPTEST_CASES` sets the number of cases (default here: 256; each case generates two or three ECDSA
//! certificates).

use btp_certs::operand::{self, keys, Decision, Settings};
use btp_certs::{
    generate_ca, generate_leaf, parse_cert_pem, verify_signed_by, CaSpec, CertPair, KeyAlgorithm, LeafSpec,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const HOUR: u64 = 3600;
const YEAR: u64 = 365 * 24 * HOUR;

/// 2030-01-01, a fixed base so that runs are reproducible from the seed.
fn base() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_893_456_000)
}

fn at(offset_secs: i64) -> SystemTime {
    let d = Duration::from_secs(offset_secs.unsigned_abs());
    if offset_secs >= 0 {
        base() + d
    } else {
        base() - d
    }
}

fn ca(not_before: i64, validity: u64) -> CertPair {
    let spec = CaSpec {
        common_name: None,
        validity: Duration::from_secs(validity),
        key: KeyAlgorithm::EcdsaP256,
    };
    generate_ca(&spec, at(not_before)).expect("CA")
}

fn leaf(ca: &CertPair, namespace: &str, not_before: i64, validity: u64) -> CertPair {
    let spec = LeafSpec {
        common_name: None,
        dns_names: operand::webhook_dns_names(namespace),
        ip_addresses: vec![],
        validity: Duration::from_secs(validity),
        key: KeyAlgorithm::EcdsaP256,
    };
    generate_leaf(ca, &spec, at(not_before)).expect("leaf")
}

/// How a stored PEM entry is damaged (or not).
#[derive(Clone, Debug)]
enum Damage {
    None,
    /// Cut after this fraction (per mille) of its bytes.
    Truncate(u16),
    /// One byte of the DER flipped (at this per-mille position), re-encoded as PEM.
    FlipDer(u16, u8),
    /// A CERTIFICATE block around random base64-ish text.
    PemGarbage(String),
    /// Random bytes.
    Bytes(Vec<u8>),
    /// Whitespace only.
    Blank,
    /// The entry is absent.
    Missing,
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        24 => Just(Damage::None),
        1 => (0u16..1000).prop_map(Damage::Truncate),
        2 => (0u16..1000, 1u8..=255).prop_map(|(p, x)| Damage::FlipDer(p, x)),
        1 => "[A-Za-z0-9+/=\n]{0,200}".prop_map(Damage::PemGarbage),
        1 => prop::collection::vec(any::<u8>(), 0..300).prop_map(Damage::Bytes),
        1 => Just(Damage::Blank),
        1 => Just(Damage::Missing),
    ]
}

fn damaged(pem_text: &str, damage: &Damage) -> Option<Vec<u8>> {
    let bytes = pem_text.as_bytes();
    Some(match damage {
        Damage::None => bytes.to_vec(),
        Damage::Truncate(p) => bytes[..bytes.len() * usize::from(*p) / 1000].to_vec(),
        Damage::FlipDer(p, x) => {
            let block = pem::parse(bytes).expect("generated PEM parses");
            let mut der = block.contents().to_vec();
            let last = der.len() - 1;
            let i = (der.len() * usize::from(*p) / 1000).min(last);
            der[i] ^= x;
            pem::encode(&pem::Pem::new(block.tag(), der)).into_bytes()
        }
        Damage::PemGarbage(g) => format!("-----BEGIN CERTIFICATE-----\n{g}\n-----END CERTIFICATE-----\n").into_bytes(),
        Damage::Bytes(b) => b.clone(),
        Damage::Blank => b" \n\t".to_vec(),
        Damage::Missing => return None,
    })
}

fn secret(pair: &CertPair, cert_key: &str, key_key: &str, cert: &Damage, key: &Damage) -> BTreeMap<String, Vec<u8>> {
    let mut data = BTreeMap::new();
    if let Some(c) = damaged(&pair.cert_pem, cert) {
        data.insert(cert_key.to_string(), c);
    }
    if let Some(k) = damaged(&pair.key_pem, key) {
        data.insert(key_key.to_string(), k);
    }
    data
}

/// A validity window relative to now: (NotBefore offset, validity), mostly containing now.
fn arb_window() -> impl Strategy<Value = (i64, u64)> {
    prop_oneof![
        4 => (-10 * YEAR as i64..0, 1..20 * YEAR),
        1 => (-20 * YEAR as i64..20 * YEAR as i64, 1..20 * YEAR),
        1 => (-(YEAR as i64)..HOUR as i64, 1..2 * YEAR),
    ]
}

/// How many cases decided `Keep` (the property about `Keep` must not be vacuous).
static KEEPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Which CA signs the webhook certificate.
#[derive(Clone, Copy, Debug)]
enum Signer {
    TheCa,
    AnotherCa,
    /// The webhook Secret holds the CA itself.
    CaAsLeaf,
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn decide_never_panics_and_keep_means_a_valid_chain(
        now in -25 * YEAR as i64..25 * YEAR as i64,
        ca_window in arb_window(),
        leaf_window in arb_window(),
        boundary_hours in 0u64..1000,
        ca_damage in (arb_damage(), arb_damage()),
        leaf_damage in (arb_damage(), arb_damage()),
        signer in prop_oneof![4 => Just(Signer::TheCa), 1 => Just(Signer::AnotherCa), 1 => Just(Signer::CaAsLeaf)],
        secrets_present in (prop::bool::weighted(0.95), prop::bool::weighted(0.9)),
        leaf_namespace in prop_oneof![4 => Just("kyma-system"), 1 => Just("other")],
    ) {
        // Windows are relative to `now`: mostly around it, sometimes entirely before or after.
        let (ca_window, leaf_window) = ((now + ca_window.0, ca_window.1), (now + leaf_window.0, leaf_window.1));
        let the_ca = ca(ca_window.0, ca_window.1);
        let webhook = match signer {
            Signer::TheCa => leaf(&the_ca, leaf_namespace, leaf_window.0, leaf_window.1),
            Signer::AnotherCa => leaf(&ca(ca_window.0, ca_window.1), leaf_namespace, leaf_window.0, leaf_window.1),
            Signer::CaAsLeaf => the_ca.clone(),
        };
        let ca_data = secret(&the_ca, keys::CA_CRT, keys::CA_KEY, &ca_damage.0, &ca_damage.1);
        let webhook_data = secret(&webhook, keys::TLS_CRT, keys::TLS_KEY, &leaf_damage.0, &leaf_damage.1);
        let settings = Settings {
            expiration_boundary: Duration::from_secs(boundary_hours * HOUR),
            ..Settings::default()
        };
        let now = at(now);
        let decision = operand::decide(
            secrets_present.0.then_some(&ca_data),
            secrets_present.1.then_some(&webhook_data),
            now,
            &settings,
        );
        // Never panics, and the message is plain text about the Secrets.
        let _ = decision.to_string();
        if decision == Decision::Keep {
            KEEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let ca_pem = &ca_data[keys::CA_CRT];
            let leaf_pem = &webhook_data[keys::TLS_CRT];
            let ca_info = parse_cert_pem(ca_pem).expect("Keep with an unparsable CA");
            let leaf_info = parse_cert_pem(leaf_pem).expect("Keep with an unparsable webhook certificate");
            prop_assert!(ca_info.is_ca);
            prop_assert!(!leaf_info.is_ca);
            verify_signed_by(leaf_pem, ca_pem).expect("Keep with a broken chain");
            for info in [&ca_info, &leaf_info] {
                prop_assert!(info.not_before <= now, "Keep before NotBefore");
                prop_assert!(now + settings.expiration_boundary <= info.not_after, "Keep inside the expiry boundary");
            }
            prop_assert!(leaf_info.dns_names.iter().any(|n| n == "sap-btp-operator-webhook-service.kyma-system.svc"));
            prop_assert!(!ca_data[keys::CA_KEY].iter().all(u8::is_ascii_whitespace));
            prop_assert!(!webhook_data[keys::TLS_KEY].iter().all(u8::is_ascii_whitespace));
        }
        // A WebhookOnly decision must be carried out by the stored CA: regenerate succeeds.
        if let Decision::WebhookOnly(_) = decision {
            let certs = operand::regenerate(&decision, Some(&ca_data), now, &settings)
                .expect("WebhookOnly with a CA that cannot issue")
                .expect("certificates");
            verify_signed_by(certs.webhook.cert_pem.as_bytes(), &ca_data[keys::CA_CRT]).expect("new leaf chains to the stored CA");
        }
    }

    #[test]
    fn decide_never_panics_on_arbitrary_entries_and_never_keeps_them(
        ca_cert in prop::collection::vec(any::<u8>(), 0..400),
        ca_key in prop::collection::vec(any::<u8>(), 0..400),
        tls_cert in prop::collection::vec(any::<u8>(), 0..400),
        tls_key in prop::collection::vec(any::<u8>(), 0..400),
        now_secs in any::<u64>(),
    ) {
        let ca = BTreeMap::from([(keys::CA_CRT.to_string(), ca_cert), (keys::CA_KEY.to_string(), ca_key)]);
        let webhook = BTreeMap::from([(keys::TLS_CRT.to_string(), tls_cert), (keys::TLS_KEY.to_string(), tls_key)]);
        let now = UNIX_EPOCH.checked_add(Duration::from_secs(now_secs)).unwrap_or(UNIX_EPOCH);
        let decision = operand::decide(Some(&ca), Some(&webhook), now, &Settings::default());
        prop_assert_ne!(decision, Decision::Keep);
    }
}

/// The `Keep` property above is not vacuous: across its cases some decided `Keep`. Runs the property
/// itself (a second time) so as not to depend on test order.
#[test]
fn keep_is_reached_by_the_generated_cases() {
    decide_never_panics_and_keep_means_a_valid_chain();
    let keeps = KEEPS.load(std::sync::atomic::Ordering::Relaxed);
    assert!(keeps > 0, "no case decided Keep: the Keep property was never checked");
}

/// Found by the property above: a CA whose SubjectPublicKeyInfo names another curve (one byte of the
/// curve OID changed) still carries the right key bits, so the key seemed to match; a webhook-only
/// decision then failed on every regeneration. Now the whole SPKI must match: full regeneration.
#[test]
fn a_ca_with_damaged_key_parameters_is_regenerated_in_full() {
    let now = base();
    let the_ca = ca(-3600, 10 * YEAR);
    let block = pem::parse(the_ca.cert_pem.as_bytes()).unwrap();
    let mut der = block.contents().to_vec();
    let p256 = [0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    let at = der
        .windows(p256.len())
        .position(|w| w == p256)
        .expect("P-256 OID in the CA");
    der[at + p256.len() - 1] ^= 0x05;
    let damaged_ca = pem::encode(&pem::Pem::new("CERTIFICATE", der));
    let ca_data = std::collections::BTreeMap::from([
        (keys::CA_CRT.to_string(), damaged_ca.into_bytes()),
        (keys::CA_KEY.to_string(), the_ca.key_pem.into_bytes()),
    ]);
    let decision = operand::decide(Some(&ca_data), None, now, &Settings::default());
    assert_eq!(decision, Decision::Full(operand::Reason::CaKeyUnusable));
}
