//! An embedded, in-memory Kubernetes API server for development and tests.
//!
//! It speaks enough of the real REST + watch protocol (discovery, CRUD, CRDs, server-side
//! apply, admission webhooks) for kube-rs clients and `kubectl` to work against it unchanged.
//! See `README.md` for what is and is not supported.

mod access;
pub mod admission;
pub mod authz;
mod context;
pub mod error;
pub mod events;
pub mod faults;
mod handlers;
pub mod patch;
pub mod proto;
pub mod registry;
mod render;
pub mod schema;
pub mod selectors;
mod server;
pub mod ssa;
pub mod store;
pub mod tls;
pub mod util;
mod watch;
pub mod workloads;

pub use authz::User;
pub use error::{ApiError, Error};
pub use faults::{FaultInjector, FaultRule, LatencyRule, RequestLog, RequestRecord};
pub use server::{mark_deployment_available, spawn_deployment_controller};
pub use workloads::spawn_workload_controller;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Server configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bearer token clients must present; a random one is generated if empty.
    pub token: String,
    /// Webhook service resolution: (namespace, name, port) -> address.
    pub service_map: HashMap<(String, String, u16), SocketAddr>,
    /// Number of watch events kept for resuming watches (older versions get 410 Gone).
    pub history: usize,
    /// Interval between BOOKMARK events on watches that asked for them.
    pub bookmark_interval: Duration,
    /// Address to listen on (port 0 = ephemeral).
    pub bind: SocketAddr,
    /// How long a deleted namespace stays `Terminating` before its content is deleted (a real cluster's
    /// namespace controller takes seconds; creates in it are refused meanwhile).
    pub namespace_termination_delay: Duration,
    /// The Kubernetes version the server presents (`/version`) and whose version-gated behaviour it
    /// follows (see [`KubeVersion`]).
    pub version: KubeVersion,
}

/// The Kubernetes version the embedded server behaves as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KubeVersion {
    /// Kubernetes 1.24: webhook configurations have no `matchConditions` (server-side apply of one that has
    /// them fails with 500 "field not declared in schema", POST silently drops them, none are evaluated).
    V1_24,
    /// The newest version modelled (1.36).
    #[default]
    Latest,
}

impl KubeVersion {
    /// Parses `1.24`, `v1.24`, `1.36`, `latest`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().trim_start_matches('v') {
            "1.24" => Some(KubeVersion::V1_24),
            "1.36" | "latest" => Some(KubeVersion::Latest),
            _ => None,
        }
    }
    /// (major, minor, gitVersion)
    pub fn numbers(self) -> (&'static str, &'static str, &'static str) {
        match self {
            KubeVersion::V1_24 => ("1", "24", "v1.24.0-btp-apiserver"),
            KubeVersion::Latest => ("1", "36", "v1.36.2-btp-apiserver"),
        }
    }
    /// Whether webhook configurations know `matchConditions` (1.28 beta on by default; GA 1.30).
    pub fn has_match_conditions(self) -> bool {
        self != KubeVersion::V1_24
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            token: String::new(),
            service_map: HashMap::new(),
            history: 10_000,
            bookmark_interval: Duration::from_secs(5),
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            namespace_termination_delay: Duration::from_millis(500),
            version: KubeVersion::default(),
        }
    }
}

/// Entry point: `ApiServer::start(Config::default()).await`.
pub struct ApiServer;

impl ApiServer {
    /// Generates certificates, binds the listener and starts serving.
    ///
    /// A boxed future, so that the server's code (its handlers and HTTP stack, spawned from this future) is
    /// compiled once, in this crate: an `async fn` would be compiled again into every test, benchmark and
    /// binary that awaits it. Awaiting it is the same.
    pub fn start(config: Config) -> StartFuture {
        Box::pin(server::start(config))
    }
}

/// What [`ApiServer::start`] returns.
pub type StartFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<RunningApiServer, Error>> + Send>>;

/// A running server. Dropping the handle stops it (without waiting);
/// [`RunningApiServer::shutdown`] stops it and waits for the listener task.
pub struct RunningApiServer {
    pub(crate) state: Arc<context::State>,
    pub(crate) addr: SocketAddr,
    pub(crate) ca_pem: String,
    pub(crate) ca_der: Vec<u8>,
    pub(crate) shutdown: tokio::sync::watch::Sender<bool>,
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for RunningApiServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl RunningApiServer {
    /// `https://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// PEM of the CA that signed the serving certificate.
    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }
    pub fn token(&self) -> String {
        self.state.token.clone()
    }
    /// A kubeconfig (cluster with certificate-authority-data, token user, context).
    pub fn kubeconfig_yaml(&self) -> String {
        self.kubeconfig_with_token(&self.state.token)
    }
    /// A kubeconfig whose token authenticates as `user` (see [`RunningApiServer::client_as`]): what another
    /// process uses to send requests that the request log records under that name.
    pub fn kubeconfig_yaml_as(&self, user: &str) -> String {
        self.kubeconfig_with_token(&self.register_user(user))
    }
    fn kubeconfig_with_token(&self, token: &str) -> String {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: btp-local\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: btp-local\n  user:\n    token: {token}\ncontexts:\n- name: btp-local\n  context:\n    cluster: btp-local\n    user: btp-local\n    namespace: default\ncurrent-context: btp-local\npreferences: {{}}\n",
            url = self.url(),
        )
    }
    /// A new token that authenticates as `user`.
    fn register_user(&self, user: &str) -> String {
        let token = crate::util::new_token();
        if let Ok(mut users) = self.state.users.write() {
            users.insert(token.clone(), user.to_string());
        }
        token
    }
    /// A `kube::Config` ready for `kube::Client::try_from`.
    pub fn kube_config(&self) -> kube::Config {
        let uri: http::Uri = self
            .url()
            .parse()
            .unwrap_or_else(|_| http::Uri::from_static("https://127.0.0.1"));
        let mut c = kube::Config::new(uri);
        c.root_cert = Some(vec![self.ca_der.clone()]);
        c.auth_info.token = Some(self.state.token.clone().into());
        c.default_namespace = "default".into();
        c
    }
    /// A client that authenticates as `user` (e.g. `system:serviceaccount:kyma-system:btp-manager`),
    /// with a token of its own. Its requests are authorized by RBAC (the Roles and bindings in the
    /// server's store; see [`authz`]) and recorded in the request log under that user.
    pub fn client_as(&self, user: &str) -> kube::Client {
        match kube::Client::try_from(self.kube_config_as(user)) {
            Ok(c) => c,
            Err(e) => panic!("building a kube client for the embedded apiserver failed: {e}"),
        }
    }
    /// The client configuration of [`RunningApiServer::client_as`] (for a client built another way).
    pub fn kube_config_as(&self, user: &str) -> kube::Config {
        let token = self.register_user(user);
        let mut config = self.kube_config();
        config.auth_info.token = Some(token.into());
        config
    }
    /// A connected client.
    pub async fn client(&self) -> kube::Client {
        match kube::Client::try_from(self.kube_config()) {
            Ok(c) => c,
            Err(e) => panic!("building a kube client for the embedded apiserver failed: {e}"),
        }
    }
    pub fn faults(&self) -> FaultInjector {
        self.state.faults.clone()
    }
    pub fn request_log(&self) -> RequestLog {
        self.state.log.clone()
    }
    /// Number of watch streams currently open (for leak assertions).
    pub fn active_watches(&self) -> usize {
        self.state.active_watches.load(std::sync::atomic::Ordering::SeqCst)
    }
    /// Registers (or changes) where a webhook service resolves to.
    pub fn set_service_address(&self, ns: &str, name: &str, port: u16, addr: SocketAddr) {
        if let Ok(mut m) = self.state.service_map.write() {
            m.insert((ns.to_string(), name.to_string(), port), addr);
        }
    }
    /// Forgets the watch history, as an etcd compaction at the current revision would: watches and
    /// resourceVersion-exact reads from before now get 410 Gone.
    pub fn compact_history(&self) {
        self.state.store.compact();
    }
    /// Stops accepting connections and ends open watches.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

pub(crate) type ServiceMap = RwLock<HashMap<(String, String, u16), SocketAddr>>;

use axum::http;
