//! As shipped: `kubectl apply -k deploy/` installs into the embedded API server, and the manager started as
//! a Pod of `deploy/deployment.yaml` would run provisions there.
//!
//! The "Pod": the release of this build's `btp-manager` binary, started with the container's `command`,
//! `args` and `env` of `deploy/deployment.yaml`, in a mount namespace where the root filesystem is read-only
//! and `/var/run/secrets/kubernetes.io/serviceaccount/` holds a token of the shipped ServiceAccount, the
//! API server's CA and the namespace (kube's in-cluster configuration, found through
//! `KUBERNETES_SERVICE_HOST`/`_PORT`), running as the Pod's user and group (10001/30001). Only the listen
//! addresses differ (tests run in parallel): loopback ports instead of :9443/:8080/:8081. The API server
//! reaches the webhooks through the manager's Service (`btp-manager-webhook-service`), and enforces RBAC for
//! the ServiceAccount. It needs root (a mount namespace, a user switch); elsewhere the test says it did not
//! run.

mod common;

use btp_api::{names, BtpOperator, Reason};
use btp_apiserver::{ApiServer, Config as ServerConfig, RunningApiServer};
use common::install::{deploy_objects, manager_user};
use common::*;
use kube::api::{Api, PostParams};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `kubectl apply -k deploy/` with `kubeconfig`; panics with kubectl's output when it fails.
fn apply_deploy(kubeconfig: &Path) {
    apply_kustomization(kubeconfig, "deploy");
}

/// `kubectl apply -k <dir>` with `kubeconfig`; panics with kubectl's output when it fails.
fn apply_kustomization(kubeconfig: &Path, dir: &str) {
    let out = Command::new(kubectl())
        .args(["apply", "-k"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl apply -k {dir}/ failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The token of a kubeconfig that the embedded server wrote for one user.
fn token_of(kubeconfig_yaml: &str) -> String {
    kubeconfig_yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("the kubeconfig holds a token")
        .to_string()
}

/// The manager's container in `deploy/deployment.yaml`.
fn container() -> serde_json::Value {
    let deployment = deploy_objects("deployment.yaml")
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("deploy/deployment.yaml holds the Deployment");
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(spec["securityContext"]["runAsUser"], 10001);
    assert_eq!(spec["securityContext"]["runAsGroup"], 30001);
    let container = spec["containers"][0].clone();
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    container
}

/// The manager run as a Pod of `deploy/deployment.yaml`; killed when dropped.
struct Pod {
    child: Child,
    dir: PathBuf,
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Pod {
    fn start(server: &RunningApiServer, webhook: std::net::SocketAddr) -> Pod {
        let dir = temp_dir("install-pod");
        let sa = dir.join("serviceaccount");
        std::fs::create_dir_all(&sa).unwrap();
        std::fs::write(sa.join("token"), token_of(&server.kubeconfig_yaml_as(&manager_user()))).unwrap();
        std::fs::write(sa.join("ca.crt"), server.ca_pem()).unwrap();
        std::fs::write(sa.join("namespace"), names::KYMA_SYSTEM).unwrap();
        let container = container();
        let mut command: Vec<String> = Vec::new();
        for part in ["command", "args"] {
            for a in container[part].as_array().expect("command and args") {
                command.push(a.as_str().expect("a string").to_string());
            }
        }
        assert_eq!(command[0], "/btp-manager", "the image's binary");
        command[0] = env!("CARGO_BIN_EXE_btp-manager").to_string();
        command.extend([
            // A Pod's ports are its own: a loopback IP of their own ([`own_addr`]).
            format!("--webhook-bind-address={webhook}"),
            format!("--metrics-bind-address={}", own_addr()),
            format!("--health-probe-bind-address={}", own_addr()),
            // Tests reach nothing beyond loopback: the Secret's token endpoint does not exist.
            "--credentials-check-interval=0".to_string(),
        ]);
        // The mount namespace: a read-only root, the ServiceAccount volume on a fresh /run; then the user.
        let script = format!(
            "set -e; mount --bind / /; mount -o remount,bind,ro /; mount -t tmpfs tmpfs /run; \
             mkdir -p /run/secrets/kubernetes.io/serviceaccount; \
             cp {sa}/token {sa}/ca.crt {sa}/namespace /run/secrets/kubernetes.io/serviceaccount/; \
             chmod 0444 /run/secrets/kubernetes.io/serviceaccount/*; \
             exec setpriv --reuid 10001 --regid 30001 --clear-groups \"$@\"",
            sa = sa.display()
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script, "pod"])
            .args(&command)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", server.addr().port().to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        for e in container["env"].as_array().expect("env") {
            let name = e["name"].as_str().expect("env name");
            let value = match (e["value"].as_str(), e["valueFrom"]["fieldRef"]["fieldPath"].as_str()) {
                (Some(v), _) => v.to_string(),
                (None, Some("metadata.namespace")) => names::KYMA_SYSTEM.to_string(),
                other => panic!("env {name}: {other:?} is not played here"),
            };
            cmd.env(name, value);
        }
        let child = cmd.spawn().expect("start the manager's Pod");
        Pod { child, dir }
    }
}

/// A cluster installed as documented, its manager running as its Pod; the kubelet and kube-controller-manager
/// played for the operand. Stops both when dropped.
struct Installed {
    server: RunningApiServer,
    kubeconfig: PathBuf,
    pod: Option<Pod>,
    workloads: tokio::task::JoinHandle<()>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        self.workloads.abort();
        if let Some(dir) = self.kubeconfig.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Install as the README says (the namespace as the documented prerequisite), start the manager as its Pod
/// would run, provision. `None` where the Pod cannot start (not root).
async fn install_and_provision(server: RunningApiServer) -> Option<Installed> {
    let dir = temp_dir("install-kubeconfig");
    let kubeconfig = dir.join("admin.kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).unwrap();
    apply_kustomization(&kubeconfig, "deploy/namespace");
    apply_deploy(&kubeconfig);
    // Applying again changes nothing and fails nowhere (a GitOps re-sync).
    apply_deploy(&kubeconfig);
    // The PodDisruptionBudget that keeps a serving replica through drains is installed with the rest.
    let pdbs: Api<kube::api::DynamicObject> = Api::namespaced_with(
        server.client().await,
        names::KYMA_SYSTEM,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("policy", "v1", "PodDisruptionBudget"),
            "poddisruptionbudgets",
        ),
    );
    let pdb = pdbs
        .get("btp-manager-controller-manager")
        .await
        .expect("the PodDisruptionBudget");
    assert_eq!(pdb.data["spec"]["minAvailable"], 1);
    if !is_root() {
        eprintln!("install: NOT RUN: the Pod-like start needs root (a mount namespace and a user switch)");
        return None;
    }
    let client = server.client().await;
    let webhook = own_addr();
    server.set_service_address(names::KYMA_SYSTEM, names::webhook::SERVICE_NAME, 443, webhook);
    let pod = Pod::start(&server, webhook);
    // kube-controller-manager and the kubelet, played: the operand's Deployment gets a running Pod.
    let workloads = btp_apiserver::spawn_workload_controller(client.clone());

    // As docs/install.md says: wait until admission works through the Service, with the documented command
    // (its `rollout status` before it has nothing to wait for here: the Pod is a process started above); then
    // the Secret and the BtpOperator are created once each, without a retry.
    let out = run_btp_manager(&kubeconfig, &documented_admission_wait());
    assert!(
        out.status.success(),
        "the documented wait for admission failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "quiet unless -v: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // What it promised: the API server reaches the manager's validating webhook, which says what to fix.
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), "default");
    let refusal = match crs.create(&PostParams::default(), &BtpOperator::new("misnamed")).await {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("a misnamed BtpOperator right after the wait: {other:?}"),
    };
    assert!(
        refusal.starts_with("admission webhook \"vbtpoperator.operator.kyma-project.io\" denied the request")
            && refusal.contains("btpoperator"),
        "refused by the admission webhook with what to fix: {refusal}"
    );

    let mut secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": names::REQUIRED_SECRET_NAME, "namespace": names::KYMA_SYSTEM,
                     "labels": {"app.kubernetes.io/managed-by": "kcp-kyma-environment-broker"}},
    });
    secret["stringData"] = credentials();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), names::KYMA_SYSTEM)
        .create(&PostParams::default(), &serde_json::from_value(secret).unwrap())
        .await
        .expect("the credentials Secret");
    let cr: BtpOperator = serde_json::from_value(serde_json::json!({
        "apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "BtpOperator",
        "metadata": {"name": names::BTP_OPERATOR_NAME, "namespace": names::KYMA_SYSTEM}, "spec": {}
    }))
    .unwrap();
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    crs.create(&PostParams::default(), &cr).await.expect("the BtpOperator");
    wait_cr_in(
        &client,
        names::KYMA_SYSTEM,
        names::BTP_OPERATOR_NAME,
        Reason::ReconcileSucceeded,
        Duration::from_secs(30),
    )
    .await;
    let created = crs.get(names::BTP_OPERATOR_NAME).await.unwrap();
    assert!(
        created
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == names::FINALIZER),
        "the mutating webhook added the finalizer"
    );
    Some(Installed {
        server,
        kubeconfig,
        pod: Some(pod),
        workloads,
    })
}

// Multi-threaded: kubectl runs as a blocking child process while the in-process API server answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_deploy_installs_and_the_manager_provisions_as_its_pod() {
    if let Some(cluster) = common::shipped::RealCluster::connect().await {
        return as_shipped_on_a_real_cluster(cluster, false).await;
    }
    let server = ApiServer::start(ServerConfig::default()).await.expect("API server");
    install_and_provision(server).await;
}

/// On a real cluster (`BTP_E2E_KUBECONFIG`): docs/install.md's commands as written (install, `rollout status`, the
/// wait for admission), the manager running as the Pods of `deploy/deployment.yaml` (two replicas, in-cluster
/// configuration from the shipped ServiceAccount's token, the shipped arguments, user 10001, a read-only root)
/// and reached through its Service; the Secret and the BtpOperator created once each, without a retry; then the
/// documented uninstall leaves nothing of the manager's.
/// With `another_module`, a ConfigMap of another module in `kyma-system` is there before the uninstall and
/// must survive it, as must the namespace.
async fn as_shipped_on_a_real_cluster(cluster: common::shipped::RealCluster, another_module: bool) {
    use common::shipped::{run_ok, Shipped};
    let mut shipped = Shipped::install(&cluster).await;
    let client = cluster.client.clone();
    // Applying again changes nothing and fails nowhere (a GitOps re-sync).
    run_ok(
        &cluster.kubeconfig,
        &["kubectl", "apply", "-k", "deploy/"].map(String::from),
    )
    .await;
    // Both replicas run as the Deployment's Pods, and one of them leads.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let selector = "app.kubernetes.io/component=btp-manager.kyma-project.io";
    let running: Vec<String> = pods
        .list(&kube::api::ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .map(|p| p.metadata.name.unwrap_or_default())
        .collect();
    assert_eq!(running.len(), 2, "two replicas run: {running:?}");
    let holder = eventually(Duration::from_secs(30), "a replica holds the Lease", || async {
        let holder = common::replica::lease_holder(&client, names::KYMA_SYSTEM).await;
        (!holder.is_empty()).then_some(holder)
    })
    .await;
    assert!(
        running.contains(&holder),
        "the Lease is held by a Pod: {holder} of {running:?}"
    );

    // What the wait promised: the API server reaches a replica through the Service, which says what to fix.
    let misnamed: Api<BtpOperator> = Api::namespaced(client.clone(), "default");
    let refusal = match misnamed
        .create(&PostParams::default(), &BtpOperator::new("misnamed"))
        .await
    {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!(
            "a misnamed BtpOperator right after the wait: {other:?}\n{}",
            shipped.logs()
        ),
    };
    assert!(
        refusal.starts_with("admission webhook \"vbtpoperator.operator.kyma-project.io\" denied the request")
            && refusal.contains("btpoperator"),
        "refused by the admission webhook with what to fix: {refusal}"
    );
    shipped.create_secret_and_cr(&client).await;
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    // The operand's Pods run too (the kubelet stand-in plays them): the CR turns Ready.
    let ready = try_wait_cr(&client, Reason::ReconcileSucceeded, Duration::from_secs(60)).await;
    assert!(ready, "the CR turned Ready\n{}", shipped.logs());
    let created = crs.get(names::BTP_OPERATOR_NAME).await.unwrap();
    assert!(
        created
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == names::FINALIZER),
        "the mutating webhook added the finalizer"
    );

    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let foreign = foreign_configmap();
    if another_module {
        configmaps
            .create(&PostParams::default(), &foreign)
            .await
            .expect("the other module's ConfigMap");
    }
    shipped.uninstall(&cluster).await;
    if another_module {
        let namespace = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .get(names::KYMA_SYSTEM)
            .await
            .expect("kyma-system is still there");
        assert!(
            namespace.metadata.deletion_timestamp.is_none(),
            "kyma-system is not being deleted"
        );
        let kept = configmaps
            .get("another-module-config")
            .await
            .expect("the other module's ConfigMap stays");
        assert_eq!(kept.data, foreign.data);
        configmaps
            .delete("another-module-config", &Default::default())
            .await
            .unwrap();
    }
    assert_nothing_of_ours_registered(&cluster.kubeconfig);
    assert!(
        installed_objects(&client).await.is_empty(),
        "the operand is gone with the CR"
    );
    assert!(
        pods.list(&kube::api::ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
            .is_empty(),
        "the manager's Pods are gone"
    );
}

/// The minor version of the API server.
async fn server_minor(client: &kube::Client) -> u32 {
    let version = client.apiserver_version().await.expect("the server's version");
    version
        .minor
        .trim_end_matches('+')
        .parse()
        .expect("a numeric minor version")
}

/// Another module's ConfigMap in `kyma-system`: the uninstall must leave it.
fn foreign_configmap() -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "another-module-config", "namespace": names::KYMA_SYSTEM,
                     "labels": {"kyma-project.io/module": "another-module"}},
        "data": {"k": "v"}
    }))
    .unwrap()
}

/// Where a test installs: an embedded API server of its own, or the real cluster of `BTP_E2E_KUBECONFIG` (whose
/// `deploy/` the documented uninstall removes when the test is done).
enum Target {
    Embedded { server: RunningApiServer, dir: PathBuf },
    Real(Box<common::shipped::RealCluster>),
}

impl Target {
    async fn new(name: &str, version: btp_apiserver::KubeVersion) -> Self {
        if let Some(cluster) = common::shipped::RealCluster::connect().await {
            return Self::Real(Box::new(cluster));
        }
        let server = ApiServer::start(ServerConfig {
            version,
            ..ServerConfig::default()
        })
        .await
        .expect("API server");
        let dir = temp_dir(name);
        std::fs::write(dir.join("admin.kubeconfig"), server.kubeconfig_yaml()).unwrap();
        Self::Embedded { server, dir }
    }

    fn kubeconfig(&self) -> PathBuf {
        match self {
            Self::Embedded { dir, .. } => dir.join("admin.kubeconfig"),
            Self::Real(cluster) => cluster.kubeconfig.clone(),
        }
    }

    async fn client(&self) -> kube::Client {
        match self {
            Self::Embedded { server, .. } => server.client().await,
            Self::Real(cluster) => cluster.client.clone(),
        }
    }

    /// Whether the API server knows webhook `matchConditions` (from 1.28 on).
    async fn has_match_conditions(&self) -> bool {
        server_minor(&self.client().await).await >= 28
    }

    /// `kubectl apply -k deploy/namespace` and `-k deploy/`; on a real cluster also until the CRD is served.
    async fn apply_deploy(&self) {
        let kubeconfig = self.kubeconfig();
        apply_kustomization(&kubeconfig, "deploy/namespace");
        apply_deploy(&kubeconfig);
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(self.client().await);
        eventually(
            Duration::from_secs(30),
            "the BtpOperator CRD is established",
            || async {
                crds.get_opt(&format!("{}.{}", names::PLURAL, names::GROUP))
                    .await
                    .ok()
                    .flatten()
                    .and_then(|c| c.status)
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"))
            },
        )
        .await;
    }

    /// The real cluster: `deploy/` uninstalled as documented (and `extra` deleted first); the embedded: its
    /// directory removed.
    async fn finish(self, extra: &[(&str, &str, &str, Option<&str>)]) {
        match self {
            Self::Embedded { dir, .. } => {
                let _ = std::fs::remove_dir_all(dir);
            }
            Self::Real(cluster) => {
                for (group, kind, name, namespace) in extra {
                    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
                    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
                    let api: Api<DynamicObject> = match namespace {
                        Some(ns) => Api::namespaced_with(cluster.client.clone(), ns, &resource),
                        None => Api::all_with(cluster.client.clone(), &resource),
                    };
                    let _ = api.delete(name, &Default::default()).await;
                }
                common::shipped::uninstall(&cluster).await;
            }
        }
    }
}

/// Whether `kyma-system/btpoperator` shows `reason` within `within`.
async fn try_wait_cr(client: &kube::Client, reason: Reason, within: Duration) -> bool {
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    try_eventually(within, || async {
        crs.get_opt(names::BTP_OPERATOR_NAME)
            .await
            .ok()
            .flatten()
            .and_then(|cr| cr.status)
            .and_then(|s| s.conditions.first().map(|c| c.reason.clone()))
            .is_some_and(|r| r == reason.to_string())
    })
    .await
    .is_ok()
}

/// The oldest supported version: the same install and the same Pod provision there (the manager registers its
/// webhooks without `matchConditions`, which 1.24 does not know).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_1_24_kubectl_apply_k_deploy_installs_and_the_manager_provisions() {
    if let Some(cluster) = common::shipped::RealCluster::connect().await {
        let minor = server_minor(&cluster.client).await;
        if minor != 24 {
            return skip(&format!("needs Kubernetes 1.24; the real server is 1.{minor}"));
        }
        return as_shipped_on_a_real_cluster(cluster, false).await;
    }
    let server = ApiServer::start(ServerConfig {
        version: btp_apiserver::KubeVersion::V1_24,
        ..ServerConfig::default()
    })
    .await
    .expect("API server");
    install_and_provision(server).await;
}

/// What a supported version rejects is kept out of `deploy/`: every object of it applies server-side (the API
/// server checks each field against its schema) on 1.24 as on the newest version; and the check has teeth:
/// the webhook configurations with `matchConditions` (as `deploy/` once shipped them) are refused by 1.24 as
/// a real 1.24 refused them (the corpus case `vwc-match-conditions`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_object_of_deploy_applies_server_side_on_every_supported_version() {
    let versions: &[btp_apiserver::KubeVersion] = if real_cluster().is_some() {
        // A real cluster is the version it is (the stage runs 1.24 and 1.36).
        &[btp_apiserver::KubeVersion::Latest]
    } else {
        &[btp_apiserver::KubeVersion::V1_24, btp_apiserver::KubeVersion::Latest]
    };
    for &version in versions {
        let target = Target::new(&format!("install-ssa-{version:?}"), version).await;
        let kubeconfig = target.kubeconfig();
        apply_kustomization(&kubeconfig, "deploy/namespace");
        let out = Command::new(kubectl())
            .args(["apply", "--server-side", "-k"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy"))
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .expect("run kubectl");
        assert!(
            out.status.success(),
            "{version:?}: kubectl apply --server-side -k deploy/:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The same configurations as the manager registers them where the server has matchConditions.
        let with_conditions = btp_webhooks::manifests::WebhookManifests::in_cluster(names::KYMA_SYSTEM)
            .to_yaml()
            .unwrap();
        let file = temp_dir("install-ssa-conditions").join("webhooks-with-match-conditions.yaml");
        std::fs::write(&file, with_conditions).unwrap();
        // Past kubectl's own validation (against the server's OpenAPI, which refuses the field on 1.24 before
        // sending), to what the API server does with it.
        let out = Command::new(kubectl())
            .args(["apply", "--server-side", "--force-conflicts", "--validate=false", "-f"])
            .arg(&file)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .expect("run kubectl");
        let _ = std::fs::remove_dir_all(file.parent().unwrap());
        let stderr = String::from_utf8_lossy(&out.stderr);
        if target.has_match_conditions().await {
            assert!(out.status.success(), "{stderr}");
        } else {
            assert!(!out.status.success(), "1.24 refuses matchConditions");
            assert!(
                stderr.contains("matchConditions: field not declared in schema"),
                "{stderr}"
            );
        }
        target.finish(&[]).await;
    }
}

/// A CRD that takes any content, as the Prometheus Operator's do for what this test needs.
fn open_crd(group: &str, kind: &str, plural: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
}

/// The optional components install on top of the base: monitoring (with the Prometheus Operator's CRDs
/// present) and the Kyma dashboard extension.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitoring_and_dashboard_components_apply() {
    let target = Target::new("install-components", btp_apiserver::KubeVersion::Latest).await;
    let kubeconfig = target.kubeconfig();
    target.apply_deploy().await;
    let client = target.client().await;
    let crds = [
        open_crd("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
        open_crd("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
    ];
    common::install::apply(&client, &crds).await;
    let kinds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    eventually(
        Duration::from_secs(30),
        "the Prometheus Operator's CRDs are served",
        || async {
            for name in [
                "servicemonitors.monitoring.coreos.com",
                "prometheusrules.monitoring.coreos.com",
            ] {
                let established = kinds
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|c| c.status)
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
                if !established {
                    return false;
                }
            }
            true
        },
    )
    .await;
    apply_kustomization(&kubeconfig, "deploy/monitoring");
    apply_kustomization(&kubeconfig, "deploy/dashboard");
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    for (group, kind, name) in [
        ("monitoring.coreos.com", "ServiceMonitor", "btp-manager"),
        ("monitoring.coreos.com", "PrometheusRule", "btp-manager"),
        ("", "ConfigMap", "btp-manager-busola-extension"),
    ] {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), names::KYMA_SYSTEM, &resource);
        assert!(api.get_opt(name).await.unwrap().is_some(), "{kind} {name} installed");
    }
    // The ServiceMonitor selects the manager's metrics Service, on a port it has.
    let monitor = deploy_objects("monitoring/servicemonitor.yaml").remove(0);
    let service = deploy_objects("services.yaml")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "btp-manager-metrics-service")
        .expect("the metrics Service");
    for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the metrics Service"
        );
    }
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().unwrap();
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == port),
        "the metrics Service has port {port}"
    );
    target
        .finish(&[
            (
                "monitoring.coreos.com",
                "ServiceMonitor",
                "btp-manager",
                Some(names::KYMA_SYSTEM),
            ),
            (
                "monitoring.coreos.com",
                "PrometheusRule",
                "btp-manager",
                Some(names::KYMA_SYSTEM),
            ),
            (
                "",
                "ConfigMap",
                "btp-manager-busola-extension",
                Some(names::KYMA_SYSTEM),
            ),
            (
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "servicemonitors.monitoring.coreos.com",
                None,
            ),
            (
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "prometheusrules.monitoring.coreos.com",
                None,
            ),
        ])
        .await;
}

use common::shipped::documented_blocks;

/// The commands of the first `sh` block of the section `heading` in `docs/<file>`.
fn documented_commands(file: &str, heading: &str) -> Vec<Vec<String>> {
    documented_blocks(file, heading)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("docs/{file} {heading}: an sh block"))
}

/// Run one documented command with `kubeconfig` from the repository root; panics with its output on failure.
fn run_documented(kubeconfig: &Path, command: &[String]) {
    assert_eq!(
        command[0], "kubectl",
        "the documented steps are kubectl commands: {command:?}"
    );
    let out = Command::new(kubectl())
        .args(&command[1..])
        // A test's bound on a wait the docs leave open (a deletion that never finishes fails here, not hangs).
        .args(if command[1] == "delete" {
            vec!["--timeout=60s"]
        } else {
            vec![]
        })
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "{}:\n{}\n{}",
        command.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The documented wait for admission: the `btp-manager` command of docs/install.md's "## 2. Install", which the
/// README's install block shows too; its arguments.
fn documented_admission_wait() -> Vec<String> {
    let command = documented_blocks("install.md", "## 2. Install")
        .into_iter()
        .flatten()
        .find(|c| c[0] == "btp-manager")
        .expect("docs/install.md's install steps wait for admission with btp-manager");
    assert_eq!(command[1..3], ["check", "admission"], "{command:?}");
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let install = readme
        .split_once("\n## Installing on a cluster\n")
        .expect("the README's install section")
        .1;
    assert!(
        install.contains(&format!(
            "rollout status deployment/btp-manager-controller-manager\n{}\n",
            command.join(" ")
        )),
        "the README's install block waits for admission as docs/install.md does, after rollout status: {command:?}"
    );
    command[1..].to_vec()
}

/// This build's `btp-manager` with `args`, using `kubeconfig` (as `KUBECONFIG`, the current kubeconfig).
fn run_btp_manager(kubeconfig: &Path, args: &[String]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_btp-manager"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run btp-manager")
}

/// `deploy/` installed and no manager serving (the API server cannot call the webhooks): the documented wait,
/// given 2 s, gives up when they have passed, with a non-zero exit code and the last answer; with `-v` it
/// printed a line per change of the answer (here the answer stays the same).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_admission_gives_up_with_the_last_answer_when_no_manager_serves() {
    // On a real cluster nothing runs the manager's Pods here (no kubelet stand-in), and nothing listens on the
    // Service's ClusterIP.
    let target = Target::new("install-no-admission", btp_apiserver::KubeVersion::Latest).await;
    let kubeconfig = target.kubeconfig();
    target.apply_deploy().await;
    // A real API server answers the first write of a custom resource type it has just begun to serve only after
    // about 2 s (seen on 1.36, for a dry run too): one write first, so that the 2 s below see answers.
    let crs: Api<BtpOperator> = Api::namespaced(target.client().await, "default");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let _ = crs.create(&dry_run, &BtpOperator::new("warm-up")).await;
    let mut args: Vec<String> = documented_admission_wait()
        .into_iter()
        .filter(|a| !a.starts_with("--wait"))
        .collect();
    args.extend(["--wait=2s".to_string(), "-v".to_string()]);
    let started = std::time::Instant::now();
    let run = tokio::task::spawn_blocking(move || run_btp_manager(&kubeconfig, &args));
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("check admission --wait=2s ends on its own")
        .expect("the command ran");
    let waited = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "no manager, no admission:\n{stdout}{stderr}");
    assert!(
        waited >= Duration::from_secs(2),
        "it tried for the whole wait ({waited:?})"
    );
    let error = stderr
        .lines()
        .find(|l| l.starts_with("btp-manager: "))
        .unwrap_or_else(|| panic!("the error: {stderr}"));
    assert!(
        error.starts_with("btp-manager: admission did not work within 2s (")
            && error.contains("the last answer: the API server cannot call the webhooks: ")
            && error.contains("failed calling webhook \"mbtpoperator.operator.kyma-project.io\""),
        "{error}"
    );
    println!("{stdout}{error}");
    assert_eq!(stderr.lines().count(), 1, "only the error on stderr: {stderr}");
    // -v: a line per change; the answer never changed, so one line, the last answer.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let (_, answer) = lines[0]
        .trim_start()
        .split_once("s ")
        .expect("elapsed, then the answer");
    assert!(
        error.ends_with(answer),
        "the line and the error name the same answer:\n{answer}\n{error}"
    );
    target.finish(&[]).await;
}

/// What docs/install.md says for a registry: the `images:` entry of `deploy/kustomization.yaml` renders the
/// manager's Deployment with the registry's name and this version's tag (`kubectl kustomize`, offline).
#[test]
fn the_documented_registry_image_renders_into_the_deployment() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/install.md")).unwrap();
    let images = doc
        .split("```yaml\n")
        .filter_map(|b| b.split("\n```").next())
        .find(|b| b.starts_with("images:"))
        .expect("docs/install.md shows the images: entry for a registry");
    let dir = temp_dir("install-registry-image");
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    let kustomization = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&kustomization).unwrap();
    std::fs::write(&kustomization, format!("{text}{images}\n")).unwrap();
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("run kubectl kustomize");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rendered: Vec<serde_json::Value> = serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).unwrap();
    let deployment = rendered
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        format!("registry.example.com/team/btp-manager:{}", env!("CARGO_PKG_VERSION")),
        "the documented registry name with this version"
    );
    assert_eq!(container["imagePullPolicy"], "IfNotPresent");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The documented uninstall on a provisioned cluster: the manager deprovisions, stops, and every object of
/// the manager is gone, while the namespace `kyma-system` and another module's ConfigMap in it stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_uninstall_deletes_only_the_managers_objects() {
    if let Some(cluster) = common::shipped::RealCluster::connect().await {
        return as_shipped_on_a_real_cluster(cluster, true).await;
    }
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let server = ApiServer::start(ServerConfig::default()).await.expect("API server");
    let Some(mut installed) = install_and_provision(server).await else {
        return;
    };
    let client = installed.server.client().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let foreign = foreign_configmap();
    configmaps
        .create(&PostParams::default(), &foreign)
        .await
        .expect("the foreign ConfigMap");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    assert!(
        secrets
            .get_opt(names::webhook::CERT_SECRET_NAME)
            .await
            .unwrap()
            .is_some(),
        "the manager made its certificate Secret"
    );

    let commands = documented_commands("install.md", "## Uninstalling");
    assert!(commands.iter().any(|c| c.iter().any(|a| a == "-k")), "{commands:?}");
    for command in &commands {
        run_documented(&installed.kubeconfig, command);
        if command[1] == "scale" {
            // The kubelet's part: a Pod of a Deployment scaled to zero ends.
            drop(installed.pod.take());
        }
    }
    assert!(installed.pod.is_none(), "the documented steps stop the manager");

    let namespace = Api::<Namespace>::all(client.clone())
        .get_opt(names::KYMA_SYSTEM)
        .await
        .unwrap()
        .expect("kyma-system is still there");
    assert!(
        namespace.metadata.deletion_timestamp.is_none(),
        "kyma-system is not being deleted"
    );
    assert_eq!(
        configmaps
            .get("another-module-config")
            .await
            .expect("the foreign ConfigMap stays")
            .data,
        foreign.data
    );
    // Nothing of the manager's is left: its own objects, its registrations, the operand.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    for name in ["btp-manager-controller-manager", names::operand::DEPLOYMENT] {
        assert!(
            deployments.get_opt(name).await.unwrap().is_none(),
            "Deployment {name} left"
        );
    }
    assert!(secrets
        .get_opt(names::webhook::CERT_SECRET_NAME)
        .await
        .unwrap()
        .is_none());
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    assert!(vwcs
        .get_opt(names::webhook::VALIDATING_CONFIGURATION)
        .await
        .unwrap()
        .is_none());
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(crds
        .get_opt(&format!("{}.{}", names::PLURAL, names::GROUP))
        .await
        .unwrap()
        .is_none());
    let left: Vec<String> = common::installed_objects(&client).await.into_iter().collect();
    assert!(left.is_empty(), "objects the manager installed are left: {left:?}");
}

/// `kubectl apply -f <file>` (relative to the repository) with `kubeconfig`.
fn apply_file(kubeconfig: &Path, file: &str) {
    run_documented(kubeconfig, &["kubectl", "apply", "-f", file].map(str::to_string));
}

/// Whether `kind/name` (namespaced in kyma-system unless cluster-scoped) exists, asked through kubectl.
/// After a rollback (the documented steps or `uninstall --keep-operand`): none of the manager's own
/// registrations is left, in `kyma-system`, cluster-wide or in `default`.
fn assert_nothing_of_ours_registered(kubeconfig: &Path) {
    for (kind, name, namespaced) in [
        (
            "validatingwebhookconfiguration",
            names::webhook::VALIDATING_CONFIGURATION,
            false,
        ),
        (
            "mutatingwebhookconfiguration",
            names::webhook::MUTATING_CONFIGURATION,
            false,
        ),
        ("service", names::webhook::SERVICE_NAME, true),
        ("secret", names::webhook::CERT_SECRET_NAME, true),
        ("networkpolicy", "btp-manager-allow-webhook", true),
        ("poddisruptionbudget", "btp-manager-controller-manager", true),
    ] {
        assert!(
            !exists(kubeconfig, kind, name, namespaced),
            "{kind} {name} is left registered"
        );
    }
    for (kind, name) in [
        ("rolebinding", "btp-manager-api-server-endpoints-rolebinding"),
        ("role", "btp-manager-api-server-endpoints-role"),
    ] {
        assert!(
            !exists_in(kubeconfig, kind, name, Some("default")),
            "{kind} default/{name} is left"
        );
    }
}

fn exists(kubeconfig: &Path, kind: &str, name: &str, namespaced: bool) -> bool {
    exists_in(kubeconfig, kind, name, namespaced.then_some(names::KYMA_SYSTEM))
}

/// Whether `kind` `name` exists in `namespace` (None: cluster-scoped).
fn exists_in(kubeconfig: &Path, kind: &str, name: &str, namespace: Option<&str>) -> bool {
    let mut command = Command::new(kubectl());
    command.args(["get", kind, name, "--ignore-not-found", "-o", "name"]);
    if let Some(namespace) = namespace {
        command.args(["-n", namespace]);
    }
    let out = command.env("KUBECONFIG", kubeconfig).output().expect("run kubectl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    !out.stdout.is_empty()
}

/// docs/upgrading.md#how-to-switch: `deploy/` applied over the Go install replaces its same-named objects, and
/// the documented deletion of the Go-only objects removes those and nothing of `deploy/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_from_the_go_install_keeps_every_object_of_deploy() {
    let target = Target::new("install-switch", btp_apiserver::KubeVersion::Latest).await;
    let kubeconfig = target.kubeconfig();
    apply_kustomization(&kubeconfig, "deploy/namespace");
    apply_file(&kubeconfig, "tests/fixtures/go-install.yaml");
    apply_deploy(&kubeconfig);
    // The guide's install (its first block) is what `apply_deploy` did; then the deletes (its second).
    let blocks = documented_blocks("upgrading.md", "## How to switch");
    assert_eq!(blocks.len(), 2, "install and wait, then delete: {blocks:?}");
    let commands = &blocks[1];
    assert!(commands.len() >= 4, "{commands:?}");
    for command in commands {
        assert_eq!(command[1], "delete", "the switch only deletes: {command:?}");
        run_documented(&kubeconfig, command);
    }
    // Every object of deploy/ is still there.
    let kustomization = deploy_objects("kustomization.yaml").remove(0);
    for file in kustomization["resources"].as_array().unwrap() {
        for object in deploy_objects(file.as_str().unwrap()) {
            let kind = object["kind"].as_str().unwrap();
            let name = object["metadata"]["name"].as_str().unwrap();
            // deploy/ also has a Role in `default` (the API server's EndpointSlices).
            let namespace = object["metadata"]["namespace"].as_str();
            assert!(
                exists_in(&kubeconfig, kind, name, namespace),
                "{kind} {name} of deploy/ was deleted"
            );
        }
    }
    // And none of the Go-only objects.
    let deployed: std::collections::BTreeSet<(String, String)> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| deploy_objects(f.as_str().unwrap()))
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/go-install.yaml")).unwrap();
    let mut go_only = 0;
    for object in btp_manager::shipped::objects(&text).unwrap() {
        let kind = object["kind"].as_str().unwrap().to_string();
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        if deployed.contains(&(kind.clone(), name.clone())) {
            continue;
        }
        go_only += 1;
        let namespaced = object["metadata"]["namespace"].is_string();
        assert!(
            !exists(&kubeconfig, &kind, &name, namespaced),
            "{kind} {name} of the Go install is left"
        );
    }
    assert_eq!(go_only, 10, "the Go-only objects the guide names");
    target.finish(&[]).await;
}

/// docs/upgrading.md#rolling-back-to-the-go-btp-manager on a cluster this manager provisioned (running as its
/// Pod): after the documented steps (RSA certificates first, then stop and unregister) a BtpOperator create is
/// accepted with no manager running, the operand runs as before with certificates the Go manager can renew,
/// the CR and the CRD are there, and nothing of this manager's is registered. Then the Go install again: the
/// Go manager leads with its own RBAC and nothing of ours writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rollback_leaves_the_operand_running_and_nothing_of_ours_registered() {
    if real_cluster().is_some() {
        skip("runs on an embedded API server it starts (the rollback on a real cluster: migration::the_switch_completes_while_the_go_manager_renews_its_lease)");
        return;
    }
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let server = ApiServer::start(ServerConfig::default()).await.expect("API server");
    let Some(mut installed) = install_and_provision(server).await else {
        return;
    };
    let client = installed.server.client().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let operand_generation = || async {
        deployments
            .get(names::operand::DEPLOYMENT)
            .await
            .unwrap()
            .metadata
            .generation
    };
    let generation = operand_generation().await;
    let ca_key = |s: Secret| {
        s.data
            .unwrap_or_default()
            .get("ca.key")
            .map(|b| b.0.clone())
            .unwrap_or_default()
    };
    let ecdsa_ca = ca_key(secrets.get(names::operand::CA_SECRET).await.unwrap());
    assert!(
        ecdsa_ca.starts_with(b"-----BEGIN PRIVATE KEY-----"),
        "ECDSA (PKCS#8) by default"
    );
    // A runtime ConfigMap exists (the guide patches it, or creates it).
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let runtime: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-manager", "namespace": names::KYMA_SYSTEM}, "data": {}
    }))
    .unwrap();
    configmaps.create(&PostParams::default(), &runtime).await.unwrap();

    let blocks = documented_blocks("upgrading.md", "## Rolling back to the Go BTP Manager");
    assert_eq!(blocks.len(), 2, "RSA first, then stop and unregister: {blocks:?}");
    for command in &blocks[0] {
        run_documented(&installed.kubeconfig, command);
    }
    // The manager issues an RSA pair the Go manager can renew from (PKCS#1), without touching the Deployment.
    eventually(Duration::from_secs(60), "a new RSA CA stored as PKCS#1", || async {
        secrets
            .get_opt(names::operand::CA_SECRET)
            .await
            .unwrap()
            .is_some_and(|s| ca_key(s).starts_with(b"-----BEGIN RSA PRIVATE KEY-----"))
    })
    .await;
    assert_eq!(
        operand_generation().await,
        generation,
        "the operand Deployment is not changed"
    );

    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), "default");
    let other: BtpOperator = serde_json::from_value(serde_json::json!({
        "apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "BtpOperator",
        "metadata": {"name": "another", "namespace": "default"}, "spec": {}
    }))
    .unwrap();
    for command in &blocks[1] {
        run_documented(&installed.kubeconfig, command);
        if command[1] == "scale" {
            // The kubelet's part: a Pod of a Deployment scaled to zero ends.
            drop(installed.pod.take());
            // What the rest is for: with the manager gone, its validating webhook (failurePolicy Fail) refuses
            // every BtpOperator create.
            let refused = crs.create(&PostParams::default(), &other).await;
            assert!(
                refused.is_err(),
                "a stopped manager's webhook refuses creates: {refused:?}"
            );
        }
    }
    assert!(installed.pod.is_none(), "the documented steps stop the manager");

    // BtpOperator creates are accepted without the manager (nothing refuses them).
    crs.create(&PostParams::default(), &other)
        .await
        .expect("a BtpOperator create is accepted after the rollback");
    // Nothing of ours registered; the objects the Go install shares by name stay for it to replace.
    let kubeconfig = &installed.kubeconfig;
    assert_nothing_of_ours_registered(kubeconfig);
    for (kind, name, namespaced) in [
        ("deployment", "btp-manager-controller-manager", true),
        ("clusterrole", "btp-manager-manager-role", false),
        (
            "customresourcedefinition",
            "btpoperators.operator.kyma-project.io",
            false,
        ),
    ] {
        assert!(
            exists(kubeconfig, kind, name, namespaced),
            "{kind} {name} stays for the Go install"
        );
    }
    // The operand runs on, with its certificates and webhook configurations; the CR keeps its finalizer.
    assert_eq!(operand_generation().await, generation);
    for (kind, name, namespaced) in [
        ("secret", names::operand::CA_SECRET, true),
        ("secret", names::operand::WEBHOOK_SECRET, true),
        (
            "validatingwebhookconfiguration",
            names::operand::VALIDATING_WEBHOOK_CONFIGURATION,
            false,
        ),
        (
            "mutatingwebhookconfiguration",
            names::operand::MUTATING_WEBHOOK_CONFIGURATION,
            false,
        ),
    ] {
        assert!(
            exists(kubeconfig, kind, name, namespaced),
            "the operand's {kind} {name}"
        );
    }
    let cr = Api::<BtpOperator>::namespaced(client.clone(), names::KYMA_SYSTEM)
        .get(names::BTP_OPERATOR_NAME)
        .await
        .expect("the CR stays");
    assert!(cr
        .metadata
        .finalizers
        .unwrap_or_default()
        .iter()
        .any(|f| f == names::FINALIZER));
    assert!(cr.metadata.deletion_timestamp.is_none());

    // Finally the Go manager, installed as it was (the Go install's objects replace the shared ones in place),
    // its Pod played as client-go runs its leader election, with the ServiceAccount's RBAC as the Go install
    // leaves it: it takes the Lease (ours expires: the manager's process was killed, not stopped) and keeps
    // renewing it, and nothing of ours writes.
    use common::go_lease::{go_client, GoLeader, LEASE_DURATION, RETRY_PERIOD};
    let log = installed.server.request_log();
    let rolled_back = log.len();
    apply_file(kubeconfig, "tests/fixtures/go-install.yaml");
    let go = GoLeader::start(
        go_client(installed.server.kube_config_as(&manager_user())),
        names::KYMA_SYSTEM,
        "btp-manager-controller-manager-go",
    );
    eventually(
        LEASE_DURATION + RETRY_PERIOD * 4,
        "the Go manager leads and renews its Lease",
        || async {
            common::replica::lease_holder(&client, names::KYMA_SYSTEM).await == "btp-manager-controller-manager-go"
                && go.record().renewed.len() >= 3
        },
    )
    .await;
    let record = go.record();
    assert!(
        record.refused.is_empty() && !record.lost,
        "the Go install's RBAC allows every renewal: {:?}",
        record.refused
    );
    let role: k8s_openapi::api::rbac::v1::Role = Api::namespaced(client.clone(), names::KYMA_SYSTEM)
        .get("btp-manager-leader-election-role")
        .await
        .unwrap();
    assert!(
        role.rules
            .unwrap_or_default()
            .iter()
            .any(|r| r.verbs.contains(&"update".to_string())),
        "the leader-election Role is the Go install's own again (its PUT needs update)"
    );
    let ours: Vec<String> = log
        .since(rolled_back)
        .into_iter()
        .filter(|r| r.changed && r.user_agent.starts_with("btp-manager/"))
        .map(|r| format!("{} {} {}/{}", r.verb, r.resource, r.namespace, r.name))
        .collect();
    assert!(ours.is_empty(), "nothing of ours writes after the rollback: {ours:#?}");
}

/// `btp-manager uninstall --keep-operand` with `kubeconfig` (and `extra` flags): its stdout; panics when it fails.
fn uninstall_keep_operand(kubeconfig: &Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_btp-manager"))
        .args(["uninstall", "--keep-operand", "--kubeconfig"])
        .arg(kubeconfig)
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run btp-manager uninstall");
    assert!(
        out.status.success(),
        "btp-manager uninstall --keep-operand {extra:?}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `btp-manager uninstall --keep-operand` on a cluster the manager (as its Pod) provisioned: without
/// `--apply` it changes nothing and says what it would do; with it the manager is stopped and unregistered,
/// BtpOperator creates are accepted, and the operand, the CR and the objects the Go install shares stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_keep_operand_is_a_dry_run_unless_applied_and_then_unregisters_only_the_manager() {
    if let Some(cluster) = common::shipped::RealCluster::connect().await {
        return uninstall_keep_operand_as_shipped(cluster).await;
    }
    use k8s_openapi::api::apps::v1::Deployment;
    let server = ApiServer::start(ServerConfig::default()).await.expect("API server");
    let Some(mut installed) = install_and_provision(server).await else {
        return;
    };
    let client = installed.server.client().await;
    let kubeconfig = installed.kubeconfig.clone();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let generation = deployments
        .get(names::operand::DEPLOYMENT)
        .await
        .unwrap()
        .metadata
        .generation;
    let log = installed.server.request_log();

    let before = log.len();
    let dry = uninstall_keep_operand(&kubeconfig, &[]);
    assert!(
        dry.contains(&format!(
            "would delete ValidatingWebhookConfiguration {}",
            names::webhook::VALIDATING_CONFIGURATION
        )),
        "{dry}"
    );
    assert!(
        dry.contains("would scale Deployment kyma-system/btp-manager-controller-manager to 0"),
        "{dry}"
    );
    assert!(dry.contains("dry run: nothing changed"), "{dry}");
    let writes: Vec<String> = log
        .since(before)
        .into_iter()
        .filter(|r| r.changed && r.user == "system:admin")
        .map(|r| format!("{} {} {}", r.verb, r.resource, r.name))
        .collect();
    assert!(writes.is_empty(), "the dry run wrote: {writes:?}");
    assert!(exists(
        &kubeconfig,
        "validatingwebhookconfiguration",
        names::webhook::VALIDATING_CONFIGURATION,
        false
    ));

    // The kubelet's part: the manager's process ends once its Deployment is scaled to zero.
    let pod = installed.pod.take();
    let watch = {
        let deployments = deployments.clone();
        tokio::spawn(async move {
            eventually(Duration::from_secs(60), "the manager is scaled to zero", || async {
                deployments
                    .get("btp-manager-controller-manager")
                    .await
                    .ok()
                    .and_then(|d| d.spec)
                    .and_then(|s| s.replicas)
                    == Some(0)
            })
            .await;
            drop(pod);
        })
    };
    let applied = {
        let kubeconfig = kubeconfig.clone();
        tokio::task::spawn_blocking(move || uninstall_keep_operand(&kubeconfig, &["--apply", "--timeout=60s"]))
            .await
            .unwrap()
    };
    watch.await.unwrap();
    assert_only_the_manager_unregistered(&kubeconfig, &applied, &deployments, generation).await;
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), "default");
    let other: BtpOperator = serde_json::from_value(serde_json::json!({
        "apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "BtpOperator",
        "metadata": {"name": "another", "namespace": "default"}, "spec": {}
    }))
    .unwrap();
    crs.create(&PostParams::default(), &other)
        .await
        .expect("a BtpOperator create is accepted after the uninstall");
    // Running it again finds nothing left to do.
    let again = uninstall_keep_operand(&kubeconfig, &["--apply", "--timeout=10s"]);
    assert!(
        again.contains(&format!(
            "absent: ValidatingWebhookConfiguration {}",
            names::webhook::VALIDATING_CONFIGURATION
        )),
        "{again}"
    );
}

/// [`uninstall_keep_operand_is_a_dry_run_unless_applied_and_then_unregisters_only_the_manager`] on a real cluster:
/// `deploy/` installed as documented, the manager running as its Pods (the kubelet stand-in ends them when the
/// command scales the Deployment to zero); the dry run's requests are read from the audit log where there is one.
async fn uninstall_keep_operand_as_shipped(cluster: common::shipped::RealCluster) {
    use k8s_openapi::api::apps::v1::Deployment;
    let mut shipped = common::shipped::Shipped::install(&cluster).await;
    let client = cluster.client.clone();
    shipped.create_secret_and_cr(&client).await;
    assert!(
        try_wait_cr(&client, Reason::ReconcileSucceeded, Duration::from_secs(60)).await,
        "the CR turned Ready\n{}",
        shipped.logs()
    );
    let kubeconfig = cluster.kubeconfig.clone();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), names::KYMA_SYSTEM);
    let generation = deployments
        .get(names::operand::DEPLOYMENT)
        .await
        .unwrap()
        .metadata
        .generation;
    let requests = common::requests::audit_log().map(common::requests::Requests::audit);
    let dry = {
        let kubeconfig = kubeconfig.clone();
        tokio::task::spawn_blocking(move || uninstall_keep_operand(&kubeconfig, &[]))
            .await
            .unwrap()
    };
    assert!(
        dry.contains("would scale Deployment kyma-system/btp-manager-controller-manager to 0"),
        "{dry}"
    );
    assert!(dry.contains("dry run: nothing changed"), "{dry}");
    if let Some(requests) = &requests {
        let writes: Vec<String> = requests
            .since(0)
            .into_iter()
            .filter(|r| r.user_agent.contains("(uninstall)") && r.method != "GET")
            .map(|r| format!("{} {} {}", r.verb, r.resource, r.name))
            .collect();
        assert!(writes.is_empty(), "the dry run wrote: {writes:?}");
    }
    assert!(exists(
        &kubeconfig,
        "validatingwebhookconfiguration",
        names::webhook::VALIDATING_CONFIGURATION,
        false
    ));
    let applied = {
        let kubeconfig = kubeconfig.clone();
        tokio::task::spawn_blocking(move || uninstall_keep_operand(&kubeconfig, &["--apply", "--timeout=60s"]))
            .await
            .unwrap()
    };
    assert_only_the_manager_unregistered(&kubeconfig, &applied, &deployments, generation).await;
    let crs: Api<BtpOperator> = Api::namespaced(client.clone(), "default");
    crs.create(&PostParams::default(), &BtpOperator::new("another"))
        .await
        .expect("a BtpOperator create is accepted after the uninstall");
    crs.delete("another", &Default::default()).await.unwrap();
    // The CR keeps its finalizer for the next manager: the test's cleanup lets it go, then the documented
    // uninstall removes the rest of deploy/ (scaled to zero, nothing to stop).
    drop(shipped);
    common::shipped::RealCluster::leave_clean(cluster).await;
}

/// What `uninstall --keep-operand --apply` (its output `applied`) leaves: the manager scaled to zero and
/// nothing of it registered, while its Deployment, the CRD, the CR, the operand's certificates and webhook
/// configuration stay and the operand's Deployment keeps its `generation`.
async fn assert_only_the_manager_unregistered(
    kubeconfig: &Path,
    applied: &str,
    deployments: &Api<k8s_openapi::api::apps::v1::Deployment>,
    generation: Option<i64>,
) {
    assert!(
        applied.contains("scaled Deployment kyma-system/btp-manager-controller-manager to 0 replicas"),
        "{applied}"
    );
    assert_nothing_of_ours_registered(kubeconfig);
    for (kind, name, namespaced) in [
        ("deployment", "btp-manager-controller-manager", true),
        (
            "customresourcedefinition",
            "btpoperators.operator.kyma-project.io",
            false,
        ),
        ("btpoperator", names::BTP_OPERATOR_NAME, true),
        ("secret", names::operand::CA_SECRET, true),
        (
            "validatingwebhookconfiguration",
            names::operand::VALIDATING_WEBHOOK_CONFIGURATION,
            false,
        ),
    ] {
        assert!(exists(kubeconfig, kind, name, namespaced), "{kind} {name} stays");
    }
    assert_eq!(
        deployments
            .get(names::operand::DEPLOYMENT)
            .await
            .unwrap()
            .metadata
            .generation,
        generation,
        "the operand is not touched"
    );
}
