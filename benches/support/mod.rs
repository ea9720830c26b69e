//! What the benchmarks that run the manager as its own process share: the process (`btp-manager run`
//! against a kubeconfig), its peak memory and CPU time, its metrics, and a deadline-bounded wait.
#![allow(dead_code)]

#[path = "../../tests/common/addr.rs"]
mod addr;
#[path = "../../tests/common/eventually.rs"]
mod eventually;
pub mod metrics;
#[path = "../../tests/common/install.rs"]
mod shipped;
pub mod summary;

/// The tests' deadline-bounded wait, and whether `kyma-system/btpoperator` is Ready.
pub use eventually::{cr_ready as is_ready, eventually};

use btp_api::{names, BtpOperator};
use btp_manager::reconciler::resources;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The manager process; killed when dropped.
pub struct Manager {
    child: Child,
    /// Where its `/metrics` are served.
    pub metrics: std::net::SocketAddr,
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Manager {
    /// `btp-manager run` against `kubeconfig`, on loopback addresses of its own ([`addr::own_addr`]: no
    /// outgoing connection takes their ports between the moment they were free and the manager's bind), with
    /// `extra` flags.
    pub fn start(kubeconfig: &std::path::Path, extra: &[&str]) -> Self {
        let metrics = addr::own_addr();
        let child = Command::new(env!("CARGO_BIN_EXE_btp-manager"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("KUBECONFIG", kubeconfig)
            .env(
                "SAP_BTP_SERVICE_OPERATOR",
                "example.test/sap-btp-service-operator:v0.11.10",
            )
            .env("RUST_LOG", "warn")
            .args(["run", "--webhook-bind-address"])
            .arg(addr::own_addr().to_string())
            .arg("--metrics-bind-address")
            .arg(metrics.to_string())
            .arg("--health-probe-bind-address")
            .arg(addr::own_addr().to_string())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start btp-manager run");
        Manager { child, metrics }
    }

    /// CPU time (user + system) used so far, in seconds (clock ticks of 1/100 s, Linux's USER_HZ).
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name (which is in parentheses and may hold spaces).
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
        // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the command name.
        (ticks(11) + ticks(12)) / 100.0
    }

    /// Peak resident memory so far, in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    }

    /// Its `/metrics` text ([`metrics::text`]).
    pub async fn metrics_text(&self) -> String {
        metrics::text(self.metrics).await
    }
}

/// The value of the first metrics line that starts with `prefix` (NaN when absent).
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// An embedded API server with a kubeconfig file for the manager process, the given namespaces, the
/// BtpOperator CRD and the operand's CRDs (ServiceInstance, ServiceBinding).
pub struct Cluster {
    pub server: btp_apiserver::RunningApiServer,
    pub client: kube::Client,
    pub kubeconfig: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Cluster {
    pub async fn start(name: &str, namespaces: impl IntoIterator<Item = String>) -> Self {
        let server = btp_apiserver::ApiServer::start(btp_apiserver::Config::default())
            .await
            .expect("API server");
        let client = server.client().await;
        let dir = std::env::temp_dir().join(format!("btp-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, server.kubeconfig_yaml()).expect("kubeconfig");
        install(&client, namespaces).await;
        Cluster {
            server,
            client,
            kubeconfig,
            dir,
        }
    }

    /// See [`provision`].
    pub async fn provision(&self, labels: std::collections::BTreeMap<String, String>) -> Api<BtpOperator> {
        provision(&self.client, labels).await
    }

    pub async fn shutdown(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        self.server.shutdown().await;
    }
}

/// The credentials Secret (dummy values) and `kyma-system/btpoperator` with `labels`, created once the
/// manager's webhooks answer; returns when the CR is Ready.
pub async fn provision(client: &kube::Client, labels: std::collections::BTreeMap<String, String>) -> Api<BtpOperator> {
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": names::REQUIRED_SECRET_NAME, "namespace": names::KYMA_SYSTEM,
                     "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_KEB}},
        "stringData": {"clientid": "id", "clientsecret": "secret", "sm_url": "https://sm.example.com",
                       "tokenurl": "https://auth.example.com", "cluster_id": "cluster-1"}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), names::KYMA_SYSTEM)
        .create(&PostParams::default(), &secret)
        .await
        .expect("credentials Secret");
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let mut cr = BtpOperator::new(names::BTP_OPERATOR_NAME);
    cr.metadata.labels = Some(labels);
    // The manager's webhooks come up with it: retry the create until they answer.
    eventually(Duration::from_secs(30), "the CR is created", || async {
        crs.create(&PostParams::default(), &cr).await.is_ok()
    })
    .await;
    eventually(Duration::from_secs(60), "the CR is Ready", || is_ready(&crs)).await;
    crs
}

/// Wait until the BtpOperator CRD the bench created is served (established): a CR created before is refused.
pub async fn btp_operator_crd_served(client: &kube::Client) {
    btp_manager::objects::crd_established(client, names::CRD_NAME, std::time::Duration::from_secs(30))
        .await
        .expect("the BtpOperator CRD is established");
}

/// Create `namespaces`, the BtpOperator CRD and the operand's CRDs (ServiceInstance, ServiceBinding).
pub async fn install(client: &kube::Client, namespaces: impl IntoIterator<Item = String>) {
    for ns in namespaces {
        let obj: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).expect("ns");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &obj)
            .await
            .expect("namespace");
    }
    // The manager's ServiceAccount and RBAC as `deploy/` ships them (the embedded server enforces RBAC for
    // the manager's user).
    shipped::manager_identity(client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &BtpOperator::crd().expect("crd"))
        .await
        .expect("BtpOperator CRD");
    btp_operator_crd_served(client).await;
    // The operand's CRDs as the manager loads its manifests (as untyped objects: a typed
    // CustomResourceDefinition parsed here would compile its whole schema's deserializer into every benchmark
    // again).
    let module =
        resources::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("module-resources")).expect("module resources");
    let untyped: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<CustomResourceDefinition>(&()));
    for doc in module.apply.iter().filter(|o| o["kind"] == "CustomResourceDefinition") {
        let crd: DynamicObject = serde_json::from_value(doc.clone()).expect("operand CRD object");
        untyped.create(&PostParams::default(), &crd).await.expect("operand CRD");
        btp_manager::objects::crd_established(
            client,
            &kube::ResourceExt::name_any(&crd),
            std::time::Duration::from_secs(30),
        )
        .await
        .expect("the operand CRD is established");
    }
}

pub mod dataset;

/// Force one reconcile of `kyma-system/btpoperator` (the `operation: reconcile` annotation) and wait until
/// the manager has consumed the annotation (it removes it when the pass is over).
pub async fn force_reconcile(crs: &Api<BtpOperator>) {
    use kube::api::{Patch, PatchParams};
    let patch = serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: "reconcile"}}});
    crs.patch(names::BTP_OPERATOR_NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate the CR");
    eventually(Duration::from_secs(10), "the forced reconcile ran", || async {
        crs.get(names::BTP_OPERATOR_NAME).await.is_ok_and(|c| {
            !c.metadata
                .annotations
                .unwrap_or_default()
                .contains_key(names::OPERATION_ANNOTATION)
        })
    })
    .await;
}

/// The manager's reconcile-time histogram in its `/metrics` text: (sum of seconds, count).
pub fn reconcile_time(metrics: &str) -> (f64, f64) {
    let prefix = "controller_runtime_reconcile_time_seconds_";
    (
        metric(metrics, &format!("{prefix}sum{{")),
        metric(metrics, &format!("{prefix}count{{")),
    )
}

/// Reconciles the manager counted as errors, from its `/metrics` text.
pub fn reconcile_errors(metrics: &str) -> f64 {
    metric(
        metrics,
        "controller_runtime_reconcile_total{controller=\"btpoperator\",result=\"error\"}",
    )
}

/// The embedded API server as its own process (the `serve` example of btp-apiserver), with the
/// Deployment controller it plays, a kubeconfig for an admin and one for the manager's user, and its
/// request log as JSON lines (the audit log of a real API server). Killed when dropped.
pub struct ServerProcess {
    child: Child,
    /// The admin's kubeconfig.
    pub kubeconfig: std::path::PathBuf,
    /// A kubeconfig that authenticates as the manager's user (its requests are logged under that name).
    pub manager_kubeconfig: std::path::PathBuf,
    audit_log: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The user the manager's kubeconfig of [`ServerProcess`] authenticates as.
pub const MANAGER_USER: &str = "system:serviceaccount:kyma-system:btp-manager-controller-manager";

/// The `serve` example binary next to the binaries of this build, built first if it is not there yet
/// (`cargo bench` and `cargo test --test X` do not build the examples of other packages).
fn serve_example() -> std::path::PathBuf {
    let manager = std::path::Path::new(env!("CARGO_BIN_EXE_btp-manager"));
    let dir = manager.parent().expect("the binary has a directory");
    let serve = dir.join("examples").join("serve");
    if !serve.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "--locked", "-p", "btp-apiserver", "--example", "serve"]);
        if dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo to build the serve example");
        assert!(status.success(), "building the serve example failed");
    }
    serve
}

impl ServerProcess {
    pub async fn start(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("btp-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let kubeconfig = dir.join("admin.kubeconfig");
        let manager_kubeconfig = dir.join("manager.kubeconfig");
        let audit_log = dir.join("audit.jsonl");
        let child = Command::new(serve_example())
            .arg(&kubeconfig)
            .arg("--as")
            .arg(format!("{MANAGER_USER}={}", manager_kubeconfig.display()))
            .arg("--audit-log")
            .arg(&audit_log)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the serve example");
        let server = ServerProcess {
            child,
            kubeconfig,
            manager_kubeconfig,
            audit_log,
            dir,
        };
        // The audit log is opened after both kubeconfigs are written, and the server listens by then.
        eventually(Duration::from_secs(30), "the API server process is up", || async {
            server.audit_log.exists()
        })
        .await;
        server
    }

    /// An admin client.
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("the admin kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a usable kubeconfig");
        kube::Client::try_from(config).expect("a client")
    }

    /// Every request the server has logged so far (the log is written every 50 ms).
    pub fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}
