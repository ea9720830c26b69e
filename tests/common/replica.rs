//! Manager processes for the tests that run several replicas side by side (`tests/shutdown.rs`,
//! `tests/rollout.rs`): the built binary with `run --leader-elect`, `HOSTNAME` set to the replica's name (so
//! its Lease identity and the `User-Agent` of its requests carry it), its own loopback addresses, and its log in a
//! file.

use btp_api::{names, BtpOperator};
use btp_apiserver::{ApiServer, Config as ServerConfig, RunningApiServer};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The manager's Lease.
pub const LEASE: &str = "ec023d38.kyma-project.io";

/// One manager process; killed when dropped.
pub struct Replica {
    pub name: String,
    child: Child,
    pub metrics: SocketAddr,
    pub health: SocketAddr,
    pub webhook: SocketAddr,
    log: PathBuf,
}

impl Replica {
    /// Start `btp-manager run --leader-elect` with `args` (the lease duration, the resources paths and whatever
    /// else the test sets), against `kubeconfig`, logging into `dir`.
    pub fn start(name: &str, kubeconfig: &Path, dir: &Path, args: &[String]) -> Self {
        // Not on 127.0.0.1: a port of it free a moment ago may be an outgoing connection's by the time the
        // process binds it. The webhook server on the IP every replica of the process shares, as the
        // certificate they share names it.
        let (metrics, health, webhook) = (super::own_addr(), super::own_addr(), super::replica_webhook_addr());
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("the replica's log file");
        let child = Command::new(env!("CARGO_BIN_EXE_btp-manager"))
            .args(["run", "--leader-elect"])
            // Tests reach nothing beyond loopback: the Secrets' token endpoints do not exist.
            .arg("--credentials-check-interval=0")
            .arg(format!("--metrics-bind-address={metrics}"))
            .arg(format!("--health-probe-bind-address={health}"))
            .arg(format!("--webhook-bind-address={webhook}"))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("HOSTNAME", name)
            .env(
                "SAP_BTP_SERVICE_OPERATOR",
                "example.test/sap-btp-service-operator:v0.11.10",
            )
            .env("RUST_LOG", "info")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("the log file"))
            .stderr(out)
            .spawn()
            .expect("starting btp-manager");
        Self {
            name: name.into(),
            child,
            metrics,
            health,
            webhook,
            log,
        }
    }

    /// `kill <signal> <pid>`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} {}", self.child.id());
    }

    /// What it logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for exit; the status and how long it took.
    pub async fn exited(&mut self, within: Duration) -> (std::process::ExitStatus, Duration) {
        let start = Instant::now();
        let child = &mut self.child;
        match super::try_eventually(within, || std::future::ready(child.try_wait().unwrap())).await {
            Ok(status) => (status, start.elapsed()),
            Err(()) => panic!("{} did not exit within {within:?}:\n{}", self.name, self.logs()),
        }
    }

    /// Whether a request with this `User-Agent` was sent by this replica.
    pub fn sent(&self, user_agent: &str) -> bool {
        user_agent.contains(&format!("({}_", self.name))
    }

    /// `GET /readyz`: whether it answered 200.
    pub async fn ready(&self) -> bool {
        ready(self.health).await
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // A stopped process dies of SIGKILL too; continue it anyway so nothing is left stopped.
            let _ = Command::new("kill")
                .args(["-CONT", &self.child.id().to_string()])
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `GET /readyz` on a health address: whether it answered 200.
pub async fn ready(addr: SocketAddr) -> bool {
    http_get(addr, "/readyz").await.is_some_and(|r| is_ok(&r))
}

/// Whether an HTTP response is a 200.
pub fn is_ok(response: &str) -> bool {
    response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200")
}

/// `GET path` at a loopback address: the whole response, None when none came within 500 ms.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        String::from_utf8(buf).ok()
    };
    tokio::time::timeout(Duration::from_millis(500), attempt)
        .await
        .ok()
        .flatten()
}

/// The replica (pod name) whose manager holds the Lease in `namespace` (the identity is
/// `<HOSTNAME>_<random suffix>`; "" when none).
pub async fn lease_holder(client: &kube::Client, namespace: &str) -> String {
    let identity = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(LEASE)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    identity
        .rsplit_once('_')
        .map_or(identity.as_str(), |(pod, _)| pod)
        .to_string()
}

/// An embedded API server for replicas: `kyma-system`, the BtpOperator CRD, the credentials Secret and a
/// Deployment controller stand-in; its admin kubeconfig is `<dir>/kubeconfig`, `dir` a new temporary
/// directory named after `name`.
pub async fn cluster(name: &str) -> (RunningApiServer, kube::Client, PathBuf) {
    let server = ApiServer::start(ServerConfig::default()).await.expect("API server");
    let client = server.client().await;
    let dir = super::temp_dir(name);
    std::fs::write(dir.join("kubeconfig"), server.kubeconfig_yaml()).expect("the kubeconfig");
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": names::KYMA_SYSTEM}})).expect("a Namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("kyma-system");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &BtpOperator::crd().expect("the CRD"))
        .await
        .expect("the BtpOperator CRD");
    super::btp_operator_crd_served(&client).await;
    let mut secret = serde_json::json!({
        "metadata": {"name": names::REQUIRED_SECRET_NAME, "namespace": names::KYMA_SYSTEM,
                     "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_KEB}},
    });
    secret["stringData"] = super::credentials();
    Api::<Secret>::namespaced(client.clone(), names::KYMA_SYSTEM)
        .create(
            &PostParams::default(),
            &serde_json::from_value(secret).expect("a Secret"),
        )
        .await
        .expect("the credentials Secret");
    btp_apiserver::testing::spawn_deployment_controller(client.clone());
    (server, client, dir)
}

/// Where replicas run: the embedded server of [`cluster`], or the real cluster of `BTP_E2E_KUBECONFIG` prepared
/// the same way (`kyma-system`, the BtpOperator CRD, the credentials Secret, and what runs Pods: the kubelet
/// stand-in), the replicas authenticating as the shipped ServiceAccount (its token, `deploy/rbac.yaml`).
pub struct ReplicaCluster {
    pub client: kube::Client,
    /// The kubeconfig the replicas use.
    pub kubeconfig: PathBuf,
    /// The test's own directory (logs, charts).
    pub dir: PathBuf,
    /// Who sent what: the embedded request log, or the real server's audit log.
    pub requests: super::requests::Requests,
    backend: ReplicaBackend,
}

enum ReplicaBackend {
    Embedded(RunningApiServer),
    Real {
        cluster: Box<super::shipped::RealCluster>,
        _kubelet: super::kubelet::Kubelet,
    },
}

/// The cluster for a replicas test named `name`; None (saying why, as a skip) on a real cluster without its
/// audit log (`BTP_E2E_AUDIT_LOG`), where who sent what cannot be told.
pub async fn any_cluster(name: &str) -> Option<ReplicaCluster> {
    if super::real_cluster().is_none() {
        let (server, client, dir) = cluster(name).await;
        return Some(ReplicaCluster {
            client,
            kubeconfig: dir.join("kubeconfig"),
            dir,
            requests: super::requests::Requests::Embedded(server.request_log()),
            backend: ReplicaBackend::Embedded(server),
        });
    }
    let Some(audit) = super::requests::audit_log() else {
        super::skip("counts each replica's requests: needs the API server's audit log (BTP_E2E_AUDIT_LOG)");
        return None;
    };
    let cluster = super::shipped::RealCluster::connect().await?;
    let client = cluster.client.clone();
    let dir = super::temp_dir(name);
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": names::KYMA_SYSTEM}})).expect("a Namespace");
    super::ensure(&Api::<Namespace>::all(client.clone()), &ns).await;
    super::ensure(
        &Api::<CustomResourceDefinition>::all(client.clone()),
        &BtpOperator::crd().expect("the CRD"),
    )
    .await;
    super::btp_operator_crd_served(&client).await;
    let token = super::install::shipped_identity_token(&client).await;
    std::fs::write(
        dir.join("kubeconfig"),
        super::install::token_kubeconfig(&cluster.config, &token),
    )
    .expect("the kubeconfig");
    let mut secret = serde_json::json!({
        "metadata": {"name": names::REQUIRED_SECRET_NAME, "namespace": names::KYMA_SYSTEM,
                     "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_KEB}},
    });
    secret["stringData"] = super::credentials();
    Api::<Secret>::namespaced(client.clone(), names::KYMA_SYSTEM)
        .create(
            &PostParams::default(),
            &serde_json::from_value(secret).expect("a Secret"),
        )
        .await
        .expect("the credentials Secret");
    let kubelet = super::kubelet::Kubelet::start(
        client.clone(),
        &cluster.config,
        super::kubelet::KubeletOptions::default(),
    )
    .await;
    Some(ReplicaCluster {
        client,
        kubeconfig: dir.join("kubeconfig"),
        dir,
        requests: super::requests::Requests::audit(audit),
        backend: ReplicaBackend::Real {
            cluster: Box::new(cluster),
            _kubelet: kubelet,
        },
    })
}

impl ReplicaCluster {
    /// The embedded server (None on a real cluster).
    pub fn embedded(&self) -> Option<&RunningApiServer> {
        match &self.backend {
            ReplicaBackend::Embedded(server) => Some(server),
            ReplicaBackend::Real { .. } => None,
        }
    }

    /// After the replicas are gone: on a real cluster, what they left (the CR, the operand, their webhook
    /// registrations, certificate and Lease) is removed, as the harness does.
    pub async fn finish(self) {
        if let ReplicaBackend::Real { cluster, _kubelet } = self.backend {
            super::cleanup(&cluster.client, &[]).await;
            drop(_kubelet);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
