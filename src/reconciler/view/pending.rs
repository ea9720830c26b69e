//! Read-your-writes: what this process wrote, deleted or read from the API server that the stores have not
//! shown yet ([`Pending`]), and the one rule that says whether a store's copy may answer ([`trust`]).
//!
//! Resource versions are compared for equality only (they are opaque): a store that shows anything other
//! than what this process last saw may be behind or ahead, and only the API server can tell. A watch
//! delivers one object's changes in order, so once it delivered what this process saw, whatever the store
//! shows from then on is as new or newer.

use super::key::ObjectKey;
use crate::reconciler::gate::Cause;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// What this process last saw of an object directly, not yet shown by a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A write was sent and has not answered yet.
    InFlight,
    /// Written, or read from the API server, at this resourceVersion.
    At(String),
    /// Deleted, or read from the API server as absent.
    Gone,
}

impl Seen {
    /// What a write's answer or a read of the API server says: at `resource_version`, or absent.
    pub fn from_version(resource_version: Option<String>) -> Self {
        resource_version.map_or(Seen::Gone, Seen::At)
    }

    fn is(&self, stored: Option<&str>) -> bool {
        match (self, stored) {
            (Seen::At(seen), Some(stored)) => seen == stored,
            (Seen::Gone, None) => true,
            _ => false,
        }
    }
}

/// Whether a store's copy answers a read.
#[derive(Debug, PartialEq, Eq)]
pub enum Trust {
    /// The store answers; what was seen directly (if anything) is confirmed and can be forgotten.
    Store,
    /// The store has not caught up with what this process saw directly: ask the API server.
    Server,
}

/// Whether a store holding an object at `stored` (None: the store does not hold it) answers for an object
/// this process last saw directly as `seen` (None: nothing pending). Pure.
pub fn trust(stored: Option<&str>, seen: Option<&Seen>) -> Trust {
    match seen {
        None => Trust::Store,
        Some(seen) if seen.is(stored) => Trust::Store,
        Some(_) => Trust::Server,
    }
}

/// Who caused a change a watch delivered: ours when it echoes our own write (`echo`), and also when the
/// object has a generation that the change left as it was (`before` → `now`): a status or metadata-only
/// update, the work of a controller following our write (the Deployment controller's status, the CRD's
/// conditions), which a person fixing something does not make. Anything else is someone else's. Pure.
pub fn cause_of_change(echo: Cause, before: Option<i64>, now: Option<i64>) -> Cause {
    match (echo, before, now) {
        (Cause::Ours, _, _) => Cause::Ours,
        (_, Some(before), Some(now)) if before == now => Cause::Ours,
        _ => Cause::Theirs,
    }
}

/// Which store: one object can be in two (the operand Secret is a module object and one of the operand's
/// Secrets), and each must catch up on its own before it answers for it.
pub type StoreId = usize;

/// An entry: an object as one store holds it.
pub type Entry = (StoreId, ObjectKey);

/// What this process saw directly and no store has shown yet, per store, shared by the stores' watches
/// (which clear it) and the reads (which consult it under the same lock as they copy from a store).
#[derive(Default)]
pub struct Pending {
    seen: Mutex<HashMap<Entry, Seen>>,
    /// Woken after every change a store took ([`super::ClusterView::caught_up`] waits on it).
    changed: tokio::sync::Notify,
}

impl Pending {
    /// The entries, locked. A read copies from its store while holding this, so that a watch delivering our
    /// write in between clears the entry only after the copy: a copy older than our write is never trusted.
    pub fn lock(&self) -> MutexGuard<'_, HashMap<Entry, Seen>> {
        crate::sync::lock(&self.seen)
    }

    /// Notified after every change a store took.
    pub fn changed(&self) -> &tokio::sync::Notify {
        &self.changed
    }

    /// A watch delivered `key` at `resource_version` (None: its deletion), after its store took it.
    /// Returns whether the change echoes this process's own write or delete: the version it wrote, or any
    /// version while that write has not been delivered yet (the API server may store an intermediate
    /// version before it answers, such as a CRD's create just before it is established). The entry is
    /// cleared when the delivery is what was seen.
    pub fn delivered(&self, entry: &Entry, resource_version: Option<&str>) -> Cause {
        let echo = {
            let mut seen = self.lock();
            let here = seen.get(entry).map(|seen| seen.is(resource_version));
            if here == Some(true) {
                seen.remove(entry);
            }
            here.is_some()
        };
        self.changed.notify_waiters();
        match echo {
            true => Cause::Ours,
            false => Cause::Theirs,
        }
    }

    /// Record what this process saw of `entry` directly, unless its store already shows exactly that
    /// (`shown`, asked under the lock so that a delivery cannot slip between the look and the record): an
    /// entry left then would never clear, and would take every later change of the object for an echo of
    /// ours.
    pub fn record(&self, entry: Entry, seen: Seen, shown: impl FnOnce(&Seen) -> bool) {
        let mut entries = self.lock();
        if shown(&seen) {
            entries.remove(&entry);
        } else {
            entries.insert(entry, seen);
        }
    }

    /// The write announced as [`Seen::InFlight`] failed: nothing of ours is pending for `entry` any more
    /// (unless something else was recorded meanwhile).
    pub fn write_failed(&self, entry: &Entry) {
        let mut entries = self.lock();
        if entries.get(entry) == Some(&Seen::InFlight) {
            entries.remove(entry);
        }
    }

    /// A read of the API server answered `seen` for `entry`: it replaces what is pending, or clears it when
    /// the store already shows the same (`shown`, asked under the lock). A read of an object no write of ours
    /// touched leaves nothing to wait for.
    pub fn read_again(&self, entry: &Entry, seen: Seen, shown: impl FnOnce(&Seen) -> bool) {
        let mut entries = self.lock();
        if !entries.contains_key(entry) {
            return;
        }
        if shown(&seen) {
            entries.remove(entry);
        } else {
            entries.insert(entry.clone(), seen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Entry {
        (0, ObjectKey::core("Secret", "kyma-system", name))
    }

    #[test]
    fn a_store_answers_unless_it_has_not_caught_up_with_what_was_seen_directly() {
        let at = |rv: &str| Seen::At(rv.into());
        assert_eq!(trust(Some("7"), None), Trust::Store, "nothing pending");
        assert_eq!(trust(None, None), Trust::Store, "nothing pending, absent");
        assert_eq!(
            trust(Some("7"), Some(&at("7"))),
            Trust::Store,
            "caught up with our write"
        );
        assert_eq!(
            trust(None, Some(&Seen::Gone)),
            Trust::Store,
            "caught up with our delete"
        );
        assert_eq!(trust(None, Some(&at("7"))), Trust::Server, "our create not seen yet");
        assert_eq!(
            trust(Some("6"), Some(&at("7"))),
            Trust::Server,
            "older or newer: cannot tell"
        );
        assert_eq!(
            trust(Some("7"), Some(&Seen::Gone)),
            Trust::Server,
            "our delete not seen yet"
        );
        assert_eq!(
            trust(Some("7"), Some(&Seen::InFlight)),
            Trust::Server,
            "a write in flight"
        );
        assert_eq!(trust(None, Some(&Seen::InFlight)), Trust::Server);
    }

    #[test]
    fn only_the_echo_of_our_own_write_or_delete_counts_as_ours() {
        let p = Pending::default();
        let k = key("sap-btp-service-operator");
        assert_eq!(p.delivered(&k, Some("3")), Cause::Theirs, "nothing of ours pending");
        p.record(k.clone(), Seen::At("5".into()), |_| false);
        assert_eq!(
            p.delivered(&k, Some("4")),
            Cause::Ours,
            "another version while our write is not delivered yet"
        );
        assert_eq!(p.delivered(&k, Some("5")), Cause::Ours, "the echo of our write");
        assert_eq!(p.delivered(&k, Some("5")), Cause::Theirs, "an echo counts once");
        p.record(k.clone(), Seen::Gone, |_| false);
        assert_eq!(p.delivered(&k, None), Cause::Ours, "the echo of our delete");
        assert_eq!(p.delivered(&k, None), Cause::Theirs);
    }

    #[test]
    fn a_write_in_flight_takes_every_delivery_for_ours_until_it_answers_or_fails() {
        let p = Pending::default();
        let k = key("ca-server-cert");
        p.record(k.clone(), Seen::InFlight, |_| false);
        assert_eq!(p.delivered(&k, Some("5")), Cause::Ours, "delivered before the answer");
        p.record(k.clone(), Seen::At("5".into()), |_| true);
        assert!(p.lock().is_empty(), "the store shows the answer: nothing pending");
        assert_eq!(
            p.delivered(&k, Some("6")),
            Cause::Theirs,
            "a later change is someone else's"
        );

        p.record(k.clone(), Seen::InFlight, |_| false);
        p.record(key("other"), Seen::At("1".into()), |_| false);
        p.write_failed(&k);
        p.write_failed(&key("other"));
        assert_eq!(
            p.lock().keys().collect::<Vec<_>>(),
            vec![&key("other")],
            "only the failed write is forgotten"
        );
        p.record((1, key("other").1), Seen::At("1".into()), |_| false);
        assert_eq!(p.delivered(&key("other"), Some("1")), Cause::Ours);
        assert_eq!(
            p.lock().keys().collect::<Vec<_>>(),
            vec![&(1, key("other").1)],
            "each store catches up on its own"
        );
    }

    #[test]
    fn a_read_of_the_server_replaces_only_what_is_pending() {
        let p = Pending::default();
        p.read_again(&key("a"), Seen::At("3".into()), |_| false);
        assert!(p.lock().is_empty(), "nothing of ours pending: nothing to wait for");
        p.record(key("a"), Seen::At("3".into()), |_| false);
        p.read_again(&key("a"), Seen::At("4".into()), |_| false);
        assert_eq!(p.lock().get(&key("a")), Some(&Seen::At("4".into())));
        p.read_again(&key("a"), Seen::At("5".into()), |seen| *seen == Seen::At("5".into()));
        assert!(p.lock().is_empty(), "the store already shows what the server answered");
    }

    #[test]
    fn a_change_that_leaves_the_generation_is_a_controllers_and_counts_as_ours() {
        assert_eq!(cause_of_change(Cause::Ours, None, None), Cause::Ours);
        assert_eq!(
            cause_of_change(Cause::Theirs, Some(3), Some(3)),
            Cause::Ours,
            "status only"
        );
        assert_eq!(
            cause_of_change(Cause::Theirs, Some(3), Some(4)),
            Cause::Theirs,
            "a spec edit"
        );
        assert_eq!(
            cause_of_change(Cause::Theirs, None, Some(1)),
            Cause::Theirs,
            "created by someone"
        );
        assert_eq!(
            cause_of_change(Cause::Theirs, None, None),
            Cause::Theirs,
            "a kind without generation"
        );
    }
}
