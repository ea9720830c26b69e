//! Certificate handling for the BTP Manager operator: self-signed CA and leaf (webhook serving)
//! certificate generation, PEM parsing, CA -> leaf verification and expiry checks.
//!
//! Crypto is done by `ring` (through `rcgen` and `x509-parser`); RSA keys are generated with the
//! pure-Rust `rsa` crate because ring cannot generate them. No function panics on bad input.

mod algorithm;
mod error;
mod generate;
mod keys;
mod parse;
mod verify;

pub mod operand;
pub mod rotation;

pub use algorithm::KeyAlgorithm;
pub use error::CertError;
pub use generate::{generate_ca, generate_leaf, generate_leaf_with_key, CaSpec, CertPair, LeafSpec};
pub use parse::{expires_within, parse_bundle_pem, parse_cert_pem, pem_blocks_equal_certs, CertInfo};
pub use verify::{check_key_matches_cert, check_key_pem, verify_signed_by};
