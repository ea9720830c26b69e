//! Shared setup: a real HTTPS webhook server on loopback with a freshly generated CA.
#![allow(dead_code)]

pub mod hostile;

use btp_certs::{generate_ca, generate_leaf, CaSpec, CertPair, KeyAlgorithm, LeafSpec};
use btp_webhooks::client::{tls_config, Connection, Protocol};
use btp_webhooks::handlers::{FixedServiceCounter, WebhookState};
use btp_webhooks::rules::{RulesConfig, ServiceCounts};
use btp_webhooks::server::{Limits, Stats};
use btp_webhooks::tls::{server_config, SwappableCert};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub fn ca() -> CertPair {
    let spec = CaSpec {
        common_name: Some("test-ca".into()),
        validity: Duration::from_secs(3600),
        key: KeyAlgorithm::EcdsaP256,
    };
    generate_ca(&spec, SystemTime::now()).expect("CA")
}

pub fn leaf(ca: &CertPair) -> CertPair {
    let spec = LeafSpec {
        common_name: None,
        dns_names: vec!["localhost".into()],
        ip_addresses: vec!["127.0.0.1".parse().unwrap()],
        validity: Duration::from_secs(3600),
        key: KeyAlgorithm::EcdsaP256,
    };
    generate_leaf(ca, &spec, SystemTime::now()).expect("leaf")
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub cert: Arc<SwappableCert>,
    pub ca: CertPair,
    pub stats: Arc<Stats>,
    drain: Option<tokio::sync::oneshot::Sender<()>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(WebhookState::new(
            RulesConfig::default(),
            Arc::new(FixedServiceCounter(Ok(ServiceCounts {
                instances: 2,
                bindings: 1,
            }))),
        ))
        .await
    }

    pub fn default_state() -> WebhookState {
        WebhookState::new(
            RulesConfig::default(),
            Arc::new(FixedServiceCounter(Ok(ServiceCounts {
                instances: 2,
                bindings: 1,
            }))),
        )
    }

    pub async fn start_with(state: WebhookState) -> Self {
        Self::start_with_limits(state, Limits::default()).await
    }

    pub async fn start_with_limits(state: WebhookState, limits: Limits) -> Self {
        let ca = ca();
        let leaf = leaf(&ca);
        let cert = SwappableCert::from_pem(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).expect("cert");
        let tls = server_config(cert.clone()).expect("tls config");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (drain, drained) = tokio::sync::oneshot::channel::<()>();
        let app = btp_webhooks::router(state);
        let stats = Arc::new(Stats::default());
        let task = tokio::spawn(btp_webhooks::server::serve_draining(
            listener,
            tls,
            app,
            (limits, stats.clone()),
            async move {
                // Dropped without a drain (a plain shutdown): no drain.
                if drained.await.is_err() {
                    std::future::pending::<()>().await;
                }
            },
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            addr,
            cert,
            ca,
            stats,
            drain: Some(drain),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Start the drain (the manager's SIGTERM): the server goes on serving until [`TestServer::shutdown`].
    pub fn drain(&mut self) {
        if let Some(drain) = self.drain.take() {
            let _ = drain.send(());
        }
    }

    pub async fn connect(&self, protocol: Protocol) -> Connection {
        self.connect_trusting(self.ca.cert_pem.as_bytes(), protocol)
            .await
            .expect("connect")
    }

    pub async fn connect_trusting(
        &self,
        ca_pem: &[u8],
        protocol: Protocol,
    ) -> Result<Connection, btp_webhooks::client::ClientError> {
        Connection::open(self.addr, "127.0.0.1", tls_config(ca_pem, protocol)?, protocol).await
    }

    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task").expect("server result");
        }
    }
}

/// Wait until `check` returns true, polling; panic with `what` after `deadline`.
pub async fn wait_until<F, Fut>(deadline: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if check().await {
            return;
        }
        assert!(tokio::time::Instant::now() < end, "timed out waiting for: {what}");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The AdmissionReviews recorded from a real kube-apiserver (test data inside the repository).
pub fn fixtures_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/admission")
}

/// An AdmissionReview body for a request about a BtpOperator.
pub fn btp_review(operation: &str, namespace: &str, name: &str, uid: &str) -> serde_json::Value {
    let object = serde_json::json!({
        "apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "BtpOperator",
        "metadata": {"name": name, "namespace": namespace}
    });
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "operator.kyma-project.io", "version": "v1alpha1", "kind": "BtpOperator"},
            "resource": {"group": "operator.kyma-project.io", "version": "v1alpha1", "resource": "btpoperators"},
            "name": name, "namespace": namespace, "operation": operation,
            "userInfo": {"username": "admin"},
            "object": if operation == "DELETE" { serde_json::Value::Null } else { object.clone() },
            "oldObject": if operation == "DELETE" { object } else { serde_json::Value::Null },
            "dryRun": false
        }
    })
}
