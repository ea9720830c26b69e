//! The view itself ([`ClusterView`]): the stores of one term, what each answers, the records of this
//! process's own writes, and [`read_through`], the one place that asks the API server when a store cannot
//! say.

use super::kept::{AnyKept, Kept};
use super::key::{ObjectKey, Read};
use super::pending::{Pending, Seen};
use btp_api::BtpOperator;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::DynamicObject;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMeta;
use serde_json::Value;
use std::sync::Arc;

/// The kinds of the module's objects the view keeps (`apiVersion`, kind): those the manager's ClusterRole
/// may list and watch (deploy/rbac.yaml). Other kinds (a custom module's custom resources) are read from
/// the API server.
pub const MODULE_KINDS: [(&str, &str); 13] = [
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

/// The key of the BtpOperator `namespace`/`name`.
pub fn cr_key(namespace: &str, name: &str) -> ObjectKey {
    use btp_api::names::{GROUP, KIND};
    ObjectKey {
        group: GROUP.to_string(),
        kind: KIND.to_string(),
        namespace: Some(namespace.to_string()),
        name: name.to_string(),
    }
}

/// The stores of one leadership term and what this process saw directly (see the module documentation).
pub struct ClusterView {
    pub(super) pending: Arc<Pending>,
    /// The BtpOperators, cluster-wide.
    pub(super) crs: Kept<BtpOperator>,
    /// The credentials Secret, by name, in the chart namespace.
    pub(super) credentials: Kept<Secret>,
    /// The module's objects of [`MODULE_KINDS`]: labelled `managed-by=btp-manager`, in the chart namespace
    /// or cluster-wide; every NetworkPolicy of the chart namespace (the legacy policy has no label of ours).
    pub(super) module: Vec<Kept<DynamicObject>>,
    /// The operand's cluster-ID Secrets, by name, in every namespace.
    pub(super) clusterid: Kept<Secret>,
    /// The operand Secrets we created, by label and name, in every namespace (metadata only).
    pub(super) operand_secrets: Kept<PartialObjectMeta<Secret>>,
    /// The operand's pods, by label, in the chart namespace.
    pub(super) pods: Kept<Pod>,
    /// The `default/kubernetes` EndpointSlices (the API server's ports).
    pub(super) slices: Kept<EndpointSlice>,
}

impl ClusterView {
    fn stores(&self) -> impl Iterator<Item = &dyn AnyKept> {
        let typed: [&dyn AnyKept; 6] = [
            &self.crs,
            &self.credentials,
            &self.clusterid,
            &self.operand_secrets,
            &self.pods,
            &self.slices,
        ];
        self.module.iter().map(|k| k as &dyn AnyKept).chain(typed)
    }

    /// Whether every store has finished its first list.
    pub fn ready(&self) -> bool {
        self.stores().all(|s| s.listed())
    }

    /// The BtpOperator `namespace`/`name`.
    pub fn cr(&self, namespace: &str, name: &str) -> Read<Arc<BtpOperator>> {
        self.crs.get(&self.pending, &cr_key(namespace, name), false)
    }

    /// The credentials Secret `namespace`/`name` (NotKnown for another Secret than the one watched).
    pub fn credentials_secret(&self, namespace: &str, name: &str) -> Read<Secret> {
        let key = ObjectKey::core("Secret", namespace, name);
        self.credentials.get(&self.pending, &key, false).map(|s| (*s).clone())
    }

    /// A module object: an absence must hold for objects without our label too when `certain_absence`
    /// (a `delete/` object), so only a store that sees every object of its scope answers it then.
    pub fn module_object(&self, key: &ObjectKey, certain_absence: bool) -> Read<Value> {
        let Some(kept) = self.module.iter().find(|k| k.covers(key)) else {
            return Read::NotKnown;
        };
        kept.get(&self.pending, key, certain_absence)
            .and_then(|obj| serde_json::to_value(obj.as_ref()).ok())
    }

    /// The operand's cluster-ID Secret in `namespace`.
    pub fn clusterid_secret(&self, namespace: &str) -> Read<Secret> {
        let key = ObjectKey::core("Secret", namespace, crate::reconciler::drift::CLUSTER_ID_SECRET);
        self.clusterid.get(&self.pending, &key, false).map(|s| (*s).clone())
    }

    /// The operand's pods in `namespace` (NotKnown outside the chart namespace).
    pub fn operand_pods(&self, namespace: &str) -> Read<Vec<Pod>> {
        if !self.pods.covers_namespace(Some(namespace)) {
            return Read::NotKnown;
        }
        self.pods
            .list(&self.pending)
            .map(|pods| pods.iter().map(|p| (**p).clone()).collect())
    }

    /// The operand Secrets we created, in every namespace (metadata only).
    pub fn operand_secrets(&self) -> Read<Vec<kube::api::ObjectMeta>> {
        self.operand_secrets
            .list(&self.pending)
            .map(|secrets| secrets.iter().map(|s| s.metadata.clone()).collect())
    }

    /// The `default/kubernetes` EndpointSlices.
    pub fn api_server_slices(&self) -> Read<Vec<EndpointSlice>> {
        self.slices
            .list(&self.pending)
            .map(|slices| slices.iter().map(|s| (**s).clone()).collect())
    }

    /// The stores that see `key` (what no store sees needs no record: nothing answers for it).
    fn keeping<'a>(&'a self, key: &'a ObjectKey) -> impl Iterator<Item = &'a dyn AnyKept> + 'a {
        self.stores().filter(move |s| s.covers(key))
    }

    /// This process is about to write `key`: until the write's answer is recorded ([`Writing::wrote`]),
    /// every version a watch delivers of it is an echo of ours (the watch may deliver the write before its
    /// answer arrives), and reads of it go to the API server. A write that fails, or is dropped unanswered
    /// (its pass ran out of its budget, its term ended), leaves nothing pending: the returned [`Writing`]
    /// undoes the record when it is dropped without an answer.
    pub fn writing(&self, key: &ObjectKey) -> Writing<'_> {
        for store in self.keeping(key) {
            self.pending
                .record((store.id(), key.clone()), Seen::InFlight, |_| false);
        }
        Writing {
            view: self,
            key: key.clone(),
            answered: false,
        }
    }

    /// A write of `key` answered `answer`: each store whose watch selects the object answers for it again
    /// once it shows that version; the others forget what [`ClusterView::writing`] announced.
    pub fn wrote(&self, key: &ObjectKey, answer: &ObjectMeta) {
        let seen = Seen::from_version(answer.resource_version.clone());
        for store in self.keeping(key) {
            let entry = (store.id(), key.clone());
            if store.admits(answer.labels.as_ref()) {
                self.pending.record(entry, seen.clone(), |seen| shown(store, key, seen));
            } else {
                self.pending.write_failed(&entry);
            }
        }
    }

    /// The write announced with [`ClusterView::writing`] failed.
    pub fn write_failed(&self, key: &ObjectKey) {
        for store in self.keeping(key) {
            self.pending.write_failed(&(store.id(), key.clone()));
        }
    }

    /// This process deleted `key`: each store that holds it answers for it again once it shows it gone.
    pub fn deleted(&self, key: &ObjectKey) {
        for store in self.keeping(key) {
            self.pending
                .record((store.id(), key.clone()), Seen::Gone, |seen| shown(store, key, seen));
        }
    }

    /// Every module object of `kind` was deleted (by a delete of the collection in the chart namespace, or
    /// cluster-wide for a cluster-scoped kind), and so was anything of that kind this process wrote that the
    /// module's stores have not shown yet: until they show each gone, it is read from the API server.
    pub fn removed(&self, api_version: &str, kind: &str) {
        let module = self.module.iter().map(|k| k as &dyn AnyKept);
        let held: Vec<(usize, ObjectKey)> = module
            .clone()
            .flat_map(|s| s.held(api_version, kind).into_iter().map(move |k| (s.id(), k)))
            .collect();
        let ids: Vec<usize> = module.map(|s| s.id()).collect();
        let mut entries = self.pending.lock();
        let ours = |((id, k), _): &(&(usize, ObjectKey), &mut Seen)| ids.contains(id) && k.is(api_version, kind);
        for (_, seen) in entries.iter_mut().filter(|e| ours(e)) {
            *seen = Seen::Gone;
        }
        for entry in held {
            entries.insert(entry, Seen::Gone);
        }
    }

    /// This process wrote the CR and the API server answered `answer`; a CR being deleted whose last
    /// finalizer the write removed is gone.
    pub fn wrote_cr(&self, answer: &BtpOperator) {
        let meta = &answer.metadata;
        let key = cr_key(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        );
        let finalizers = meta.finalizers.as_ref().is_some_and(|f| !f.is_empty());
        match meta.deletion_timestamp.is_some() && !finalizers {
            true => self.deleted(&key),
            false => self.wrote(&key, meta),
        }
    }

    /// [`ClusterView::read_again`] for a read answered as JSON (an object of the module).
    pub fn read_again_json(&self, key: &ObjectKey, live: Option<&Value>) {
        let version = live.and_then(|l| l["metadata"]["resourceVersion"].as_str());
        self.read_again(key, version.map(str::to_string));
    }

    /// A read of the API server answered `key` at `resource_version` (None: absent): it replaces what is
    /// pending for `key`, so that each store answers again once it shows the same.
    pub fn read_again(&self, key: &ObjectKey, resource_version: Option<String>) {
        let seen = Seen::from_version(resource_version);
        for store in self.keeping(key) {
            let entry = (store.id(), key.clone());
            self.pending
                .read_again(&entry, seen.clone(), |seen| shown(store, key, seen));
        }
    }

    /// A list of the API server answered the operand Secrets `found` (see [`relisted`]).
    pub fn operand_secrets_listed(&self, found: &[ObjectMeta]) {
        relisted(&self.pending, &self.operand_secrets, found.iter());
    }

    /// A list of the API server answered the operand pods `found` (see [`relisted`]).
    pub fn operand_pods_listed(&self, found: &[Pod]) {
        relisted(&self.pending, &self.pods, found.iter().map(|p| &p.metadata));
    }

    /// What `look` answers once it knows (a store caught up). Never resolves while it does not.
    pub async fn caught_up<T>(&self, look: impl Fn(&Self) -> Read<T>) -> Option<T> {
        loop {
            // Registered before the look, so that a change in between is not missed.
            let changed = self.pending.changed().notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(answer) = look(self).known() {
                return answer;
            }
            changed.await;
        }
    }
}

/// A write of this process in flight ([`ClusterView::writing`]): its answer is recorded with
/// [`Writing::wrote`]; dropped without one (the write failed, or the future that sent it was dropped), it
/// leaves nothing pending, so that later changes of the object are not taken for echoes of a write that
/// may never have happened.
#[must_use = "a write in flight is undone when this is dropped"]
pub struct Writing<'a> {
    view: &'a ClusterView,
    key: ObjectKey,
    answered: bool,
}

impl Writing<'_> {
    /// The write answered `answer` ([`ClusterView::wrote`]).
    pub fn wrote(mut self, answer: &ObjectMeta) {
        self.answered = true;
        self.view.wrote(&self.key, answer);
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.view.write_failed(&self.key);
        }
    }
}

/// Whether `store` shows `key` as `seen` (a write in flight is never shown).
fn shown(store: &dyn AnyKept, key: &ObjectKey, seen: &Seen) -> bool {
    match seen {
        Seen::At(version) => store.shows(key, Some(version)),
        Seen::Gone => store.shows(key, None),
        Seen::InFlight => false,
    }
}

/// A list of the API server answered `found` for `store`: each of its pending entries takes what the list
/// says of it (present at a version, or absent), as [`ClusterView::read_again`] does for one object.
fn relisted<'a, K>(pending: &Pending, store: &Kept<K>, found: impl Iterator<Item = &'a ObjectMeta>)
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let versions: std::collections::HashMap<ObjectKey, Option<String>> = found
        .map(|meta| (store.key_of_meta(meta), meta.resource_version.clone()))
        .collect();
    let mine: Vec<ObjectKey> = pending
        .lock()
        .keys()
        .filter(|(id, _)| *id == AnyKept::id(store))
        .map(|(_, k)| k.clone())
        .collect();
    for key in mine {
        let seen = Seen::from_version(versions.get(&key).cloned().flatten());
        pending.read_again(&(AnyKept::id(store), key.clone()), seen, |seen| {
            shown(store, &key, seen)
        });
    }
}

/// What `look` answers from `view` when it knows; otherwise `get`'s answer from the API server, raced with
/// the store catching up (the watch usually delivers our own write a moment after the write's answer),
/// whichever is first. `answered` is told what the API server answered (usually
/// [`ClusterView::read_again`]). Without a view (no term yet), `get` answers.
///
/// This is the one place where "the store cannot say, ask the API server" is decided.
pub async fn read_through<T, E>(
    view: Option<&ClusterView>,
    look: impl Fn(&ClusterView) -> Read<T>,
    get: impl std::future::Future<Output = Result<Option<T>, E>>,
    answered: impl FnOnce(&ClusterView, Option<&T>),
) -> Result<Option<T>, E> {
    let Some(view) = view else {
        return get.await;
    };
    if let Some(known) = look(view).known() {
        return Ok(known);
    }
    let live = tokio::select! {
        live = get => live?,
        cached = view.caught_up(&look) => return Ok(cached),
    };
    answered(view, live.as_ref());
    Ok(live)
}
