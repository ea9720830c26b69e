//! Shared harness: an API server with kyma-system and the BtpOperator CRD, and the manager's reconciler
//! running against it with the real module-resources.
//!
//! The API server is the embedded one, unless `BTP_E2E_KUBECONFIG` names a kubeconfig: then the tests run
//! against that cluster, one at a time (the CR is a singleton), and each removes what it created when it
//! stops. The harness plays the operand's Deployment controller and kubelet (the operand's Pods, marked
//! Ready, and what its container does at start) unless `BTP_E2E_REAL_OPERAND=1` says the cluster really runs
//! the operand. Use a disposable cluster without BTP
//! Manager: cleanup deletes everything labelled `app.kubernetes.io/managed-by=btp-manager`.
#![allow(dead_code)]

pub mod addr;
pub mod admission;
pub mod chart;
pub mod eventually;
pub mod go_lease;
pub mod go_manager;
pub mod install;
pub mod kubelet;
pub mod operand;
pub mod pod;
pub mod proxy;
pub mod replica;
pub mod requests;
pub mod shipped;
pub mod token_endpoint;

pub use addr::*;
pub use eventually::*;

use btp_api::{names, BtpOperator, Reason};
use btp_apiserver::{ApiServer, Config as ServerConfig, RunningApiServer};
use btp_manager::config::Config;
use btp_manager::manager::{ManagerBuilder, Options};
use btp_manager::reconciler::Context;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::sync::Arc;
use std::time::Duration;

/// Every kind the manager installs for the operand: (group, version, kind, namespaced).
pub const MANAGED_KINDS: [(&str, &str, &str, bool); 13] = [
    ("", "v1", "ConfigMap", true),
    ("", "v1", "Secret", true),
    ("", "v1", "Service", true),
    ("", "v1", "ServiceAccount", true),
    ("apps", "v1", "Deployment", true),
    ("rbac.authorization.k8s.io", "v1", "Role", true),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", true),
    ("networking.k8s.io", "v1", "NetworkPolicy", true),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", false),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", false),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        false,
    ),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", false),
];

pub const IMAGE: &str = "example.test/sap-btp-service-operator:v0.11.10";

/// Where the tests run.
pub enum Backend {
    /// The embedded API server (default).
    Embedded(RunningApiServer),
    /// The cluster of `BTP_E2E_KUBECONFIG`; the guard keeps tests of this binary one at a time.
    Cluster { _serial: tokio::sync::OwnedMutexGuard<()> },
}

static SERIAL: std::sync::OnceLock<Arc<tokio::sync::Mutex<()>>> = std::sync::OnceLock::new();

/// Whether the tests run against a real cluster.
pub fn real_cluster() -> Option<String> {
    std::env::var("BTP_E2E_KUBECONFIG").ok().filter(|p| !p.is_empty())
}

/// Say that the running test does not run here, and why: on stderr, and as a line `<suite>::<test>\t<reason>`
/// in the file `BTP_E2E_SKIPS` names (the real-server stage of `.ci/run` counts these as skipped, not passed).
/// The test is the current thread's name (libtest names each test's thread after it).
pub fn skip(reason: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let suite = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| s.rsplit_once('-').map_or(s.clone(), |(name, _hash)| name.to_string()))
        .unwrap_or_default();
    eprintln!("skipped {suite}::{test}: {reason}");
    if let Some(path) = std::env::var_os("BTP_E2E_SKIPS").filter(|p| !p.is_empty()) {
        use std::io::Write as _;
        let line = format!("{suite}::{test}\t{}\n", reason.replace(['\n', '\t'], " "));
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!("recording the skip in {}: {e}", std::path::Path::new(&path).display());
        }
    }
}

/// A poison-tolerant lock of a harness mutex (a panicking test thread must not wedge the stand-ins).
pub fn sync_lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How `Env::start_with` runs the manager.
#[derive(Clone, Debug)]
pub struct StartOptions {
    /// On the embedded server: the user the manager's client authenticates as (its requests are logged
    /// under that name); the harness keeps the admin client. None: one client for both.
    pub manager_user: Option<String>,
    /// Whether the harness runs the reconciler itself (false: the test starts the manager its own way,
    /// e.g. through `ManagerBuilder` with leader election, using `Env::manager_client`).
    pub reconcile: bool,
    /// Whether the credentials check runs with the configuration's interval. Off by default: the suites'
    /// Secrets name token endpoints that do not exist, and tests reach nothing beyond loopback; the tests of
    /// the check bring their own endpoint (`token_endpoint`).
    pub credentials_check: bool,
}

impl Default for StartOptions {
    fn default() -> Self {
        Self {
            manager_user: None,
            reconcile: true,
            credentials_check: false,
        }
    }
}

async fn connect() -> (
    Option<RunningApiServer>,
    Option<tokio::sync::OwnedMutexGuard<()>>,
    kube::Client,
    kube::Config,
) {
    match real_cluster() {
        Some(path) => {
            let guard = SERIAL
                .get_or_init(|| Arc::new(tokio::sync::Mutex::new(())))
                .clone()
                .lock_owned()
                .await;
            let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("BTP_E2E_KUBECONFIG is readable");
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .expect("BTP_E2E_KUBECONFIG is a usable kubeconfig");
            let client = kube::Client::try_from(config.clone()).expect("client");
            (None, Some(guard), client, config)
        }
        None => {
            let server = ApiServer::start(ServerConfig::default()).await.expect("API server");
            let client = server.client().await;
            let config = server.kube_config();
            (Some(server), None, client, config)
        }
    }
}

/// Create if absent; whether it was created.
async fn ensure<K>(api: &Api<K>, obj: &K) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 409 => false,
        Err(e) => panic!("creating {:?}: {e}", obj.meta().name),
    }
}

pub struct Env {
    pub backend: Backend,
    pub client: kube::Client,
    /// The client the manager uses (see `StartOptions::manager_user`).
    pub manager_client: kube::Client,
    pub ctx: Arc<Context>,
    /// Who sent what since this environment started: the embedded request log, or a real server's audit log
    /// (`BTP_E2E_AUDIT_LOG`; None without one).
    pub requests: Option<requests::Requests>,
    /// The user the manager's requests are recorded under on a real cluster (its ServiceAccount).
    pub manager_user_on_real: Option<String>,
    /// On a real cluster: the scheduler, kubelet and kube-proxy stand-ins (None on the embedded server, whose
    /// workload stand-in plays them, and where `BTP_E2E_REAL_OPERAND=1` says the cluster runs the operand).
    pub kubelet: Option<kubelet::Kubelet>,
    config: Config,
    created_namespaces: std::sync::Mutex<Vec<String>>,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Env {
    /// Embedded API server, kyma-system, the CRD, the manager's reconciler; `deployments_become_available`
    /// plays the Deployment controller.
    pub async fn start(config: Config, deployments_become_available: bool) -> Self {
        Self::start_with(config, deployments_become_available, StartOptions::default()).await
    }

    /// As `start`, with the manager's identity and whether the harness runs the reconciler.
    pub async fn start_with(config: Config, deployments_become_available: bool, options: StartOptions) -> Self {
        // `BTP_TEST_LOG=btp_manager=debug` shows the in-process manager's logs with the test's output.
        if let Ok(filter) = std::env::var("BTP_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_test_writer()
                .try_init();
        }
        let config = if options.credentials_check {
            config
        } else {
            Config {
                credentials_check_interval: Duration::ZERO,
                ..config
            }
        };
        let (server, serial, client, config_of_admin) = connect().await;
        if server.is_none() {
            // A test that failed earlier could not clean up after itself (panics skip `stop`).
            cleanup(&client, &[]).await;
        }
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": names::KYMA_SYSTEM}})).unwrap();
        ensure(&Api::<Namespace>::all(client.clone()), &ns).await;
        // The manager's client is built as the manager builds it (one retry layer: the reconciler's). On a real
        // cluster it is the shipped ServiceAccount's (its token, RBAC and PriorityClass from `deploy/`, as
        // `kubectl apply -k deploy/` installs them); on the embedded server the user `manager_user` names.
        let manager_config = match (&server, &options.manager_user) {
            (Some(server), Some(user)) => {
                // The embedded server enforces RBAC for every user but its admin: the manager's identity gets
                // exactly what `deploy/` grants it.
                install::manager_identity(&client).await;
                server.kube_config_as(user)
            }
            (Some(_), None) => config_of_admin.clone(),
            (None, _) => install::shipped_identity(&client, &config_of_admin).await,
        };
        if server.is_some() {
            // The operand's Pods name the manager's PriorityClass (the API server refuses them without it).
            install::apply(&client, &install::deploy_objects("priority-class.yaml")).await;
        }
        let manager_client = btp_manager::manager::manager_client(manager_config).expect("the manager's client");
        ensure(
            &Api::<CustomResourceDefinition>::all(client.clone()),
            &BtpOperator::crd().unwrap(),
        )
        .await;
        btp_operator_crd_served(&client).await;
        let real_operand = std::env::var("BTP_E2E_REAL_OPERAND").is_ok_and(|v| v == "1");
        let mut kubelet = None;
        if server.is_none() && !real_operand {
            // A real cluster without the operand: kube-controller-manager runs the Deployment and ReplicaSet
            // controllers; the stand-ins schedule and run the Pods (Ready unless the test says otherwise) and
            // play what the operand's container does at start.
            let options = kubelet::KubeletOptions {
                ready: deployments_become_available,
                ..kubelet::KubeletOptions::default()
            };
            kubelet = Some(kubelet::Kubelet::start(client.clone(), &config_of_admin, options).await);
        } else if deployments_become_available && !real_operand {
            // Deployments get Pods that run (there is no kubelet), and the operand's Pods start as the operand
            // does (its cluster-ID Secret).
            btp_apiserver::spawn_workload_controller(client.clone());
            operand::spawn_operand_starts(client.clone());
        }
        let requests = match &server {
            Some(server) => Some(requests::Requests::Embedded(server.request_log())),
            None => requests::audit_log().map(requests::Requests::audit),
        };
        let manager_user_on_real = server.is_none().then(install::manager_user);
        let (ctx, stop, task) = spawn_manager(&manager_client, config.clone(), options.reconcile).await;
        let backend = match (server, serial) {
            (Some(server), _) => Backend::Embedded(server),
            (None, serial) => Backend::Cluster {
                _serial: serial.expect("serial guard"),
            },
        };
        Self {
            backend,
            created_namespaces: std::sync::Mutex::new(Vec::new()),
            client,
            manager_client,
            ctx,
            requests,
            manager_user_on_real,
            kubelet,
            config,
            stop: Some(stop),
            task,
        }
    }

    /// Stop the manager's reconciler (as a crash or a rollout would) and start a new one, with fresh
    /// in-memory state, against the same API server.
    pub async fn restart_manager(&mut self) {
        self.stop_manager().await;
        let (ctx, stop, task) = spawn_manager(&self.manager_client, self.config.clone(), true).await;
        self.ctx = ctx;
        self.stop = Some(stop);
        self.task = task;
    }

    async fn stop_manager(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// The embedded API server (None on a real cluster).
    pub fn server(&self) -> Option<&RunningApiServer> {
        match &self.backend {
            Backend::Embedded(server) => Some(server),
            Backend::Cluster { .. } => None,
        }
    }

    /// Play the operand where none runs: serve its webhooks with the manager-issued certificate and (when
    /// `removes_finalizers`) remove its finalizer from deleted ServiceInstances/ServiceBindings. Call after
    /// provisioning. On a real cluster its webhook server is reached through the operand's Service: the
    /// kubelet stand-in runs it as the operand Pod's port, the kube-proxy stand-in listens on the Service's
    /// ClusterIP. Where `BTP_E2E_REAL_OPERAND=1`, the real operand does all this.
    pub async fn play_operand(&self, removes_finalizers: bool) -> OperandDouble {
        let finalizers = removes_finalizers.then(|| operand::spawn_finalizer_remover(self.client.clone(), 16));
        match (self.server(), &self.kubelet) {
            (Some(server), _) => OperandDouble {
                _webhooks: Some(operand::serve_webhooks(server, &self.client).await),
                finalizers,
                _played: None,
                _proxy: None,
            },
            (None, Some(kubelet)) => {
                let (addr, stop) = operand::serve_webhooks_on_loopback(&self.client).await;
                let played = kubelet.serve_played(operand::pod_labels(), operand::WEBHOOK_PORT, addr);
                let proxy = proxy::serve_service(
                    &self.client,
                    kubelet.lookup(),
                    names::KYMA_SYSTEM,
                    operand::WEBHOOK_SERVICE,
                )
                .await;
                OperandDouble {
                    _webhooks: Some(stop),
                    finalizers,
                    _played: Some(played),
                    _proxy: Some(proxy),
                }
            }
            (None, None) => {
                if let Some(task) = finalizers {
                    task.abort();
                }
                OperandDouble {
                    _webhooks: None,
                    finalizers: None,
                    _played: None,
                    _proxy: None,
                }
            }
        }
    }

    pub fn crs(&self, ns: &str) -> Api<BtpOperator> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// The embedded server's request log (None on a real cluster).
    pub fn request_log(&self) -> Option<btp_apiserver::testing::RequestLog> {
        match &self.backend {
            Backend::Embedded(server) => Some(server.request_log()),
            Backend::Cluster { .. } => None,
        }
    }

    /// Create a namespace if absent; one this test created is removed when it stops (on a real cluster).
    pub async fn ensure_namespace(&self, ns: &str) {
        let n: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
        if ensure(&Api::<Namespace>::all(self.client.clone()), &n).await {
            self.created_namespaces.lock().unwrap().push(ns.to_string());
        }
    }

    pub async fn create_cr(&self, ns: &str, name: &str) {
        if ns != names::KYMA_SYSTEM {
            self.ensure_namespace(ns).await;
        }
        self.crs(ns)
            .create(&PostParams::default(), &BtpOperator::new(name))
            .await
            .unwrap();
    }

    pub async fn create_secret(&self, data: serde_json::Value, labelled: bool) {
        let labels = if labelled {
            serde_json::json!({"app.kubernetes.io/managed-by": "kcp-kyma-environment-broker"})
        } else {
            serde_json::json!({})
        };
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "sap-btp-manager", "namespace": names::KYMA_SYSTEM, "labels": labels},
            "stringData": data
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.client.clone(), names::KYMA_SYSTEM)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// Create the credentials Secret ([`credentials`], labelled) and `kyma-system/btpoperator`.
    pub async fn create_secret_and_cr(&self) {
        self.create_secret(credentials(), true).await;
        self.create_cr(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME).await;
    }

    /// Merge `patch` into the credentials Secret `kyma-system/sap-btp-manager`.
    pub async fn patch_secret(&self, patch: serde_json::Value) {
        Api::<Secret>::namespaced(self.client.clone(), names::KYMA_SYSTEM)
            .patch(
                names::REQUIRED_SECRET_NAME,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }

    /// `kyma-system/btpoperator` as it is now.
    pub async fn cr(&self) -> BtpOperator {
        self.crs(names::KYMA_SYSTEM)
            .get(names::BTP_OPERATOR_NAME)
            .await
            .unwrap()
    }

    /// Merge `patch` into `kyma-system/btpoperator`.
    pub async fn patch_cr(&self, patch: serde_json::Value) {
        self.crs(names::KYMA_SYSTEM)
            .patch(names::BTP_OPERATOR_NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Delete `kyma-system/btpoperator` (the deletion is accepted; the manager's finalizer holds it).
    pub async fn delete_cr(&self) {
        self.crs(names::KYMA_SYSTEM)
            .delete(names::BTP_OPERATOR_NAME, &kube::api::DeleteParams::default())
            .await
            .unwrap();
    }

    /// Wait until `kyma-system/btpoperator` shows `reason` (and the state it goes with); the CR as it was seen
    /// then.
    pub async fn wait_cr(&self, reason: Reason, secs: u64) -> BtpOperator {
        self.wait_cr_at(names::KYMA_SYSTEM, names::BTP_OPERATOR_NAME, reason, secs)
            .await
    }

    /// [`Env::wait_cr`] for the BtpOperator `ns/name`.
    pub async fn wait_cr_at(&self, ns: &str, name: &str, reason: Reason, secs: u64) -> BtpOperator {
        wait_cr_in(&self.client, ns, name, reason, Duration::from_secs(secs)).await
    }

    /// Wait until `kyma-system/btpoperator` is gone.
    pub async fn wait_cr_gone(&self, secs: u64) {
        let crs = self.crs(names::KYMA_SYSTEM);
        eventually(Duration::from_secs(secs), "the BtpOperator is gone", || cr_gone(&crs)).await;
    }

    /// The embedded API server, for a test that needs its fault injection; None (saying the test is not run)
    /// on a real cluster.
    pub fn embedded(&self) -> Option<&RunningApiServer> {
        let server = self.server();
        if server.is_none() {
            skip("needs the embedded API server's fault injection");
        }
        server
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        if let Backend::Cluster { .. } = &self.backend {
            let namespaces = self.created_namespaces.lock().unwrap().clone();
            cleanup(&self.client, &namespaces).await;
        }
    }
}

/// The operand stand-in of [`Env::play_operand`]; dropping it stops it.
pub struct OperandDouble {
    _webhooks: Option<tokio::sync::oneshot::Sender<()>>,
    finalizers: Option<tokio::task::JoinHandle<()>>,
    _played: Option<kubelet::PlayedPort>,
    _proxy: Option<proxy::ServiceProxy>,
}

impl Drop for OperandDouble {
    fn drop(&mut self) {
        if let Some(task) = self.finalizers.take() {
            task.abort();
        }
    }
}

/// The manager's reconciler, wired as `run` wires it without leader election (the built-in module resources
/// and network policies; `reconcile`: whether it runs, else only its context is made).
async fn spawn_manager(
    client: &kube::Client,
    config: Config,
    reconcile: bool,
) -> (
    Arc<Context>,
    tokio::sync::watch::Sender<bool>,
    Option<tokio::task::JoinHandle<()>>,
) {
    let builder =
        ManagerBuilder::new(client.clone(), Options::in_process(config, IMAGE)).expect("the manager's options");
    let (stop, term) = tokio::sync::watch::channel(false);
    if !reconcile {
        return (builder.context(), stop, None);
    }
    let reconciler = builder.start_reconciler(term).await.expect("the reconciler starts");
    (reconciler.ctx, stop, Some(reconciler.task))
}

/// Leave a real cluster as the test found it: the CRs (finalizers removed), the required Secret and config
/// ConfigMap, what the tests add by hand, everything labelled managed-by=btp-manager, and what we created.
async fn cleanup(client: &kube::Client, namespaces: &[String]) {
    use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
    let ok = |r: Result<(), kube::Error>| match r {
        Ok(()) | Err(kube::Error::Api(_)) => {}
        Err(e) => panic!("cleanup: {e}"),
    };
    let crs: Api<BtpOperator> = Api::all(client.clone());
    for cr in crs
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let ns = cr.metadata.namespace.clone().unwrap_or_default();
        let name = cr.metadata.name.clone().unwrap_or_default();
        let api: Api<BtpOperator> = Api::namespaced(client.clone(), &ns);
        let unfinalize = serde_json::json!({"metadata": {"finalizers": null}});
        ok(api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&unfinalize))
            .await
            .map(|_| ()));
        ok(api.delete(&name, &DeleteParams::default()).await.map(|_| ()));
    }
    let mut scopes: Vec<String> = vec![names::KYMA_SYSTEM.to_string()];
    scopes.extend(namespaces.iter().cloned());
    let by_name: [(&str, &str, &str, &str); 5] = [
        ("", "v1", "Secret", "sap-btp-manager"),
        ("", "v1", "ConfigMap", "sap-btp-manager"),
        ("", "v1", "Secret", "sap-btp-operator-clusterid"),
        ("networking.k8s.io", "v1", "NetworkPolicy", "team-policy"),
        (
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "kyma-project.io--btp-operator-allow-to-webhook",
        ),
    ];
    for (group, version, kind, name) in by_name {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), names::KYMA_SYSTEM, &ar);
        ok(api.delete(name, &DeleteParams::default()).await.map(|_| ()));
    }
    let managed = ListParams::default().labels("app.kubernetes.io/managed-by=btp-manager");
    let namespaced = [
        ("", "v1", "ConfigMap"),
        ("", "v1", "Secret"),
        ("", "v1", "Service"),
        ("", "v1", "ServiceAccount"),
        ("apps", "v1", "Deployment"),
        ("rbac.authorization.k8s.io", "v1", "Role"),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
        ("networking.k8s.io", "v1", "NetworkPolicy"),
    ];
    for ns in &scopes {
        for (group, version, kind) in namespaced {
            let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
            ok(api
                .delete_collection(&DeleteParams::default(), &managed)
                .await
                .map(|_| ()));
        }
    }
    // ServiceInstances/ServiceBindings a test left: the operand's webhooks go first (no operand answers them
    // after a test), then the finalizers, then the objects.
    for (kind, name) in [
        (
            "MutatingWebhookConfiguration",
            "sap-btp-operator-mutating-webhook-configuration",
        ),
        (
            "ValidatingWebhookConfiguration",
            "sap-btp-operator-validating-webhook-configuration",
        ),
    ] {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind));
        ok(Api::<DynamicObject>::all_with(client.clone(), &ar)
            .delete(name, &DeleteParams::default())
            .await
            .map(|_| ()));
    }
    for kind in ["ServiceBinding", "ServiceInstance"] {
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &operand::services(kind));
        for obj in all
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let ns = obj.metadata.namespace.clone().unwrap_or_default();
            let name = obj.metadata.name.clone().unwrap_or_default();
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &operand::services(kind));
            let unfinalize = serde_json::json!({"metadata": {"finalizers": null}});
            ok(api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&unfinalize))
                .await
                .map(|_| ()));
            ok(api.delete(&name, &DeleteParams::default()).await.map(|_| ()));
        }
    }
    let cluster = [
        ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
        ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    ];
    for (group, version, kind) in cluster {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        ok(api
            .delete_collection(&DeleteParams::default(), &managed)
            .await
            .map(|_| ()));
    }
    // What a manager process of an earlier test registered for itself (its webhook configurations would
    // refuse every BtpOperator once nothing serves them), its certificate and its Lease; an installed
    // `deploy/` is uninstalled by `shipped::RealCluster::connect` instead.
    for (group, kind, name) in [
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
            names::webhook::VALIDATING_CONFIGURATION,
        ),
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration",
            names::webhook::MUTATING_CONFIGURATION,
        ),
    ] {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
        ok(Api::<DynamicObject>::all_with(client.clone(), &ar)
            .delete(name, &DeleteParams::default())
            .await
            .map(|_| ()));
    }
    for (group, kind, name) in [
        ("", "Secret", names::webhook::CERT_SECRET_NAME),
        ("coordination.k8s.io", "Lease", replica::LEASE),
    ] {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
        ok(
            Api::<DynamicObject>::namespaced_with(client.clone(), names::KYMA_SYSTEM, &ar)
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
        );
    }
    // `kyma-system` and the BtpOperator CRD are shared fixtures: never deleted here (on a real cluster
    // they take seconds to go, and the next test's creates would meanwhile be refused with 403
    // NamespaceTerminating). What the tests created besides them is deleted and waited for, so that
    // the next test starts on a settled cluster.
    let nss: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces.iter().filter(|ns| ns.as_str() != names::KYMA_SYSTEM) {
        ok(nss.delete(ns, &DeleteParams::default()).await.map(|_| ()));
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    eventually(
        Duration::from_secs(90),
        "namespaces and CRDs deleted by the cleanup are gone",
        || {
            let (nss, crds, managed) = (nss.clone(), crds.clone(), managed.clone());
            async move {
                for ns in namespaces.iter().filter(|ns| ns.as_str() != names::KYMA_SYSTEM) {
                    if !matches!(nss.get_opt(ns).await, Ok(None)) {
                        return false;
                    }
                }
                crds.list(&managed).await.is_ok_and(|l| l.items.is_empty())
            }
        },
    )
    .await;
}

/// Every object of the module kinds, in any namespace, carrying both labels the manager puts on what it
/// installs, as `Kind namespace/name` (sorted).
pub async fn installed_objects(client: &kube::Client) -> std::collections::BTreeSet<String> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
    use kube::ResourceExt as _;
    let selector = ListParams::default().labels(&names::module_resource_selector());
    let mut found = std::collections::BTreeSet::new();
    for (group, version, kind, _) in MANAGED_KINDS {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        for o in api.list_metadata(&selector).await.unwrap().items {
            found.insert(format!("{kind} {}/{}", o.namespace().unwrap_or_default(), o.name_any()));
        }
    }
    found
}

/// How many ServiceInstances and ServiceBindings exist, in all namespaces (0 without their CRDs).
pub async fn count_services(client: &kube::Client) -> usize {
    use kube::api::{DynamicObject, ListParams};
    let mut n = 0;
    for kind in ["ServiceInstance", "ServiceBinding"] {
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &operand::services(kind));
        n += match all.list_metadata(&ListParams::default()).await {
            Ok(l) => l.items.len(),
            Err(kube::Error::Api(s)) if s.code == 404 => 0,
            Err(e) => panic!("listing {kind}s: {e}"),
        };
    }
    n
}

pub fn credentials() -> serde_json::Value {
    serde_json::json!({
        "clientid": "dummy-client-id", "clientsecret": "CANARY-secret-value", "sm_url": "https://sm.example.com",
        "tokenurl": "https://auth.example.com", "cluster_id": "cluster-1"
    })
}

/// An environment with the credentials Secret and `kyma-system/btpoperator` in Ready.
pub async fn ready_env(config: Config) -> Env {
    let env = Env::start(config, true).await;
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    env
}

/// Force one reconcile of `kyma-system/btpoperator` and wait until it has run (the manager removes the
/// annotation when the pass is over).
pub async fn reconcile_now(env: &Env) {
    reconcile_now_in(&env.crs(names::KYMA_SYSTEM), Duration::from_secs(5)).await;
}

/// Mark the operand Deployment (not) available, as its controller would (once the manager created it). On a
/// real cluster its controller does: the operand's Pods turn (not) ready.
pub async fn set_available(env: &Env, available: bool) {
    use k8s_openapi::api::apps::v1::Deployment;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), names::KYMA_SYSTEM);
    let name = names::operand::DEPLOYMENT;
    eventually(Duration::from_secs(10), "the operand Deployment exists", || async {
        deployments.get_opt(name).await.unwrap().is_some()
    })
    .await;
    if let Some(kubelet) = &env.kubelet {
        kubelet.set_ready(available);
        return;
    }
    let status = if available { "True" } else { "False" };
    let patch = serde_json::json!({"status": {"conditions": [
        {"type": "Available", "status": status, "reason": "Test", "message": "set by the test"},
        {"type": "Progressing", "status": "True", "reason": "Test", "message": "set by the test"},
    ]}});
    deployments
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Wait until the BtpOperator CRD a test created is served (established), as on a real cluster: a CR created
/// before is refused (404).
pub async fn btp_operator_crd_served(client: &kube::Client) {
    btp_manager::objects::crd_established(client, names::CRD_NAME, Duration::from_secs(30))
        .await
        .expect("the BtpOperator CRD is established");
}

/// The kubectl to run: `$KUBECTL`, else the one on PATH (`scripts/test` installs it).
pub fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// A fresh, empty directory `btp-<name>-<pid>-<n>` in the temporary directory, for one test: `n` counts the
/// calls of this process, so tests running side by side that ask for the same name (two Kubernetes versions
/// of one scenario) never share one (they did, and one test's kubeconfig was removed under the other's kubectl).
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("btp-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// Copy the built-in operand chart (`module-resources`: `apply/` and `chart-version`) to `dir`, with an empty
/// `delete/`, for a test to change.
pub fn copy_chart(dir: &std::path::Path) {
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("module-resources");
    std::fs::create_dir_all(dir.join("apply")).expect("the chart's apply/");
    std::fs::create_dir_all(dir.join("delete")).expect("the chart's delete/");
    for entry in std::fs::read_dir(source.join("apply")).expect("module-resources/apply") {
        let path = entry.expect("a file").path();
        std::fs::copy(&path, dir.join("apply").join(path.file_name().expect("a name"))).expect("copy");
    }
    std::fs::copy(source.join("chart-version"), dir.join("chart-version")).expect("copy chart-version");
}

/// The arguments of `btp-manager run <flags>`, parsed by the manager's own CLI (so a test runs the flags a user
/// would type, with the defaults `run` has).
pub fn run_args<I, S>(flags: I) -> btp_manager::cli::RunArgs
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser as _;
    let argv: Vec<std::ffi::OsString> = ["btp-manager".into(), "run".into()]
        .into_iter()
        .chain(flags.into_iter().map(Into::into))
        .collect();
    let cli = btp_manager::cli::Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("`{argv:?}` does not parse: {e}"));
    match cli.command {
        btp_manager::cli::Command::Run(args) => *args,
        _ => unreachable!("parsed `run`"),
    }
}
