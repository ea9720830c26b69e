//! The read path's rules on stores this test feeds itself (no API server): what a store answers before
//! and after its first list, read-your-writes per store, deletions, lists, and the wait for a store to
//! catch up.

use super::kept::{Kept, Scope, Selection};
use super::pending::Pending;
use super::*;
use btp_api::BtpOperator;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ApiResource;
use kube::api::{DynamicObject, ObjectMeta};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::Value;
use std::sync::Arc;

const NS: &str = "kyma-system";

/// A view over stores this test feeds: a labelled module Secret store and an unlabelled NetworkPolicy one,
/// the operand Secrets (which overlap the module's), the cluster-ID Secrets, pods and the CRs.
struct Fed {
    view: ClusterView,
    secrets: Writer<DynamicObject>,
    policies: Writer<DynamicObject>,
    clusterid: Writer<Secret>,
    operand_secrets: Writer<PartialObjectMeta<Secret>>,
    pods: Writer<Pod>,
    crs: Writer<BtpOperator>,
}

fn in_ns() -> Scope<'static> {
    Scope {
        namespace: Some(NS),
        namespaced: true,
        name: None,
        label: None,
    }
}

/// A store's health, its watch running.
fn healthy() -> super::health::Health {
    super::health::Health::new(std::time::Duration::from_secs(15))
}

fn everywhere(name: Option<&'static str>) -> Scope<'static> {
    Scope {
        namespace: None,
        namespaced: true,
        name,
        label: None,
    }
}

const OURS: Option<(&str, &str)> = Some(("app.kubernetes.io/managed-by", "btp-manager"));

fn module_store(
    id: usize,
    api_version: &str,
    kind: &str,
    selection: Selection,
) -> (Kept<DynamicObject>, Writer<DynamicObject>) {
    let resource = crate::reconciler::kinds::Kinds::default().api_resource(api_version, kind);
    let writer = Writer::new(resource.clone());
    let scope = Scope {
        label: OURS.filter(|_| selection == Selection::Some),
        ..in_ns()
    };
    let kept = Kept::new(
        id,
        (api_version, kind),
        resource,
        scope,
        (selection, healthy()),
        writer.as_reader(),
    );
    (kept, writer)
}

fn fed() -> Fed {
    let (secret_store, secrets) = module_store(0, "v1", "Secret", Selection::Some);
    let (policy_store, policies) = module_store(1, "networking.k8s.io/v1", "NetworkPolicy", Selection::Everything);
    let clusterid = Writer::<Secret>::default();
    let operand_secrets = Writer::<PartialObjectMeta<Secret>>::default();
    let pods = Writer::<Pod>::default();
    let crs = Writer::<BtpOperator>::default();
    let credentials = Writer::<Secret>::default();
    let slices = Writer::<EndpointSlice>::default();
    let cr_version = format!("{}/{}", btp_api::names::GROUP, btp_api::names::VERSION);
    let view = ClusterView {
        pending: Arc::new(Pending::default()),
        crs: Kept::new(
            2,
            (&cr_version, btp_api::names::KIND),
            (),
            everywhere(None),
            (Selection::Everything, healthy()),
            crs.as_reader(),
        ),
        credentials: Kept::new(
            3,
            ("v1", "Secret"),
            (),
            Scope {
                name: Some("sap-btp-manager"),
                ..in_ns()
            },
            (Selection::Some, healthy()),
            credentials.as_reader(),
        ),
        module: vec![secret_store, policy_store],
        clusterid: Kept::new(
            4,
            ("v1", "Secret"),
            (),
            everywhere(Some(crate::reconciler::drift::CLUSTER_ID_SECRET)),
            (Selection::Some, healthy()),
            clusterid.as_reader(),
        ),
        operand_secrets: Kept::new(
            5,
            ("v1", "Secret"),
            (),
            Scope {
                label: OURS,
                ..everywhere(Some(crate::reconciler::drift::OPERAND_SECRET))
            },
            (Selection::Some, healthy()),
            operand_secrets.as_reader(),
        ),
        pods: Kept::new(
            6,
            ("v1", "Pod"),
            (),
            in_ns(),
            (Selection::Some, healthy()),
            pods.as_reader(),
        ),
        slices: Kept::new(
            7,
            ("discovery.k8s.io/v1", "EndpointSlice"),
            (),
            everywhere(None),
            (Selection::Some, healthy()),
            slices.as_reader(),
        ),
    };
    Fed {
        view,
        secrets,
        policies,
        clusterid,
        operand_secrets,
        pods,
        crs,
    }
}

fn object(resource: &ApiResource, name: &str, rv: &str) -> DynamicObject {
    let mut o = DynamicObject::new(name, resource).within(NS);
    o.metadata.resource_version = Some(rv.into());
    o
}

fn secret_resource() -> ApiResource {
    crate::reconciler::kinds::Kinds::default().api_resource("v1", "Secret")
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

/// A write's answer at `rv`, labelled as the manager labels what it applies.
fn answer(rv: &str) -> ObjectMeta {
    ObjectMeta {
        resource_version: Some(rv.into()),
        labels: Some([(btp_api::names::MANAGED_BY_LABEL.to_string(), "btp-manager".to_string())].into()),
        ..ObjectMeta::default()
    }
}

fn secret(name: &str) -> ObjectKey {
    ObjectKey::core("Secret", NS, name)
}

fn version(read: Read<Value>) -> Option<Option<Value>> {
    read.known()
        .map(|o| o.map(|v| v["metadata"]["resourceVersion"].clone()))
}

#[test]
fn a_store_answers_only_after_its_first_list_and_only_for_what_its_watch_sees() {
    let mut f = fed();
    assert_eq!(f.view.module_object(&secret("ca-server-cert"), false), Read::NotKnown);
    listed(&mut f.secrets, vec![]);
    assert_eq!(
        f.view.module_object(&secret("ca-server-cert"), false),
        Read::Absent,
        "listed, and absent"
    );
    assert_eq!(
        f.view.module_object(&ObjectKey::core("ConfigMap", NS, "x"), false),
        Read::NotKnown,
        "a kind not kept"
    );
    assert_eq!(
        f.view
            .module_object(&ObjectKey::core("Secret", "elsewhere", "x"), false),
        Read::NotKnown,
        "a namespace not watched"
    );
    assert_eq!(
        f.view.credentials_secret(NS, "another-secret"),
        Read::NotKnown,
        "a name the watch does not select"
    );
}

#[test]
fn an_absence_that_must_hold_for_unlabelled_objects_comes_only_from_a_store_that_sees_them() {
    let mut f = fed();
    listed(&mut f.secrets, vec![]);
    listed(&mut f.policies, vec![]);
    assert_eq!(f.view.module_object(&secret("outdated"), true), Read::NotKnown);
    let legacy = ObjectKey::new("networking.k8s.io/v1", "NetworkPolicy", Some(NS), "legacy");
    assert_eq!(f.view.module_object(&legacy, true), Read::Absent);
}

#[test]
fn our_write_is_read_from_the_server_until_the_store_shows_it() {
    let mut f = fed();
    let r = secret_resource();
    listed(&mut f.secrets, vec![object(&r, "ca-server-cert", "4")]);
    let k = secret("ca-server-cert");
    f.view.wrote(&k, &answer("5"));
    assert_eq!(
        f.view.module_object(&k, false),
        Read::NotKnown,
        "the store still has the copy before our write"
    );
    f.secrets
        .apply_watcher_event(&Event::Apply(object(&r, "ca-server-cert", "5")));
    assert_eq!(version(f.view.module_object(&k, false)), Some(Some("5".into())));
    assert!(f.view.pending.lock().is_empty(), "caught up: nothing pending");

    // A create the store has not seen yet reads from the server too (no regeneration from a stale copy).
    let k = secret("webhook-server-cert");
    f.view.wrote(&k, &answer("6"));
    assert_eq!(f.view.module_object(&k, false), Read::NotKnown);
    // A read of the server while the store lags replaces what is pending.
    f.view.read_again(&k, Some("7".into()));
    f.secrets
        .apply_watcher_event(&Event::Apply(object(&r, "webhook-server-cert", "7")));
    assert_eq!(version(f.view.module_object(&k, false)), Some(Some("7".into())));
}

#[test]
fn each_store_that_holds_an_object_catches_up_with_our_write_on_its_own() {
    let mut f = fed();
    let r = secret_resource();
    let name = crate::reconciler::drift::OPERAND_SECRET;
    let mut meta = PartialObjectMeta::<Secret>::default();
    meta.metadata.name = Some(name.into());
    meta.metadata.namespace = Some(NS.into());
    meta.metadata.resource_version = Some("4".into());
    listed(&mut f.secrets, vec![object(&r, name, "4")]);
    listed(&mut f.operand_secrets, vec![meta.clone()]);
    let k = secret(name);
    f.view.wrote(&k, &answer("5"));
    // The operand Secrets' store delivers our write first; the module's still shows the older copy.
    meta.metadata.resource_version = Some("5".into());
    f.operand_secrets.apply_watcher_event(&Event::Apply(meta));
    f.view.pending.delivered(&(5, k.clone()), Some("5"));
    assert_eq!(f.view.operand_secrets().map(|s| s.len()), Read::Present(1));
    assert_eq!(
        f.view.module_object(&k, false),
        Read::NotKnown,
        "the module's store has not caught up"
    );
    f.secrets.apply_watcher_event(&Event::Apply(object(&r, name, "5")));
    f.view.pending.delivered(&(0, k.clone()), Some("5"));
    assert_eq!(version(f.view.module_object(&k, false)), Some(Some("5".into())));
}

#[test]
fn once_the_watch_delivered_our_write_a_later_change_of_someone_elses_is_read_from_the_store() {
    let mut f = fed();
    let r = secret_resource();
    listed(&mut f.secrets, vec![]);
    let k = secret("sap-btp-service-operator");
    f.view.wrote(&k, &answer("5"));
    let entry = (0, k.clone());
    // Someone else's change is not what we wrote: still pending.
    f.view.pending.delivered(&entry, Some("4"));
    assert_eq!(f.view.pending.lock().get(&entry), Some(&Seen::At("5".into())));
    // The watch delivered our write, then a later change (the store shows the later one).
    f.view.pending.delivered(&entry, Some("5"));
    f.secrets
        .apply_watcher_event(&Event::Apply(object(&r, "sap-btp-service-operator", "6")));
    assert_eq!(version(f.view.module_object(&k, false)), Some(Some("6".into())));
}

#[test]
fn a_write_the_store_already_shows_leaves_nothing_pending() {
    use crate::reconciler::gate::Cause;
    let mut f = fed();
    let r = secret_resource();
    listed(&mut f.secrets, vec![]);
    let k = secret("ca-server-cert");
    let writing = f.view.writing(&k);
    // The watch delivers the write before its answer is recorded.
    f.secrets
        .apply_watcher_event(&Event::Apply(object(&r, "ca-server-cert", "5")));
    assert_eq!(
        f.view.pending.delivered(&(0, k.clone()), Some("5")),
        Cause::Ours,
        "in flight"
    );
    writing.wrote(&answer("5"));
    assert!(f.view.pending.lock().is_empty(), "the store shows it: nothing pending");
    assert_eq!(
        f.view.pending.delivered(&(0, k.clone()), Some("6")),
        Cause::Theirs,
        "a later change is someone else's"
    );
    // A failed write leaves nothing behind either.
    let writing = f.view.writing(&k);
    assert_eq!(f.view.pending.lock().len(), 1);
    drop(writing);
    assert!(f.view.pending.lock().is_empty());
}

#[tokio::test]
async fn a_write_dropped_with_its_pass_is_not_left_pending() {
    use crate::reconciler::gate::Cause;
    let mut f = fed();
    let r = secret_resource();
    listed(&mut f.secrets, vec![object(&r, "sap-btp-service-operator", "4")]);
    let k = secret("sap-btp-service-operator");
    // A pass's write that never answers, dropped when the pass runs out of its budget.
    let pass = async {
        let _writing = f.view.writing(&k);
        std::future::pending::<()>().await;
    };
    assert!(tokio::time::timeout(std::time::Duration::from_millis(10), pass)
        .await
        .is_err());
    assert!(
        f.view.pending.lock().is_empty(),
        "nothing of the dropped write is pending"
    );
    // A person's change is theirs (it brings a pass at once), not an echo of the dropped write.
    f.secrets
        .apply_watcher_event(&Event::Apply(object(&r, "sap-btp-service-operator", "9")));
    assert_eq!(f.view.pending.delivered(&(0, k.clone()), Some("9")), Cause::Theirs);
    assert_eq!(
        version(f.view.module_object(&k, false)),
        Some(Some(Value::from("9"))),
        "and the store answers for it"
    );
}

#[test]
fn a_store_whose_watch_cannot_run_answers_nothing_until_it_has_listed_again() {
    let mut f = fed();
    let r = secret_resource();
    listed(&mut f.secrets, vec![object(&r, "sap-btp-service-operator", "4")]);
    let k = secret("sap-btp-service-operator");
    assert_eq!(version(f.view.module_object(&k, false)), Some(Some(Value::from("4"))));
    assert_eq!(f.view.module_object(&secret("gone"), false), Read::Absent);
    // Its watch is refused (an RBAC change): the copy it holds is nobody's truth any more.
    f.view.module[0].health().failed(Some(403));
    assert_eq!(f.view.module_object(&k, false), Read::NotKnown);
    assert_eq!(
        f.view.module_object(&secret("gone"), false),
        Read::NotKnown,
        "an absence neither"
    );
    // Listed again (the watch started anew): it answers again.
    listed(&mut f.secrets, vec![]);
    f.view.module[0].health().listed();
    assert_eq!(f.view.module_object(&k, false), Read::Absent);
    // The same for the stores answered as lists.
    listed(&mut f.pods, vec![]);
    assert!(f.view.operand_pods(NS).known().is_some());
    f.view.pods.health().failed(Some(404));
    assert_eq!(f.view.operand_pods(NS), Read::NotKnown);
}

#[test]
fn what_no_store_sees_is_not_recorded() {
    let f = fed();
    let k = ObjectKey::new("example.com/v1", "Widget", Some(NS), "w");
    f.view.writing(&k).wrote(&answer("3"));
    assert!(
        f.view.pending.lock().is_empty(),
        "nothing would ever clear it, and nothing reads it from a store"
    );
}

#[tokio::test]
async fn a_read_sent_to_the_server_is_answered_by_the_store_once_its_watch_delivers_our_write() {
    use futures::FutureExt as _;
    let mut f = fed();
    let r = secret_resource();
    listed(&mut f.secrets, vec![]);
    let k = secret("ca-server-cert");
    f.view.wrote(&k, &answer("5"));
    let waiting = f.view.caught_up(|v| v.module_object(&k, false));
    tokio::pin!(waiting);
    assert!(waiting.as_mut().now_or_never().is_none(), "the store has not caught up");
    f.secrets
        .apply_watcher_event(&Event::Apply(object(&r, "ca-server-cert", "5")));
    f.view.pending.delivered(&(0, k.clone()), Some("5"));
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .expect("answered once the watch delivered our write");
    assert_eq!(
        answer.map(|v| v["metadata"]["resourceVersion"].clone()),
        Some("5".into())
    );
}

#[tokio::test]
async fn read_through_asks_the_server_only_when_the_view_cannot_say() {
    let mut f = fed();
    let r = secret_resource();
    let k = secret("ca-server-cert");
    let asked = std::sync::atomic::AtomicUsize::new(0);
    let get = |answer: Option<Value>| {
        asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::ready(Ok::<_, ()>(answer))
    };
    let live = serde_json::json!({"metadata": {"name": "ca-server-cert", "resourceVersion": "9"}});
    // Not listed: the server answers.
    let read = read_through(
        Some(&f.view),
        |v| v.module_object(&k, false),
        get(Some(live.clone())),
        |_, _| {},
    )
    .await;
    assert_eq!(read, Ok(Some(live)));
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Listed: the store answers, and the request is never sent.
    listed(&mut f.secrets, vec![object(&r, "ca-server-cert", "9")]);
    let read = read_through(
        Some(&f.view),
        |v| v.module_object(&k, false),
        async { Err(()) },
        |_, _| {},
    )
    .await;
    assert_eq!(
        read.ok().flatten().map(|v| v["metadata"]["resourceVersion"].clone()),
        Some("9".into())
    );
    // Without a view (no term yet), the server answers.
    let read = read_through(None, |v: &ClusterView| v.module_object(&k, false), get(None), |_, _| {}).await;
    assert_eq!(read, Ok(None));
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[test]
fn what_a_deprovisioning_removed_is_read_from_the_server_until_the_store_sees_it_gone() {
    let mut f = fed();
    let r = secret_resource();
    let cert = object(&r, "ca-server-cert", "4");
    listed(&mut f.secrets, vec![cert.clone()]);
    let mut clusterid = Secret::default();
    clusterid.metadata.name = Some(crate::reconciler::drift::CLUSTER_ID_SECRET.into());
    clusterid.metadata.namespace = Some("creds".into());
    clusterid.metadata.resource_version = Some("3".into());
    listed(&mut f.clusterid, vec![clusterid.clone()]);
    // Written by us just before, not in the store yet: deleted too.
    f.view.wrote(&secret("webhook-server-cert"), &answer("8"));
    f.view.removed("v1", "Secret");
    // The cluster-ID Secret goes by name, one namespace at a time.
    let clusterid_key = ObjectKey::core("Secret", "creds", crate::reconciler::drift::CLUSTER_ID_SECRET);
    f.view.deleted(&clusterid_key);
    assert_eq!(
        f.view.module_object(&secret("webhook-server-cert"), false),
        Read::Absent,
        "our write the store never showed is gone with the rest"
    );
    assert_eq!(f.view.module_object(&secret("ca-server-cert"), false), Read::NotKnown);
    assert_eq!(f.view.clusterid_secret("creds"), Read::NotKnown);
    f.secrets.apply_watcher_event(&Event::Delete(cert));
    f.clusterid.apply_watcher_event(&Event::Delete(clusterid));
    assert_eq!(f.view.module_object(&secret("ca-server-cert"), false), Read::Absent);
    assert_eq!(f.view.clusterid_secret("creds"), Read::Absent);
}

#[test]
fn a_pod_we_deleted_is_listed_from_the_server_until_the_store_sees_it_gone() {
    let mut f = fed();
    let mut pod = Pod::default();
    pod.metadata.name = Some("sap-btp-operator-controller-manager-1".into());
    pod.metadata.namespace = Some(NS.into());
    pod.metadata.resource_version = Some("9".into());
    assert_eq!(f.view.operand_pods(NS), Read::NotKnown, "not listed yet");
    listed(&mut f.pods, vec![pod.clone()]);
    assert!(matches!(f.view.operand_pods(NS), Read::Present(p) if p.len() == 1));
    f.view
        .deleted(&ObjectKey::core("Pod", NS, "sap-btp-operator-controller-manager-1"));
    assert_eq!(f.view.operand_pods(NS), Read::NotKnown);
    f.pods.apply_watcher_event(&Event::Delete(pod));
    assert_eq!(f.view.operand_pods(NS), Read::Present(vec![]));
    assert_eq!(f.view.operand_pods("elsewhere"), Read::NotKnown);
}

#[test]
fn a_cr_copy_older_than_our_status_write_is_not_read() {
    let mut f = fed();
    let mut cr: BtpOperator = serde_json::from_value(serde_json::json!({
        "apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "BtpOperator",
        "metadata": {"name": "btpoperator", "namespace": NS, "resourceVersion": "10"},
    }))
    .expect("a BtpOperator");
    listed(&mut f.crs, vec![cr.clone()]);
    assert!(matches!(f.view.cr(NS, "btpoperator"), Read::Present(_)));
    f.view.wrote(&cr_key(NS, "btpoperator"), &answer("11"));
    assert_eq!(
        f.view.cr(NS, "btpoperator").map(|_| ()),
        Read::NotKnown,
        "the store still has the copy before our status write"
    );
    cr.metadata.resource_version = Some("11".into());
    f.crs.apply_watcher_event(&Event::Apply(cr));
    f.view.pending.delivered(&(2, cr_key(NS, "btpoperator")), Some("11"));
    let Read::Present(now) = f.view.cr(NS, "btpoperator") else {
        panic!("the store caught up");
    };
    assert_eq!(now.metadata.resource_version.as_deref(), Some("11"));
    assert_eq!(f.view.cr(NS, "other").map(|_| ()), Read::Absent);
}

#[test]
fn a_write_is_waited_for_only_in_the_stores_whose_watch_selects_it() {
    let mut f = fed();
    listed(&mut f.secrets, vec![]);
    // The credentials Secret, annotated by the drift step: labelled for the environment broker, so the
    // module's Secret store (ours only) never shows it and must not wait for it.
    let k = secret("sap-btp-manager");
    let broker = ObjectMeta {
        resource_version: Some("5".into()),
        labels: Some(
            [(
                btp_api::names::MANAGED_BY_LABEL.to_string(),
                "kcp-kyma-environment-broker".to_string(),
            )]
            .into(),
        ),
        ..ObjectMeta::default()
    };
    f.view.writing(&k).wrote(&broker);
    let ids: Vec<usize> = f.view.pending.lock().keys().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![3], "only the credentials store waits for it");
    // A delete of something a store does not hold leaves nothing to wait for in that store.
    f.view.deleted(&secret("never-there"));
    assert_eq!(f.view.pending.lock().len(), 1);
}

#[test]
fn a_read_of_the_server_that_the_store_already_shows_clears_what_was_pending() {
    let mut f = fed();
    let r = secret_resource();
    listed(&mut f.secrets, vec![object(&r, "ca-server-cert", "4")]);
    let k = secret("ca-server-cert");
    f.view.wrote(&k, &answer("5"));
    f.secrets
        .apply_watcher_event(&Event::Apply(object(&r, "ca-server-cert", "6")));
    // Behind or ahead cannot be told from the store: the server answered 6, which the store shows.
    assert_eq!(f.view.module_object(&k, false), Read::NotKnown);
    f.view.read_again(&k, Some("6".into()));
    assert!(
        f.view.pending.lock().is_empty(),
        "nothing left to take later changes for echoes"
    );
}

#[test]
fn a_list_of_the_server_settles_what_a_listed_store_waits_for() {
    let mut f = fed();
    let name = crate::reconciler::drift::OPERAND_SECRET;
    let meta = |ns: &str, rv: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        resource_version: Some(rv.into()),
        ..ObjectMeta::default()
    };
    listed(
        &mut f.operand_secrets,
        vec![PartialObjectMeta {
            metadata: meta("old", "3"),
            ..PartialObjectMeta::default()
        }],
    );
    // Deleted by us; the list answered before the store showed the deletion.
    f.view.deleted(&ObjectKey::core("Secret", "old", name));
    assert_eq!(f.view.operand_secrets().map(|_| ()), Read::NotKnown);
    f.view.operand_secrets_listed(&[]);
    assert_eq!(
        f.view.operand_secrets().map(|_| ()),
        Read::NotKnown,
        "the store still shows it"
    );
    f.operand_secrets.apply_watcher_event(&Event::Delete(PartialObjectMeta {
        metadata: meta("old", "3"),
        ..PartialObjectMeta::default()
    }));
    assert_eq!(f.view.operand_secrets().map(|s| s.len()), Read::Present(0));
    assert!(f.view.pending.lock().is_empty());
}
