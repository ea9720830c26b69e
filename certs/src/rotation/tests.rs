use super::*;

const MIN: Duration = Duration::from_secs(60);

/// Short lifetimes so that every transition happens within a simulated hour.
fn policy() -> Policy {
    Policy {
        ca_validity: 100 * MIN,
        leaf_validity: 90 * MIN,
        ca_renew_before: 40 * MIN,
        leaf_renew_before: 10 * MIN,
        overlap: 2 * MIN,
        key: KeyAlgorithm::EcdsaP256,
        dns_names: vec!["btp-manager-webhook-service.kyma-system.svc".into()],
        ip_addresses: vec![],
    }
}

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn settled(now: SystemTime) -> Stored {
    let (stored, steps) = settle(&Stored::default(), now, &policy()).unwrap();
    assert_eq!(steps.len(), 1);
    assert!(matches!(steps[0], Step::Bootstrap(_)));
    stored
}

fn serial(pem: &str) -> String {
    parse_cert_pem(pem.as_bytes()).unwrap().serial_hex
}

#[test]
fn empty_secret_bootstraps_a_ca_and_a_leaf_signed_by_it() {
    let s = settled(t0());
    let ca = s.ca.as_ref().unwrap();
    let leaf = s.leaf.as_ref().unwrap();
    verify_signed_by(leaf.cert_pem.as_bytes(), ca.cert_pem.as_bytes()).unwrap();
    let info = parse_cert_pem(leaf.cert_pem.as_bytes()).unwrap();
    assert_eq!(info.dns_names, policy().dns_names);
    assert_eq!(decide(&s, t0(), &policy()), Step::Keep);
    assert_eq!(s.ca_bundle().matches("BEGIN CERTIFICATE").count(), 1);
}

#[test]
fn round_trips_through_secret_data() {
    let s = settled(t0());
    let (s, _) = settle(&s, t0() + 61 * MIN, &policy()).unwrap(); // stages a next CA
    assert!(s.next_ca.is_some());
    let data = s.to_data();
    assert_eq!(Stored::from_data(&data), s);
    assert_eq!(data[keys::CA_BUNDLE], s.ca_bundle().into_bytes());
}

#[test]
fn garbage_or_missing_entries_lead_to_bootstrap_or_new_leaf() {
    let s = settled(t0());
    let mut data = s.to_data();
    data.insert(keys::CA_CRT.into(), b"garbage".to_vec());
    assert!(matches!(
        decide(&Stored::from_data(&data), t0(), &policy()),
        Step::Bootstrap(_)
    ));

    let mut data = s.to_data();
    data.remove(keys::CA_KEY);
    assert!(matches!(
        decide(&Stored::from_data(&data), t0(), &policy()),
        Step::Bootstrap(_)
    ));

    let other = settled(t0());
    let mut data = s.to_data();
    data.insert(keys::CA_KEY.into(), other.ca.unwrap().key_pem.into_bytes());
    assert!(
        matches!(decide(&Stored::from_data(&data), t0(), &policy()), Step::Bootstrap(_)),
        "foreign CA key"
    );

    let mut data = s.to_data();
    data.remove(keys::TLS_CRT);
    assert!(matches!(
        decide(&Stored::from_data(&data), t0(), &policy()),
        Step::IssueLeaf(_)
    ));

    let mut data = s.to_data();
    data.insert(
        keys::TLS_KEY.into(),
        b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec(),
    );
    assert!(matches!(
        decide(&Stored::from_data(&data), t0(), &policy()),
        Step::IssueLeaf(_)
    ));
}

#[test]
fn leaf_from_another_ca_or_for_other_names_is_reissued_from_the_current_ca() {
    let s = settled(t0());
    let foreign = settled(t0());
    let mixed = Stored {
        leaf: foreign.leaf.clone(),
        ..s.clone()
    };
    let Step::IssueLeaf(why) = decide(&mixed, t0(), &policy()) else {
        panic!("expected IssueLeaf")
    };
    assert!(why.contains("not issued by the current CA"), "{why}");
    let fixed = advance(&mixed, &Step::IssueLeaf(why), t0(), &policy()).unwrap();
    verify_signed_by(
        fixed.leaf.unwrap().cert_pem.as_bytes(),
        s.ca.unwrap().cert_pem.as_bytes(),
    )
    .unwrap();

    let mut renamed = policy();
    renamed.ip_addresses = vec!["127.0.0.1".parse().unwrap()];
    assert!(matches!(decide(&mixed, t0(), &renamed), Step::IssueLeaf(_)));
}

#[test]
fn leaf_renewal_keeps_the_ca_and_the_bundle() {
    // A CA renewal window short enough not to interfere.
    let p = Policy {
        ca_renew_before: 5 * MIN,
        ..policy()
    };
    let s = settled(t0());
    let before = s.ca_bundle();
    let due = t0() + 81 * MIN; // leaf (90 min) within its 10-minute window
    assert!(matches!(decide(&s, due - 2 * MIN, &p), Step::Keep));
    let (renewed, steps) = settle(&s, due, &p).unwrap();
    assert!(matches!(steps.as_slice(), [Step::IssueLeaf(_)]), "{steps:?}");
    assert_eq!(renewed.ca, s.ca);
    assert_eq!(renewed.ca_bundle(), before);
    assert_ne!(
        serial(&renewed.leaf.unwrap().cert_pem),
        serial(&s.leaf.unwrap().cert_pem)
    );
}

#[test]
fn ca_rotation_overlaps_old_and_new_ca_until_every_replica_serves_the_new_leaf() {
    let p = policy();
    let s = settled(t0());
    let old_ca = s.ca.clone().unwrap();

    // 1. The CA enters its renewal window: stage the next CA, bundle = old + new, leaf unchanged.
    let t1 = t0() + 61 * MIN;
    let (staged, steps) = settle(&s, t1, &p).unwrap();
    assert_eq!(steps, vec![Step::StageNextCa]);
    let new_ca = staged.next_ca.clone().unwrap().0;
    assert_eq!(staged.ca_bundle().matches("BEGIN CERTIFICATE").count(), 2);
    assert!(staged.ca_bundle().contains(old_ca.cert_pem.trim()) && staged.ca_bundle().contains(new_ca.cert_pem.trim()));
    verify_signed_by(
        staged.leaf.as_ref().unwrap().cert_pem.as_bytes(),
        old_ca.cert_pem.as_bytes(),
    )
    .unwrap();

    // Within the overlap nothing is signed with the new CA yet.
    assert_eq!(decide(&staged, t1 + MIN, &p), Step::Keep);
    assert_eq!(next_check(&staged, &p), Some(t1 + p.overlap));

    // 2. After the overlap: the leaf comes from the new CA, which is now current; old CA still trusted.
    let t2 = t1 + p.overlap;
    let (promoted, steps) = settle(&staged, t2, &p).unwrap();
    assert_eq!(steps, vec![Step::PromoteNextCa]);
    assert_eq!(promoted.ca.as_ref(), Some(&new_ca));
    verify_signed_by(
        promoted.leaf.as_ref().unwrap().cert_pem.as_bytes(),
        new_ca.cert_pem.as_bytes(),
    )
    .unwrap();
    assert_eq!(promoted.ca_bundle().matches("BEGIN CERTIFICATE").count(), 2);
    assert!(promoted.ca_bundle().contains(old_ca.cert_pem.trim()));
    assert!(promoted
        .previous_ca
        .as_ref()
        .unwrap()
        .0
        .contains(old_ca.cert_pem.trim()));

    // 3. After another overlap the old CA leaves the bundle.
    assert_eq!(decide(&promoted, t2 + MIN, &p), Step::Keep);
    let (done, steps) = settle(&promoted, t2 + p.overlap, &p).unwrap();
    assert_eq!(steps, vec![Step::DropPreviousCa]);
    assert_eq!(done.ca_bundle().matches("BEGIN CERTIFICATE").count(), 1);
    assert!(!done.ca_bundle().contains(old_ca.cert_pem.trim()));
    assert_eq!(decide(&done, t2 + p.overlap, &p), Step::Keep);
}

#[test]
fn a_leaf_capped_by_the_ca_expiry_is_not_renewed_in_a_loop() {
    let p = policy();
    let s = settled(t0());
    // 95 minutes in: the CA has 5 minutes left; stage + wait is in progress. Re-issuing the leaf would give
    // one that expires with the CA too, so only the CA rotation may act.
    let mut staged = settle(&s, t0() + 61 * MIN, &p).unwrap().0;
    // Pretend the leaf was re-issued late and is capped at the CA expiry.
    staged.leaf = Some(new_leaf(staged.ca.as_ref().unwrap(), t0() + 95 * MIN, &p).unwrap());
    staged.next_ca.as_mut().unwrap().1 = t0() + 95 * MIN; // overlap not yet over
    assert_eq!(decide(&staged, t0() + 96 * MIN, &p), Step::Keep);
}

#[test]
fn an_expired_ca_bootstraps_everything() {
    let s = settled(t0());
    let (fresh, steps) = settle(&s, t0() + 101 * MIN, &policy()).unwrap();
    assert!(matches!(steps.as_slice(), [Step::Bootstrap(_)]), "{steps:?}");
    assert_ne!(fresh.ca, s.ca);
}

#[test]
fn a_broken_staged_ca_is_staged_again() {
    let s = settle(&settled(t0()), t0() + 61 * MIN, &policy()).unwrap().0;
    let mut data = s.to_data();
    data.insert(keys::NEXT_CA_CRT.into(), b"nope".to_vec());
    assert_eq!(
        decide(&Stored::from_data(&data), t0() + 61 * MIN, &policy()),
        Step::StageNextCa
    );
}

#[test]
fn next_check_is_the_earliest_renewal() {
    let p = policy();
    let s = settled(t0());
    // CA at +100 − 40 → +60 min; leaf at +90 − 10 → +80 min.
    assert_eq!(next_check(&s, &p), Some(t0() + 60 * MIN));
    let p = Policy {
        ca_renew_before: 5 * MIN,
        ..p
    };
    assert_eq!(next_check(&s, &p), Some(t0() + 80 * MIN));
}
