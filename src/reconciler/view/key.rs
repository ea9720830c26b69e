//! Which object a read or a write is about ([`ObjectKey`]), and what a read from the view answers
//! ([`Read`]).

use std::fmt;

/// One object as the API addresses it: its API group and kind, its namespace (None for a cluster-scoped
/// kind) and its name. The version is left out: an object is the same object in every version served.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The API group (empty for the core group).
    pub group: String,
    /// The kind.
    pub kind: String,
    /// The namespace; None for a cluster-scoped kind.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// The object `name` of `kind` in `apiVersion`, in `namespace` (None for a cluster-scoped kind: the
    /// caller knows the scope).
    pub fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            group: group_of(api_version).to_string(),
            kind: kind.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// The object `meta` describes, of `kind` in `apiVersion` (its namespace kept only for a `namespaced`
    /// kind).
    pub fn of(api_version: &str, kind: &str, namespaced: bool, meta: &kube::api::ObjectMeta) -> Self {
        let namespace = meta.namespace.as_deref().filter(|_| namespaced);
        Self::new(api_version, kind, namespace, meta.name.as_deref().unwrap_or_default())
    }

    /// A core (`v1`) object in `namespace`.
    pub fn core(kind: &str, namespace: &str, name: &str) -> Self {
        Self::new("v1", kind, Some(namespace), name)
    }

    /// Whether this object is of `kind` in the group of `api_version`.
    pub fn is(&self, api_version: &str, kind: &str) -> bool {
        self.kind == kind && self.group == group_of(api_version)
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The API group of `apiVersion` (`apps/v1` → `apps`, `v1` → the core group, empty).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// What the view answers for an object (or a list) it is asked for.
#[derive(Clone, Debug, PartialEq)]
pub enum Read<T> {
    /// The store holds it, as new as anything this process wrote.
    Present(T),
    /// The store has listed, is as new as anything this process wrote or deleted, and does not hold it.
    Absent,
    /// The store cannot say: no store keeps it, the store has not finished its first list, or it has not
    /// caught up with a write or delete of this process yet. Ask the API server.
    NotKnown,
}

impl<T> Read<T> {
    /// `Some(Some(object))`, `Some(None)` for an absence, None when not known.
    pub fn known(self) -> Option<Option<T>> {
        match self {
            Read::Present(t) => Some(Some(t)),
            Read::Absent => Some(None),
            Read::NotKnown => None,
        }
    }

    /// The same answer for what `f` makes of the object.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Read<U> {
        match self {
            Read::Present(t) => Read::Present(f(t)),
            Read::Absent => Read::Absent,
            Read::NotKnown => Read::NotKnown,
        }
    }

    /// The same answer for what `f` makes of the object; not known when `f` makes nothing of it (a copy
    /// that does not convert is asked of the API server).
    pub fn and_then<U>(self, f: impl FnOnce(T) -> Option<U>) -> Read<U> {
        match self {
            Read::Present(t) => f(t).map_or(Read::NotKnown, Read::Present),
            Read::Absent => Read::Absent,
            Read::NotKnown => Read::NotKnown,
        }
    }

    /// `Present` for `Some`, `Absent` for `None`.
    pub fn from_option(found: Option<T>) -> Self {
        found.map_or(Read::Absent, Read::Present)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_the_group_not_the_version() {
        let a = ObjectKey::new("apps/v1", "Deployment", Some("ns"), "d");
        assert_eq!(a.group, "apps");
        assert!(a.is("apps/v1beta1", "Deployment"));
        assert!(!a.is("extensions/v1beta1", "Deployment"));
        assert_eq!(ObjectKey::core("Secret", "ns", "s").group, "");
        assert_eq!(a.to_string(), "Deployment ns/d");
        assert_eq!(
            ObjectKey::new("rbac.authorization.k8s.io/v1", "ClusterRole", None, "r").to_string(),
            "ClusterRole r"
        );
    }

    #[test]
    fn a_read_says_which_of_the_three_cases_it_is() {
        assert_eq!(Read::Present(1).known(), Some(Some(1)));
        assert_eq!(Read::<u8>::Absent.known(), Some(None));
        assert_eq!(Read::<u8>::NotKnown.known(), None);
        assert_eq!(Read::from_option(Some(2)).map(|n| n * 2), Read::Present(4));
        assert_eq!(Read::<u8>::from_option(None), Read::Absent);
        assert_eq!(Read::Present(3).and_then(|n| (n > 2).then_some(n)), Read::Present(3));
        assert_eq!(Read::Present(1).and_then(|n| (n > 2).then_some(n)), Read::NotKnown);
        assert_eq!(Read::<u8>::Absent.and_then(Some), Read::Absent);
    }
}
