//! The reconcile loop for `BtpOperator`.
//!
//! [`reconcile`] ([`pass`]) is the whole flow: an ignored CR is left alone, a misnamed one gets a warning, a
//! deleted one is deprovisioned ([`deprovision`], the stages of [`deprovision_plan`]), any other is
//! provisioned ([`provision`]) in one pass — finalizer, `Processing`, the required Secret, credentials drift,
//! apply, readiness, `Ready`. A pass never sleeps: it returns, and watches ([`controller`]) bring it back.
//!
//! Where to find what:
//! - decisions, pure and unit-tested: [`status`] (the condition), [`credentials_condition`] (the
//!   `CredentialsValid` condition), [`credentials`] (the required Secret),
//!   [`drift`] (cluster ID and credentials namespace), [`resources`] (preparing the manifests),
//!   [`network_policies`], [`waves`] (the order of the apply), [`readiness`] (operand readiness and
//!   `ReadyTimeout`), [`requeue`] (when a pass comes back, error backoff), [`deprovision_plan`] (the deletion
//!   stages, a state machine), [`memory`] (what is remembered about the CR between passes);
//! - doing: [`pass`] (one pass), [`provision`] and [`deprovision`] (the two flows), [`converge`] (the steps
//!   both use to keep the operand converged), [`cluster`] (every API read and write), [`view`] (the one
//!   read path: watch-fed stores with read-your-writes), [`status_writer`] (status and Events), [`events`]
//!   (Events off the pass), [`context`] (what passes share);
//! - how a pass ends: [`end`] ([`End`]: what to report, when to come back), or [`error`]
//!   ([`ReconcileError`]: retried with backoff).
//!
//! This file only declares and re-exports: nothing here is imported from below.

pub mod cluster;
pub mod context;
pub mod controller;
pub mod converge;
pub mod credentials;
pub mod credentials_condition;
pub mod deprovision;
pub mod deprovision_plan;
pub mod drift;
pub mod end;
pub mod error;
pub mod events;
pub mod gate;
pub mod kinds;
pub mod memory;
pub mod metrics;
pub mod network_policies;
pub mod pass;
pub mod provision;
pub mod readiness;
pub mod requeue;
pub mod resources;
pub mod status;
pub mod status_writer;
pub mod view;
pub mod waves;

pub use context::Context;
pub use controller::{error_policy, run};
pub use end::End;
pub use error::ReconcileError;
pub use pass::{pass_budget, reconcile, PASS_BUDGET};
pub use readiness::deployment_ready;
