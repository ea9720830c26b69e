//! The handle of a running server: its address, CA, kubeconfigs and clients, and (with the `testing`
//! feature) its fault injection and request log.

use crate::context::State;
use axum::http;
use std::net::SocketAddr;
use std::sync::Arc;

/// A running server. Dropping the handle stops it (without waiting);
/// [`RunningApiServer::shutdown`] stops it and waits for the listener task.
pub struct RunningApiServer {
    pub(crate) state: Arc<State>,
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
    /// server's store) and recorded in the request log under that user.
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
    /// Fault injection: failed requests, simulated latency, cut watches (test support).
    #[cfg(feature = "testing")]
    pub fn faults(&self) -> crate::faults::FaultInjector {
        self.state.faults.clone()
    }
    /// Every request the server answered (test support).
    #[cfg(feature = "testing")]
    pub fn request_log(&self) -> crate::faults::RequestLog {
        self.state.log.clone()
    }
    /// Number of watch streams currently open (for leak assertions).
    pub fn active_watches(&self) -> usize {
        self.state.active_watches.load(std::sync::atomic::Ordering::SeqCst)
    }
    /// Registers (or changes) where a webhook service resolves to.
    pub fn set_service_address(&self, ns: &str, name: &str, port: u16, addr: SocketAddr) {
        self.state.webhooks.set_service_address(ns, name, port, addr);
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
