//! The `BtpOperator` API (`operator.kyma-project.io/v1alpha1`) and the names the whole product shares.
//!
//! Every name here is part of the compatibility contract with the original Go BTP Manager
//! (docs/behaviour.md, docs/upgrading.md): clusters and tools already rely on them.

pub mod credentials;
pub mod names;
pub mod reason;
pub mod types;

pub use credentials::{CredentialsReason, CREDENTIALS_VALID};
pub use reason::Reason;
pub use types::{BtpOperator, BtpOperatorSpec, BtpOperatorStatus, Condition, ConditionStatus, State};
