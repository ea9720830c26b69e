//! `btp-manager doctor` against the embedded API server, with RBAC enforced, or against the real cluster of
//! `BTP_E2E_KUBECONFIG` (the manager then runs as the Pods of `deploy/`): a cluster installed as `deploy/`
//! ships it, with the manager running (as `run --leader-elect` does, authenticated as its ServiceAccount),
//! passes clean; each problem induced (a missing grant, an unlabelled Secret, no leader, a wiped caBundle, an
//! expired certificate, an old Kubernetes) is reported on its line with what to do; and doctor writes nothing
//! (its only non-read requests are SubjectAccessReviews and a dry-run create). `check admission --wait -v`, the
//! binary, waits through an install's states and prints a line per change.

mod common;

use btp_api::{names, BtpOperator};
use btp_apiserver::{ApiServer, Config as ServerConfig, RunningApiServer};
use btp_manager::doctor::{self, Check, Report, Target, Verdict};
use btp_manager::manager::{self, manager_client, ManagerBuilder, Options};
use btp_manager::shipped;
use common::*;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::time::Duration;
use tokio::sync::watch;

/// The user doctor runs as here: bound to a ClusterRole that may read everything (a platform operator).
const DOCTOR: &str = "platform-operator";

/// A healthy installation to diagnose: on the embedded server, `deploy/` installed and the manager running in
/// this process (as `run --leader-elect` does, its ServiceAccount's RBAC enforced, its webhooks reached by URL);
/// on the real cluster of `BTP_E2E_KUBECONFIG`, `deploy/` installed as docs/install.md says and the manager
/// running as its Pods (stopped and started again by scaling its Deployment). Either way the credentials Secret
/// and the BtpOperator are created and Ready.
struct Cluster {
    admin: kube::Client,
    doctor: kube::Client,
    backend: Backend,
}

enum Backend {
    Embedded {
        server: Box<RunningApiServer>,
        manager: Option<Box<(manager::Manager, watch::Sender<bool>)>>,
        _workloads: tokio::task::JoinHandle<()>,
    },
    Real {
        cluster: Box<common::shipped::RealCluster>,
        shipped: Box<common::shipped::Shipped>,
    },
}

impl Cluster {
    /// `deploy/` installed, the manager running, the credentials Secret and the BtpOperator created, Ready.
    async fn start(config: ServerConfig) -> Cluster {
        if let Some(cluster) = common::shipped::RealCluster::connect().await {
            let mut shipped = common::shipped::Shipped::install(&cluster).await;
            let admin = cluster.client.clone();
            shipped.create_secret_and_cr(&admin).await;
            let crs: Api<BtpOperator> = Api::namespaced(admin.clone(), names::KYMA_SYSTEM);
            eventually(Duration::from_secs(60), "the BtpOperator is Ready", || cr_ready(&crs)).await;
            return Cluster {
                doctor: admin.clone(),
                admin,
                backend: Backend::Real {
                    cluster: Box::new(cluster),
                    shipped: Box::new(shipped),
                },
            };
        }
        let server = ApiServer::start(config).await.expect("API server");
        let admin = server.client().await;
        let kyma_system =
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names::KYMA_SYSTEM}});
        common::install::apply(&admin, &[kyma_system]).await;
        common::install::apply(&admin, &[serde_json::to_value(BtpOperator::crd().unwrap()).unwrap()]).await;
        for (_, text) in shipped::FOR_LOCAL {
            common::install::apply(&admin, &shipped::objects(text).unwrap()).await;
        }
        let reader = serde_json::json!([
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "doctor-test-reader"},
             "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]},
                       {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
                       {"apiGroups": ["operator.kyma-project.io"], "resources": ["btpoperators"], "verbs": ["create"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "doctor-test-reader"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "doctor-test-reader"},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": DOCTOR}]}
        ]);
        common::install::apply(&admin, reader.as_array().unwrap()).await;
        let workloads = btp_apiserver::spawn_workload_controller(admin.clone());
        let doctor = server.client_as(DOCTOR);
        let mut cluster = Cluster {
            admin,
            doctor,
            backend: Backend::Embedded {
                server: Box::new(server),
                manager: None,
                _workloads: workloads,
            },
        };
        cluster.start_manager().await;
        let mut secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": names::REQUIRED_SECRET_NAME, "namespace": names::KYMA_SYSTEM,
                         "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_KEB}},
        });
        secret["stringData"] = credentials();
        common::install::apply(&cluster.admin, &[secret]).await;
        let crs: Api<BtpOperator> = Api::namespaced(cluster.admin.clone(), names::KYMA_SYSTEM);
        crs.create(&PostParams::default(), &BtpOperator::new(names::BTP_OPERATOR_NAME))
            .await
            .expect("the BtpOperator");
        eventually(Duration::from_secs(20), "the BtpOperator is Ready", || cr_ready(&crs)).await;
        cluster
    }

    /// The embedded server (None on a real cluster).
    fn server(&self) -> Option<&RunningApiServer> {
        match &self.backend {
            Backend::Embedded { server, .. } => Some(&**server),
            Backend::Real { .. } => None,
        }
    }

    /// Start the manager (on a real cluster: its Deployment scaled back to two replicas, rolled out).
    async fn start_manager(&mut self) {
        match &mut self.backend {
            Backend::Embedded { server, manager, .. } => *manager = Some(Box::new(start_manager(server).await)),
            Backend::Real { cluster, .. } => {
                let deployment = format!("deployment/{}", common::shipped::DEPLOYMENT);
                for command in [
                    vec![
                        "kubectl",
                        "-n",
                        names::KYMA_SYSTEM,
                        "scale",
                        &deployment,
                        "--replicas=2",
                    ],
                    vec!["kubectl", "-n", names::KYMA_SYSTEM, "rollout", "status", &deployment],
                ] {
                    let command: Vec<String> = command.into_iter().map(String::from).collect();
                    common::shipped::run_ok(&cluster.kubeconfig, &command).await;
                }
            }
        }
        eventually(Duration::from_secs(30), "the manager leads", || async {
            line(&self.diagnose().await, "leader").verdict == Verdict::Pass
        })
        .await;
    }

    /// Stop the manager gracefully: it releases the Lease (on a real cluster: its Deployment scaled to zero,
    /// its Pods gone).
    async fn stop_manager(&mut self) {
        match &mut self.backend {
            Backend::Embedded { manager, .. } => {
                if let Some((manager, term)) = manager.take().map(|m| *m) {
                    let _ = term.send(true);
                    manager.shut_down().await.expect("a graceful shutdown");
                }
            }
            Backend::Real { cluster, .. } => {
                let deployment = format!("deployment/{}", common::shipped::DEPLOYMENT);
                for command in [
                    vec![
                        "kubectl",
                        "-n",
                        names::KYMA_SYSTEM,
                        "scale",
                        &deployment,
                        "--replicas=0",
                    ],
                    vec![
                        "kubectl",
                        "-n",
                        names::KYMA_SYSTEM,
                        "wait",
                        "pod",
                        "-l",
                        "app.kubernetes.io/component=btp-manager.kyma-project.io",
                        "--for=delete",
                        "--timeout=60s",
                    ],
                ] {
                    let command: Vec<String> = command.into_iter().map(String::from).collect();
                    common::shipped::run_ok(&cluster.kubeconfig, &command).await;
                }
            }
        }
    }

    async fn diagnose(&self) -> Report {
        doctor::diagnose(&self.doctor, &Target::default()).await
    }

    /// The end of a test: on the embedded server the manager stopped; on a real cluster `deploy/` uninstalled as
    /// documented, which needs a running manager (it deprovisions the CR first): one is started where the test
    /// stopped it.
    async fn finish(mut self) {
        if matches!(self.backend, Backend::Embedded { .. }) {
            return self.stop_manager().await;
        }
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(self.admin.clone(), names::KYMA_SYSTEM);
        let selector =
            kube::api::ListParams::default().labels("app.kubernetes.io/component=btp-manager.kyma-project.io");
        if pods.list(&selector).await.unwrap().items.is_empty() {
            self.start_manager().await;
        }
        if let Backend::Real { cluster, shipped } = self.backend {
            shipped.uninstall(&cluster).await;
        }
    }
}

/// The manager as `run --leader-elect` runs it, as its ServiceAccount, its webhooks reached by URL; stopped by
/// sending `true`.
async fn start_manager(server: &RunningApiServer) -> (manager::Manager, watch::Sender<bool>) {
    let args = common::run_args([
        "--leader-elect",
        "--operand-image",
        IMAGE,
        "--webhook-bind-address",
        "127.0.0.1:0",
        "--metrics-bind-address",
        "127.0.0.1:0",
        "--health-probe-bind-address",
        "127.0.0.1:0",
        // Tests reach nothing beyond loopback: the Secret's token endpoint does not exist.
        "--credentials-check-interval=0",
    ]);
    let (term, term_rx) = watch::channel(false);
    let client = manager_client(server.kube_config_as(&shipped::manager_user(names::KYMA_SYSTEM)))
        .expect("the manager's client");
    let manager = ManagerBuilder::new(client, Options::run(&args))
        .expect("the manager's options")
        .start(term_rx)
        .await
        .expect("the manager starts");
    (manager, term)
}

/// The check named `name` of `report`.
fn line(report: &Report, name: &str) -> Check {
    report
        .checks
        .iter()
        .find(|c| c.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("doctor has a {name} check:\n{}", report.to_text()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_installation_passes_clean_and_doctor_writes_nothing() {
    if let Some(cluster) = common::shipped::RealCluster::connect().await {
        return a_healthy_installation_as_shipped_passes_clean(cluster).await;
    }
    let cluster = Cluster::start(ServerConfig::default()).await;
    let log = cluster.server().expect("the embedded server").request_log();
    let before = log.len();
    let report = cluster.diagnose().await;
    println!("{}", report.to_text());
    assert!(report.healthy(), "{}", report.to_text());
    assert!(
        report.checks.iter().all(|c| c.verdict == Verdict::Pass),
        "nothing to warn about either:\n{}",
        report.to_text()
    );
    for name in [
        "version",
        "crd",
        "rbac",
        "deployment",
        "leader",
        "webhooks",
        "admission",
        "secret",
        "btpoperator",
        "credentials",
        "operand",
        "operand-hooks",
        "netpol",
    ] {
        line(&report, name);
    }
    let writes: Vec<String> = log
        .since(before)
        .into_iter()
        .filter(|r| r.user == DOCTOR)
        .filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "discovery"))
        .filter(|r| !(r.verb == "create" && r.resource == "subjectaccessreviews"))
        .filter(|r| !(r.verb == "create" && r.query.contains("dryRun=All")))
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect();
    assert!(writes.is_empty(), "doctor wrote: {writes:?}");
    cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_grant_and_an_unlabelled_secret_are_named_with_their_fix() {
    let cluster = Cluster::start(ServerConfig::default()).await;
    // An older deploy/rbac.yaml: no create on CRDs.
    let mut role = shipped::objects(shipped::RBAC)
        .unwrap()
        .into_iter()
        .find(|o| o["metadata"]["name"] == "btp-manager-manager-role")
        .unwrap();
    for rule in role["rules"].as_array_mut().unwrap() {
        if rule["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "customresourcedefinitions")
        {
            rule["verbs"].as_array_mut().unwrap().retain(|v| v != "create");
        }
    }
    common::install::apply(&cluster.admin, &[role]).await;
    let secrets: Api<Secret> = Api::namespaced(cluster.admin.clone(), names::KYMA_SYSTEM);
    let unlabel = serde_json::json!({"metadata": {"labels": {names::MANAGED_BY_LABEL: null}}});
    secrets
        .patch(
            names::REQUIRED_SECRET_NAME,
            &PatchParams::default(),
            &Patch::Merge(&unlabel),
        )
        .await
        .unwrap();

    let report = cluster.diagnose().await;
    println!("{}", report.to_text());
    assert!(!report.healthy());
    let rbac = line(&report, "rbac");
    assert_eq!(rbac.verdict, Verdict::Fail);
    assert!(
        rbac.message.contains(
            "create customresourcedefinitions (group apiextensions.k8s.io) [ClusterRole btp-manager-manager-role]"
        ),
        "{}",
        rbac.message
    );
    assert!(rbac.message.contains("lacks 1 of"), "{}", rbac.message);
    let secret = line(&report, "secret");
    assert_eq!(secret.verdict, Verdict::Fail);
    assert_eq!(
        secret.fix.as_deref(),
        Some("kubectl label secret sap-btp-manager -n kyma-system app.kubernetes.io/managed-by=kcp-kyma-environment-broker")
    );
    assert!(
        !report.to_text().contains("CANARY"),
        "no credential value in the report"
    );
    cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_leader_a_wiped_ca_bundle_and_an_expired_certificate_are_reported() {
    let mut cluster = Cluster::start(ServerConfig::default()).await;
    // With the manager down nothing repairs what is broken below.
    cluster.stop_manager().await;
    let wipe = serde_json::json!({"webhooks": [{"name": "vbtpoperator.operator.kyma-project.io", "clientConfig": {"caBundle": null}}]});
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(cluster.admin.clone())
        .patch(
            names::webhook::VALIDATING_CONFIGURATION,
            &PatchParams::default(),
            &Patch::Strategic(&wipe),
        )
        .await
        .unwrap();
    // The operand's serving certificate, expired a day ago (signed by its CA, so only its age is wrong).
    let secrets: Api<Secret> = Api::namespaced(cluster.admin.clone(), names::KYMA_SYSTEM);
    let ca = secrets.get(btp_certs::operand::CA_SECRET).await.unwrap().data.unwrap();
    let ca = btp_certs::CertPair {
        cert_pem: String::from_utf8(ca[btp_certs::operand::keys::CA_CRT].0.clone()).unwrap(),
        key_pem: String::from_utf8(ca[btp_certs::operand::keys::CA_KEY].0.clone()).unwrap(),
    };
    let past = std::time::SystemTime::now() - Duration::from_secs(3 * 86_400);
    let spec = btp_certs::LeafSpec {
        common_name: Some("sap-btp-operator-webhook-service.kyma-system.svc".into()),
        dns_names: vec!["sap-btp-operator-webhook-service.kyma-system.svc".into()],
        ip_addresses: vec![],
        validity: Duration::from_secs(86_400),
        key: btp_certs::KeyAlgorithm::default(),
    };
    let expired = btp_certs::generate_leaf(&ca, &spec, past).unwrap();
    let data = serde_json::json!({"stringData": {"tls.crt": expired.cert_pem, "tls.key": expired.key_pem}});
    secrets
        .patch(
            btp_certs::operand::WEBHOOK_SECRET,
            &PatchParams::default(),
            &Patch::Merge(&data),
        )
        .await
        .unwrap();

    let report = cluster.diagnose().await;
    println!("{}", report.to_text());
    let leader = line(&report, "leader");
    assert_eq!(leader.verdict, Verdict::Fail);
    assert!(
        leader.message.contains("no replica holds the Lease"),
        "{}",
        leader.message
    );
    let webhooks = line(&report, "webhooks");
    assert_eq!(webhooks.verdict, Verdict::Fail);
    assert!(
        webhooks.message.contains("vbtpoperator.operator.kyma-project.io"),
        "{}",
        webhooks.message
    );
    assert!(webhooks.fix.unwrap().contains("btp-manager-webhook-cert"));
    let leaf = line(&report, "operand-leaf");
    assert_eq!(leaf.verdict, Verdict::Fail);
    assert!(leaf.message.contains("has expired"), "{}", leaf.message);
    // Nothing else is blamed.
    assert_eq!(line(&report, "rbac").verdict, Verdict::Pass, "{}", report.to_text());
    assert_eq!(line(&report, "secret").verdict, Verdict::Pass);
    cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_kubernetes_is_a_warning_that_says_what_degrades() {
    if let Some(cluster) = common::shipped::RealCluster::connect().await {
        let version = cluster.client.apiserver_version().await.expect("the server's version");
        if version
            .minor
            .trim_end_matches('+')
            .parse::<u32>()
            .is_ok_and(|m| m >= 28)
        {
            return skip(&format!(
                "needs Kubernetes before 1.28; the real server is {}",
                version.git_version
            ));
        }
    }
    let config = ServerConfig {
        version: btp_apiserver::KubeVersion::V1_24,
        ..ServerConfig::default()
    };
    let cluster = Cluster::start(config).await;
    let report = cluster.diagnose().await;
    println!("{}", report.to_text());
    let version = line(&report, "version");
    assert_eq!(version.verdict, Verdict::Warn);
    assert!(
        version.message.contains("v1.24") && version.message.contains("matchConditions"),
        "{}",
        version.message
    );
    assert!(version.fix.unwrap().contains("1.28"));
    // Everything else works there: the manager registered its webhooks without matchConditions.
    assert!(report.healthy(), "{}", report.to_text());
    assert!(
        report
            .checks
            .iter()
            .filter(|c| c.name != "version")
            .all(|c| c.verdict == Verdict::Pass),
        "{}",
        report.to_text()
    );
    cluster.finish().await;
}

/// The API server's endpoint moves to a port the installed network policies do not allow (6443, as on
/// kubeadm, kind and k3s): with the manager down, doctor fails `apiserver-egress` naming the port; once the
/// manager runs again it renders the policies for the live EndpointSlices and doctor passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_cuts_the_manager_off_the_api_server_is_named_until_the_manager_renders_it_again() {
    let mut cluster = Cluster::start(ServerConfig::default()).await;
    assert_eq!(
        line(&cluster.diagnose().await, "apiserver-egress").verdict,
        Verdict::Pass,
        "healthy at first"
    );
    cluster.stop_manager().await;
    let slice = serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes-6443", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"]}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    });
    common::install::apply(&cluster.admin, &[slice]).await;
    let cut = line(&cluster.diagnose().await, "apiserver-egress");
    assert_eq!(cut.verdict, Verdict::Fail, "{}", cut.message);
    assert!(cut.message.contains("6443"), "names the port: {}", cut.message);
    assert!(cut.fix.is_some());
    cluster.start_manager().await;
    eventually(
        Duration::from_secs(20),
        "the manager renders its policies for 6443",
        || async { line(&cluster.diagnose().await, "apiserver-egress").verdict == Verdict::Pass },
    )
    .await;
    let slices: Api<kube::api::DynamicObject> = Api::namespaced_with(
        cluster.admin.clone(),
        "default",
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
        )),
    );
    slices.delete("kubernetes-6443", &Default::default()).await.unwrap();
    cluster.finish().await;
}

/// The next line the child printed, within `deadline`; `None` once its stdout is closed.
async fn next_line(
    lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    deadline: Duration,
    what: &str,
) -> Option<String> {
    tokio::time::timeout(deadline, lines.recv())
        .await
        .unwrap_or_else(|_| panic!("check admission -v: no line within {deadline:?}: {what}"))
}

/// `btp-manager check admission --wait -v` through an install, as this build's binary: a line whenever the
/// answer changes (BtpOperators not served before the CRD, the API server unable to call the webhooks before
/// the manager serves, then the manager's refusal), never the same answer twice in a row; exit code 0 once
/// admission works. The install goes on only after the line for the state before, so every state is seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_admission_waits_through_the_install_and_prints_a_line_per_change() {
    use std::io::BufRead as _;
    // On a real cluster: the manager starts as docs/install.md installs it, as its Pods behind its Service.
    let real = common::shipped::RealCluster::connect().await;
    let mut embedded = None;
    let (admin, kubeconfig, dir) = match &real {
        Some(cluster) => {
            // From no CRD on (the suites' shared BtpOperator CRD goes first).
            let crds: Api<
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
            > = Api::all(cluster.client.clone());
            let name = format!("{}.{}", names::PLURAL, names::GROUP);
            let _ = crds.delete(&name, &Default::default()).await;
            eventually(Duration::from_secs(60), "the BtpOperator CRD is gone", || async {
                crds.get_opt(&name).await.is_ok_and(|c| c.is_none())
            })
            .await;
            (cluster.client.clone(), cluster.kubeconfig.clone(), None)
        }
        None => {
            let server = ApiServer::start(ServerConfig::default()).await.expect("API server");
            let admin = server.client().await;
            let dir = temp_dir("check-admission");
            let kubeconfig = dir.join("admin.kubeconfig");
            std::fs::write(&kubeconfig, server.kubeconfig_yaml()).unwrap();
            embedded = Some(server);
            (admin, kubeconfig, Some(dir))
        }
    };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_btp-manager"))
        .args(["check", "admission", "--wait=2m", "-v"])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start btp-manager check admission");
    let stdout = child.stdout.take().expect("its stdout");
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Duration::from_secs(30);
    let mut seen = vec![next_line(&mut lines, deadline, "the first answer")
        .await
        .expect("a first line")];
    assert!(seen[0].contains("BtpOperators are not served"), "{}", seen[0]);

    // The webhook configurations of deploy/ first (the probe still meets no CRD), then the CRD: the API server
    // calls the webhooks through a Service that nothing serves.
    let kyma_system =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names::KYMA_SYSTEM}});
    common::install::apply(&admin, &[kyma_system]).await;
    let webhooks = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/webhooks.yaml")).unwrap();
    common::install::apply(&admin, &shipped::objects(&webhooks).unwrap()).await;
    common::install::apply(&admin, &[serde_json::to_value(BtpOperator::crd().unwrap()).unwrap()]).await;
    while !seen.last().is_some_and(|l| l.contains("cannot call the webhooks")) {
        let line = next_line(&mut lines, deadline, "the webhooks unreachable").await;
        seen.push(line.unwrap_or_else(|| panic!("check admission ended early: {seen:#?}")));
    }

    // The manager starts (embedded: in this process, its webhooks registered by URL, its CA in them; real: as its
    // Pods): admission works.
    let mut installed = None;
    let mut manager = None;
    match (&real, &embedded) {
        (Some(cluster), _) => installed = Some(common::shipped::Shipped::install(cluster).await),
        (None, Some(server)) => {
            for (_, text) in shipped::FOR_LOCAL {
                common::install::apply(&admin, &shipped::objects(text).unwrap()).await;
            }
            manager = Some(start_manager(server).await);
        }
        (None, None) => unreachable!("one of the two"),
    }
    while let Some(line) = next_line(&mut lines, Duration::from_secs(120), "admission works").await {
        seen.push(line);
    }
    let status = child.wait().expect("check admission ends");
    reader.join().expect("the reader");
    if let Some((manager, term)) = manager {
        let _ = term.send(true);
        manager.shut_down().await.expect("a graceful shutdown");
    }
    println!("{}", seen.join("\n"));
    assert!(status.success(), "exit code 0 once admission works: {seen:#?}");
    let answers: Vec<&str> = seen
        .iter()
        .map(|l| l.trim_start().split_once("s ").expect("elapsed, then the answer").1)
        .collect();
    assert!(
        answers.last().is_some_and(|a| a.starts_with(
            "admission works: the validating webhook refused a misnamed BtpOperator (dry run): admission webhook \
             \"vbtpoperator.operator.kyma-project.io\" denied the request"
        )),
        "{seen:#?}"
    );
    assert!(
        answers[..answers.len() - 1]
            .iter()
            .all(|a| !a.starts_with("admission works")),
        "{seen:#?}"
    );
    for pair in answers.windows(2) {
        assert_ne!(pair[0], pair[1], "a line per change, not per attempt: {seen:#?}");
    }
    if let (Some(cluster), Some(installed)) = (&real, installed) {
        installed.uninstall(cluster).await;
    }
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// On a real cluster (`BTP_E2E_KUBECONFIG`): `deploy/` installed as docs/install.md says, the manager running as
/// its Pods, the Secret and the CR Ready; `btp-manager doctor` (the binary, with the cluster's kubeconfig) passes
/// every check (before Kubernetes 1.28 the version line warns what degrades) and exits 0; where the API server
/// keeps an audit log, doctor's requests are reads, access reviews and the dry-run create of its admission
/// probe.
async fn a_healthy_installation_as_shipped_passes_clean(cluster: common::shipped::RealCluster) {
    let mut shipped = common::shipped::Shipped::install(&cluster).await;
    let requests = common::requests::audit_log().map(common::requests::Requests::audit);
    shipped.create_secret_and_cr(&cluster.client).await;
    let crs: Api<BtpOperator> = Api::namespaced(cluster.client.clone(), names::KYMA_SYSTEM);
    eventually(Duration::from_secs(60), "the BtpOperator is Ready", || cr_ready(&crs)).await;
    let before = requests.as_ref().map_or(0, |r| r.len());
    let out = common::shipped::run(&cluster.kubeconfig, &["btp-manager".to_string(), "doctor".to_string()]).await;
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "doctor passes on a healthy install:\n{report}\n{}",
        shipped.logs()
    );
    // Before 1.28 the version line is a warning that says what degrades (the real 1.24 of the stage).
    let version = cluster.client.apiserver_version().await.expect("the server's version");
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap_or(u32::MAX);
    let version_line = report
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("version"))
        .unwrap_or_default();
    if minor < 28 {
        assert!(
            version_line.starts_with("WARN") && version_line.contains("matchConditions"),
            "on Kubernetes 1.{minor} the version line warns what degrades:\n{report}"
        );
    } else {
        assert!(version_line.starts_with("ok "), "{report}");
    }
    for name in [
        "crd",
        "rbac",
        "deployment",
        "leader",
        "webhooks",
        "admission",
        "secret",
        "btpoperator",
        "credentials",
        "operand",
    ] {
        assert!(
            report
                .lines()
                .any(|l| l.starts_with("ok ") && l.split_whitespace().nth(1) == Some(name)),
            "doctor's {name} line passes:\n{report}"
        );
    }
    if let Some(requests) = requests {
        let writes: Vec<String> = requests
            .since(before)
            .into_iter()
            .filter(|r| r.user_agent.contains("doctor"))
            .filter(|r| r.method != "GET")
            .filter(|r| !(r.verb == "create" && r.resource == "subjectaccessreviews"))
            .filter(|r| !(r.verb == "create" && r.query.contains("dryRun=All")))
            .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
            .collect();
        assert!(writes.is_empty(), "doctor wrote: {writes:?}");
    }
    shipped.uninstall(&cluster).await;
}
