//! `btp-manager local`, as a user runs it: the binary, its output, and kubectl against it.
//!
//! Every test runs the built binary from a directory with nothing beside it (a fresh temporary directory,
//! or `/`): the operand's manifests come from the copy built into the binary.

mod common;

use common::{eventually, free_addr, kubectl, temp_dir, try_eventually};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// The binary, started in `cwd`.
fn binary(cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_btp-manager"));
    cmd.current_dir(cwd);
    cmd
}

/// `local --once` run in `cwd`, its kubeconfig written to `dir`, and succeeded: its output and stdout.
fn local_once(cwd: &Path, dir: &Path) -> (std::process::Output, String) {
    let out = binary(cwd)
        .args(["local", "--once", "--timeout", "60s", "--kubeconfig"])
        .arg(dir.join("kubeconfig"))
        .output()
        .unwrap_or_else(|e| panic!("run btp-manager local --once in {}: {e}", cwd.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (out, stdout)
}

#[test]
fn local_once_reaches_ready_and_shows_the_webhook_refusal() {
    let dir = temp_dir("local-once");
    assert!(!dir.join("module-resources").exists());
    let (out, stdout) = local_once(&dir, &dir);
    assert!(
        stdout.contains("refused as expected: kyma-system/btpoperator-test"),
        "{stdout}"
    );
    assert!(
        stdout.contains("denied the request: BtpOperator must be named \"btpoperator\""),
        "{stdout}"
    );
    assert!(stdout.contains("Processing / Initialized"), "{stdout}");
    assert!(
        stdout.contains("Ready / ReconcileSucceeded — Module provisioning succeeded"),
        "{stdout}"
    );
    // The credentials check asked the stand-in token endpoint with the example's credentials.
    assert!(
        stdout.contains("stand-in token endpoint at https://127.0.0.1:"),
        "{stdout}"
    );
    assert!(stdout.contains("CredentialsValid True / TokenIssued"), "{stdout}");
    // One readable story: the refusal is the API server's message, not a Rust Debug of a Status.
    assert!(!stdout.contains("Status {"), "{stdout}");
    assert!(!stdout.contains("ErrorResponse"), "{stdout}");
    for line in stdout.lines() {
        assert!(
            line.starts_with('['),
            "every stdout line is a timestamped story line: {line:?}"
        );
    }
    // Logs go to stderr as readable lines (warnings only by default), never JSON.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.lines().any(|l| l.trim_start().starts_with('{')), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn local_started_from_the_root_directory_reaches_ready() {
    let dir = temp_dir("local-root");
    let (_, stdout) = local_once(Path::new("/"), &dir);
    assert!(stdout.contains("Ready / ReconcileSucceeded"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resources_path_that_does_not_exist_is_reported_in_one_line() {
    let dir = temp_dir("local-bad-path");
    let out = binary(&dir)
        .args(["local", "--once", "--resources-path", "no-such-dir", "--kubeconfig"])
        .arg(dir.join("kubeconfig"))
        .output()
        .expect("run btp-manager local");
    assert!(!out.status.success(), "a missing --resources-path must fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let error: Vec<&str> = stderr.lines().filter(|l| l.starts_with("btp-manager:")).collect();
    assert_eq!(error.len(), 1, "{stderr}");
    assert!(
        error[0].contains("loading module resources from no-such-dir"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `local` (without --once) running until dropped, with its stdout lines.
struct Local {
    child: Child,
    lines: Receiver<String>,
    /// Every stdout line seen so far.
    seen: Vec<String>,
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Local {
    fn start(name: &str, extra: &[&str]) -> Local {
        let dir = temp_dir(&format!("local-{name}"));
        let kubeconfig = dir.join("kubeconfig");
        let mut child = binary(&dir)
            .arg("local")
            .args(extra)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start btp-manager local");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Local {
            child,
            lines,
            seen: Vec::new(),
            dir,
            kubeconfig,
        }
    }

    /// Wait (with a deadline) for a stdout line containing `text` (one read while waiting for another counts).
    async fn wait_for_line(&mut self, text: &str) -> String {
        if let Some(line) = self.seen.iter().find(|l| l.contains(text)) {
            return line.clone();
        }
        let (lines, seen) = (&self.lines, &mut self.seen);
        let found = try_eventually(Duration::from_secs(60), || {
            let mut found = None;
            while let Ok(line) = lines.try_recv() {
                seen.push(line.clone());
                if line.contains(text) {
                    found = Some(line);
                    break;
                }
            }
            std::future::ready(found)
        })
        .await;
        found.unwrap_or_else(|()| panic!("local printed {text:?} within 60 s; saw:\n{}", self.seen.join("\n")))
    }

    fn kubectl(&self, args: &[&str]) -> std::process::Output {
        Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("kubectl must be installed (scripts/test installs it): {e}"))
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The metric names an OpenMetrics exposition offers: every sample's name, and for each family its name with
/// the suffixes its samples carry (`_total` for counters; `_bucket`, `_count`, `_sum` for histograms), so that
/// a family with no sample yet counts too.
fn exported_metric_names(exposition: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_count", "_sum"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// The metric names the alert rules' expressions use: identifiers of the manager's metric families
/// (`btpmanager_…`, `controller_runtime_…`).
fn metric_names_in_rules(rules: &str) -> std::collections::BTreeSet<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .flat_map(|expr| {
            expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .filter(|w| w.starts_with("btpmanager_") || w.starts_with("controller_runtime_"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A plain HTTP/1.1 GET: (status code, body).
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn local_serves_metrics_health_and_webhooks_on_the_given_addresses() {
    let (metrics, health, webhooks) = (free_addr(), free_addr(), free_addr());
    let mut local = Local::start(
        "ops",
        &[
            "--metrics-bind-address",
            &metrics.to_string(),
            "--health-probe-bind-address",
            &health.to_string(),
            "--webhook-bind-address",
            &webhooks.to_string(),
        ],
    );
    let line = local.wait_for_line("admission webhooks serving on").await;
    assert!(line.contains(&format!("https://{webhooks} ")), "{line}");
    let line = local.wait_for_line("metrics on").await;
    assert!(
        line.contains(&format!("http://{metrics}/metrics")) && line.contains(&format!("http://{health}/healthz")),
        "{line}"
    );
    local.wait_for_line("Ready / ReconcileSucceeded").await;
    // The credentials check has reported (its metrics are exported from its first result on).
    local.wait_for_line("CredentialsValid True / TokenIssued").await;

    assert_eq!(http_get(health, "/healthz"), (200, "ok".into()));
    assert_eq!(http_get(health, "/readyz"), (200, "ok".into()));
    // The watch that printed Ready can be answered before the pass that wrote it has its own answer: the
    // state gauge follows when that write returns, and the success is counted when the pass ends.
    let (status, body) = eventually(
        Duration::from_secs(10),
        "Ready and the reconcile's success are exported",
        || {
            let (status, body) = http_get(metrics, "/metrics");
            std::future::ready(
                if status != 200
                    || (body.contains("btpmanager_btpoperator_state{state=\"Ready\"} 1")
                        && !body.contains("btpmanager_reconcile_last_success_timestamp_seconds 0.0"))
                {
                    Ok((status, body))
                } else {
                    Err(body)
                },
            )
        },
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("controller_runtime_reconcile_total{controller=\"btpoperator\",result=\"success\"}"),
        "{body}"
    );
    // What alerts read (deploy/monitoring/): this replica leads, the CR is Ready, a reconcile succeeded, and
    // every certificate's expiry is known.
    assert!(body.contains("\nbtpmanager_leader 1\n"), "{body}");
    assert!(
        body.contains("btpmanager_btpoperator_state{state=\"Ready\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("btpmanager_btpoperator_state{state=\"Error\"} 0"),
        "{body}"
    );
    assert!(
        !body.contains("btpmanager_reconcile_last_success_timestamp_seconds 0.0"),
        "{body}"
    );
    for certificate in ["manager-ca", "manager-leaf", "operand-ca", "operand-leaf"] {
        assert!(
            body.contains(&format!(
                "btpmanager_certificate_expiration_timestamp_seconds{{certificate=\"{certificate}\"}}"
            )),
            "{certificate}: {body}"
        );
    }
    // Every metric an alert rule names is one the manager exports.
    let exported = exported_metric_names(&body);
    let rules =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring/prometheusrule.yaml"))
            .unwrap();
    let named = metric_names_in_rules(&rules);
    assert!(named.len() >= 6, "the rules name the manager's metrics: {named:?}");
    let unknown: Vec<&String> = named.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "alert rules name metrics the manager does not export: {unknown:?}"
    );
    // The refused misnamed CR went through the webhook server on the given address.
    assert!(body.contains("btpmanager_webhook_request_duration_seconds"), "{body}");
    assert!(body.contains("verdict=\"denied\""), "{body}");
    // The API server reaches the webhooks there: a misnamed CR is refused.
    let manifest = local.dir.join("misnamed.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: operator.kyma-project.io/v1alpha1\nkind: BtpOperator\nmetadata:\n  name: other\n  namespace: kyma-system\n",
    )
    .unwrap();
    let apply = local.kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    assert!(!apply.status.success());
    assert!(String::from_utf8_lossy(&apply.stderr).contains("denied the request"));
}

#[tokio::test]
async fn kubectl_describe_and_get_events_show_the_managers_events() {
    let mut local = Local::start("events", &[]);
    local.wait_for_line("Ready / ReconcileSucceeded").await;
    // The Ready Event is published right after the status write: poll with a deadline.
    let events = eventually(Duration::from_secs(30), "describe shows the Ready Event", || {
        let out = local.kubectl(&["describe", "btpoperator", "btpoperator", "-n", "kyma-system"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let events = text
            .split_once("\nEvents:")
            .map(|(_, e)| e.to_string())
            .unwrap_or_default();
        std::future::ready(if events.contains("ReconcileSucceeded") {
            Ok(events)
        } else {
            Err(events)
        })
    })
    .await;
    assert!(!events.contains("<none>"), "{events}");
    for expected in [
        "Initialized",
        "Processing: Initialized",
        "ReconcileSucceeded",
        "Ready: Module provisioning succeeded",
        "btp-manager",
    ] {
        assert!(
            events.contains(expected),
            "describe's Events lack {expected:?}:\n{events}"
        );
    }

    let get = local.kubectl(&["get", "events", "-n", "kyma-system"]);
    assert!(get.status.success(), "{}", String::from_utf8_lossy(&get.stderr));
    let table = String::from_utf8_lossy(&get.stdout);
    for expected in ["REASON", "ReconcileSucceeded", "Initialized", "btpoperator"] {
        assert!(
            table.contains(expected),
            "kubectl get events lacks {expected:?}:\n{table}"
        );
    }
    // The core/v1 view carries the converted fields.
    let get = local.kubectl(&[
        "get",
        "events",
        "-n",
        "kyma-system",
        "--field-selector",
        "involvedObject.kind=BtpOperator,reason=ReconcileSucceeded",
        "-o",
        "jsonpath={.items[0].involvedObject.name}/{.items[0].source.component}/{.items[0].count}",
    ]);
    assert!(get.status.success(), "{}", String::from_utf8_lossy(&get.stderr));
    assert_eq!(String::from_utf8_lossy(&get.stdout), "btpoperator/btp-manager/1");
}

#[tokio::test]
async fn kubectl_against_local_sees_ready_and_a_refused_apply() {
    let mut local = Local::start("kubectl", &[]);
    local.wait_for_line("Ready / ReconcileSucceeded").await;
    let get = local.kubectl(&[
        "get",
        "btpoperators",
        "-n",
        "kyma-system",
        "-o",
        "jsonpath={.items[0].status.state}",
    ]);
    assert!(get.status.success(), "{}", String::from_utf8_lossy(&get.stderr));
    assert_eq!(String::from_utf8_lossy(&get.stdout), "Ready");
    // The table's printer columns: the state, and the credentials check's reason.
    local.wait_for_line("CredentialsValid True / TokenIssued").await;
    let table = local.kubectl(&["get", "btpoperators", "-n", "kyma-system"]);
    let table = String::from_utf8_lossy(&table.stdout);
    let header = table.lines().next().unwrap_or_default();
    assert!(header.contains("STATE") && header.contains("CREDENTIALS"), "{table}");
    assert!(table.contains("TokenIssued"), "{table}");

    let manifest = local.dir.join("misnamed.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: operator.kyma-project.io/v1alpha1\nkind: BtpOperator\nmetadata:\n  name: btpoperator\n  namespace: default\n",
    )
    .unwrap();
    let apply = local.kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&apply.stderr);
    assert!(!apply.status.success(), "a misnamed BtpOperator must be refused");
    assert!(stderr.contains("denied the request"), "{stderr}");
    assert!(
        stderr.contains("namespace \"default\"") && stderr.contains("kyma-system/btpoperator"),
        "{stderr}"
    );
}

#[tokio::test]
async fn kubectl_delete_returns_once_the_manager_has_deprovisioned() {
    let mut local = Local::start("delete", &[]);
    local.wait_for_line("Ready / ReconcileSucceeded").await;
    // kubectl waits until the object is gone, and gives up (non-zero) after --timeout.
    let delete = local.kubectl(&[
        "delete",
        "btpoperator",
        "btpoperator",
        "-n",
        "kyma-system",
        "--timeout=10s",
    ]);
    assert!(
        delete.status.success(),
        "kubectl delete did not finish within 10 s: {}{}",
        String::from_utf8_lossy(&delete.stdout),
        String::from_utf8_lossy(&delete.stderr)
    );
    let get = local.kubectl(&["get", "btpoperators", "-A", "-o", "name"]);
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "", "no BtpOperator left");
    let deploy = local.kubectl(&["get", "deployments", "-n", "kyma-system", "-o", "name"]);
    assert!(deploy.status.success(), "{}", String::from_utf8_lossy(&deploy.stderr));
    assert!(
        !String::from_utf8_lossy(&deploy.stdout).contains("sap-btp-operator-controller-manager"),
        "the operand Deployment is removed: {}",
        String::from_utf8_lossy(&deploy.stdout)
    );
}
