//! Watch-fed copies of what a pass reads (docs/behaviour.md#caches), as the Go manager reads through its
//! informer cache: the module's objects of the kinds in [`CACHED`], the operand's cluster-ID Secrets and
//! its pods. A pass that finds what it needs here sends no read: a steady-state pass sends no request at
//! all, and a cold or warm install saves the round trip of its reads.
//!
//! Three rules keep a copy from deciding wrongly:
//! - a store answers only once its first list is done, and only for what its watch sees: the module's
//!   objects by the label every applied object carries (one without it reads as absent, and the apply
//!   writes it again, with the label), the network policies of the chart namespace all of them (the
//!   legacy policy has no label of ours), the cluster-ID Secrets by name;
//! - what this process wrote or deleted itself is not read from a store that has not caught up with it
//!   ([`trust`]): until the store's watch delivers the same resourceVersion (or the deletion), the object is
//!   read from the API server, as before there were stores;
//! - every change a store takes brings a pass (the stores of [`CACHED`] are the controller's triggers), so a
//!   pass that decided from a copy a moment old runs again with the change.
//!
//! Kinds outside [`CACHED`] (custom resources in a module, `delete/` objects whose absence must be certain)
//! are read from the API server.

use btp_api::names;
use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{store::Writer, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt as _};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;

/// The kinds whose module objects are kept in a store (`apiVersion`, kind): those the manager's
/// ClusterRole may list and watch (deploy/rbac.yaml).
pub const CACHED: [(&str, &str); 13] = [
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("apps/v1", "Deployment"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
];

/// Which object: kind, namespace (None when cluster-scoped), name.
pub type Key = (String, Option<String>, String);

/// Which object a read is for, as the API addresses it.
#[derive(Clone, Copy, Debug)]
pub struct Lookup<'a> {
    /// Its `apiVersion`.
    pub api_version: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// Its namespace (ignored for a cluster-scoped kind).
    pub namespace: Option<&'a str>,
    /// Its name.
    pub name: &'a str,
    /// Whether an absence must hold for unlabelled objects too (a `delete/` object): only a store that sees
    /// every object of its scope answers then.
    pub certain_absence: bool,
}

impl<'a> Lookup<'a> {
    /// A read of `kind` `namespace`/`name` for which an absence among our labelled objects is enough.
    pub fn new(api_version: &'a str, kind: &'a str, namespace: Option<&'a str>, name: &'a str) -> Self {
        Self {
            api_version,
            kind,
            namespace,
            name,
            certain_absence: false,
        }
    }

    /// The same read, for which an absence must hold for unlabelled objects too.
    pub fn certain(self) -> Self {
        Self {
            certain_absence: true,
            ..self
        }
    }

    fn key(&self) -> Key {
        let namespaced = !crate::reconciler::resources::is_cluster_scoped(self.kind);
        (
            self.kind.to_string(),
            self.namespace.filter(|_| namespaced).map(str::to_string),
            self.name.to_string(),
        )
    }
}

/// `at` from `caches` when a store can answer, else `get`'s answer from the API server, raced with the store
/// catching up (the watch usually delivers our own write a moment after the write's answer), whichever is
/// first; the API server's answer replaces what is pending for `at` ([`Caches::read_again`]).
pub async fn read_through<E>(
    caches: Option<&Caches>,
    at: Lookup<'_>,
    get: impl std::future::Future<Output = Result<Option<Value>, E>>,
) -> Result<Option<Value>, E> {
    let Some(caches) = caches else {
        return get.await;
    };
    if let Some(cached) = caches.object(at) {
        return Ok(cached);
    }
    let live = tokio::select! {
        live = get => live?,
        cached = caches.caught_up(at) => return Ok(cached),
    };
    let version = live.as_ref().and_then(|v| v["metadata"]["resourceVersion"].as_str());
    caches.read_again(&at.key(), version.map(str::to_string));
    Ok(live)
}

/// Whether a store's copy answers a read. Pure.
#[derive(Debug, PartialEq, Eq)]
pub enum Trust {
    /// The store answers; what was seen directly (if anything) is confirmed and can be forgotten.
    Store,
    /// The store has not caught up with what this process wrote or read directly: ask the API server.
    Server,
}

/// Whether a store holding `stored` (the resourceVersion of its copy, None when it has none) answers for an
/// object this process last saw directly as `direct` (None: nothing pending; `Some(None)`: absent, as
/// after its delete; `Some(Some(rv))`: as its write or read answered). Resource versions are compared for
/// equality only (they are opaque): a store that shows anything else may be behind or ahead, and only
/// the API server can tell. Pure.
pub fn trust(stored: Option<&str>, direct: Option<Option<&str>>) -> Trust {
    match direct {
        None => Trust::Store,
        Some(seen) if seen == stored => Trust::Store,
        Some(_) => Trust::Server,
    }
}

/// The resourceVersion recorded for a write in flight: no object has it (resourceVersions are never empty).
const IN_FLIGHT: &str = "";

/// One kind's store and what its watch sees.
struct Watched {
    api_version: &'static str,
    kind: &'static str,
    resource: ApiResource,
    /// The namespace watched; None: cluster-wide.
    namespace: Option<String>,
    /// Whether the watch sees every object in its scope (not only those with our label): only then is an
    /// absence certain for an object we did not label.
    everything: bool,
    store: Store<DynamicObject>,
}

/// The stores of one term (see the module documentation), and what this process saw directly.
pub struct Caches {
    objects: Vec<Watched>,
    clusterid: Store<Secret>,
    pods_namespace: String,
    pods: Store<Pod>,
    /// Objects this process wrote, deleted or read directly that a store had not shown yet: kind,
    /// namespace, name → resourceVersion (None: absent).
    direct: Pending,
}

/// What this process saw directly and no store has shown yet (see [`Caches::saw`]), shared with the
/// watches that clear it.
type Pending = std::sync::Arc<Shared>;

/// What the stores' watches share with the lookups.
#[derive(Default)]
struct Shared {
    /// Kind, namespace, name → resourceVersion (None: absent) seen directly and not yet shown by a store.
    seen: Mutex<HashMap<Key, Option<String>>>,
    /// Woken after every change a store took (see [`Caches::caught_up`]).
    changed: tokio::sync::Notify,
}

fn lock(pending: &Pending) -> std::sync::MutexGuard<'_, HashMap<Key, Option<String>>> {
    super::context::clock(&pending.seen)
}

/// A watch delivered `key` at `resource_version` (None: its deletion): when that is what this process saw
/// directly, the store has now caught up with it, and whatever the store shows from here on is as new or
/// newer (a watch delivers one object's changes in order). This is what lets a store that shows a later
/// change of someone else's (the Deployment controller's status right after our apply) answer again.
///
/// Returns whether the change echoes this process's own write or delete ([`Cause::Ours`](super::gate::Cause)):
/// the version it wrote, or any version while that write has not been delivered yet (the API server may
/// store an intermediate version before it answers, such as a CRD's create just before it is established).
/// Only those are held back while a failed pass waits for its retry.
fn seen_in_watch(pending: &Pending, key: &Key, resource_version: Option<&str>) -> super::gate::Cause {
    let echo = {
        let mut seen = lock(pending);
        let pending_here = seen.get(key).map(|seen| seen.as_deref() == resource_version);
        if pending_here == Some(true) {
            seen.remove(key);
        }
        pending_here.is_some()
    };
    pending.changed.notify_waiters();
    if echo {
        super::gate::Cause::Ours
    } else {
        super::gate::Cause::Theirs
    }
}

/// Whether `store` has finished its first list (a store answers only from then on).
pub fn listed<K: kube::Resource + Clone>(store: &Store<K>) -> bool
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use futures::FutureExt as _;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

fn version(obj: &impl kube::Resource) -> Option<&str> {
    obj.meta().resource_version.as_deref()
}

impl Caches {
    fn direct(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Option<String>>> {
        lock(&self.direct)
    }

    /// Whether every store has finished its first list.
    pub fn ready(&self) -> bool {
        self.objects.iter().all(|w| listed(&w.store)) && listed(&self.clusterid) && listed(&self.pods)
    }

    /// The store's copy of `key` (`read` takes it) unless [`trust`] says to ask the API server. The copy
    /// is taken while the pending map is locked: a watch that delivers our write in between clears the
    /// entry only after the copy, never leaving a copy older than our write trusted.
    fn answer<T>(
        &self,
        key: &Key,
        read: impl FnOnce() -> Option<T>,
        rv: impl Fn(&T) -> Option<&str>,
    ) -> Option<Option<T>> {
        let mut direct = self.direct();
        let stored = read();
        let seen = direct.get(key).map(|d| d.as_deref());
        match trust(stored.as_ref().and_then(&rv), seen) {
            Trust::Store => {
                direct.remove(key);
                Some(stored)
            }
            Trust::Server => None,
        }
    }

    /// The object `at` names from its kind's store: `Some(None)` when absent, None when no store can answer
    /// (its kind is not kept, the store has not listed yet or has not caught up with a write of ours).
    pub fn object(&self, at: Lookup<'_>) -> Option<Option<Value>> {
        let watched = self.objects.iter().find(|w| {
            w.api_version == at.api_version
                && w.kind == at.kind
                && w.namespace.as_deref().is_none_or(|ns| Some(ns) == at.namespace)
                && (w.everything || !at.certain_absence)
        })?;
        if !listed(&watched.store) {
            return None;
        }
        let mut object = ObjectRef::new_with(at.name, watched.resource.clone());
        if let (Some(ns), Some(_)) = (at.namespace, &watched.namespace) {
            object = object.within(ns);
        }
        let answer = self.answer(&at.key(), || watched.store.get(&object), |o| version(o.as_ref()))?;
        Some(answer.and_then(|o| serde_json::to_value(o.as_ref()).ok()))
    }

    /// [`Caches::object`] once its store can answer (see [`read_through`]). Never resolves for an object no
    /// store keeps.
    pub async fn caught_up(&self, at: Lookup<'_>) -> Option<Value> {
        loop {
            // Registered before the look, so that a change in between is not missed.
            let changed = self.direct.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(answer) = self.object(at) {
                return answer;
            }
            changed.await;
        }
    }

    /// The operand's cluster-ID Secret in `namespace` (see [`Caches::object`] for the answers).
    pub fn clusterid_secret(&self, namespace: &str) -> Option<Option<Secret>> {
        if !listed(&self.clusterid) {
            return None;
        }
        let at = ObjectRef::new(crate::reconciler::drift::CLUSTER_ID_SECRET).within(namespace);
        let key = (
            "Secret".to_string(),
            Some(namespace.to_string()),
            crate::reconciler::drift::CLUSTER_ID_SECRET.to_string(),
        );
        Some(
            self.answer(&key, || self.clusterid.get(&at), |s| version(s.as_ref()))?
                .map(|s| s.as_ref().clone()),
        )
    }

    /// The operand's pods in `namespace`, unless a pod this process deleted is not yet gone from the store
    /// (then None: list them).
    pub fn operand_pods(&self, namespace: &str) -> Option<Vec<Pod>> {
        if namespace != self.pods_namespace || !listed(&self.pods) {
            return None;
        }
        let mut direct = self.direct();
        let pods = self.pods.state();
        let pending: Vec<Key> = direct.keys().filter(|(k, _, _)| k == "Pod").cloned().collect();
        for key in pending {
            let stored = pods.iter().find(|p| p.metadata.name.as_deref() == Some(key.2.as_str()));
            let seen = direct.get(&key).map(|d| d.as_deref());
            match trust(stored.and_then(|p| version(p.as_ref())), seen) {
                Trust::Store => {
                    direct.remove(&key);
                }
                Trust::Server => return None,
            }
        }
        Some(pods.iter().map(|p| p.as_ref().clone()).collect())
    }

    /// Remember what this process saw of `key` directly: a write's answer (its resourceVersion), a delete
    /// (None), or a read of the API server made while a store lagged.
    /// When a store already shows exactly that (its watch delivered our write before the answer came),
    /// nothing is pending: an entry left here would never clear, and would take every later change of the
    /// object for an echo of ours.
    pub fn saw(&self, key: Key, resource_version: Option<String>) {
        if self.shown(&key, resource_version.as_deref()) {
            self.direct().remove(&key);
        } else {
            self.direct().insert(key, resource_version);
        }
    }

    /// Whether the store of `key`'s kind, listed, shows it at `resource_version` (None: absent).
    fn shown(&self, key: &Key, resource_version: Option<&str>) -> bool {
        let (kind, namespace, name) = key;
        let Some(watched) = self
            .objects
            .iter()
            .find(|w| w.kind == kind && w.namespace.is_some() == namespace.is_some())
        else {
            return false;
        };
        if !listed(&watched.store) || (watched.namespace.is_some() && watched.namespace != *namespace) {
            return false;
        }
        let mut object = ObjectRef::new_with(name, watched.resource.clone());
        if let Some(ns) = namespace {
            object = object.within(ns);
        }
        let stored = watched.store.get(&object);
        stored.as_deref().and_then(version) == resource_version
    }

    /// This process is about to write `key`: until the write's answer is recorded ([`Caches::saw`]), every
    /// version a watch delivers of it is an echo of ours (the watch may deliver the write before its answer
    /// arrives), and reads of it go to the API server. [`Caches::write_failed`] undoes it.
    pub fn writing(&self, key: Key) {
        self.direct().insert(key, Some(IN_FLIGHT.to_string()));
    }

    /// The write announced with [`Caches::writing`] failed: nothing of ours is pending for `key` any more
    /// (unless something else was recorded meanwhile).
    pub fn write_failed(&self, key: &Key) {
        let mut direct = self.direct();
        if direct.get(key).is_some_and(|v| v.as_deref() == Some(IN_FLIGHT)) {
            direct.remove(key);
        }
    }

    /// Every object of `kind` the store holds was deleted (by a delete of the collection): until the store
    /// shows each gone, it is read from the API server.
    pub fn removed(&self, kind: &str) {
        let mut direct = self.direct();
        // Written by us and not yet shown by the store: deleted too.
        for (_, seen) in direct.iter_mut().filter(|((k, _, _), _)| k == kind) {
            *seen = None;
        }
        for watched in self.objects.iter().filter(|w| w.kind == kind) {
            for obj in watched.store.state() {
                let namespace = watched.namespace.as_ref().and(obj.metadata.namespace.clone());
                let name = obj.metadata.name.clone().unwrap_or_default();
                direct.insert((kind.to_string(), namespace, name), None);
            }
        }
        if kind == "Secret" {
            for secret in self.clusterid.state() {
                let (namespace, name) = (secret.metadata.namespace.clone(), secret.metadata.name.clone());
                direct.insert((kind.to_string(), namespace, name.unwrap_or_default()), None);
            }
        }
    }

    /// A watch outside these stores (the credentials Secret's) delivered `key` at `resource_version`: whether
    /// it echoes a write of this process recorded with [`Caches::saw`] (the entry is then cleared).
    pub fn echo(&self, key: &Key, resource_version: Option<&str>) -> super::gate::Cause {
        seen_in_watch(&self.direct, key, resource_version)
    }

    /// Like [`Caches::saw`] for a read, only when something is pending for `key` (a read of an object no
    /// write of ours touched leaves nothing to wait for).
    pub fn read_again(&self, key: &Key, resource_version: Option<String>) {
        if let Some(seen) = self.direct().get_mut(key) {
            *seen = resource_version;
        }
    }
}

/// Who caused a change a watch delivered: ours when it echoes our own write (`echo`), and also when the
/// object has a generation that the change left as it was (`before` → `now`): a status or metadata-only
/// update, the work of a controller following our write (the Deployment controller's status, the CRD's
/// conditions), which a person fixing something does not make. Anything else is someone else's. Pure.
pub fn cause_of_change(echo: super::gate::Cause, before: Option<i64>, now: Option<i64>) -> super::gate::Cause {
    use super::gate::Cause;
    match (echo, before, now) {
        (Cause::Ours, _, _) => Cause::Ours,
        (_, Some(before), Some(now)) if before == now => Cause::Ours,
        _ => Cause::Theirs,
    }
}

/// A store and its watch for `api` seen through `config`; the stream yields once per change the store
/// takes (for triggers), with its cause: an echo of our own write, or not. A relist cannot tell (it
/// reports what changed while the watch was down, ours or not): it counts as ours.
fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    (kind, namespaced): (&'static str, bool),
    pending: Pending,
) -> impl Stream<Item = super::gate::Cause> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let key = move |o: &K| -> Key {
        let meta = o.meta();
        let namespace = meta.namespace.clone().filter(|_| namespaced);
        (kind.to_string(), namespace, meta.name.clone().unwrap_or_default())
    };
    // The generation each object was last seen at (see [`cause_of_change`]).
    let mut generations: HashMap<Key, i64> = HashMap::new();
    watcher::watcher(api, config)
        .backoff(crate::watch_backoff::WatchBackoff::default())
        .reflect(writer)
        .filter_map(move |event| {
            std::future::ready(match event {
                // Not an `InitApply`: a relist's objects reach the store only at its `InitDone`, and until
                // then the store still shows what it had (the pending entry clears when it shows the same).
                Ok(watcher::Event::Apply(o)) => {
                    let k = key(&o);
                    let echo = seen_in_watch(&pending, &k, version(&o));
                    let generation = o.meta().generation;
                    let before = match generation {
                        Some(g) => generations.insert(k, g),
                        None => generations.remove(&k),
                    };
                    Some(cause_of_change(echo, before, generation))
                }
                Ok(watcher::Event::InitApply(o)) => {
                    if let Some(g) = o.meta().generation {
                        generations.insert(key(&o), g);
                    }
                    None
                }
                Ok(watcher::Event::Delete(o)) => {
                    let k = key(&o);
                    generations.remove(&k);
                    Some(seen_in_watch(&pending, &k, None))
                }
                Ok(watcher::Event::InitDone) => Some(super::gate::Cause::Ours),
                Ok(watcher::Event::Init) => None,
                Err(e) => {
                    tracing::debug!(error = %e, kind, "cache watch");
                    None
                }
            })
        })
}

/// The stores of a term, for a manager whose chart namespace is `namespace`: the caches, a stream that
/// yields once per change of a module object, with its cause (the controller's trigger), and a future that keeps the
/// cluster-ID Secret and pod stores (run it beside).
pub fn start(
    client: &kube::Client,
    namespace: &str,
) -> (
    std::sync::Arc<Caches>,
    impl Stream<Item = super::gate::Cause> + Send + 'static,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let labelled = format!("{}={}", names::MANAGED_BY_LABEL, names::MANAGED_BY_BTP_MANAGER);
    let pending = Pending::default();
    let mut objects = Vec::new();
    let mut triggers = Vec::new();
    for (api_version, kind) in CACHED {
        let resource = crate::reconciler::cluster::api_resource(api_version, kind);
        let cluster_scoped = crate::reconciler::resources::is_cluster_scoped(kind);
        // The chart namespace's network policies, all of them: the legacy policy has no label of ours.
        let everything = kind == "NetworkPolicy";
        let api = if cluster_scoped {
            Api::<DynamicObject>::all_with(client.clone(), &resource)
        } else {
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource)
        };
        let config = match everything {
            true => watcher::Config::default(),
            false => watcher::Config::default().labels(&labelled),
        };
        let writer = Writer::new(resource.clone());
        let store = writer.as_reader();
        triggers.push(reflect(api, config, writer, (kind, !cluster_scoped), pending.clone()).boxed());
        objects.push(Watched {
            api_version,
            kind,
            resource,
            namespace: (!cluster_scoped).then(|| namespace.to_string()),
            everything,
            store,
        });
    }
    let clusterid_writer = Writer::<Secret>::default();
    let clusterid = clusterid_writer.as_reader();
    let clusterid_watch = reflect(
        Api::<Secret>::all(client.clone()),
        watcher::Config::default().fields(&format!(
            "metadata.name={}",
            crate::reconciler::drift::CLUSTER_ID_SECRET
        )),
        clusterid_writer,
        ("Secret", true),
        pending.clone(),
    );
    let pods_writer = Writer::<Pod>::default();
    let pods = pods_writer.as_reader();
    let pods_watch = reflect(
        Api::<Pod>::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(&format!(
            "{}={}",
            crate::reconciler::drift::OPERAND_POD_LABEL,
            crate::reconciler::drift::OPERAND_POD_LABEL_VALUE
        )),
        pods_writer,
        ("Pod", true),
        pending.clone(),
    );
    let caches = std::sync::Arc::new(Caches {
        objects,
        clusterid,
        pods_namespace: namespace.to_string(),
        pods,
        direct: pending,
    });
    let keep = async move {
        futures::join!(
            clusterid_watch.for_each(|_| async {}),
            pods_watch.for_each(|_| async {})
        );
    };
    (caches, futures::stream::select_all(triggers), keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    const NS: &str = "kyma-system";

    /// Caches over stores this test feeds: a labelled Secret store and an unlabelled NetworkPolicy one.
    struct Fed {
        caches: Caches,
        secrets: Writer<DynamicObject>,
        policies: Writer<DynamicObject>,
        clusterid: Writer<Secret>,
        pods: Writer<Pod>,
    }

    fn watched(api_version: &'static str, kind: &'static str, everything: bool) -> (Watched, Writer<DynamicObject>) {
        let resource = crate::reconciler::cluster::api_resource(api_version, kind);
        let writer = Writer::new(resource.clone());
        let store = writer.as_reader();
        let w = Watched {
            api_version,
            kind,
            resource,
            namespace: Some(NS.into()),
            everything,
            store,
        };
        (w, writer)
    }

    fn fed() -> Fed {
        let (secret_store, secrets) = watched("v1", "Secret", false);
        let (policy_store, policies) = watched("networking.k8s.io/v1", "NetworkPolicy", true);
        let clusterid = Writer::<Secret>::default();
        let pods = Writer::<Pod>::default();
        Fed {
            caches: Caches {
                objects: vec![secret_store, policy_store],
                clusterid: clusterid.as_reader(),
                pods_namespace: NS.into(),
                pods: pods.as_reader(),
                direct: Pending::default(),
            },
            secrets,
            policies,
            clusterid,
            pods,
        }
    }

    fn object(resource: &ApiResource, name: &str, rv: &str) -> DynamicObject {
        let mut o = DynamicObject::new(name, resource).within(NS);
        o.metadata.resource_version = Some(rv.into());
        o
    }

    fn listed<K: kube::Resource + Clone>(w: &mut Writer<K>, objects: Vec<K>)
    where
        K::DynamicType: Eq + std::hash::Hash + Clone,
    {
        w.apply_watcher_event(&Event::Init);
        for o in objects {
            w.apply_watcher_event(&Event::InitApply(o));
        }
        w.apply_watcher_event(&Event::InitDone);
    }

    fn key(kind: &str, name: &str) -> Key {
        (kind.into(), Some(NS.into()), name.into())
    }

    #[test]
    fn a_store_answers_only_after_its_first_list() {
        let mut f = fed();
        assert_eq!(
            f.caches.object(Lookup::new("v1", "Secret", Some(NS), "ca-server-cert")),
            None
        );
        listed(&mut f.secrets, vec![]);
        assert_eq!(
            f.caches.object(Lookup::new("v1", "Secret", Some(NS), "ca-server-cert")),
            Some(None),
            "listed, and absent"
        );
        assert_eq!(
            f.caches.object(Lookup::new("v1", "ConfigMap", Some(NS), "x")),
            None,
            "a kind not kept"
        );
        assert_eq!(
            f.caches
                .object(Lookup::new("v1", "Secret", Some("elsewhere"), "ca-server-cert")),
            None,
            "a namespace not watched"
        );
    }

    #[test]
    fn an_absence_that_must_hold_for_unlabelled_objects_comes_only_from_a_store_that_sees_them() {
        let mut f = fed();
        listed(&mut f.secrets, vec![]);
        listed(&mut f.policies, vec![]);
        assert_eq!(
            f.caches
                .object(Lookup::new("v1", "Secret", Some(NS), "outdated").certain()),
            None
        );
        assert_eq!(
            f.caches
                .object(Lookup::new("networking.k8s.io/v1", "NetworkPolicy", Some(NS), "legacy").certain()),
            Some(None)
        );
    }

    #[test]
    fn our_write_is_read_from_the_server_until_the_store_shows_it() {
        let mut f = fed();
        let resource = f.caches.objects[0].resource.clone();
        listed(&mut f.secrets, vec![object(&resource, "ca-server-cert", "4")]);
        f.caches.saw(key("Secret", "ca-server-cert"), Some("5".into()));
        assert_eq!(
            f.caches.object(Lookup::new("v1", "Secret", Some(NS), "ca-server-cert")),
            None,
            "the store still has the copy before our write"
        );
        f.secrets
            .apply_watcher_event(&Event::Apply(object(&resource, "ca-server-cert", "5")));
        let answer = f.caches.object(Lookup::new("v1", "Secret", Some(NS), "ca-server-cert"));
        assert_eq!(
            answer.flatten().map(|v| v["metadata"]["resourceVersion"].clone()),
            Some("5".into())
        );
        assert!(f.caches.direct().is_empty(), "caught up: nothing pending");

        // A create the store has not seen yet reads from the server too (no regeneration from a stale copy).
        f.caches.saw(key("Secret", "webhook-server-cert"), Some("6".into()));
        assert_eq!(
            f.caches
                .object(Lookup::new("v1", "Secret", Some(NS), "webhook-server-cert")),
            None
        );
        // A read of the server while the store lags replaces what is pending.
        f.caches
            .read_again(&key("Secret", "webhook-server-cert"), Some("7".into()));
        f.secrets
            .apply_watcher_event(&Event::Apply(object(&resource, "webhook-server-cert", "7")));
        assert!(f
            .caches
            .object(Lookup::new("v1", "Secret", Some(NS), "webhook-server-cert"))
            .is_some());
    }

    #[test]
    fn once_the_watch_delivered_our_write_a_later_change_of_someone_elses_is_read_from_the_store() {
        let mut f = fed();
        let resource = f.caches.objects[0].resource.clone();
        listed(&mut f.secrets, vec![]);
        let k = key("Secret", "sap-btp-service-operator");
        f.caches.saw(k.clone(), Some("5".into()));
        // Someone else's change is not ours: still pending.
        seen_in_watch(&f.caches.direct, &k, Some("4"));
        assert_eq!(f.caches.direct().get(&k), Some(&Some("5".to_string())));
        // The watch delivered our write, then a later change (the store shows the later one).
        seen_in_watch(&f.caches.direct, &k, Some("5"));
        f.secrets
            .apply_watcher_event(&Event::Apply(object(&resource, "sap-btp-service-operator", "6")));
        let answer = f
            .caches
            .object(Lookup::new("v1", "Secret", Some(NS), "sap-btp-service-operator"));
        assert_eq!(
            answer.flatten().map(|v| v["metadata"]["resourceVersion"].clone()),
            Some("6".into())
        );
        // A delete of ours is caught up by the watch's deletion.
        f.caches.saw(k.clone(), None);
        seen_in_watch(&f.caches.direct, &k, None);
        assert!(f.caches.direct().is_empty());
    }

    #[test]
    fn a_change_that_leaves_the_generation_is_a_controllers_and_counts_as_ours() {
        use crate::reconciler::gate::Cause;
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

    #[test]
    fn a_write_the_store_already_shows_leaves_nothing_pending() {
        use crate::reconciler::gate::Cause;
        let mut f = fed();
        let resource = f.caches.objects[0].resource.clone();
        listed(&mut f.secrets, vec![]);
        let k = key("Secret", "ca-server-cert");
        f.caches.writing(k.clone());
        // The watch delivers the write before its answer is recorded.
        f.secrets
            .apply_watcher_event(&Event::Apply(object(&resource, "ca-server-cert", "5")));
        assert_eq!(f.caches.echo(&k, Some("5")), Cause::Ours, "in flight");
        f.caches.saw(k.clone(), Some("5".into()));
        assert!(f.caches.direct().is_empty(), "the store shows it: nothing pending");
        assert_eq!(
            f.caches.echo(&k, Some("6")),
            Cause::Theirs,
            "a later change is someone else's"
        );
    }

    #[test]
    fn only_the_echo_of_our_own_write_or_delete_counts_as_ours() {
        use crate::reconciler::gate::Cause;
        let f = fed();
        let k = key("Secret", "sap-btp-service-operator");
        assert_eq!(f.caches.echo(&k, Some("3")), Cause::Theirs, "nothing of ours pending");
        f.caches.saw(k.clone(), Some("5".into()));
        assert_eq!(
            f.caches.echo(&k, Some("4")),
            Cause::Ours,
            "another version while our write is not delivered yet"
        );
        assert_eq!(f.caches.echo(&k, Some("5")), Cause::Ours, "the echo of our write");
        assert_eq!(f.caches.echo(&k, Some("5")), Cause::Theirs, "an echo counts once");
        f.caches.saw(k.clone(), None);
        assert_eq!(f.caches.echo(&k, None), Cause::Ours, "the echo of our delete");
        assert_eq!(f.caches.echo(&k, None), Cause::Theirs);
    }

    #[tokio::test]
    async fn a_read_sent_to_the_server_is_answered_by_the_store_once_its_watch_delivers_our_write() {
        use futures::FutureExt as _;
        let mut f = fed();
        let resource = f.caches.objects[0].resource.clone();
        listed(&mut f.secrets, vec![]);
        let k = key("Secret", "ca-server-cert");
        f.caches.saw(k.clone(), Some("5".into()));
        let waiting = f
            .caches
            .caught_up(Lookup::new("v1", "Secret", Some(NS), "ca-server-cert"));
        tokio::pin!(waiting);
        assert!(waiting.as_mut().now_or_never().is_none(), "the store has not caught up");
        f.secrets
            .apply_watcher_event(&Event::Apply(object(&resource, "ca-server-cert", "5")));
        seen_in_watch(&f.caches.direct, &k, Some("5"));
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("answered once the watch delivered our write");
        assert_eq!(
            answer.map(|v| v["metadata"]["resourceVersion"].clone()),
            Some("5".into())
        );
    }

    #[test]
    fn what_a_deprovisioning_removed_is_read_from_the_server_until_the_store_sees_it_gone() {
        let mut f = fed();
        let resource = f.caches.objects[0].resource.clone();
        let cert = object(&resource, "ca-server-cert", "4");
        listed(&mut f.secrets, vec![cert.clone()]);
        let mut clusterid = Secret::default();
        clusterid.metadata.name = Some(crate::reconciler::drift::CLUSTER_ID_SECRET.into());
        clusterid.metadata.namespace = Some("creds".into());
        clusterid.metadata.resource_version = Some("3".into());
        listed(&mut f.clusterid, vec![clusterid.clone()]);
        // Written by us just before, not in the store yet: deleted too.
        f.caches.saw(key("Secret", "webhook-server-cert"), Some("8".into()));
        f.caches.removed("Secret");
        assert_eq!(
            f.caches
                .object(Lookup::new("v1", "Secret", Some(NS), "webhook-server-cert")),
            Some(None),
            "our write the store never showed is gone with the rest"
        );
        assert_eq!(
            f.caches.object(Lookup::new("v1", "Secret", Some(NS), "ca-server-cert")),
            None
        );
        assert_eq!(f.caches.clusterid_secret("creds"), None);
        f.secrets.apply_watcher_event(&Event::Delete(cert));
        f.clusterid.apply_watcher_event(&Event::Delete(clusterid));
        assert_eq!(
            f.caches.object(Lookup::new("v1", "Secret", Some(NS), "ca-server-cert")),
            Some(None)
        );
        assert_eq!(f.caches.clusterid_secret("creds"), Some(None));
    }

    #[test]
    fn a_pod_we_deleted_is_listed_from_the_server_until_the_store_sees_it_gone() {
        let mut f = fed();
        let mut pod = Pod::default();
        pod.metadata.name = Some("sap-btp-operator-controller-manager-1".into());
        pod.metadata.namespace = Some(NS.into());
        pod.metadata.resource_version = Some("9".into());
        listed(&mut f.pods, vec![pod.clone()]);
        assert_eq!(f.caches.operand_pods(NS).map(|p| p.len()), Some(1));
        f.caches.saw(
            (
                "Pod".into(),
                Some(NS.into()),
                "sap-btp-operator-controller-manager-1".into(),
            ),
            None,
        );
        assert_eq!(f.caches.operand_pods(NS), None);
        f.pods.apply_watcher_event(&Event::Delete(pod));
        assert_eq!(f.caches.operand_pods(NS).map(|p| p.len()), Some(0));
        assert_eq!(f.caches.operand_pods("elsewhere"), None);
    }

    #[test]
    fn a_store_answers_unless_it_has_not_caught_up_with_what_was_seen_directly() {
        assert_eq!(trust(Some("7"), None), Trust::Store, "nothing pending");
        assert_eq!(trust(None, None), Trust::Store, "nothing pending, absent");
        assert_eq!(
            trust(Some("7"), Some(Some("7"))),
            Trust::Store,
            "caught up with our write"
        );
        assert_eq!(trust(None, Some(None)), Trust::Store, "caught up with our delete");
        assert_eq!(trust(None, Some(Some("7"))), Trust::Server, "our create not seen yet");
        assert_eq!(
            trust(Some("6"), Some(Some("7"))),
            Trust::Server,
            "older or newer: cannot tell"
        );
        assert_eq!(trust(Some("7"), Some(None)), Trust::Server, "our delete not seen yet");
    }
}
