//! Certificate parsing and expiry checks.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use crate::error::CertError;

const CERTIFICATE_TAG: &str = "CERTIFICATE";

/// The fields of a certificate the operator makes decisions on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
    /// basicConstraints CA:true.
    pub is_ca: bool,
    /// DNS subjectAltNames, in certificate order.
    pub dns_names: Vec<String>,
    /// IP subjectAltNames, in certificate order.
    pub ip_addresses: Vec<IpAddr>,
    /// Subject DN in RFC 4514-like form (e.g. `CN=btp-manager`); empty for an empty subject.
    pub subject: String,
    /// Serial number as lowercase hex without separators or leading zero bytes.
    pub serial_hex: String,
}

/// The DER of every `CERTIFICATE` block, in order (other blocks are skipped).
pub(crate) fn all_cert_ders(pem_bytes: &[u8]) -> Result<Vec<Vec<u8>>, CertError> {
    let blocks = pem::parse_many(pem_bytes).map_err(|e| CertError::parse("PEM", e))?;
    Ok(blocks
        .into_iter()
        .filter(|b| b.tag() == CERTIFICATE_TAG)
        .map(pem::Pem::into_contents)
        .collect())
}

/// The DER of the first `CERTIFICATE` block.
pub(crate) fn first_cert_der(pem_bytes: &[u8]) -> Result<Vec<u8>, CertError> {
    all_cert_ders(pem_bytes)?
        .into_iter()
        .next()
        .ok_or(CertError::NoCertificate)
}

/// Parses one DER certificate, rejecting trailing bytes.
pub(crate) fn parse_der(der: &[u8]) -> Result<X509Certificate<'_>, CertError> {
    let (rest, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| CertError::parse("certificate", e))?;
    if !rest.is_empty() {
        return Err(CertError::parse(
            "certificate",
            format!("{} trailing bytes after the DER certificate", rest.len()),
        ));
    }
    Ok(cert)
}

/// basicConstraints CA:true (a duplicated extension is an error).
pub(crate) fn is_ca(cert: &X509Certificate<'_>) -> Result<bool, CertError> {
    let bc = cert
        .basic_constraints()
        .map_err(|e| CertError::parse("certificate basicConstraints", e))?;
    Ok(bc.is_some_and(|ext| ext.value.ca))
}

fn timestamp_to_system_time(secs: i64) -> Result<SystemTime, CertError> {
    let magnitude = Duration::from_secs(secs.unsigned_abs());
    let t = if secs >= 0 {
        UNIX_EPOCH.checked_add(magnitude)
    } else {
        UNIX_EPOCH.checked_sub(magnitude)
    };
    t.ok_or_else(|| CertError::parse("certificate validity", "time out of range"))
}

fn serial_hex(raw: &[u8]) -> String {
    let significant: Vec<u8> = raw.iter().copied().skip_while(|b| *b == 0).collect();
    if significant.is_empty() {
        return "0".to_string();
    }
    significant.iter().map(|b| format!("{b:02x}")).collect()
}

fn info_from_der(der: &[u8]) -> Result<CertInfo, CertError> {
    let cert = parse_der(der)?;
    let mut dns_names = Vec::new();
    let mut ip_addresses = Vec::new();
    let san = cert
        .subject_alternative_name()
        .map_err(|e| CertError::parse("certificate subjectAltName", e))?;
    if let Some(san) = san {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => dns_names.push((*dns).to_string()),
                GeneralName::IPAddress(bytes) => {
                    let ip = if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                        IpAddr::V4(Ipv4Addr::from(v4))
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                        IpAddr::V6(Ipv6Addr::from(v6))
                    } else {
                        return Err(CertError::parse(
                            "certificate subjectAltName",
                            format!("IP address of {} bytes", bytes.len()),
                        ));
                    };
                    ip_addresses.push(ip);
                }
                _ => {}
            }
        }
    }
    let validity = cert.validity();
    Ok(CertInfo {
        not_before: timestamp_to_system_time(validity.not_before.timestamp())?,
        not_after: timestamp_to_system_time(validity.not_after.timestamp())?,
        is_ca: is_ca(&cert)?,
        dns_names,
        ip_addresses,
        subject: cert.subject().to_string(),
        serial_hex: serial_hex(cert.raw_serial()),
    })
}

/// Parses the first `CERTIFICATE` block of `pem` (other blocks are skipped; a malformed PEM block
/// anywhere is an error).
pub fn parse_cert_pem(pem: &[u8]) -> Result<CertInfo, CertError> {
    info_from_der(&first_cert_der(pem)?)
}

/// Parses every `CERTIFICATE` block of `pem`, in order. Non-certificate blocks are skipped;
/// malformed PEM, a block that is not X.509, or no certificate at all is an error.
pub fn parse_bundle_pem(pem: &[u8]) -> Result<Vec<CertInfo>, CertError> {
    let ders = all_cert_ders(pem)?;
    if ders.is_empty() {
        return Err(CertError::NoCertificate);
    }
    ders.iter().map(|der| info_from_der(der)).collect()
}

/// Whether the certificate needs renewing: `now + window >= not_after`, or it is not valid yet
/// (`now < not_before`). An overflowing `now + window` counts as expiring.
pub fn expires_within(info: &CertInfo, now: SystemTime, window: Duration) -> bool {
    if now < info.not_before {
        return true;
    }
    now.checked_add(window)
        .is_none_or(|deadline| deadline >= info.not_after)
}

/// Whether `a` and `b` contain the same set of certificates (DER comparison, so PEM line
/// wrapping, whitespace, order, duplicates and non-certificate blocks do not matter). False when
/// either side is malformed or contains no certificate.
pub fn pem_blocks_equal_certs(a: &[u8], b: &[u8]) -> bool {
    match (all_cert_ders(a), all_cert_ders(b)) {
        (Ok(mut a), Ok(mut b)) if !a.is_empty() && !b.is_empty() => {
            a.sort_unstable();
            a.dedup();
            b.sort_unstable();
            b.dedup();
            a == b
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_hex_strips_leading_zero_bytes() {
        assert_eq!(serial_hex(&[0x00, 0x8f, 0x01]), "8f01");
        assert_eq!(serial_hex(&[0x7f, 0x00]), "7f00");
        assert_eq!(serial_hex(&[0x00]), "0");
        assert_eq!(serial_hex(&[]), "0");
    }

    #[test]
    fn timestamps_before_the_epoch_convert() {
        assert_eq!(
            timestamp_to_system_time(-10).unwrap(),
            UNIX_EPOCH - Duration::from_secs(10)
        );
        assert_eq!(
            timestamp_to_system_time(10).unwrap(),
            UNIX_EPOCH + Duration::from_secs(10)
        );
    }

    fn info(not_before: u64, not_after: u64) -> CertInfo {
        CertInfo {
            not_before: UNIX_EPOCH + Duration::from_secs(not_before),
            not_after: UNIX_EPOCH + Duration::from_secs(not_after),
            is_ca: false,
            dns_names: vec![],
            ip_addresses: vec![],
            subject: String::new(),
            serial_hex: "1".into(),
        }
    }

    #[test]
    fn expires_within_boundaries() {
        let c = info(1_000, 2_000);
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let w = Duration::from_secs(100);
        // Comfortably inside the validity, outside the window.
        assert!(!expires_within(&c, at(1_000), w));
        assert!(!expires_within(&c, at(1_899), w));
        // now + window == not_after counts as expiring.
        assert!(expires_within(&c, at(1_900), w));
        assert!(expires_within(&c, at(1_950), w));
        // Already expired.
        assert!(expires_within(&c, at(2_000), Duration::ZERO));
        assert!(expires_within(&c, at(3_000), w));
        // One nanosecond before not_after with a zero window is still fine.
        assert!(!expires_within(&c, at(2_000) - Duration::from_nanos(1), Duration::ZERO));
        // Not yet valid.
        assert!(expires_within(&c, at(999), Duration::ZERO));
        assert!(expires_within(&c, at(1_000) - Duration::from_nanos(1), Duration::ZERO));
        // Overflowing window.
        assert!(expires_within(&c, at(1_000), Duration::MAX));
    }
}
