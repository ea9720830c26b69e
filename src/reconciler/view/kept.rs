//! One watch-fed store and what its watch sees ([`Kept`]): which objects it can answer for, and how it
//! answers under the read-your-writes rule of [`super::pending`].

use super::health::Health;
use super::key::{ObjectKey, Read};
use super::pending::{trust, Pending, StoreId, Trust};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Resource;
use std::sync::Arc;

/// What a watch selects within its namespace (or the cluster).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Every object of the kind: an absence is certain.
    Everything,
    /// Only some (by label or by name): an object outside the selection reads as absent, which is only
    /// good enough when the caller says so.
    Some,
}

/// Where a watch looks: its namespace (None: every namespace, or the kind is cluster-scoped), whether the
/// kind is namespaced, the one name it selects, if it selects by name, and the one label it selects, if it
/// selects by label.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// The namespace watched.
    pub namespace: Option<&'a str>,
    /// Whether the kind is namespaced (its keys carry a namespace).
    pub namespaced: bool,
    /// The name a field selector picks, if any.
    pub name: Option<&'a str>,
    /// The label (key, value) a label selector picks, if any.
    pub label: Option<(&'a str, &'a str)>,
}

/// A store of one kind, fed by a watch on its [`Scope`].
pub struct Kept<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash,
{
    id: StoreId,
    api_version: String,
    kind: String,
    dyntype: K::DynamicType,
    /// The namespace watched; None: every namespace, or the kind is cluster-scoped.
    namespace: Option<String>,
    /// Whether the kind is namespaced (its keys carry a namespace).
    namespaced: bool,
    /// The one name the watch selects, if it selects by name.
    name: Option<String>,
    /// The one label the watch selects, if it selects by label.
    label: Option<(String, String)>,
    selection: Selection,
    store: Store<K>,
    /// Whether its watch runs ([`super::health`]).
    health: Health,
}

/// Whether `store` has finished its first list (a store answers only from then on).
pub fn listed<K: Resource + Clone>(store: &Store<K>) -> bool
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use futures::FutureExt as _;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

fn version<K: Resource>(obj: &K) -> Option<&str> {
    obj.meta().resource_version.as_deref()
}

impl<K> Kept<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// Store `id`: `store`, of `kind` in `apiVersion`, fed by a watch on `scope` that selects `selection`,
    /// whose health is `health`.
    pub fn new(
        id: StoreId,
        (api_version, kind): (&str, &str),
        dyntype: K::DynamicType,
        scope: Scope<'_>,
        (selection, health): (Selection, Health),
        store: Store<K>,
    ) -> Self {
        Self {
            id,
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            dyntype,
            namespace: scope.namespace.filter(|_| scope.namespaced).map(str::to_string),
            namespaced: scope.namespaced,
            name: scope.name.map(str::to_string),
            label: scope.label.map(|(k, v)| (k.to_string(), v.to_string())),
            selection,
            store,
            health,
        }
    }

    /// Whether the first list is done.
    pub fn listed(&self) -> bool {
        listed(&self.store)
    }

    /// Its watch's health.
    #[cfg(test)]
    pub(super) fn health(&self) -> &Health {
        &self.health
    }

    /// Whether the store answers reads: it has listed, and its watch runs (or has listed again since it
    /// could not).
    pub fn answers(&self) -> bool {
        self.listed() && self.health.answers()
    }

    /// The key of `obj`, as this store holds it.
    pub fn key_of(&self, obj: &K) -> ObjectKey {
        self.key_of_meta(obj.meta())
    }

    /// The key of the object `meta` describes, as this store would hold it.
    pub fn key_of_meta(&self, meta: &kube::api::ObjectMeta) -> ObjectKey {
        ObjectKey::of(&self.api_version, &self.kind, self.namespaced, meta)
    }

    /// Whether `key` is of this store's kind and in the scope its watch sees.
    pub fn covers(&self, key: &ObjectKey) -> bool {
        key.is(&self.api_version, &self.kind)
            && key.namespace.is_some() == self.namespaced
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| key.namespace.as_ref() == Some(ns))
            && self.name.as_ref().is_none_or(|name| *name == key.name)
    }

    /// Whether the store, listed, sees every object of `namespace` (None: of its whole scope) that
    /// [`Kept::list`] answers for: a name-selected store sees one name only.
    pub fn covers_namespace(&self, namespace: Option<&str>) -> bool {
        self.namespace.as_deref().is_none_or(|ns| Some(ns) == namespace)
    }

    fn stored(&self, key: &ObjectKey) -> Option<Arc<K>> {
        let mut at = ObjectRef::new_with(&key.name, self.dyntype.clone());
        if let Some(ns) = &key.namespace {
            at = at.within(ns);
        }
        self.store.get(&at)
    }

    /// `key` from this store, under the read-your-writes rule: [`Read::NotKnown`] when the key is outside
    /// what the watch sees, before the first list, while its watch cannot run, or while the store has not
    /// caught up with what this process saw of it directly. An absence from a store that selects only some objects is an answer
    /// only when `certain_absence` is not asked for.
    pub fn get(&self, pending: &Pending, key: &ObjectKey, certain_absence: bool) -> Read<Arc<K>> {
        if !self.covers(key) || !self.answers() {
            return Read::NotKnown;
        }
        let entry = (self.id, key.clone());
        let mut entries = pending.lock();
        let stored = self.stored(key);
        match trust(stored.as_deref().and_then(version), entries.get(&entry)) {
            Trust::Store => {
                entries.remove(&entry);
            }
            Trust::Server => return Read::NotKnown,
        }
        match stored {
            Some(obj) => Read::Present(obj),
            None if certain_absence && self.selection != Selection::Everything => Read::NotKnown,
            None => Read::Absent,
        }
    }

    /// Every object the store holds, unless it has not caught up with something this process saw directly
    /// of an object in its scope (or has not listed yet, or its watch cannot run): then [`Read::NotKnown`].
    /// Never [`Read::Absent`].
    pub fn list(&self, pending: &Pending) -> Read<Vec<Arc<K>>> {
        if !self.answers() {
            return Read::NotKnown;
        }
        let mut entries = pending.lock();
        let mine: Vec<_> = entries.keys().filter(|(id, _)| *id == self.id).cloned().collect();
        for entry in mine {
            let stored = self.stored(&entry.1);
            match trust(stored.as_deref().and_then(version), entries.get(&entry)) {
                Trust::Store => {
                    entries.remove(&entry);
                }
                Trust::Server => return Read::NotKnown,
            }
        }
        Read::Present(self.store.state())
    }
}

/// A store of any kind, for what the view asks of all of them alike.
pub trait AnyKept: Send + Sync {
    /// Which store this is.
    fn id(&self) -> StoreId;
    /// Whether the first list is done.
    fn listed(&self) -> bool;
    /// Whether the watch would select an object carrying `labels` (None: not known, taken as yes).
    fn admits(&self, labels: Option<&std::collections::BTreeMap<String, String>>) -> bool;
    /// Whether `key` is of the store's kind and in the scope its watch sees.
    fn covers(&self, key: &ObjectKey) -> bool;
    /// Whether the store, answering, shows `key` at `resource_version` (None: absent).
    fn shows(&self, key: &ObjectKey, resource_version: Option<&str>) -> bool;
    /// The keys of every object the store holds of `kind` in `apiVersion`.
    fn held(&self, api_version: &str, kind: &str) -> Vec<ObjectKey>;
}

impl<K> AnyKept for Kept<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    fn id(&self) -> StoreId {
        self.id
    }

    fn listed(&self) -> bool {
        Kept::listed(self)
    }

    fn admits(&self, labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
        match (&self.label, labels) {
            (Some((key, value)), Some(labels)) => labels.get(key) == Some(value),
            _ => true,
        }
    }

    fn covers(&self, key: &ObjectKey) -> bool {
        Kept::covers(self, key)
    }

    fn shows(&self, key: &ObjectKey, resource_version: Option<&str>) -> bool {
        self.covers(key) && self.answers() && self.stored(key).as_deref().and_then(version) == resource_version
    }

    fn held(&self, api_version: &str, kind: &str) -> Vec<ObjectKey> {
        if self.kind != kind || super::key::group_of(&self.api_version) != super::key::group_of(api_version) {
            return Vec::new();
        }
        self.store.state().iter().map(|o| self.key_of(o)).collect()
    }
}
