//! Key algorithm selection.

use std::fmt;
use std::str::FromStr;

use crate::error::CertError;

pub(crate) const ALLOWED_NAMES: &str = "ecdsa-p256 (aliases: ecdsa, p256), rsa-2048, rsa-3072, rsa-4096";
const ALLOWED_RSA_BITS: &str = "RSA key sizes 2048, 3072, 4096";

/// The key type of a generated certificate. Signatures always use SHA-256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeyAlgorithm {
    /// ECDSA on NIST P-256 (the default: fast to generate, small).
    #[default]
    EcdsaP256,
    /// RSA with a 2048-bit modulus.
    Rsa2048,
    /// RSA with a 3072-bit modulus.
    Rsa3072,
    /// RSA with a 4096-bit modulus.
    Rsa4096,
}

impl KeyAlgorithm {
    /// Every supported algorithm, default first.
    pub const ALL: [KeyAlgorithm; 4] = [
        KeyAlgorithm::EcdsaP256,
        KeyAlgorithm::Rsa2048,
        KeyAlgorithm::Rsa3072,
        KeyAlgorithm::Rsa4096,
    ];

    /// The canonical name, as accepted by [`FromStr`] and printed by [`fmt::Display`].
    pub fn as_str(self) -> &'static str {
        match self {
            KeyAlgorithm::EcdsaP256 => "ecdsa-p256",
            KeyAlgorithm::Rsa2048 => "rsa-2048",
            KeyAlgorithm::Rsa3072 => "rsa-3072",
            KeyAlgorithm::Rsa4096 => "rsa-4096",
        }
    }

    /// The RSA algorithm for a modulus size in bits (2048, 3072 or 4096).
    pub fn from_rsa_bits(bits: u32) -> Result<Self, CertError> {
        match bits {
            2048 => Ok(KeyAlgorithm::Rsa2048),
            3072 => Ok(KeyAlgorithm::Rsa3072),
            4096 => Ok(KeyAlgorithm::Rsa4096),
            other => Err(CertError::UnsupportedKeyAlgorithm {
                value: format!("RSA {other} bits"),
                allowed: ALLOWED_RSA_BITS,
            }),
        }
    }

    /// The RSA modulus size in bits, `None` for ECDSA.
    pub fn rsa_bits(self) -> Option<usize> {
        match self {
            KeyAlgorithm::EcdsaP256 => None,
            KeyAlgorithm::Rsa2048 => Some(2048),
            KeyAlgorithm::Rsa3072 => Some(3072),
            KeyAlgorithm::Rsa4096 => Some(4096),
        }
    }

    /// Whether this is one of the RSA variants.
    pub fn is_rsa(self) -> bool {
        self.rsa_bits().is_some()
    }
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyAlgorithm {
    type Err = CertError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ecdsa-p256" | "ecdsa" | "p256" => Ok(KeyAlgorithm::EcdsaP256),
            "rsa-2048" => Ok(KeyAlgorithm::Rsa2048),
            "rsa-3072" => Ok(KeyAlgorithm::Rsa3072),
            "rsa-4096" => Ok(KeyAlgorithm::Rsa4096),
            _ => Err(CertError::UnsupportedKeyAlgorithm {
                value: s.chars().take(64).collect(),
                allowed: ALLOWED_NAMES,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_ecdsa_p256() {
        assert_eq!(KeyAlgorithm::default(), KeyAlgorithm::EcdsaP256);
    }

    #[test]
    fn from_str_accepts_canonical_names_and_aliases() {
        let cases = [
            ("ecdsa-p256", KeyAlgorithm::EcdsaP256),
            ("ECDSA-P256", KeyAlgorithm::EcdsaP256),
            ("ecdsa", KeyAlgorithm::EcdsaP256),
            ("P256", KeyAlgorithm::EcdsaP256),
            ("rsa-2048", KeyAlgorithm::Rsa2048),
            ("RSA-3072", KeyAlgorithm::Rsa3072),
            (" Rsa-4096 ", KeyAlgorithm::Rsa4096),
        ];
        for (input, want) in cases {
            assert_eq!(input.parse::<KeyAlgorithm>(), Ok(want), "input {input:?}");
        }
    }

    #[test]
    fn display_round_trips() {
        for alg in KeyAlgorithm::ALL {
            assert_eq!(alg.to_string().parse::<KeyAlgorithm>(), Ok(alg));
        }
        assert_eq!(KeyAlgorithm::Rsa3072.to_string(), "rsa-3072");
    }

    #[test]
    fn from_str_rejects_unknown_and_lists_accepted_values() {
        for bad in ["", "rsa", "rsa-1024", "ed25519", "ecdsa-p384", "rsa2048"] {
            let err = bad.parse::<KeyAlgorithm>().unwrap_err();
            assert!(matches!(err, CertError::UnsupportedKeyAlgorithm { .. }), "{bad:?}");
            let msg = err.to_string();
            for name in ["ecdsa-p256", "rsa-2048", "rsa-3072", "rsa-4096"] {
                assert!(msg.contains(name), "{msg}");
            }
        }
    }

    #[test]
    fn from_rsa_bits() {
        assert_eq!(KeyAlgorithm::from_rsa_bits(2048), Ok(KeyAlgorithm::Rsa2048));
        assert_eq!(KeyAlgorithm::from_rsa_bits(3072), Ok(KeyAlgorithm::Rsa3072));
        assert_eq!(KeyAlgorithm::from_rsa_bits(4096), Ok(KeyAlgorithm::Rsa4096));
        for bad in [0, 1024, 2047, 2049, 8192, u32::MAX] {
            let err = KeyAlgorithm::from_rsa_bits(bad).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(&bad.to_string()), "{msg}");
            for allowed in ["2048", "3072", "4096"] {
                assert!(msg.contains(allowed), "{msg}");
            }
        }
    }

    #[test]
    fn rsa_bits() {
        assert_eq!(KeyAlgorithm::EcdsaP256.rsa_bits(), None);
        assert_eq!(KeyAlgorithm::Rsa4096.rsa_bits(), Some(4096));
        assert!(!KeyAlgorithm::EcdsaP256.is_rsa());
        assert!(KeyAlgorithm::Rsa2048.is_rsa());
    }
}
