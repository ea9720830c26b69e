//! The one read path of a pass (docs/behaviour.md#the-read-path): every object a pass reads from the
//! cluster comes through the term's [`ClusterView`] and [`read_through`], as the Go manager reads through
//! its informer cache. The view holds a watch-fed store for each of: the BtpOperators, the credentials
//! Secret, the module's objects of the kinds in [`MODULE_KINDS`], the operand's cluster-ID Secrets, Secrets
//! and pods, and the API server's EndpointSlices ([`start`] builds them with the term).
//!
//! One rule for every store: a read answers [`Read::Present`] or [`Read::Absent`] only from a store that
//! has finished its first list, whose watch runs (`health.rs`: not refused for good, not failing for longer
//! than a Lease duration, or listed again since), that sees the object (its watch selects it), and that has caught up with
//! whatever this process last wrote, deleted or read of that object directly ([`pending`]); otherwise it
//! answers [`Read::NotKnown`] and [`read_through`] asks the API server, raced with the store catching up.
//! Every write or delete a pass sends is recorded here before and after it is sent
//! ([`ClusterView::writing`], [`Writing::wrote`], [`ClusterView::deleted`]); a write dropped unanswered
//! leaves nothing pending.
//!
//! Every change a store takes of an object whose change matters brings a pass ([`Started::changes`]), so a
//! pass that decided from a copy a moment old runs again with the change.
//!
//! Not kept here, on purpose: the ServiceInstances and ServiceBindings a deletion counts (there may be
//! thousands: `cluster/services.rs` lists them page by page, metadata only), the kinds of discovery
//! (`kinds.rs`, once per term) and the runtime ConfigMap the controller reads before a term starts.
//!
//! This file only declares and re-exports: the view and [`read_through`] are in `stores.rs`, the rule in
//! `pending.rs`, one store in `kept.rs`, whether its watch runs in `health.rs`, the watches in `start.rs`.

mod health;
mod kept;
mod key;
mod pending;
mod start;
mod stores;

pub use health::{failure_code, WatchHealth, FAILURE_RUN_GAP};
pub use kept::{listed, Selection};
pub use key::{group_of, ObjectKey, Read};
pub use pending::{cause_of_change, trust, Seen, Trust};
pub use start::{start, Started};
pub use stores::{cr_key, read_through, ClusterView, Writing, MODULE_KINDS};

#[cfg(test)]
mod tests;
