//! A stand-in for the scheduler and the kubelet of one node on a real API server that has neither (the control
//! planes of `../shared/realk8s`: etcd, kube-apiserver and kube-controller-manager, whose Deployment,
//! ReplicaSet and EndpointSlice controllers really run). Everything it does goes through the API as theirs
//! does:
//!
//! - the Node `btp-e2e-node`, `Ready`, its Lease in `kube-node-lease` renewed (so the node lifecycle
//!   controller never evicts its Pods);
//! - every Pod without a node is bound to it (`pods/binding`, the scheduler's request);
//! - a bound Pod is run: its status written through the `status` subresource (`Running`, a Pod IP, the
//!   `Ready` condition), as the kubelet writes it. What runs depends on the Pod:
//!   - the manager's Pods (`deploy/deployment.yaml`, when [`KubeletOptions::run_manager`]): the container as a
//!     process ([`super::pod`]), with a token of its ServiceAccount bound to the Pod (TokenRequest), the CA of
//!     `kube-root-ca.crt`, `KUBERNETES_SERVICE_HOST` at the `kubernetes` Service's ClusterIP (forwarded to
//!     the API server), and `Ready` from its readiness probe, probed on the Pod's own period;
//!   - the Go BTP Manager's Pods (the same label, the container's command `/manager`: the Go install's
//!     Deployment, `tests/fixtures/go-install.yaml`), when [`KubeletOptions::run_manager`]: its leader election
//!     as [`super::go_lease`] plays it, with the token of its ServiceAccount, `Ready` at once (its readiness
//!     probe is a ping); SIGTERM ends it without releasing the Lease, as the Go process ends;
//!   - every other Pod is played: what its container does at start where the test suite knows it (the
//!     operand's cluster-ID Secret, [`super::operand::start_container`]), then `Ready` as
//!     [`Kubelet::set_ready`] says;
//! - a deleted Pod is finished as the kubelet finishes it: its container gets SIGTERM, and SIGKILL when the
//!   grace period ends, then the Pod is deleted with grace period 0.
//!
//! Pod IPs are data only (`198.18.0.0/15`, the benchmarking range: EndpointSlices refuse loopback): nothing
//! sends to them. Connections reach containers through [`super::proxy`], which plays kube-proxy on the
//! Services' ClusterIPs (loopback ranges in these clusters) and looks the containers up here. A container's
//! ports listen on a loopback IP of their own ([`super::own_addr`]), as a Pod's network is its own.
#![allow(dead_code)]

use super::pod::{Launch, PodProcess, ServiceAccountFiles};
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::ResourceExt as _;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// The one node of the stand-in.
pub const NODE: &str = "btp-e2e-node";
/// The label of the manager's Pods (`deploy/deployment.yaml`).
pub const MANAGER_POD_LABEL: (&str, &str) = ("app.kubernetes.io/component", "btp-manager.kyma-project.io");

/// What the stand-in does with the Pods it runs.
#[derive(Clone, Debug)]
pub struct KubeletOptions {
    /// Whether played containers are `Ready` (see [`Kubelet::set_ready`]).
    pub ready: bool,
    /// Whether the manager's Pods run (as processes); otherwise they stay unscheduled.
    pub run_manager: bool,
    /// `RUST_LOG` of the manager's containers.
    pub rust_log: String,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        Self {
            ready: true,
            run_manager: false,
            rust_log: "info,btp_webhooks::handlers=warn".into(),
        }
    }
}

/// The running stand-in; stops (and kills its containers) when dropped. Pods it ran stay as they are.
pub struct Kubelet {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    _kubernetes: Option<super::proxy::ServiceProxy>,
}

struct Shared {
    client: kube::Client,
    options: KubeletOptions,
    pods: Store<Pod>,
    /// Whether played containers are ready; a change re-runs every Pod.
    ready: tokio::sync::watch::Sender<bool>,
    /// Played Pods whose container has started (by uid): true when it came up, false when it refused.
    started: Mutex<HashMap<String, bool>>,
    /// The manager's running containers, by Pod uid.
    containers: Mutex<HashMap<String, Container>>,
    /// Pods being finished (by uid).
    terminating: Mutex<HashSet<String>>,
    /// Where a Pod's container port listens: (namespace, pod) → container port → address.
    ports: Mutex<HashMap<(String, String), BTreeMap<i32, SocketAddr>>>,
    /// Stand-ins serving a port of played Pods.
    played_ports: Mutex<Vec<Played>>,
    /// `KUBERNETES_SERVICE_HOST`/`_PORT` of the containers.
    kubernetes_service: (String, u16),
    /// How to reach the API server (for the Go manager's client, with its Pod's token).
    config: kube::Config,
    dir: PathBuf,
}

/// A port of played Pods served by a stand-in: the labels the Pod has, the container port, the address.
type Played = (BTreeMap<String, String>, i32, SocketAddr);

struct Container {
    /// Tells the container's task to stop, with the grace period.
    stop: tokio::sync::watch::Sender<Option<Duration>>,
    /// The task that runs it (and owns its process): aborted when dropped, unless taken.
    task: Option<JoinHandle<()>>,
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        // The containers' tasks own their processes: aborting them kills the processes.
        super::sync_lock(&self.shared.containers).clear();
    }
}

impl Kubelet {
    /// Start the stand-in against the cluster of `client` (`config`: where its API server listens, for the
    /// `kubernetes` Service of the manager's containers).
    pub async fn start(client: kube::Client, config: &kube::Config, options: KubeletOptions) -> Self {
        ensure_node(&client).await;
        let kubernetes: Service = Api::<Service>::namespaced(client.clone(), "default")
            .get("kubernetes")
            .await
            .expect("the kubernetes Service");
        let cluster_ip = kubernetes
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ip.clone())
            .expect("the kubernetes Service has a ClusterIP");
        let dir = super::temp_dir("kubelet");
        let (store, writer) = reflector::store();
        let (ready, _) = tokio::sync::watch::channel(options.ready);
        let shared = Arc::new(Shared {
            client: client.clone(),
            options: options.clone(),
            pods: store,
            ready,
            started: Mutex::default(),
            containers: Mutex::default(),
            terminating: Mutex::default(),
            ports: Mutex::default(),
            played_ports: Mutex::default(),
            kubernetes_service: (cluster_ip.clone(), 443),
            config: config.clone(),
            dir,
        });
        // The manager's containers reach the API server through the `kubernetes` Service, as in a cluster.
        let kubernetes = if options.run_manager {
            let api_server = api_server_address(config);
            let listen: SocketAddr = format!("{cluster_ip}:443").parse().expect("a ClusterIP");
            Some(super::proxy::forward(listen, api_server).await)
        } else {
            None
        };
        let mut tasks = vec![tokio::spawn(heartbeat(client.clone()))];
        tasks.push(tokio::spawn(run(shared.clone(), writer)));
        let kubelet = Self {
            shared,
            tasks,
            _kubernetes: kubernetes,
        };
        kubelet
            .shared
            .pods
            .wait_until_ready()
            .await
            .expect("the Pod watch lists");
        kubelet
    }

    /// Played containers (every Pod but the manager's) turn (not) `Ready`, as a container whose readiness
    /// probe starts or stops passing.
    pub fn set_ready(&self, ready: bool) {
        self.shared.ready.send_replace(ready);
    }

    /// Serve `port` of every played Pod carrying `labels` at `addr` (a stand-in for what its container
    /// serves there), until dropped.
    pub fn serve_played(&self, labels: BTreeMap<String, String>, port: i32, addr: SocketAddr) -> PlayedPort {
        super::sync_lock(&self.shared.played_ports).push((labels.clone(), port, addr));
        PlayedPort {
            shared: self.shared.clone(),
            entry: (labels, port, addr),
        }
    }

    /// Where container port `port` of Pod `namespace/pod` listens, if it runs here.
    pub fn address(&self, namespace: &str, pod: &str, port: i32) -> Option<SocketAddr> {
        self.shared.address(namespace, pod, port)
    }

    /// The manager's containers running now: (Pod name, its log file).
    pub fn manager_logs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&self.shared.dir) {
            for e in entries.flatten() {
                let log = e.path().join("container.log");
                if let Ok(text) = std::fs::read_to_string(&log) {
                    out.push((e.file_name().to_string_lossy().into_owned(), text));
                }
            }
        }
        out
    }

    /// Where containers listen, for [`super::proxy`].
    pub fn lookup(&self) -> super::proxy::Lookup {
        let shared = self.shared.clone();
        Arc::new(move |ns: &str, pod: &str, port: i32| shared.address(ns, pod, port))
    }
}

/// A port served for played Pods ([`Kubelet::serve_played`]); removed when dropped.
pub struct PlayedPort {
    shared: Arc<Shared>,
    entry: Played,
}

impl Drop for PlayedPort {
    fn drop(&mut self) {
        super::sync_lock(&self.shared.played_ports).retain(|e| *e != self.entry);
    }
}

impl Shared {
    fn address(&self, namespace: &str, pod: &str, port: i32) -> Option<SocketAddr> {
        if let Some(addr) = super::sync_lock(&self.ports)
            .get(&(namespace.to_string(), pod.to_string()))
            .and_then(|p| p.get(&port))
        {
            return Some(*addr);
        }
        let labels = self.pods.get(&ObjectRef::new(pod).within(namespace))?.labels().clone();
        super::sync_lock(&self.played_ports)
            .iter()
            .find(|(want, p, _)| *p == port && want.iter().all(|(k, v)| labels.get(k) == Some(v)))
            .map(|(_, _, addr)| *addr)
    }
}

/// The API server's address, from the client's configuration.
fn api_server_address(config: &kube::Config) -> SocketAddr {
    let url = &config.cluster_url;
    let host = url.host().expect("the API server's host");
    let port = url.port_u16().unwrap_or(443);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = if host == "localhost" {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        host.parse().expect("the API server is addressed by IP on loopback")
    };
    SocketAddr::new(ip, port)
}

/// The Node, `Ready`.
async fn ensure_node(client: &kube::Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux"}},
    }))
    .expect("a Node");
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the Node {NODE}: {e}"),
    }
    let now = jiff::Timestamp::now().to_string();
    let status = serde_json::json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "the test suite's kubelet stand-in is posting ready status",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "addresses": [{"type": "Hostname", "address": NODE}],
    }});
    nodes
        .patch_status(NODE, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("the Node's status");
}

/// The node's Lease, renewed every 10 s as a kubelet does.
async fn heartbeat(client: kube::Client) {
    let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    loop {
        let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": NODE, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40, "renewTime": now},
        });
        let _ = leases
            .patch(
                NODE,
                &PatchParams::apply("btp-e2e-kubelet").force(),
                &Patch::Apply(&lease),
            )
            .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// The Pod loop: every change of a Pod, and every change of the played readiness, runs the Pods again.
async fn run(shared: Arc<Shared>, writer: reflector::store::Writer<Pod>) {
    let pods: Api<Pod> = Api::all(shared.client.clone());
    let mut events = std::pin::pin!(watcher(pods, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects());
    let mut ready = shared.ready.subscribe();
    loop {
        tokio::select! {
            pod = events.next() => match pod {
                Some(Ok(pod)) => handle(&shared, &pod).await,
                Some(Err(e)) => tracing::debug!(error = %e, "kubelet stand-in: watch"),
                None => return,
            },
            changed = ready.changed() => {
                if changed.is_err() {
                    return;
                }
                for pod in shared.pods.state() {
                    handle(&shared, &pod).await;
                }
            }
        }
    }
}

fn is_manager(pod: &Pod) -> bool {
    pod.labels().get(MANAGER_POD_LABEL.0).map(String::as_str) == Some(MANAGER_POD_LABEL.1)
}

async fn handle(shared: &Arc<Shared>, pod: &Pod) {
    let (Some(uid), Some(ns)) = (pod.uid(), pod.namespace()) else {
        return;
    };
    let name = pod.name_any();
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return;
    }
    let manager = is_manager(pod);
    if pod.metadata.deletion_timestamp.is_some() {
        if node == Some(NODE) && super::sync_lock(&shared.terminating).insert(uid.clone()) {
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .and_then(|s| u64::try_from(s).ok())
                .unwrap_or(30);
            tokio::spawn(finish(shared.clone(), ns, name, uid, Duration::from_secs(grace)));
        }
        return;
    }
    if manager && !shared.options.run_manager {
        return;
    }
    match node {
        None => bind(shared, &ns, &name).await,
        Some(NODE) if manager => {
            let mut containers = super::sync_lock(&shared.containers);
            if let std::collections::hash_map::Entry::Vacant(entry) = containers.entry(uid) {
                let (stop, stopped) = tokio::sync::watch::channel(None);
                let task = tokio::spawn(run_container(shared.clone(), pod.clone(), stopped));
                entry.insert(Container { stop, task: Some(task) });
            }
        }
        Some(NODE) => play(shared, pod, &uid, &ns, &name).await,
        Some(_) => {}
    }
}

/// `pods/binding`: what the scheduler sends.
async fn bind(shared: &Shared, ns: &str, name: &str) {
    let binding = serde_json::json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    });
    let pods: Api<Pod> = Api::namespaced(shared.client.clone(), ns);
    match pods
        .create_subresource::<_, serde_json::Value>("binding", name, &PostParams::default(), &binding)
        .await
    {
        Ok(_) => {}
        // Already bound (a second event of the same Pod), or gone.
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {}
        Err(e) => tracing::debug!(error = %e, "kubelet stand-in: binding {ns}/{name}"),
    }
}

/// A played Pod: its container's start (once), then its status as the played readiness says.
async fn play(shared: &Shared, pod: &Pod, uid: &str, ns: &str, name: &str) {
    let known = super::sync_lock(&shared.started).get(uid).copied();
    let up = match known {
        Some(up) => up,
        None => {
            let mut outcome = Ok(true);
            for _ in 0..5 {
                outcome = super::operand::start_container(&shared.client, pod).await;
                if outcome.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let up = match outcome {
                Ok(up) => up,
                Err(e) => {
                    tracing::debug!(error = %e, "kubelet stand-in: the container of {ns}/{name} did not start");
                    return;
                }
            };
            super::sync_lock(&shared.started).insert(uid.to_string(), up);
            up
        }
    };
    let ready = up && *shared.ready.borrow();
    if status_is(pod, ready) {
        return;
    }
    write_status(&shared.client, pod, ready, 0).await;
}

/// Whether the Pod's status already says `Running` and `Ready` = `ready`.
fn status_is(pod: &Pod, ready: bool) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let is_ready = status
        .conditions
        .as_ref()
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status == "True");
    status.phase.as_deref() == Some("Running") && status.pod_ip.is_some() && is_ready == Some(ready)
}

/// The Pod's IP: data only, from its uid, in 198.18.0.0/15.
fn pod_ip(uid: &str) -> String {
    let mut h: u32 = 2_166_136_261;
    for b in uid.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(16_777_619);
    }
    format!("198.{}.{}.{}", 18 + (h >> 16) % 2, (h >> 8) % 256, 1 + h % 254)
}

/// The status a kubelet writes for a running Pod.
async fn write_status(client: &kube::Client, pod: &Pod, ready: bool, restarts: i32) {
    let (Some(ns), Some(uid)) = (pod.namespace(), pod.uid()) else {
        return;
    };
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or_else(|| now.clone(), |t| t.0.to_string());
    let flag = if ready { "True" } else { "False" };
    let ip = pod_ip(&uid);
    let condition = |t: &str, s: &str| serde_json::json!({"type": t, "status": s, "lastTransitionTime": now});
    let containers: Vec<serde_json::Value> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                "ready": ready, "started": true, "restartCount": restarts,
                "state": {"running": {"startedAt": started}},
            })
        })
        .collect();
    let status = serde_json::json!({"status": {
        "phase": "Running", "hostIP": "198.18.0.1", "hostIPs": [{"ip": "198.18.0.1"}],
        "podIP": ip, "podIPs": [{"ip": ip}], "startTime": started,
        "conditions": [condition("PodScheduled", "True"), condition("Initialized", "True"),
                       condition("ContainersReady", flag), condition("Ready", flag)],
        "containerStatuses": containers,
    }});
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    match pods
        .patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&status))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => tracing::debug!(error = %e, "kubelet stand-in: status of {ns}/{}", pod.name_any()),
    }
}

/// A deleted Pod: its container stopped within the grace period, then the Pod deleted for good.
async fn finish(shared: Arc<Shared>, ns: String, name: String, uid: String, grace: Duration) {
    let container = super::sync_lock(&shared.containers).remove(&uid);
    if let Some(mut container) = container {
        container.stop.send_replace(Some(grace));
        // The task ends once the process has exited (SIGTERM, then SIGKILL at the end of the grace period).
        if let Some(task) = container.task.take() {
            let _ = task.await;
        }
    }
    super::sync_lock(&shared.ports).remove(&(ns.clone(), name.clone()));
    let pods: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    for _ in 0..10 {
        match pods.delete(&name, &params).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => break,
            Err(e) => {
                tracing::debug!(error = %e, "kubelet stand-in: deleting {ns}/{name}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    super::sync_lock(&shared.terminating).remove(&uid);
}

/// The listen flag of `btp-manager run` for each named container port of the manager's container.
fn listen_flag(port_name: &str) -> Option<&'static str> {
    match port_name {
        "webhook" => Some("--webhook-bind-address"),
        "metrics" => Some("--metrics-bind-address"),
        "health" => Some("--health-probe-bind-address"),
        _ => None,
    }
}

/// The files of the Pod's ServiceAccount volume: a token bound to the Pod (TokenRequest, as the kubelet asks
/// for a projected token), `kube-root-ca.crt`'s CA and the namespace.
async fn service_account_files(client: &kube::Client, pod: &Pod) -> Result<ServiceAccountFiles, String> {
    let ns = pod.namespace().unwrap_or_default();
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3607,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.name_any(), "uid": pod.uid()}},
    });
    let answer: serde_json::Value = Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create_subresource("token", &sa, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("a token of {ns}/{sa}: {e}"))?;
    let token = answer["status"]["token"]
        .as_str()
        .ok_or("the TokenRequest's answer holds no token")?
        .to_string();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let ca_pem = super::try_eventually(Duration::from_secs(30), || async {
        configmaps
            .get_opt("kube-root-ca.crt")
            .await
            .ok()
            .flatten()
            .and_then(|c| c.data)
            .and_then(|d| d.get("ca.crt").cloned())
    })
    .await
    .map_err(|()| format!("{ns}/kube-root-ca.crt never held ca.crt"))?;
    Ok(ServiceAccountFiles {
        token,
        ca_pem,
        namespace: ns,
    })
}

/// One of the manager's Pods: its container run, restarted when it exits (as `restartPolicy: Always` does),
/// `Ready` from its readiness probe, stopped when the Pod is deleted.
async fn run_container(shared: Arc<Shared>, pod: Pod, mut stop: tokio::sync::watch::Receiver<Option<Duration>>) {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let Some(spec) = pod.spec.clone() else { return };
    let Some(container) = spec.containers.first().cloned() else {
        return;
    };
    let files = match service_account_files(&shared.client, &pod).await {
        Ok(files) => files,
        Err(e) => {
            tracing::warn!("kubelet stand-in: {ns}/{name}: {e}");
            return;
        }
    };
    if container.command.as_deref() == Some(&["/manager".to_string()][..]) {
        return run_go_manager(&shared, &pod, &files, stop).await;
    }
    // The container's ports, each on a loopback address of its own (kept across restarts of the container).
    let mut ports = BTreeMap::new();
    let mut extra_args = Vec::new();
    let mut named = HashMap::new();
    for p in container.ports.clone().unwrap_or_default() {
        let addr = super::own_addr();
        ports.insert(p.container_port, addr);
        if let Some(port_name) = p.name.as_deref() {
            named.insert(port_name.to_string(), p.container_port);
            if let Some(flag) = listen_flag(port_name) {
                extra_args.push(format!("{flag}={addr}"));
            }
        }
    }
    super::sync_lock(&shared.ports).insert((ns.clone(), name.clone()), ports.clone());
    let security = spec.security_context.clone().unwrap_or_default();
    let user = (security.run_as_user.unwrap_or(0), security.run_as_group.unwrap_or(0));
    let dir = shared.dir.join(&name);
    let _ = std::fs::create_dir_all(&dir);
    let probe = container.readiness_probe.clone();
    let probe_addr = probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .and_then(|h| match &h.port {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => Some(*n),
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => named.get(s).copied(),
        })
        .and_then(|p| ports.get(&p).copied());
    let probe_path = probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .and_then(|h| h.path.clone())
        .unwrap_or_else(|| "/".into());
    let seconds = |v: Option<i32>, default: u64| v.and_then(|s| u64::try_from(s).ok()).unwrap_or(default);
    let initial_delay = Duration::from_secs(seconds(probe.as_ref().and_then(|p| p.initial_delay_seconds), 0));
    let period = Duration::from_secs(seconds(probe.as_ref().and_then(|p| p.period_seconds), 10).max(1));
    let failure_threshold = seconds(probe.as_ref().and_then(|p| p.failure_threshold), 3);
    let pod_ns = ns.clone();
    let pod_name = name.clone();
    let sa_name = spec.service_account_name.clone().unwrap_or_default();
    let field = move |path: &str| -> Option<String> {
        match path {
            "metadata.namespace" => Some(pod_ns.clone()),
            "metadata.name" => Some(pod_name.clone()),
            "spec.serviceAccountName" => Some(sa_name.clone()),
            _ => None,
        }
    };
    let mut restarts = 0;
    loop {
        let launch = Launch {
            container: &container,
            user,
            service_account: &files,
            field: &field,
            kubernetes_service: shared.kubernetes_service.clone(),
            hostname: &name,
            extra_args: extra_args.clone(),
            rust_log: &shared.options.rust_log,
            dir: &dir,
        };
        let mut process = match PodProcess::start(launch) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("kubelet stand-in: {ns}/{name}: {e}");
                return;
            }
        };
        write_status(&shared.client, &pod, false, restarts).await;
        let mut ready = false;
        let mut failures = 0;
        let mut next_probe = tokio::time::Instant::now() + initial_delay;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next_probe) => {
                    next_probe += period;
                    if let Some(status) = process.exited() {
                        tracing::warn!("kubelet stand-in: {ns}/{name}: the container exited ({status})");
                        break;
                    }
                    let Some(addr) = probe_addr else { continue };
                    let ok = probe_http(addr, &probe_path).await;
                    failures = if ok { 0 } else { failures + 1 };
                    let now_ready = if ok { true } else if failures >= failure_threshold { false } else { ready };
                    if now_ready != ready {
                        ready = now_ready;
                        let current = shared.pods.get(&ObjectRef::new(&name).within(&ns)).map_or_else(|| pod.clone(), |p| (*p).clone());
                        write_status(&shared.client, &current, ready, restarts).await;
                    }
                }
                changed = stop.changed() => {
                    let grace = if changed.is_ok() { (*stop.borrow()).unwrap_or(Duration::ZERO) } else { Duration::ZERO };
                    process.signal("TERM");
                    let exited = super::try_eventually(grace, || std::future::ready(process.exited())).await;
                    if exited.is_err() {
                        process.signal("KILL");
                    }
                    return;
                }
            }
        }
        // restartPolicy Always: the kubelet restarts the container after a back-off.
        restarts += 1;
        write_status(&shared.client, &pod, false, restarts).await;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(10)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The Go manager's Pod: its leader election with its Pod's token, `Ready`, until the Pod is deleted.
async fn run_go_manager(
    shared: &Shared,
    pod: &Pod,
    files: &ServiceAccountFiles,
    mut stop: tokio::sync::watch::Receiver<Option<Duration>>,
) {
    let config = super::install::token_config(&shared.config, &files.token).await;
    let mut go = super::go_lease::GoLeader::start(
        super::go_lease::go_client(config),
        &pod.namespace().unwrap_or_default(),
        &pod.name_any(),
    );
    write_status(&shared.client, pod, true, 0).await;
    let _ = stop.changed().await;
    go.stop().await;
}

/// An HTTP GET probe: whether it answered 2xx or 3xx within a second.
async fn probe_http(addr: SocketAddr, path: &str) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nUser-Agent: kube-probe\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let head = String::from_utf8_lossy(&buf);
        let code: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((200..400).contains(&code))
    };
    tokio::time::timeout(Duration::from_secs(1), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}
