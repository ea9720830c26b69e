//! The watches of a term's [`ClusterView`]: each a list and then a watch feeding one store, started with
//! the term, before its first pass. Every delivery is told to the view's pending writes
//! ([`Pending::delivered`]) after its store took it, so the two never disagree for long.

use super::health::{kept_watch, Health};
use super::kept::{Kept, Scope, Selection};
use super::key::ObjectKey;
use super::pending::{cause_of_change, Entry, Pending, StoreId};
use super::stores::{ClusterView, MODULE_KINDS};
use crate::reconciler::gate::Cause;
use btp_api::{names, BtpOperator};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt as _, Stream, StreamExt as _};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{store::Writer, Store};
use kube::runtime::watcher;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A term's view and what its watches bring.
pub struct Started {
    /// The view passes read.
    pub view: Arc<ClusterView>,
    /// The BtpOperators' store (the controller's reader).
    pub crs: Store<BtpOperator>,
    /// The BtpOperators' watch events, after their store took them (the controller's main stream).
    pub cr_events: BoxStream<'static, Result<watcher::Event<BtpOperator>, watcher::Error>>,
    /// One item per change of the module's objects, the credentials Secret or the API server's
    /// EndpointSlices, with its cause: the controller's secondary triggers.
    pub changes: BoxStream<'static, Cause>,
    /// Keeps the stores whose changes bring no pass (the cluster-ID Secrets, the operand's Secrets and
    /// pods): run it beside the controller.
    pub keep: BoxFuture<'static, ()>,
}

/// How the watch of store `id`, of `kind` in `apiVersion`, keys its objects.
fn keyer<K: kube::Resource>(
    id: StoreId,
    api_version: &str,
    kind: &str,
    namespaced: bool,
) -> impl Fn(&K) -> Entry + Send + 'static {
    let (api_version, kind) = (api_version.to_string(), kind.to_string());
    move |o: &K| (id, ObjectKey::of(&api_version, &kind, namespaced, o.meta()))
}

/// The watch of `api` seen through `config`, feeding `writer` and keeping `health` ([`kept_watch`]);
/// yields once per change its store took, with its cause: an echo of our own write, or not
/// ([`cause_of_change`]). A relist cannot tell (it reports what changed while the watch was down): it
/// counts as `relist`, ours for what the manager writes (held back like its echoes while a failed pass
/// waits), someone else's for what people or the API server change. So does a store that goes stale (its
/// watch cannot run): what it missed is read from the API server by the pass this brings.
fn reflect<K>(
    (api, config): (Api<K>, watcher::Config),
    (writer, health): (Writer<K>, Health),
    key: impl Fn(&K) -> Entry + Send + 'static,
    (pending, relist): (Arc<Pending>, Cause),
) -> impl Stream<Item = Cause> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    // The generation each object was last seen at (see [`cause_of_change`]).
    let mut generations: HashMap<Entry, i64> = HashMap::new();
    let kind = std::any::type_name::<K>();
    kept_watch(api, config, writer, health).filter_map(move |watched| {
        let event = match watched.event {
            Err(e) => {
                tracing::debug!(error = %e, kind, "watch");
                return std::future::ready(watched.went_stale.then_some(relist));
            }
            Ok(event) => event,
        };
        std::future::ready(match event {
            // Not an `InitApply`: a relist's objects reach the store only at its `InitDone`, and until
            // then the store still shows what it had (a pending entry clears when it shows the same).
            watcher::Event::Apply(o) => {
                let k = key(&o);
                let echo = pending.delivered(&k, o.meta().resource_version.as_deref());
                let generation = o.meta().generation;
                let before = match generation {
                    Some(g) => generations.insert(k, g),
                    None => generations.remove(&k),
                };
                Some(cause_of_change(echo, before, generation))
            }
            watcher::Event::InitApply(o) => {
                if let Some(g) = o.meta().generation {
                    generations.insert(key(&o), g);
                }
                None
            }
            watcher::Event::Delete(o) => {
                let k = key(&o);
                generations.remove(&k);
                Some(pending.delivered(&k, None))
            }
            watcher::Event::InitDone => {
                // A store that just listed may answer what waits for it.
                pending.changed().notify_waiters();
                Some(relist)
            }
            watcher::Event::Init => None,
        })
    })
}

/// Start the stores of a term for a manager whose chart namespace is `chart_namespace` and whose
/// credentials Secret is `secret_name` there (see [`Started`]); a store whose watch keeps failing for
/// `failing_limit` (one Lease duration) answers nothing until it has listed again ([`super::health`]).
pub fn start(client: &kube::Client, chart_namespace: &str, secret_name: &str, failing_limit: Duration) -> Started {
    use crate::reconciler::drift;
    use crate::reconciler::network_policies::{API_SERVER_SLICES_NAMESPACE, API_SERVER_SLICES_SELECTOR};
    let pending = Arc::new(Pending::default());
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    let labelled = format!("{}={}", names::MANAGED_BY_LABEL, names::MANAGED_BY_BTP_MANAGER);
    let mut ids = 0..;
    let mut next_id = move || ids.next().unwrap_or_default();
    let in_chart_namespace = Scope {
        namespace: Some(chart_namespace),
        namespaced: true,
        name: None,
        label: None,
    };
    let ours = Some((names::MANAGED_BY_LABEL, names::MANAGED_BY_BTP_MANAGER));
    let mut triggers: Vec<BoxStream<'static, Cause>> = Vec::new();
    let health = || Health::new(failing_limit);

    // The BtpOperators, cluster-wide: the controller reads them from here, and so does a pass.
    let cr_api_version = format!("{}/{}", names::GROUP, names::VERSION);
    let writer = Writer::<BtpOperator>::default();
    let everywhere = Scope {
        namespace: None,
        namespaced: true,
        name: None,
        label: None,
    };
    let id = next_id();
    let cr_health = health();
    let crs = Kept::new(
        id,
        (&cr_api_version, names::KIND),
        (),
        everywhere,
        (Selection::Everything, cr_health.clone()),
        writer.as_reader(),
    );
    let cr_store = writer.as_reader();
    let cr_key = keyer::<BtpOperator>(id, &cr_api_version, names::KIND, true);
    let cr_pending = pending.clone();
    let cr_api = Api::<BtpOperator>::all(client.clone());
    let cr_events = kept_watch(cr_api, watcher::Config::default(), writer, cr_health)
        .map(|watched| watched.event)
        .inspect(move |event| match event {
            Ok(watcher::Event::Apply(cr)) => {
                cr_pending.delivered(&cr_key(cr), cr.metadata.resource_version.as_deref());
            }
            Ok(watcher::Event::Delete(cr)) => {
                cr_pending.delivered(&cr_key(cr), None);
            }
            Ok(watcher::Event::InitDone) => cr_pending.changed().notify_waiters(),
            _ => {}
        })
        .boxed();

    // The credentials Secret, by name.
    let writer = Writer::<Secret>::default();
    let id = next_id();
    let scope = Scope {
        name: Some(secret_name),
        ..in_chart_namespace
    };
    let kept_health = health();
    let credentials = Kept::new(
        id,
        ("v1", "Secret"),
        (),
        scope,
        (Selection::Some, kept_health.clone()),
        writer.as_reader(),
    );
    let api = Api::<Secret>::namespaced(client.clone(), chart_namespace);
    let key = keyer(id, "v1", "Secret", true);
    // Changed by people: a relist brings a pass even while a failed one waits (the manager only annotates it).
    let watched = (pending.clone(), Cause::Theirs);
    triggers.push(reflect((api, by_name(secret_name)), (writer, kept_health), key, watched).boxed());

    // The module's objects.
    let mut module = Vec::new();
    for (api_version, kind) in MODULE_KINDS {
        // The built-in kinds' plurals and scopes (discovery would answer the same for these).
        let resource = crate::reconciler::kinds::Kinds::default().api_resource(api_version, kind);
        let namespaced = !crate::reconciler::kinds::is_cluster_scoped(kind);
        // The chart namespace's network policies, all of them: the legacy policy has no label of ours.
        let selection = match kind {
            "NetworkPolicy" => Selection::Everything,
            _ => Selection::Some,
        };
        let api = match namespaced {
            true => Api::<DynamicObject>::namespaced_with(client.clone(), chart_namespace, &resource),
            false => Api::<DynamicObject>::all_with(client.clone(), &resource),
        };
        let config = match selection {
            Selection::Everything => watcher::Config::default(),
            Selection::Some => watcher::Config::default().labels(&labelled),
        };
        let writer = Writer::new(resource.clone());
        let id = next_id();
        let scope = Scope {
            namespaced,
            label: ours.filter(|_| selection == Selection::Some),
            ..in_chart_namespace
        };
        let kept_health = health();
        module.push(Kept::new(
            id,
            (api_version, kind),
            resource,
            scope,
            (selection, kept_health.clone()),
            writer.as_reader(),
        ));
        let key = keyer(id, api_version, kind, namespaced);
        triggers.push(
            reflect(
                (api, config),
                (writer, kept_health),
                key,
                (pending.clone(), Cause::Ours),
            )
            .boxed(),
        );
    }

    // The API server's EndpointSlices: their ports are rendered into the network policies.
    let writer = Writer::<EndpointSlice>::default();
    let id = next_id();
    let scope = Scope {
        namespace: Some(API_SERVER_SLICES_NAMESPACE),
        namespaced: true,
        name: None,
        label: API_SERVER_SLICES_SELECTOR.split_once('='),
    };
    let kept_health = health();
    let slices = Kept::new(
        id,
        ("discovery.k8s.io/v1", "EndpointSlice"),
        (),
        scope,
        (Selection::Some, kept_health.clone()),
        writer.as_reader(),
    );
    let api = Api::<EndpointSlice>::namespaced(client.clone(), API_SERVER_SLICES_NAMESPACE);
    let config = watcher::Config::default().labels(API_SERVER_SLICES_SELECTOR);
    let key = keyer(id, "discovery.k8s.io/v1", "EndpointSlice", true);
    // The API server's own: never an echo of the manager's.
    triggers.push(
        reflect(
            (api, config),
            (writer, kept_health),
            key,
            (pending.clone(), Cause::Theirs),
        )
        .boxed(),
    );

    // What brings no pass: the cluster-ID Secrets, the operand's Secrets and its pods.
    let writer = Writer::<Secret>::default();
    let id = next_id();
    let scope = Scope {
        name: Some(drift::CLUSTER_ID_SECRET),
        ..everywhere
    };
    let kept_health = health();
    let clusterid = Kept::new(
        id,
        ("v1", "Secret"),
        (),
        scope,
        (Selection::Some, kept_health.clone()),
        writer.as_reader(),
    );
    let api = Api::<Secret>::all(client.clone());
    let key = keyer(id, "v1", "Secret", true);
    let clusterid_watch = reflect(
        (api, by_name(drift::CLUSTER_ID_SECRET)),
        (writer, kept_health),
        key,
        (pending.clone(), Cause::Ours),
    );

    let writer = Writer::<PartialObjectMeta<Secret>>::default();
    let id = next_id();
    let scope = Scope {
        name: Some(drift::OPERAND_SECRET),
        label: ours,
        ..everywhere
    };
    let kept_health = health();
    let operand_secrets = Kept::new(
        id,
        ("v1", "Secret"),
        (),
        scope,
        (Selection::Some, kept_health.clone()),
        writer.as_reader(),
    );
    let selector = drift::operand_secrets_selector();
    let config = watcher::Config::default()
        .labels(selector.label_selector.as_deref().unwrap_or_default())
        .fields(selector.field_selector.as_deref().unwrap_or_default());
    let api = Api::<PartialObjectMeta<Secret>>::all(client.clone());
    let key = keyer(id, "v1", "Secret", true);
    let operand_secrets_watch = reflect(
        (api, config),
        (writer, kept_health),
        key,
        (pending.clone(), Cause::Ours),
    );

    let writer = Writer::<Pod>::default();
    let id = next_id();
    let kept_health = health();
    let pods = Kept::new(
        id,
        ("v1", "Pod"),
        (),
        Scope {
            label: Some((drift::OPERAND_POD_LABEL, drift::OPERAND_POD_LABEL_VALUE)),
            ..in_chart_namespace
        },
        (Selection::Some, kept_health.clone()),
        writer.as_reader(),
    );
    let selector = format!("{}={}", drift::OPERAND_POD_LABEL, drift::OPERAND_POD_LABEL_VALUE);
    let api = Api::<Pod>::namespaced(client.clone(), chart_namespace);
    let key = keyer(id, "v1", "Pod", true);
    let config = watcher::Config::default().labels(&selector);
    let pods_watch = reflect(
        (api, config),
        (writer, kept_health),
        key,
        (pending.clone(), Cause::Ours),
    );

    let keep = async move {
        futures::join!(
            clusterid_watch.for_each(|_| async {}),
            operand_secrets_watch.for_each(|_| async {}),
            pods_watch.for_each(|_| async {}),
        );
    }
    .boxed();

    let view = Arc::new(ClusterView {
        pending,
        crs,
        credentials,
        module,
        clusterid,
        operand_secrets,
        pods,
        slices,
    });
    Started {
        view,
        crs: cr_store,
        cr_events,
        changes: futures::stream::select_all(triggers).boxed(),
        keep,
    }
}
