//! `deploy/` as shipped, on the real cluster of `BTP_E2E_KUBECONFIG`: installed and uninstalled by running
//! docs/install.md's commands as written (`kubectl` is `$KUBECTL`, `btp-manager` this build's binary), the
//! manager running as the Pods of `deploy/deployment.yaml` (the kubelet stand-in runs their container: the
//! in-cluster configuration from a token of the shipped ServiceAccount, the shipped arguments, user 10001, a
//! read-only root), its webhooks reached by the API server through their Service (the kube-proxy stand-in on
//! its ClusterIP, forwarding to ready replicas only).
#![allow(dead_code)]

use super::kubelet::{Kubelet, KubeletOptions};
use super::proxy::ServiceProxy;
use btp_api::names;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The real cluster of `BTP_E2E_KUBECONFIG`, for this test alone (the harness's lock), cleaned up first.
pub struct RealCluster {
    pub client: kube::Client,
    pub config: kube::Config,
    pub kubeconfig: PathBuf,
    _serial: tokio::sync::OwnedMutexGuard<()>,
}

impl RealCluster {
    /// None on the embedded server. What an earlier test left (a failed one skips its cleanup) is removed: the
    /// harness's objects, and an installed `deploy/` by its documented uninstall.
    pub async fn connect() -> Option<Self> {
        let (server, serial, client, config) = super::connect().await;
        if server.is_some() {
            return None;
        }
        let cluster = Self {
            client,
            config,
            kubeconfig: PathBuf::from(super::real_cluster().expect("BTP_E2E_KUBECONFIG")),
            _serial: serial.expect("the serial guard of a real cluster"),
        };
        super::cleanup(&cluster.client, &[]).await;
        let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
            kube::Api::namespaced(cluster.client.clone(), names::KYMA_SYSTEM);
        if deployments.get_opt(DEPLOYMENT).await.ok().flatten().is_some() {
            let kubelet = Kubelet::start(
                cluster.client.clone(),
                &cluster.config,
                KubeletOptions {
                    run_manager: true,
                    ..KubeletOptions::default()
                },
            )
            .await;
            uninstall(&cluster).await;
            drop(kubelet);
        }
        Some(cluster)
    }
}

impl RealCluster {
    /// What a test left on purpose (a CR kept for the next manager, a `deploy/` scaled to zero) removed as
    /// [`RealCluster::connect`] removes what a failed test left: the harness's cleanup, then the documented
    /// uninstall where `deploy/` is installed.
    pub async fn leave_clean(self) {
        super::cleanup(&self.client, &[]).await;
        let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
            kube::Api::namespaced(self.client.clone(), names::KYMA_SYSTEM);
        if deployments.get_opt(DEPLOYMENT).await.ok().flatten().is_some() {
            uninstall(&self).await;
        }
    }
}

/// The manager's Deployment (`deploy/deployment.yaml`).
pub const DEPLOYMENT: &str = "btp-manager-controller-manager";

/// The commands of every `sh` block of the section `heading` in `docs/<file>` (comments dropped, arguments
/// split at whitespace, quotes trimmed).
pub fn documented_blocks(file: &str, heading: &str) -> Vec<Vec<Vec<String>>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let section = text
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("docs/{file} has the section {heading}"))
        .1;
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .split("```sh\n")
        .skip(1)
        .map(|rest| {
            rest.split("\n```")
                .next()
                .unwrap_or_default()
                .lines()
                .map(|l| l.split(" #").next().unwrap_or_default().trim())
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| l.split_whitespace().map(|a| a.trim_matches('\'').to_string()).collect())
                .collect()
        })
        .collect()
}

/// Run a documented command (`kubectl ...` or `btp-manager ...`) from the repository root with `kubeconfig`, on a
/// blocking thread. A wait the docs leave open gets the test's bound (`rollout status`, `delete`), so that what
/// never finishes fails here instead of hanging.
pub async fn run(kubeconfig: &Path, command: &[String]) -> Output {
    let mut cmd = match command[0].as_str() {
        "kubectl" => Command::new(super::kubectl()),
        "btp-manager" => Command::new(env!("CARGO_BIN_EXE_btp-manager")),
        other => panic!("the documented steps run kubectl and btp-manager, not {other}: {command:?}"),
    };
    cmd.args(&command[1..]);
    if command[0] == "kubectl" {
        // The subcommand: the first argument that is not a flag or a flag's value (`kubectl -n ns rollout ...`).
        let mut args = command[1..].iter().map(String::as_str);
        let mut subcommand = Vec::new();
        while let Some(a) = args.next() {
            match a {
                "-n" | "--namespace" => {
                    args.next();
                }
                flag if flag.starts_with('-') => {}
                word if subcommand.len() < 2 => subcommand.push(word),
                _ => {}
            }
        }
        match subcommand[..] {
            ["delete", ..] => {
                cmd.arg("--timeout=120s");
            }
            ["rollout", "status"] if !command.iter().any(|a| a.starts_with("--timeout")) => {
                cmd.arg("--timeout=180s");
            }
            _ => {}
        }
    }
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KUBECONFIG", kubeconfig);
    tokio::task::spawn_blocking(move || cmd.output().expect("run the documented command"))
        .await
        .expect("the command's thread")
}

/// [`run`], panicking with its output when it fails.
pub async fn run_ok(kubeconfig: &Path, command: &[String]) -> Output {
    let out = run(kubeconfig, command).await;
    assert!(
        out.status.success(),
        "{}:\n{}\n{}",
        command.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `deploy/` installed as docs/install.md says, the manager running as its Pods and serving through its Service.
pub struct Shipped {
    pub kubelet: Kubelet,
    webhooks: ServiceProxy,
    /// The token endpoint the credentials Secret names (see [`Shipped::create_secret_and_cr`]).
    token_endpoint: Option<super::token_endpoint::StandIn>,
}

impl Shipped {
    /// docs/install.md's "## 2. Install", every command as written: `kubectl apply -k deploy/namespace` and
    /// `kubectl apply -k deploy/`, then (with the stand-ins running the manager's Pods and its Service) `kubectl
    /// rollout status` and `btp-manager check admission --wait`. Admission through the Service works when it
    /// returns.
    pub async fn install(cluster: &RealCluster) -> Self {
        let blocks = documented_blocks("install.md", "## 2. Install");
        assert!(blocks.len() >= 2, "docs/install.md installs, then waits: {blocks:?}");
        for command in &blocks[0] {
            run_ok(&cluster.kubeconfig, command).await;
        }
        let kubelet = Kubelet::start(
            cluster.client.clone(),
            &cluster.config,
            KubeletOptions {
                run_manager: true,
                ..KubeletOptions::default()
            },
        )
        .await;
        let webhooks = super::proxy::serve_service(
            &cluster.client,
            kubelet.lookup(),
            names::KYMA_SYSTEM,
            names::webhook::SERVICE_NAME,
        )
        .await;
        let shipped = Self {
            kubelet,
            webhooks,
            token_endpoint: None,
        };
        for command in &blocks[1] {
            let out = run(&cluster.kubeconfig, command).await;
            assert!(
                out.status.success(),
                "{}:\n{}\n{}\nthe manager's containers:\n{}",
                command.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                shipped.logs()
            );
        }
        shipped
    }

    /// The stand-ins of an install that started before them: the kubelet stand-in `kubelet` (running the
    /// manager's Pods) already runs, as for the switch from the Go install, whose Pod it ran before `deploy/`
    /// was applied; this serves the manager's webhook Service (which `kubectl apply -k deploy/` created).
    pub async fn serving(cluster: &RealCluster, kubelet: Kubelet) -> Self {
        let webhooks = super::proxy::serve_service(
            &cluster.client,
            kubelet.lookup(),
            names::KYMA_SYSTEM,
            names::webhook::SERVICE_NAME,
        )
        .await;
        Self {
            kubelet,
            webhooks,
            token_endpoint: None,
        }
    }

    /// The credentials Secret (labelled as the broker labels it) and `kyma-system/btpoperator`, each created
    /// once, as docs/install.md's step 3 has them created. The shipped manager checks credentials (its default
    /// interval), so the Secret's `tokenurl` names a token endpoint on loopback that accepts them, whose CA the
    /// runtime ConfigMap `sap-btp-manager` trusts (`CredentialsCheckCABundle`): nothing leaves loopback.
    pub async fn create_secret_and_cr(&mut self, client: &kube::Client) {
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        use kube::api::{Api, PostParams};
        let endpoint = super::token_endpoint::start().await;
        let config: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "sap-btp-manager", "namespace": names::KYMA_SYSTEM},
            "data": {"CredentialsCheckCABundle": endpoint.ca_pem},
        }))
        .expect("a ConfigMap");
        Api::<ConfigMap>::namespaced(client.clone(), names::KYMA_SYSTEM)
            .create(&PostParams::default(), &config)
            .await
            .expect("the runtime ConfigMap");
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": names::REQUIRED_SECRET_NAME, "namespace": names::KYMA_SYSTEM,
                         "labels": {names::MANAGED_BY_LABEL: names::MANAGED_BY_KEB}},
            "stringData": super::token_endpoint::credentials_at(&endpoint, super::token_endpoint::SECRET),
        }))
        .expect("a Secret");
        Api::<Secret>::namespaced(client.clone(), names::KYMA_SYSTEM)
            .create(&PostParams::default(), &secret)
            .await
            .expect("the credentials Secret");
        self.token_endpoint = Some(endpoint);
        Api::<btp_api::BtpOperator>::namespaced(client.clone(), names::KYMA_SYSTEM)
            .create(
                &PostParams::default(),
                &btp_api::BtpOperator::new(names::BTP_OPERATOR_NAME),
            )
            .await
            .expect("the BtpOperator");
    }

    /// What the manager's containers logged, each under its Pod's name.
    pub fn logs(&self) -> String {
        self.kubelet
            .manager_logs()
            .into_iter()
            .map(|(pod, log)| format!("--- {pod}\n{log}"))
            .collect()
    }

    /// docs/install.md's "## Uninstalling", every command as written (the stand-ins finish the Pods).
    pub async fn uninstall(self, cluster: &RealCluster) {
        uninstall(cluster).await;
        drop(self.webhooks);
    }
}

/// docs/install.md's "## Uninstalling", every command as written. A manager Pod bound to a node ends only where
/// the kubelet stand-in runs (unbound ones go at once).
pub async fn uninstall(cluster: &RealCluster) {
    for command in documented_blocks("install.md", "## Uninstalling").into_iter().flatten() {
        run_ok(&cluster.kubeconfig, &command).await;
    }
    // `kubectl delete` waited for what it deleted; the CRD's deletion takes its CRs' with it.
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(cluster.client.clone());
    super::eventually(Duration::from_secs(60), "the BtpOperator CRD is gone", || async {
        crds.get_opt("btpoperators.operator.kyma-project.io")
            .await
            .is_ok_and(|c| c.is_none())
    })
    .await;
}
